/* The Llama-style LM as a GGUF file for llama.cpp ("llama" architecture). */
#include <nabla/blocks.h>

#include "errors.h"

#include <stdint.h>
#include <stdio.h>

/* Each head's rows of a q or k projection [heads * hd, dim] from rotate-half order (pairs i,
 * i + hd/2) to adjacent pairs (2i, 2i + 1): view as [heads, 2, hd/2, dim], swap the middle
 * two dims. A new tensor in the current scope. */
static nb_tensor *interleave_rope_rows(const nb_tensor *w, int64_t heads, int64_t hd) {
    const int64_t dim = w->shape[1];
    nb_tensor *t = nb_transpose(nb_view(w, NB_SHAPE(heads, 2, hd / 2, dim)), 1, 2);
    return nb_view(nb_contiguous(t), NB_SHAPE(heads * hd, dim));
}

/* Adds one tensor; 1-D tensors (norm weights) are always float32, as llama.cpp reads them. */
static bool add(nb_gguf *g, const char *name, const nb_tensor *t, nb_gguf_type type) {
    return t && nb_gguf_add_tensor(g, name, t, t->ndim == 1 ? NB_GGUF_F32 : type);
}

static bool add_layer(nb_gguf *g, const blk_llama_block *b, int i, nb_gguf_type type) {
    const blk_attention *a = b->attention;
    char name[64];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix ".weight", i), name)
    return add(g, NAME("attn_norm"), b->attention_norm->weight, type) &&
           add(g, NAME("attn_q"), interleave_rope_rows(a->wq->weight, a->n_heads, a->head_dim),
               type) &&
           add(g, NAME("attn_k"), interleave_rope_rows(a->wk->weight, a->n_kv_heads, a->head_dim),
               type) &&
           add(g, NAME("attn_v"), a->wv->weight, type) &&
           add(g, NAME("attn_output"), a->wo->weight, type) &&
           add(g, NAME("ffn_norm"), b->ffn_norm->weight, type) &&
           add(g, NAME("ffn_gate"), b->feed_forward->w1->weight, type) &&
           add(g, NAME("ffn_up"), b->feed_forward->w3->weight, type) &&
           add(g, NAME("ffn_down"), b->feed_forward->w2->weight, type);
#undef NAME
}

static bool set_metadata(nb_gguf *g, const blk_llama_lm *m, int64_t max_len, nb_gguf_type type) {
    const blk_llama_config *c = &m->cfg;
    return nb_gguf_set_string(g, "general.architecture", "llama") &&
           nb_gguf_set_string(g, "general.name", nb_module_path(&m->base)) &&
           nb_gguf_set_u32(g, "general.file_type", type == NB_GGUF_F16 ? 1 : 0) &&
           nb_gguf_set_u32(g, "llama.context_length", (uint32_t)max_len) &&
           nb_gguf_set_u32(g, "llama.embedding_length", (uint32_t)c->dim) &&
           nb_gguf_set_u32(g, "llama.block_count", (uint32_t)m->n_layers) &&
           nb_gguf_set_u32(g, "llama.feed_forward_length", (uint32_t)c->hidden) &&
           nb_gguf_set_u32(g, "llama.rope.dimension_count", (uint32_t)(c->dim / c->n_heads)) &&
           nb_gguf_set_f32(g, "llama.rope.freq_base", (float)c->rope_base) &&
           nb_gguf_set_u32(g, "llama.attention.head_count", (uint32_t)c->n_heads) &&
           nb_gguf_set_u32(g, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads) &&
           nb_gguf_set_f32(g, "llama.attention.layer_norm_rms_epsilon", (float)c->norm_eps) &&
           nb_gguf_set_u32(g, "llama.vocab_size", (uint32_t)m->vocab);
}

bool blk_llama_lm_save_gguf(const blk_llama_lm *m, const char *path, int64_t max_len,
                            const nb_gguf_vocab *vocab, nb_gguf_type type) {
    const char *op = "blk_llama_lm_save_gguf";
    if (!m || !path || !vocab) return blk_null_argument(op) != NULL;
    if (max_len < 1 || max_len > UINT32_MAX)
        return nb_error(op, "%s: max_len %lld must be in [1, 2^32)", path, (long long)max_len),
               false;
    if (vocab->n_tokens != m->vocab)
        return nb_error(op, "%s: the vocabulary has %lld tokens, the model %lld", path,
                        (long long)vocab->n_tokens, (long long)m->vocab),
               false;
    nb_gguf *g = nb_gguf_new();
    nb_scope_begin(); /* the reordered q and k weights */
    bool ok = g && set_metadata(g, m, max_len, type) && nb_gguf_set_vocab(g, vocab) &&
              add(g, "token_embd.weight", m->tok_embeddings->weight, type);
    for (int i = 0; ok && i < m->n_layers; i++) ok = add_layer(g, m->layers[i], i, type);
    ok = ok && add(g, "output_norm.weight", m->norm->weight, type) &&
         add(g, "output.weight", m->output->weight, type) && nb_gguf_save(g, path);
    nb_scope_end();
    nb_gguf_free(g);
    if (!ok) {
        char cause[768]; /* nb_error rewrites the buffer nb_last_error points into */
        snprintf(cause, sizeof cause, "%s", nb_last_error());
        nb_error(op, "%s: %s", path, cause);
    }
    return ok;
}
