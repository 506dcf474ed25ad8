/* A DeepSeek-style language model: blocks of pre-RMSNorm multi-head latent attention and a
 * mixture-of-experts (or, in the first n_dense_layers blocks, dense SwiGLU) feed-forward,
 * under the names of DeepSeek's reference model.py. */
#include <nabla/blocks.h>
#include "errors.h"
#include "lm_cache.h"

#include <stdio.h>

blk_deepseek_block *blk_deepseek_block_new(nb_module *parent, const char *name,
                                           const blk_deepseek_config *cfg, bool dense) {
    if (!cfg) return blk_null_argument("DeepSeekBlock");
    if (cfg->moe.dim != cfg->attn.dim || (dense && cfg->dense_hidden <= 0))
        return nb_error("DeepSeekBlock",
                        "needs moe.dim = attn.dim and, for a dense block, dense_hidden > 0, got "
                        "attn.dim %lld, moe.dim %lld, dense_hidden %lld",
                        (long long)cfg->attn.dim, (long long)cfg->moe.dim,
                        (long long)cfg->dense_hidden);
    blk_deepseek_block *m = nb_module_new(parent, name, "DeepSeekBlock", sizeof *m);
    if (!m) return NULL;
    const int64_t D = cfg->attn.dim;
    if (!(m->attn_norm = blk_rms_norm_new(&m->base, "attn_norm", D, cfg->norm_eps)) ||
        !(m->attn = blk_mla_new(&m->base, "attn", &cfg->attn)) ||
        !(m->ffn_norm = blk_rms_norm_new(&m->base, "ffn_norm", D, cfg->norm_eps)) ||
        !(dense ? (void *)(m->dense = blk_swiglu_new(&m->base, "ffn", D, cfg->dense_hidden))
                : (void *)(m->moe = blk_moe_new(&m->base, "ffn", &cfg->moe))))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *blk_deepseek_block_forward(blk_deepseek_block *m, const nb_tensor *x,
                                      const blk_attn_opts *opts, nb_tensor **aux_loss) {
    if (aux_loss) *aux_loss = NULL;
    if (!m) return blk_null_argument("DeepSeekBlock");
    /* cached: inference, no graph for the norms, residuals and feed-forward either */
    const bool grad = opts && opts->cache ? nb_set_grad_enabled(false) : nb_is_grad_enabled();
    nb_tensor *h, *ffn; /* the residual add and the norm after it: one node */
    nb_tensor *normed = blk_rms_norm_forward_add(
        m->ffn_norm, x, blk_mla_forward(m->attn, blk_rms_norm_forward(m->attn_norm, x), opts), &h);
    blk_moe_routing routing = {0};
    if (m->dense) {
        ffn = blk_swiglu_forward(m->dense, normed);
        routing.aux_loss = aux_loss && ffn ? nb_scalar(ffn->dtype, 0) : NULL;
    } else {
        ffn = blk_moe_forward(m->moe, normed, aux_loss ? &routing : NULL);
    }
    nb_tensor *out = ffn ? nb_add(h, ffn) : NULL;
    if (out && aux_loss && !(*aux_loss = routing.aux_loss)) out = NULL;
    nb_set_grad_enabled(grad);
    return out;
}

blk_deepseek_lm *blk_deepseek_lm_new(nb_module *parent, const char *name, int64_t vocab,
                                     int n_layers, const blk_deepseek_config *cfg) {
    if (!cfg || n_layers < 1 || n_layers > BLK_MAX_LAYERS || vocab <= 0 ||
        cfg->n_dense_layers < 0 || cfg->n_dense_layers > n_layers)
        return nb_error(
            "DeepSeekLM",
            "needs a config, vocab > 0, 1 to %d layers and n_dense_layers in 0..layers, "
            "got vocab %lld, %d layers, n_dense_layers %d",
            BLK_MAX_LAYERS, (long long)vocab, n_layers, cfg ? cfg->n_dense_layers : 0);
    blk_deepseek_lm *m = nb_module_new(parent, name, "DeepSeekLM", sizeof *m);
    if (!m) return NULL;
    m->vocab = vocab;
    m->n_layers = n_layers;
    m->cfg = *cfg;
    const int64_t D = cfg->attn.dim;
    if (!(m->embed = nb_embedding_new(&m->base, "embed", vocab, D)) ||
        !(m->layers_container = nb_module_container(&m->base, "layers")))
        return nb_module_discard(&m->base);
    for (int i = 0; i < n_layers; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        if (!(m->layers[i] =
                  blk_deepseek_block_new(m->layers_container, idx, cfg, i < cfg->n_dense_layers)))
            return nb_module_discard(&m->base);
    }
    if (!(m->norm = blk_rms_norm_new(&m->base, "norm", D, cfg->norm_eps)) ||
        !(m->head = nb_linear_new(&m->base, "head", D, vocab, false)))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *blk_deepseek_lm_forward(blk_deepseek_lm *m, const nb_tensor *tokens,
                                   const blk_attn_opts *opts, nb_tensor **aux_loss) {
    if (aux_loss) *aux_loss = NULL;
    if (!m || !tokens) return blk_null_argument("DeepSeekLM");
    if (tokens->ndim != 2 || tokens->dtype != NB_I64)
        return nb_error("DeepSeekLM", "'%s' expects int64 tokens [B, T], got %s %s",
                        nb_module_path(&m->base), nb_dtype_name(tokens->dtype),
                        nb_shape_text(tokens));
    nb_kv_cache *c = opts ? opts->cache : NULL;
    if (c && !blk_lm_cache_fits(&m->base, m->n_layers, tokens, c)) return NULL;
    const bool grad = c ? nb_set_grad_enabled(false) : nb_is_grad_enabled(); /* inference */
    nb_tensor *x = nb_embedding_forward(m->embed, tokens), *aux = NULL;
    for (int i = 0; i < m->n_layers && x; i++) {
        blk_attn_opts layer = opts ? *opts : (blk_attn_opts){0};
        layer.attn_weights = opts && opts->attn_weights ? &opts->attn_weights[i] : NULL;
        layer.cache_layer = i;
        nb_tensor *block_aux;
        x = blk_deepseek_block_forward(m->layers[i], x, &layer, aux_loss ? &block_aux : NULL);
        if (x && aux_loss) aux = aux ? nb_add(aux, block_aux) : block_aux;
    }
    /* nb_linear_forward would replace the first error with its own */
    nb_tensor *logits = x ? nb_linear_forward(m->head, blk_rms_norm_forward(m->norm, x)) : NULL;
    nb_set_grad_enabled(grad);
    if (logits && aux_loss && !(*aux_loss = aux)) return NULL;
    return logits;
}

nb_kv_cache *blk_deepseek_lm_cache_new(const blk_deepseek_lm *m, int64_t batch, int64_t max_len) {
    if (!m) return blk_null_argument("DeepSeekLM");
    blk_mla *attn[BLK_MAX_LAYERS];
    for (int i = 0; i < m->n_layers; i++) attn[i] = m->layers[i]->attn;
    return blk_mla_cache_new(m->n_layers, attn, batch, max_len);
}

static nb_tensor *causal_forward(void *model, const nb_tensor *tokens, nb_kv_cache *c) {
    return blk_deepseek_lm_forward(model, tokens, &(blk_attn_opts){.causal = true, .cache = c},
                                   NULL);
}

static nb_kv_cache *causal_cache(void *model, int64_t batch, int64_t max_len) {
    return blk_deepseek_lm_cache_new(model, batch, max_len);
}

nb_causal_lm blk_deepseek_lm_causal(blk_deepseek_lm *m, int64_t max_len) {
    return blk_lm_causal(m, m ? &m->base : NULL, m ? m->vocab : 0, max_len, causal_forward,
                         causal_cache);
}

int64_t blk_deepseek_lm_active_params(const blk_deepseek_lm *m, int64_t *total) {
    if (!m) return blk_null_argument("DeepSeekLM"), -1;
    const int64_t all = nb_module_param_numel(&m->base);
    int64_t idle = 0;
    for (int i = 0; i < m->n_layers; i++) {
        const blk_moe *moe = m->layers[i]->moe;
        if (moe) /* the routed experts are all of one size */
            idle += (moe->cfg.n_experts - moe->cfg.top_k) *
                    nb_module_param_numel(&moe->experts[0]->base);
    }
    if (total) *total = all;
    return all - idle;
}
