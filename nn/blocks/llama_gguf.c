/* The Llama-style LM as a GGUF file for llama.cpp ("llama" architecture). */
#include <nabla/blocks.h>

#include "errors.h"
#include "gguf_parts.h"

static bool add_layer(nb_gguf *g, const void *model, int i, nb_gguf_type type) {
    const blk_llama_block *b = ((const blk_llama_lm *)model)->layers[i];
    const blk_attention *a = b->attention;
    char name[64];
    return nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_norm"), b->attention_norm->weight,
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_q"),
                              blk_gguf_pair_rope_rows(a->wq->weight, a->n_heads, 0, a->head_dim),
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_k"),
                              blk_gguf_pair_rope_rows(a->wk->weight, a->n_kv_heads, 0, a->head_dim),
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_v"), a->wv->weight, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_output"), a->wo->weight, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_norm"), b->ffn_norm->weight, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_gate"), b->feed_forward->w1->weight,
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_up"), b->feed_forward->w3->weight,
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_down"), b->feed_forward->w2->weight,
                              type);
}

/* The llama.* keys beyond nb_gguf_save_model's, and the tensors. */
static bool fill(nb_gguf *g, const void *model, nb_gguf_type type) {
    const blk_llama_lm *m = model;
    const blk_llama_config *c = &m->cfg;
    return nb_gguf_set_u32(g, "llama.embedding_length", (uint32_t)c->dim) &&
           nb_gguf_set_u32(g, "llama.block_count", (uint32_t)m->n_layers) &&
           nb_gguf_set_u32(g, "llama.feed_forward_length", (uint32_t)c->hidden) &&
           nb_gguf_set_u32(g, "llama.rope.dimension_count", (uint32_t)(c->dim / c->n_heads)) &&
           nb_gguf_set_f32(g, "llama.rope.freq_base", (float)c->rope_base) &&
           nb_gguf_set_u32(g, "llama.attention.head_count", (uint32_t)c->n_heads) &&
           nb_gguf_set_u32(g, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads) &&
           nb_gguf_set_f32(g, "llama.attention.layer_norm_rms_epsilon", (float)c->norm_eps) &&
           blk_gguf_add_lm(g, type, m->tok_embeddings->weight, m->norm->weight, m->output->weight,
                           m->n_layers, add_layer, m);
}

bool blk_llama_lm_save_gguf(const blk_llama_lm *m, const char *path, int64_t max_len,
                            const nb_gguf_vocab *vocab, nb_gguf_type type) {
    const char *op = "blk_llama_lm_save_gguf";
    if (!m || !path || !vocab) return blk_null_argument(op) != NULL;
    return blk_gguf_save_lm(op, "llama", &m->base, m->vocab, path, max_len, vocab, type, fill, m);
}
