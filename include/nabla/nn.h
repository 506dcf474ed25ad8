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
#include "nabla/gguf.h"
#include "nabla/module.h"
#include "nabla/ops.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_kv_cache nb_kv_cache; /* nabla/generate.h */

/* ---- Layers ------------------------------------------------------------------------------ */
/* y = x W^T + b, with W [out, in] and b [out] uniform in +-1/sqrt(in) (PyTorch's default). */
typedef struct {
    nb_module base;
    nb_tensor *weight, *bias; /* bias NULL when disabled */
    int64_t in_features, out_features;
} nb_linear;
nb_linear *nb_linear_new(nb_module *parent, const char *name, int64_t in, int64_t out, bool bias);
nb_tensor *nb_linear_forward(nb_linear *m, const nb_tensor *x);
/* Several Linear layers reading the same x (a block's query, key and value projections):
 * out[i] = nb_linear_forward(layers[i], x) for i < n (1 to NB_LINEARS_MAX), new tensors in
 * the current scope. The same values, bit for bit; but a single row with no gradient to
 * record (decoding one token) is multiplied by every weight in one job split across threads
 * by all their outputs, where each product alone may be too small to split. False with an
 * error naming the layer (the outputs made so far stay in the scope). */
#define NB_LINEARS_MAX 8
bool nb_linears_forward(int n, nb_linear *const *layers, const nb_tensor *x, nb_tensor **out);
/* The activations nb_linear_forward_act applies (nb_gelu, nb_gelu_tanh, nb_silu). */
typedef enum { NB_ACT_NONE, NB_ACT_GELU, NB_ACT_GELU_TANH, NB_ACT_SILU } nb_activation;
/* act(nb_linear_forward(m, x)), the same values bit for bit (a feed-forward's first layer).
 * For a single row with no gradient to record (decoding one token) the activation runs inside
 * the product's split tasks, each thread on the outputs it computed, instead of as a pass of
 * its own on the calling thread. A new tensor in the current scope, or NULL with an error
 * naming the layer. */
nb_tensor *nb_linear_forward_act(nb_linear *m, const nb_tensor *x, nb_activation act);
/* act(gate(x)) * up(x): a gated feed-forward's first half (SwiGLU with NB_ACT_SILU, GeGLU with
 * NB_ACT_GELU), the same values bit for bit as nb_mul(nb_linear_forward_act(gate, x, act),
 * nb_linear_forward(up, x)), which it is, op by op, when there are gradients to record. For a
 * single row without (decoding one token) both products and the gating are one job split
 * across threads by output features, each thread gating the outputs it computed. gate and up
 * read the same inputs and have as many outputs. A new tensor in the current scope, or NULL
 * with an error naming the layer. */
nb_tensor *nb_linear_gated_forward(nb_linear *gate, nb_linear *up, const nb_tensor *x,
                                   nb_activation act);

/* Normalises the last dim; weight ones, bias zeros, eps 1e-5 (PyTorch's defaults). */
typedef struct {
    nb_module base;
    nb_tensor *weight, *bias;
    double eps;
} nb_layer_norm;
nb_layer_norm *nb_layer_norm_new(nb_module *parent, const char *name, int64_t dim);
nb_tensor *nb_layer_norm_forward(nb_layer_norm *m, const nb_tensor *x);
/* m(x + res), and x + res in *sum, as one node (nb_f_add_layer_norm): a pre-norm block's
 * residual add and the norm after it. Both results are new tensors in the current scope. */
nb_tensor *nb_layer_norm_forward_add(nb_layer_norm *m, const nb_tensor *x, const nb_tensor *res,
                                     nb_tensor **sum);

/* Lookup table [num, dim] initialised N(0, 1) (PyTorch's default). */
typedef struct {
    nb_module base;
    nb_tensor *weight;
} nb_embedding;
nb_embedding *nb_embedding_new(nb_module *parent, const char *name, int64_t num, int64_t dim);
nb_tensor *nb_embedding_forward(nb_embedding *m, const nb_tensor *indices);

