/* A small GPT-style transformer: embeddings, pre-LN blocks, final norm, vocabulary head. */
#include "nabla/generate.h"
#include "nabla/nn.h"
#include "module_error.h"
#include "transformer_block.h"
#include "tensor/nbt.h" /* nbt_error, nbt_shape */

#include <stdio.h>

nb_transformer_lm *nb_transformer_lm_new(nb_module *parent, const char *name, int64_t vocab,
                                         int64_t max_len, int64_t dim, int64_t num_heads,
                                         int layers, double dropout) {
    const nb_lm_config cfg = {
        .vocab = vocab, .max_len = max_len, .dim = dim, .num_heads = num_heads, .layers = layers};
    return nb_transformer_lm_new_config(parent, name, &cfg, dropout);
}

/* The head: its own Linear, or with tied weights a module holding only head.bias (initialised
 * as Linear's bias; no module without the bias) that multiplies by tok_emb.weight. */
static bool make_head(nb_transformer_lm *m, bool bias) {
    if (!m->tie_weights) {
        if (!(m->head = nb_linear_new(&m->base, "head", m->dim, m->out_features, bias)))
            return false;
        m->head_weight = m->head->weight;
        m->head_bias = m->head->bias;
        return true;
    }
    m->head_weight = m->tok_emb->weight;
    if (!bias) return true;
    nb_module *head = nb_module_new(&m->base, "head", "TiedHead", sizeof *head);
    m->head_bias =
        head ? nb_module_add_param(head, "bias", NB_SHAPE(m->out_features), nb_init_linear(m->dim))
             : NULL;
    return m->head_bias != NULL;
}

nb_transformer_lm *nb_transformer_lm_new_config(nb_module *parent, const char *name,
                                                const nb_lm_config *cfg, double dropout) {
    if (!cfg) return nbt_error("TransformerLM", "NULL configuration");
    const int layers = cfg->layers;
    const int64_t out = cfg->out_features ? cfg->out_features : cfg->vocab;
    if (layers < 1 || layers > 16)
        return nbt_error("TransformerLM", "layers must be 1 to 16, got %d", layers);
    if (out < 1)
        return nbt_error("TransformerLM", "out_features must be positive, got %lld",
                         (long long)out);
    if (cfg->tie_weights && out != cfg->vocab)
        return nbt_error("TransformerLM",
                         "tied weights need out_features == vocab, got %lld and %lld",
                         (long long)out, (long long)cfg->vocab);
    nb_transformer_lm *m = nb_module_new(parent, name, "TransformerLM", sizeof *m);
    if (!m) return NULL;
    m->vocab = cfg->vocab;
    m->max_len = cfg->max_len;
    m->dim = cfg->dim;
    m->num_heads = cfg->num_heads;
    m->num_layers = layers;
    m->out_features = out;
    m->tie_weights = cfg->tie_weights;
    if (!(m->tok_emb = nb_embedding_new(&m->base, "tok_emb", m->vocab, m->dim)) ||
        !(m->pos_emb = nb_embedding_new(&m->base, "pos_emb", m->max_len, m->dim)) ||
        !(m->blocks_container = nb_module_container(&m->base, "blocks")))
        return nbn_discard(&m->base);
    const nb_block_config block = {.dim = m->dim,
                                   .num_heads = m->num_heads,
                                   .qkv_bias = cfg->qkv_bias,
                                   .gelu_tanh = cfg->gelu_tanh,
                                   .dropout = dropout};
    for (int i = 0; i < layers; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        if (!(m->blocks[i] = nb_transformer_block_new_config(m->blocks_container, idx, &block)))
            return nbn_discard(&m->base);
    }
    if (!(m->norm_f = nb_layer_norm_new(&m->base, "norm_f", m->dim)) ||
        !make_head(m, !cfg->no_head_bias))
        return nbn_discard(&m->base);
    return m;
}

nb_lm_config nb_transformer_lm_config(const nb_transformer_lm *lm) {
    if (!lm) return (nb_lm_config){0};
    return (nb_lm_config){.vocab = lm->vocab,
                          .max_len = lm->max_len,
                          .dim = lm->dim,
                          .num_heads = lm->num_heads,
                          .layers = lm->num_layers,
                          .out_features = lm->out_features,
                          .tie_weights = lm->tie_weights,
                          .qkv_bias = lm->blocks[0]->attn->W_query->bias != NULL,
                          .gelu_tanh = lm->blocks[0]->ff->gelu_tanh,
                          .no_head_bias = lm->head_bias == NULL};
}

nb_tensor *nb_transformer_lm_forward(nb_transformer_lm *m, const nb_tensor *tokens, bool causal,
                                     const nb_tensor *key_padding_mask, nb_tensor **attn_weights) {
    const nb_lm_forward_opts opts = {
        .causal = causal, .key_padding_mask = key_padding_mask, .attn_weights = attn_weights};
    return nb_transformer_lm_forward_opts(m, tokens, &opts);
}

/* Does c fit m (a layer per block, the model's dtype) with room for tokens' positions? The
 * blocks' attention checks each layer's heads against its own and names the layer. */
