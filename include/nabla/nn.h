/* nabla nn: the built-in layers and transformer pieces, each a module made with the public
 * module API of nabla/module.h (the model tree, parameters, buffers, checkpoints).
 *
 * Constructors take the parent module and a local name, and are all-or-nothing: on failure
 * they return NULL with an error and leave the model as it was. Forward functions create
 * their results in the current scope, so a training step inside nb_scope_begin/end leaves
 * nothing behind but updated parameters and gradients. */
#ifndef NABLA_NN_H
#define NABLA_NN_H

#include "nabla/autograd.h"
#include "nabla/checkpoint.h"
#include "nabla/module.h"
#include "nabla/ops.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Layers ------------------------------------------------------------------------------ */
/* y = x W^T + b, with W [out, in] and b [out] uniform in +-1/sqrt(in) (PyTorch's default). */
typedef struct {
    nb_module base;
    nb_tensor *weight, *bias; /* bias NULL when disabled */
    int64_t in_features, out_features;
} nb_linear;
nb_linear *nb_linear_new(nb_module *parent, const char *name, int64_t in, int64_t out, bool bias);
nb_tensor *nb_linear_forward(nb_linear *m, const nb_tensor *x);

/* Normalises the last dim; weight ones, bias zeros, eps 1e-5 (PyTorch's defaults). */
typedef struct {
    nb_module base;
    nb_tensor *weight, *bias;
    double eps;
} nb_layernorm;
nb_layernorm *nb_layernorm_new(nb_module *parent, const char *name, int64_t dim);
nb_tensor *nb_layernorm_forward(nb_layernorm *m, const nb_tensor *x);

/* Lookup table [num, dim] initialised N(0, 1) (PyTorch's default). */
typedef struct {
    nb_module base;
    nb_tensor *weight;
} nb_embedding_layer;
nb_embedding_layer *nb_embedding_new(nb_module *parent, const char *name, int64_t num,
                                     int64_t dim);
nb_tensor *nb_embedding_forward(nb_embedding_layer *m, const nb_tensor *indices);

/* Dropout with its own generator, seeded from the model's at creation. */
typedef struct {
    nb_module base;
    double p;
    nb_rng rng;
} nb_dropout_layer;
nb_dropout_layer *nb_dropout_new(nb_module *parent, const char *name, double p);
nb_tensor *nb_dropout_forward(nb_dropout_layer *m, const nb_tensor *x);

/* D -> hidden -> D with GELU (exact erf form) between: fc1, fc2. */
typedef struct {
    nb_module base;
    nb_linear *fc1, *fc2;
} nb_feedforward;
nb_feedforward *nb_feedforward_new(nb_module *parent, const char *name, int64_t dim,
                                   int64_t hidden);
nb_tensor *nb_feedforward_forward(nb_feedforward *m, const nb_tensor *x);

/* ---- Attention --------------------------------------------------------------------------- */
/* MultiHeadAttention as in the tutorials: W_query, W_key, W_value (bias optional), heads split
 * with view + transpose, scaled dot-product with masks, softmax, dropout on the weights,
 * heads merged with transpose + contiguous + view, then out_proj.
 *
 * Mask convention: every mask is NB_BOOL with true = blocked (PyTorch's
 * nn.MultiheadAttention convention; F.scaled_dot_product_attention uses the opposite). */
typedef struct {
    nb_module base;
    nb_linear *W_query, *W_key, *W_value, *out_proj;
    nb_dropout_layer *dropout;
    int64_t d_in, d_out, num_heads, head_dim;
} nb_mha;

typedef struct {
    bool causal;                      /* block key j > query i */
    const nb_tensor *key_padding_mask; /* [B, T_k], true = padding, or NULL */
    const nb_tensor *attn_mask;        /* [T_q, T_k], true = blocked, or NULL */
    nb_tensor **attn_weights;          /* if not NULL, receives [B, H, T_q, T_k] */
} nb_mha_opts;

/* Errors (NULL) if d_out is not divisible by num_heads. Owned by the root. */
nb_mha *nb_mha_new(nb_module *parent, const char *name, int64_t d_in, int64_t d_out,
                   int64_t num_heads, bool qkv_bias, double dropout);
/* Self-attention: x [B, T, d_in] -> [B, T, d_out]. opts may be NULL. */
nb_tensor *nb_mha_forward(nb_mha *m, const nb_tensor *x, const nb_mha_opts *opts);
/* Cross-attention: queries from q_in [B, T_q, d_in], keys/values from kv_in [B, T_k, d_in]. */
nb_tensor *nb_mha_forward_cross(nb_mha *m, const nb_tensor *q_in, const nb_tensor *kv_in,
                                const nb_mha_opts *opts);

/* Pre-LayerNorm block: x + attn(norm1(x)), then x + ff(norm2(x)), ff hidden = 4 * dim. */
typedef struct {
    nb_module base;
    nb_layernorm *norm1, *norm2;
    nb_mha *attn;
    nb_feedforward *ff;
} nb_transformer_block;
nb_transformer_block *nb_transformer_block_new(nb_module *parent, const char *name, int64_t dim,
                                               int64_t num_heads, double dropout);
nb_tensor *nb_transformer_block_forward(nb_transformer_block *m, const nb_tensor *x,
                                        const nb_mha_opts *opts);

/* ---- A small transformer over tokens --------------------------------------------------- */
/* tok_emb + pos_emb, then blocks.0 .. blocks.{layers-1}, then norm_f and head (vocab logits).
 * The toy tasks, the character LM and the benchmark all use it. */
typedef struct {
    nb_module base;
    nb_embedding_layer *tok_emb, *pos_emb;
    nb_module *blocks_container;
    nb_transformer_block *blocks[16];
    nb_layernorm *norm_f;
    nb_linear *head;
    int64_t vocab, max_len, dim, num_heads;
    int num_layers;
} nb_transformer_lm;

/* layers in 1..16; max_len bounds the sequence length. Owned by the root. */
nb_transformer_lm *nb_transformer_lm_new(nb_module *parent, const char *name, int64_t vocab,
                                         int64_t max_len, int64_t dim, int64_t num_heads,
                                         int layers, double dropout);
/* tokens NB_I64 [B, T] -> logits [B, T, vocab]. attn_weights, if not NULL, has room for
 * num_layers tensors and receives each layer's [B, H, T, T] attention weights. */
nb_tensor *nb_transformer_lm_forward(nb_transformer_lm *m, const nb_tensor *tokens, bool causal,
                                     const nb_tensor *key_padding_mask, nb_tensor **attn_weights);

#ifdef __cplusplus
}
#endif
#endif