/* Dropout with its own generator, seeded from the model's at creation. */
typedef struct {
    nb_module base;
    double p;
    nb_rng rng;
} nb_dropout;
nb_dropout *nb_dropout_new(nb_module *parent, const char *name, double p);
nb_tensor *nb_dropout_forward(nb_dropout *m, const nb_tensor *x);

/* D -> hidden -> D with GELU between: fc1, fc2. The exact erf form, or with gelu_tanh set (after
 * construction, or through nb_block_config) the tanh approximation GPT-2 uses
 * (nb_gelu_tanh). */
typedef struct {
    nb_module base;
    nb_linear *fc1, *fc2;
    bool gelu_tanh;
} nb_feedforward;
nb_feedforward *nb_feedforward_new(nb_module *parent, const char *name, int64_t dim,
                                   int64_t hidden);
nb_tensor *nb_feedforward_forward(nb_feedforward *m, const nb_tensor *x);

/* ---- Attention --------------------------------------------------------------------------- */
/* MultiHeadAttention as in the tutorials: W_query, W_key, W_value (bias optional), heads split
 * with view + transpose, scaled dot-product with masks, softmax, dropout on the weights,
 * heads merged with transpose + contiguous + view, then out_proj (bias optional).
 *
 * Masks. Boolean masks mean true = blocked (PyTorch's nn.MultiheadAttention convention;
 * F.scaled_dot_product_attention uses the opposite). A float attn_mask is added to the scaled
 * scores q k^T / sqrt(head_dim) before the softmax, as nn.MultiheadAttention adds it: -inf
 * blocks, finite values shift the scores; NaN and +inf are errors. A float mask holding only
 * 0 and -inf runs exactly like the boolean mask it stands for; one with finite non-zero values
 * takes the op-by-op path (the path that returns attn_weights), because the fused attention op
 * takes boolean masks only. attn_mask shapes (B batch, H heads):
 *   [T_q, T_k]                  the same for every sequence and head;
 *   [B, T_q, T_k] or [1, ...]   per sequence, the same for every head;
 *   [B * H, T_q, T_k]           per sequence and head, entry b * H + h (PyTorch's 3-D form);
 *   [B or 1, H or 1, T_q, T_k]  per sequence and/or head.
 * A 3-D mask is read as [B, ...] when its first dim is B or 1, else as PyTorch's [B * H, ...]
 * (the two agree when H is 1). Queries whose keys are all blocked (by any mask together) get
 * zero weights and zero gradient (PyTorch gives NaN there).
 *
 * Causal alignment: causal blocks key j > query i, counting both from 0, whatever T_q and T_k
 * are (top-left aligned, like torch.ones(T_q, T_k).tril() and SDPA's is_causal): with T_q <
 * T_k the last keys are seen by no query, with T_q > T_k queries i >= T_k - 1 see every key.
 * To give T_q new queries the last T_q of T_k positions (bottom-right alignment, decoding
 * after a prefix), use the KV cache (nabla/generate.h) or an attn_mask.
 *
 * Returned attention weights (opts.attn_weights) are per head, [B, H, T_q, T_k], the softmax
 * output before dropout and before the head mask. PyTorch's nn.MultiheadAttention returns
 * them averaged over heads by default (average_attn_weights=True); nb_mean_dims(w, 1,
 * (int[]){1}, false) gives that. */
typedef struct {
    nb_module base;
    nb_linear *W_query, *W_key, *W_value, *out_proj;
    nb_dropout *dropout;
    int64_t d_in, d_out, num_heads, head_dim;
} nb_mha;

typedef struct {
    bool causal;                       /* block key j > query i (top-left aligned, above) */
    const nb_tensor *key_padding_mask; /* bool [B, T_k], true = padding, or NULL */
    const nb_tensor *attn_mask;        /* bool or float, shapes above, or NULL */
    nb_tensor **attn_weights;          /* if not NULL, receives [B, H, T_q, T_k] (above) */
    /* [H] in the inputs' dtype, or NULL: head h's output (its slice of the context before
     * out_proj) is multiplied by head_mask[h], as Hugging Face's head_mask does. 0 removes the
     * head. Differentiable: d loss / d head_mask is the head importance of Michel et al. 2019
     * (examples/head_analysis.c). */
    const nb_tensor *head_mask;
    /* Self-attention of new tokens against what layer cache_layer of cache keeps (nabla/
     * generate.h), or NULL: the tokens' keys and values are written at the cache's positions
     * [len, len + T) and token i attends to positions [0, len + i] (causal, bottom-right
     * aligned). For inference: no autograd history; masks and attn_weights are refused. */
    nb_kv_cache *cache;
    int cache_layer;
} nb_mha_opts;

