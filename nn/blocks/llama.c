/* The Llama-style block (pre-RMSNorm, RoPE, grouped-query attention, SwiGLU, residuals) and
 * a small language model of such blocks. */
#include <nabla/blocks.h>
#include "errors.h"
#include "lm_cache.h"

#include <stdio.h>

blk_llama_block *blk_llama_block_new(nb_module *parent, const char *name,
                                     const blk_llama_config *cfg) {
    if (!cfg) return blk_null_argument("LlamaBlock");
    blk_llama_block *m = nb_module_new(parent, name, "LlamaBlock", sizeof *m);
    if (!m) return NULL;
    if (!(m->attention_norm =
              blk_rms_norm_new(&m->base, "attention_norm", cfg->dim, cfg->norm_eps)) ||
        !(m->attention = blk_attention_new(&m->base, "attention", cfg->dim, cfg->n_heads,
                                           cfg->n_kv_heads, cfg->rope_base)) ||
        !(m->ffn_norm = blk_rms_norm_new(&m->base, "ffn_norm", cfg->dim, cfg->norm_eps)) ||
        !(m->feed_forward = blk_swiglu_new(&m->base, "feed_forward", cfg->dim, cfg->hidden)))
        return nb_module_discard(&m->base);
    return m;
}

/* The block after its attention norm: normed = attention_norm(x). Returns the block's output,
 * and with next (the norm after the block) next's output in *next_normed, the block's last
 * residual add and that norm as one node (blk_rms_norm_forward_add), as is its first. */
static nb_tensor *block_body(blk_llama_block *m, const nb_tensor *x, const nb_tensor *normed,
                             const blk_attn_opts *opts, blk_rms_norm *next,
                             nb_tensor **next_normed) {
    nb_tensor *h, *out;
    nb_tensor *ffn_in = blk_rms_norm_forward_add(
        m->ffn_norm, x, blk_attention_forward(m->attention, normed, opts), &h);
    nb_tensor *ffn = blk_swiglu_forward(m->feed_forward, ffn_in);
    if (!next) return nb_add(h, ffn);
    *next_normed = blk_rms_norm_forward_add(next, h, ffn, &out);
    return out;
}

nb_tensor *blk_llama_block_forward(blk_llama_block *m, const nb_tensor *x,
                                   const blk_attn_opts *opts) {
    if (!m) return blk_null_argument("LlamaBlock");
    /* cached: inference, no graph for the norms, residuals and feed-forward either */
    const bool grad = opts && opts->cache ? nb_set_grad_enabled(false) : nb_is_grad_enabled();
    nb_tensor *out = block_body(m, x, blk_rms_norm_forward(m->attention_norm, x), opts, NULL, NULL);
    nb_set_grad_enabled(grad);
    return out;
}

blk_llama_lm *blk_llama_lm_new(nb_module *parent, const char *name, int64_t vocab, int n_layers,
                               const blk_llama_config *cfg) {
    if (!cfg || n_layers < 1 || n_layers > BLK_MAX_LAYERS || vocab <= 0)
        return nb_error("LlamaLM", "needs a config, vocab > 0 and 1 to %d layers, got %lld and %d",
                        BLK_MAX_LAYERS, (long long)vocab, n_layers);
    blk_llama_lm *m = nb_module_new(parent, name, "LlamaLM", sizeof *m);
    if (!m) return NULL;
    m->vocab = vocab;
    m->n_layers = n_layers;
    m->cfg = *cfg;
    if (!(m->tok_embeddings = nb_embedding_new(&m->base, "tok_embeddings", vocab, cfg->dim)) ||
        !(m->layers_container = nb_module_container(&m->base, "layers")))
        return nb_module_discard(&m->base);
    for (int i = 0; i < n_layers; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        if (!(m->layers[i] = blk_llama_block_new(m->layers_container, idx, cfg)))
            return nb_module_discard(&m->base);
    }
    if (!(m->norm = blk_rms_norm_new(&m->base, "norm", cfg->dim, cfg->norm_eps)) ||
        !(m->output = nb_linear_new(&m->base, "output", cfg->dim, vocab, false)))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *blk_llama_lm_forward(blk_llama_lm *m, const nb_tensor *tokens,
                                const blk_attn_opts *opts) {
    if (!m || !tokens) return blk_null_argument("LlamaLM");
    if (tokens->ndim != 2 || tokens->dtype != NB_I64)
        return nb_error("LlamaLM", "'%s' expects int64 tokens [B, T], got %s %s",
                        nb_module_path(&m->base), nb_dtype_name(tokens->dtype),
                        nb_shape_text(tokens));
    nb_kv_cache *c = opts ? opts->cache : NULL;
    if (c && !blk_lm_cache_fits(&m->base, m->n_layers, tokens, c)) return NULL;
    const bool grad = c ? nb_set_grad_enabled(false) : nb_is_grad_enabled(); /* inference */
    nb_tensor *x = nb_embedding_forward(m->tok_embeddings, tokens);
    /* Each block's output and the norm after it (the next block's attention norm, or the
     * final norm) come from one node: blk_llama_block_forward's values. */
    nb_tensor *normed = blk_rms_norm_forward(m->layers[0]->attention_norm, x);
    /* Every layer rotates at the same positions with the same head size and base: one set of
     * tables for all (a decoded token's were as much work as its norms, made once per layer). */
    const blk_attention *a0 = m->layers[0]->attention;
    blk_rope_tables rope;
    if (x && !(opts && opts->rope) &&
        !blk_rope_tables_make(nb_module_dtype(&m->base), tokens->shape[1], a0->head_dim,
                              c      ? nb_kv_cache_len(c)
                              : opts ? opts->offset
                                     : 0,
                              a0->rope_base, &rope))
        x = NULL;
    for (int i = 0; i < m->n_layers && x; i++) {
        blk_attn_opts layer = opts ? *opts : (blk_attn_opts){0};
        if (!layer.rope) layer.rope = &rope;
        layer.attn_weights = opts && opts->attn_weights ? &opts->attn_weights[i] : NULL;
        layer.cache_layer = i;
        blk_rms_norm *next = i + 1 < m->n_layers ? m->layers[i + 1]->attention_norm : m->norm;
        x = block_body(m->layers[i], x, normed, &layer, next, &normed);
    }
    /* nb_linear_forward would replace the first error with its own */
    nb_tensor *logits = x ? nb_linear_forward(m->output, normed) : NULL;
    nb_set_grad_enabled(grad);
    return logits;
}

nb_kv_cache *blk_llama_lm_cache_new(const blk_llama_lm *m, int64_t batch, int64_t max_len) {
    if (!m) return blk_null_argument("LlamaLM");
    const blk_attention *a = m->layers[0]->attention;
    return nb_kv_cache_new(m->n_layers, batch, max_len, a->n_kv_heads, a->head_dim,
                           nb_module_dtype(&m->base));
}

static nb_tensor *causal_forward(void *model, const nb_tensor *tokens, nb_kv_cache *c) {
    return blk_llama_lm_forward(model, tokens, &(blk_attn_opts){.causal = true, .cache = c});
}

static nb_kv_cache *causal_cache(void *model, int64_t batch, int64_t max_len) {
    return blk_llama_lm_cache_new(model, batch, max_len);
}

nb_causal_lm blk_llama_lm_causal(blk_llama_lm *m, int64_t max_len) {
    return blk_lm_causal(m, m ? &m->base : NULL, m ? m->vocab : 0, max_len, causal_forward,
                         causal_cache);
}
