/* The built-in TransformerLM as a GGUF file for llama.cpp ("gpt2" architecture: learned
 * positions, pre-LayerNorm blocks, fused q/k/v with bias, tanh GELU, output without bias). */
#include "nabla/nn.h"

#include <stdio.h>

static const char *const op = "nb_transformer_lm_save_gguf";

/* Whether llama.cpp's gpt2 computes what lm computes; an error naming the part if not. */
static bool fits(const nb_transformer_lm *lm, const char *path) {
    const char *why = NULL;
    if (!lm->blocks[0]->ff->gelu_tanh)
        why = "its GELU is the exact (erf) form, llama.cpp's gpt2 uses the tanh approximation "
              "(build the model with gelu_tanh)";
    else if (lm->head_bias)
        why = "its head has a bias, llama.cpp's gpt2 output has none (build the model with "
              "no_head_bias)";
    else if (lm->out_features != lm->vocab)
        why = "its head has out_features other than the vocabulary";
    if (why)
        return nb_error(op, "%s: TransformerLM '%s' does not fit llama.cpp's gpt2: %s", path,
                        nb_module_path(&lm->base), why),
               false;
    const double eps = lm->norm_f->eps;
    for (int i = 0; i < lm->num_layers; i++)
        if (lm->blocks[i]->norm1->eps != eps || lm->blocks[i]->norm2->eps != eps)
            return nb_error(op,
                            "%s: TransformerLM '%s' does not fit llama.cpp's gpt2: llama.cpp has "
                            "one LayerNorm eps, block %d's differs from norm_f's %g",
                            path, nb_module_path(&lm->base), i, eps),
                   false;
    return true;
}

/* "blk.{layer}.{what}" in buf (64 bytes, a GGUF tensor name's limit and its NUL). */
static const char *tensor_name(char buf[64], int layer, const char *what) {
    snprintf(buf, 64, "blk.%d.%s", layer, what);
    return buf;
}

static bool add_norm(nb_gguf *g, int layer, const char *what, const nb_layer_norm *n) {
    char name[64], what_weight[32], what_bias[32];
    snprintf(what_weight, sizeof what_weight, "%s.weight", what);
    snprintf(what_bias, sizeof what_bias, "%s.bias", what);
    return nb_gguf_add_weight(g, tensor_name(name, layer, what_weight), n->weight, NB_GGUF_F32) &&
           nb_gguf_add_weight(g, tensor_name(name, layer, what_bias), n->bias, NB_GGUF_F32);
}

/* attn_qkv: W_query, W_key, W_value stacked [3 D, D] as llama.cpp splits it; their biases, or
 * zeros for a model without them. */
static bool add_attention(nb_gguf *g, const nb_mha *a, int i, nb_gguf_type type) {
    char name[64];
    const nb_linear *q = a->W_query, *k = a->W_key, *v = a->W_value;
    nb_tensor *w = nb_concat(3, (nb_tensor *[]){q->weight, k->weight, v->weight}, 0);
    nb_tensor *b = q->bias ? nb_concat(3, (nb_tensor *[]){q->bias, k->bias, v->bias}, 0)
                           : nb_zeros(q->weight->dtype, NB_SHAPE(3 * a->d_out));
    return nb_gguf_add_weight(g, tensor_name(name, i, "attn_qkv.weight"), w, type) &&
           nb_gguf_add_weight(g, tensor_name(name, i, "attn_qkv.bias"), b, type) &&
           nb_gguf_add_weight(g, tensor_name(name, i, "attn_output.weight"), a->out_proj->weight,
                              type) &&
           nb_gguf_add_weight(g, tensor_name(name, i, "attn_output.bias"), a->out_proj->bias, type);
}

static bool add_block(nb_gguf *g, const nb_transformer_block *b, int i, nb_gguf_type type) {
    char name[64];
    return add_norm(g, i, "attn_norm", b->norm1) && add_attention(g, b->attn, i, type) &&
           add_norm(g, i, "ffn_norm", b->norm2) &&
           nb_gguf_add_weight(g, tensor_name(name, i, "ffn_up.weight"), b->ff->fc1->weight, type) &&
           nb_gguf_add_weight(g, tensor_name(name, i, "ffn_up.bias"), b->ff->fc1->bias, type) &&
           nb_gguf_add_weight(g, tensor_name(name, i, "ffn_down.weight"), b->ff->fc2->weight,
                              type) &&
           nb_gguf_add_weight(g, tensor_name(name, i, "ffn_down.bias"), b->ff->fc2->bias, type);
}

/* The gpt2.* keys llama.cpp reads (src/models/gpt2.cpp and the common hparams), and the
 * tensors; position_embd stays float32, as llama.cpp's converter keeps it. */
static bool fill(nb_gguf *g, const void *model, nb_gguf_type type) {
    const nb_transformer_lm *lm = model;
    bool ok = nb_gguf_set_u32(g, "gpt2.embedding_length", (uint32_t)lm->dim) &&
              nb_gguf_set_u32(g, "gpt2.feed_forward_length",
                              (uint32_t)lm->blocks[0]->ff->fc1->out_features) &&
              nb_gguf_set_u32(g, "gpt2.block_count", (uint32_t)lm->num_layers) &&
              nb_gguf_set_u32(g, "gpt2.attention.head_count", (uint32_t)lm->num_heads) &&
              nb_gguf_set_f32(g, "gpt2.attention.layer_norm_epsilon", (float)lm->norm_f->eps) &&
              nb_gguf_add_weight(g, "token_embd.weight", lm->tok_emb->weight, type) &&
              nb_gguf_add_weight(g, "position_embd.weight", lm->pos_emb->weight, NB_GGUF_F32);
    for (int i = 0; ok && i < lm->num_layers; i++) ok = add_block(g, lm->blocks[i], i, type);
    ok = ok && nb_gguf_add_weight(g, "output_norm.weight", lm->norm_f->weight, type) &&
         nb_gguf_add_weight(g, "output_norm.bias", lm->norm_f->bias, type);
    /* tied: llama.cpp's gpt2 reads token_embd.weight as the output when there is none */
    return ok && (lm->tie_weights || nb_gguf_add_weight(g, "output.weight", lm->head_weight, type));
}

bool nb_transformer_lm_save_gguf(const nb_transformer_lm *lm, const char *path,
                                 const nb_gguf_vocab *vocab, nb_gguf_type type) {
    if (!lm || !path || !vocab)
        return nb_error(op, "NULL %s", !lm ? "model" : !path ? "path" : "vocabulary"), false;
    if (!fits(lm, path)) return false;
    const nb_gguf_model_info info = {.arch = "gpt2",
                                     .name = nb_module_path(&lm->base),
                                     .max_len = lm->max_len,
                                     .n_vocab = lm->vocab,
                                     .vocab = vocab,
                                     .type = type};
    return nb_gguf_save_model(op, path, &info, fill, lm);
}