/* Constructor arguments. PyTorch's nn.MultiheadAttention(bias=False) is qkv_bias = out_bias =
 * false; the tutorials' MultiHeadAttention has qkv_bias false and out_bias true. */
typedef struct {
    int64_t d_in, d_out, num_heads;
    bool qkv_bias;  /* W_query, W_key and W_value have biases */
    bool out_bias;  /* out_proj has a bias */
    double dropout; /* on the attention weights, while training */
} nb_mha_config;

/* The tutorials' settings: no qkv bias, out_proj bias, no dropout. */
nb_mha_config nb_mha_defaults(int64_t d_in, int64_t d_out, int64_t num_heads);
/* Errors (NULL) if d_out is not divisible by num_heads. Owned by the root. */
nb_mha *nb_mha_new_config(nb_module *parent, const char *name, const nb_mha_config *cfg);
/* The same with out_bias true. Owned by the root. */
nb_mha *nb_mha_new(nb_module *parent, const char *name, int64_t d_in, int64_t d_out,
                   int64_t num_heads, bool qkv_bias, double dropout);
/* Self-attention: x [B, T, d_in] -> [B, T, d_out]. opts may be NULL. */
nb_tensor *nb_mha_forward(nb_mha *m, const nb_tensor *x, const nb_mha_opts *opts);
/* Cross-attention: queries from q_in [B, T_q, d_in], keys/values from kv_in [B, T_k, d_in]. */
nb_tensor *nb_mha_forward_cross(nb_mha *m, const nb_tensor *q_in, const nb_tensor *kv_in,
                                const nb_mha_opts *opts);

/* Pre-LayerNorm block: x + attn(norm1(x)), then x + ff(norm2(x)), ff hidden = 4 * dim. As
 * PyTorch's nn.TransformerEncoderLayer(norm_first=True, dim_feedforward=4 * dim) with
 * qkv_bias set (its names through nb_name_map_pytorch), and as GPT-2's block with qkv_bias and
 * gelu_tanh. */
typedef struct {
    nb_module base;
    nb_layer_norm *norm1, *norm2;
    nb_mha *attn;
    nb_feedforward *ff;
} nb_transformer_block;
/* What a block is built from. */
typedef struct {
    int64_t dim, num_heads;
    bool qkv_bias;  /* attn.W_query, W_key and W_value have biases (GPT-2, PyTorch) */
    bool gelu_tanh; /* the feed-forward's GELU is the tanh approximation (GPT-2) */
    double dropout; /* on the attention weights, while training */
} nb_block_config;
/* Owned by the root. */
nb_transformer_block *nb_transformer_block_new_config(nb_module *parent, const char *name,
                                                      const nb_block_config *cfg);
/* The same without q/k/v biases and with the exact GELU. Owned by the root. */
nb_transformer_block *nb_transformer_block_new(nb_module *parent, const char *name, int64_t dim,
                                               int64_t num_heads, double dropout);
nb_tensor *nb_transformer_block_forward(nb_transformer_block *m, const nb_tensor *x,
                                        const nb_mha_opts *opts);

/* Pre-LayerNorm decoder block of an encoder-decoder: x + attn(norm1(x)) (self-attention),
 * then x + cross_attn(norm2(x), memory) (queries from x, keys and values from the encoder's
 * output), then x + ff(norm3(x)), ff hidden = 4 * dim. As PyTorch's
 * nn.TransformerDecoderLayer(norm_first=True, dim_feedforward=4 * dim, activation="gelu") with
 * qkv_bias set (its in_proj split into W_query, W_key, W_value; linear1, linear2 are ff.fc1,
 * ff.fc2). Both attentions are built from cfg (out_proj with a bias). */