static bool check_cache(const nb_transformer_lm *m, const nb_tensor *tokens, const nb_kv_cache *c) {
    const nb_dtype dt = m->base.root->dtype;
    if (nb_kv_cache_layer_count(c) != m->num_layers || nb_kv_cache_dtype(c) != dt ||
        nb_kv_cache_batch(c) != tokens->shape[0])
        return nbn_error(&m->base,
                         "a model of %d blocks in %s, given tokens of batch %lld, cannot use a "
                         "cache of %d layers in %s for batch %lld",
                         m->num_layers, nb_dtype_name(dt), (long long)tokens->shape[0],
                         nb_kv_cache_layer_count(c), nb_dtype_name(nb_kv_cache_dtype(c)),
                         (long long)nb_kv_cache_batch(c)),
               false;
    const int64_t len = nb_kv_cache_len(c),
                  room = nb_kv_cache_max_len(c) < m->max_len ? nb_kv_cache_max_len(c) : m->max_len;
    if (tokens->shape[1] > room - len)
        return nbn_error(&m->base,
                         "%lld new tokens after %lld cached positions exceed the %lld the model "
                         "and cache hold",
                         (long long)tokens->shape[1], (long long)len, (long long)room),
               false;
    return true;
}

nb_tensor *nb_transformer_lm_forward_opts(nb_transformer_lm *m, const nb_tensor *tokens,
                                          const nb_lm_forward_opts *opts) {
    if (!m || !tokens || !opts)
        return nbn_null_argument("TransformerLM", m ? &m->base : NULL, tokens ? "opts" : "tokens");
    if (tokens->ndim != 2 || tokens->dtype != NB_I64 || tokens->shape[1] > m->max_len)
        return nbn_error(&m->base, "expects int64 tokens [B, T] with T <= %lld, got %s %s",
                         (long long)m->max_len, nb_dtype_name(tokens->dtype), nbt_shape(tokens));
    const nb_tensor *hm = opts->head_mask;
    if (hm && (hm->ndim != 2 || hm->shape[0] != m->num_layers || hm->shape[1] != m->num_heads))
        return nbn_error(&m->base, "head_mask must be [%d, %lld] (layers, heads), got %s",
                         m->num_layers, (long long)m->num_heads, nbt_shape(hm));
    nb_kv_cache *c = opts->cache;
    if (c && !check_cache(m, tokens, c)) return NULL;
    const int64_t T = tokens->shape[1], start = c ? nb_kv_cache_len(c) : 0;
    const bool grad = c ? nb_set_grad_enabled(false) : nb_is_grad_enabled(); /* cached: inference */
    nb_tensor *positions = nb_arange(NB_I64, (double)start, (double)(start + T), 1);
    nb_tensor *x = nb_add(nb_embedding_forward(m->tok_emb, tokens),
                          nb_embedding_forward(m->pos_emb, positions));
    /* each block's last residual add and the norm after it (the next block's first, or the
     * final one) as one node */
    nb_tensor *normed = nb_layer_norm_forward(m->num_layers ? m->blocks[0]->norm1 : m->norm_f, x);
    for (int i = 0; i < m->num_layers; i++) {
        nb_mha_opts layer = {.causal = opts->causal,
                             .key_padding_mask = opts->key_padding_mask,
                             .attn_weights = opts->attn_weights ? &opts->attn_weights[i] : NULL,
                             .head_mask = hm ? nb_select(hm, 0, i) : NULL,
                             .cache = c,
                             .cache_layer = i};
        if (hm && !layer.head_mask) {
            normed = NULL;
            break;
        }
        nb_layer_norm *next = i + 1 < m->num_layers ? m->blocks[i + 1]->norm1 : m->norm_f;
        x = nbn_transformer_block_body(m->blocks[i], x, normed, &layer, next, &normed);
    }
    nb_tensor *logits = nb_f_linear(normed, m->head_weight, m->head_bias);
    nb_set_grad_enabled(grad);
    return nbn_result(&m->base, logits);
}

nb_tensor *nb_transformer_lm_forward_cached(nb_transformer_lm *m, const nb_tensor *tokens,
                                            nb_kv_cache *c) {
    const nb_lm_forward_opts opts = {.causal = true, .cache = c};
    return nb_transformer_lm_forward_opts(m, tokens, &opts);
}

static nb_tensor *causal_forward(void *lm, const nb_tensor *tokens, nb_kv_cache *c) {
    return nb_transformer_lm_forward_cached(lm, tokens, c);
}

/* A layer per block, each with the heads of the block's attention. */
static nb_kv_cache *causal_cache(void *model, int64_t batch, int64_t max_len) {
    const nb_transformer_lm *lm = model;
    if (!lm) return nbt_error("kv_cache", "NULL module");
    return nb_kv_cache_new(lm->num_layers, batch, max_len, lm->num_heads, lm->dim / lm->num_heads,
                           lm->base.root->dtype);
}

nb_kv_cache *nb_kv_cache_for_lm(const nb_transformer_lm *lm, int64_t batch) {
    return causal_cache((void *)lm, batch, lm ? lm->max_len : 1);
}

nb_causal_lm nb_transformer_lm_causal(nb_transformer_lm *lm) {
    return (nb_causal_lm){.model = lm,
                          .module = lm ? &lm->base : NULL,
                          .vocab = lm ? lm->out_features : 0,
                          .max_len = lm ? lm->max_len : 0,
                          .forward = causal_forward,
                          .new_cache = causal_cache};
}