typedef struct {
    nb_module base;
    nb_layer_norm *norm1, *norm2, *norm3;
    nb_mha *attn, *cross_attn;
    nb_feedforward *ff;
} nb_transformer_decoder_block;
/* Owned by the root; NULL with an error (the model unchanged) on a bad config. */
nb_transformer_decoder_block *nb_transformer_decoder_block_new(nb_module *parent, const char *name,
                                                               const nb_block_config *cfg);
/* x [B, T, dim] and memory [B, S, dim] -> [B, T, dim] in the current scope. self_opts are the
 * self-attention's options (e.g. causal, a key padding mask of x) and cross_opts the
 * cross-attention's (e.g. a key padding mask of memory); either may be NULL (no masks). */
nb_tensor *nb_transformer_decoder_block_forward(nb_transformer_decoder_block *m, const nb_tensor *x,
                                                const nb_tensor *memory,
                                                const nb_mha_opts *self_opts,
                                                const nb_mha_opts *cross_opts);

/* ---- A small transformer over tokens --------------------------------------------------- */
/* tok_emb + pos_emb, then blocks.0 .. blocks.{layers-1}, then norm_f and head (logits over
 * out_features classes, the vocabulary unless asked otherwise), with a bias unless
 * no_head_bias. With tied weights the head reuses tok_emb.weight as its weight (out_features
 * must equal vocab) and owns only head.bias (nothing without the bias). The toy tasks, the
 * character LM and the benchmark all use it. */
typedef struct {
    nb_module base;
    nb_embedding *tok_emb, *pos_emb;
    nb_module *blocks_container;
    nb_transformer_block *blocks[16];
    nb_layer_norm *norm_f;
    nb_linear *head;                    /* NULL with tied weights */
    nb_tensor *head_weight, *head_bias; /* what the head multiplies by: [out, dim], [out] or
                                           NULL (no_head_bias) */
    int64_t vocab, max_len, dim, num_heads, out_features;
    int num_layers;
    bool tie_weights;
} nb_transformer_lm;

/* Everything a TransformerLM is built from; checkpoints carry it (nb_transformer_lm_save). */
typedef struct {
    int64_t vocab, max_len, dim, num_heads;
    int layers;           /* 1..16 */
    int64_t out_features; /* 0 = vocab */
    bool tie_weights;     /* head weight = tok_emb.weight (needs out_features == vocab) */
    bool qkv_bias;        /* every block's attention has q/k/v biases (nb_block_config) */
    bool gelu_tanh;       /* every block's GELU is the tanh approximation (nb_block_config) */
    bool no_head_bias;    /* the head has no bias (GPT-2's); false keeps head.bias */
} nb_lm_config;

/* layers in 1..16; max_len bounds the sequence length. Owned by the root. */
nb_transformer_lm *nb_transformer_lm_new(nb_module *parent, const char *name, int64_t vocab,
                                         int64_t max_len, int64_t dim, int64_t num_heads,
                                         int layers, double dropout);
/* The same from a configuration (other output sizes, tied weights). Owned by the root. */
nb_transformer_lm *nb_transformer_lm_new_config(nb_module *parent, const char *name,
                                                const nb_lm_config *cfg, double dropout);
/* The configuration lm was built from (out_features filled in). */
nb_lm_config nb_transformer_lm_config(const nb_transformer_lm *lm);
/* tokens NB_I64 [B, T] -> logits [B, T, out_features]. attn_weights, if not NULL, has room
 * for num_layers tensors and receives each layer's [B, H, T, T] attention weights. */
nb_tensor *nb_transformer_lm_forward(nb_transformer_lm *m, const nb_tensor *tokens, bool causal,
                                     const nb_tensor *key_padding_mask, nb_tensor **attn_weights);
/* What nb_transformer_lm_forward_opts takes beyond the tokens. */
typedef struct {
    bool causal;
    const nb_tensor *key_padding_mask; /* bool [B, T], true = padding, or NULL */
    /* [layers, heads] in the model's dtype, or NULL: row l is layer l's head mask (nb_mha_opts'
     * head_mask; Hugging Face's head_mask), differentiable. */
    const nb_tensor *head_mask;
    nb_tensor **attn_weights; /* room for num_layers tensors, or NULL */
    /* A cache with a layer for each block (nb_kv_cache_for_lm), or NULL: the tokens are
     * positions [len, len + T) of the cache and each block attends to what its layer keeps
     * (causal); for inference, no autograd history. Does not commit (nabla/generate.h). */
    nb_kv_cache *cache;
} nb_lm_forward_opts;
/* nb_transformer_lm_forward with a head mask. */
nb_tensor *nb_transformer_lm_forward_opts(nb_transformer_lm *m, const nb_tensor *tokens,
                                          const nb_lm_forward_opts *opts);

/* ---- Checkpoints that describe their model ---------------------------------------------- */
/* Saves lm's subtree (and opt's state if opt is not NULL, as nb_module_save_with) with lm's
 * configuration in the file's __metadata__ ("nabla.model" = "TransformerLM", "nabla.block" =
 * "pre_ln", "nabla.vocab", "nabla.d_model", "nabla.heads", "nabla.layers", "nabla.context",
 * "nabla.out_features", "nabla.tie_weights", "nabla.qkv_bias", "nabla.gelu_tanh",
 * "nabla.no_head_bias"; files without the last three are read as 0), plus n_extra entries of the
 * caller's (e.g. a character vocabulary). */
bool nb_transformer_lm_save(const nb_transformer_lm *lm, nb_optimizer *opt, const char *path,
                            int n_extra, const nb_metadata_entry *extra);
/* Reads the configuration from path's __metadata__, reading only the header, and checks it
 * before any model is built: every number in range (decimal digits; layers 1 to 16, heads
 * dividing d_model, tie_weights 0 or 1) and the file's tensors exactly those of a TransformerLM
 * of this configuration (names, shapes, one of F32/F64; optimizer state under "optim." aside).
 * So a model built from it is no larger than the file's own data. False with an error naming
 * the file and the missing or malformed key or the disagreeing tensor. */
bool nb_lm_config_read(const char *path, nb_lm_config *cfg);
/* Loads path into lm (and opt if not NULL), first checking that the configuration it carries
 * is lm's: a mismatch is an error naming each differing field with both values ("d_model:
 * checkpoint 96, model 128"), and nothing changes. Files without a configuration load as
 * nb_module_load_with does (names, dtypes and shapes must match). */
bool nb_transformer_lm_load(nb_transformer_lm *lm, nb_optimizer *opt, const char *path);

/* ---- Export (nabla/gguf.h) ------------------------------------------------------------- */
/* Writes lm as a GGUF file that llama.cpp runs as its "gpt2" architecture: gpt2.* metadata
 * (context_length = lm->max_len, the learned positions), the tensors under llama.cpp's names
 * (token_embd, position_embd, blk.N.attn_qkv = W_query, W_key, W_value stacked, attn_output,
 * ffn_up = fc1, ffn_down = fc2, the LayerNorms' weights and biases, output_norm, output unless
 * the weights are tied) in type (1-D tensors and position_embd float32), q/k/v biases as zeros
 * when lm has none, and the vocabulary (its n_tokens must be lm->vocab). GPT-2's graph in
 * llama.cpp fixes what lm must be; refused, with an error naming the part: the exact (erf)
 * GELU (llama.cpp's gpt2 uses the tanh form: build with gelu_tanh), a head with a bias
 * (gpt2's output has none: no_head_bias), out_features other than vocab, or LayerNorms of
 * differing eps (llama.cpp has one). llama.cpp's CPU GELU reads a float16 table, so its
 * probabilities differ from nabla's by about 1e-3 (docs/guide.md). Replaces path atomically;
 * false with an error naming the file. */
bool nb_transformer_lm_save_gguf(const nb_transformer_lm *lm, const char *path,
                                 const nb_gguf_vocab *vocab, nb_gguf_type type);

#ifdef __cplusplus
}
#endif
#endif
