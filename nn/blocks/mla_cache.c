/* Multi-head latent attention against a cache: the layer keeps [kv_norm(c_kv), k_pe] per
 * position (kv_rank + rope_dim numbers, the rows "latent_rope") and attends "absorbed", as
 * DeepSeek's reference model.py does: with wkv_b's rows per head split into W_uk (keys,
 * nope_dim x kv_rank) and W_uv (values, v_dim x kv_rank),
 *   q_nope . (W_uk c) = (q_nope W_uk) . c   and   sum_j p_j (W_uv c_j) = W_uv (sum_j p_j c_j),
 * so each head's query becomes [q_nope W_uk, q_pe] (kv_rank + rope_dim numbers) and reads the
 * cached rows themselves as keys, and the softmax-weighted sum of the latents goes through
 * W_uv afterwards. Nothing per head is rebuilt from the latent: a token's step reads
 * (kv_rank + rope_dim) numbers per cached position instead of n_heads keys and values. */
#include <nabla/blocks.h>
#include "attn_mask.h"
#include "errors.h"
#include "mla_parts.h"

#include <math.h>

#define ROWS_NAME "latent_rope"

/* Does layer opts->cache_layer of the cache fit m and x? Errors name m and the cache. */
static bool cache_fits(const blk_mla *m, const nb_tensor *x, const blk_attn_opts *o) {
    const nb_kv_cache *c = o->cache;
    const int64_t want = m->cfg.kv_rank + m->cfg.rope_dim;
    const nb_dtype dt = nb_module_dtype(&m->base);
    if (o->cache_layer < 0 || o->cache_layer >= nb_kv_cache_layer_count(c) ||
        nb_kv_cache_dtype(c) != dt || nb_kv_cache_batch(c) != x->shape[0]) {
        nb_error("MLA",
                 "'%s': a layer in %s for x %s cannot use layer %d of a cache of %d layers in "
                 "%s for batch %lld",
                 nb_module_path(&m->base), nb_dtype_name(dt), nb_shape_text(x), o->cache_layer,
                 nb_kv_cache_layer_count(c), nb_dtype_name(nb_kv_cache_dtype(c)),
                 (long long)nb_kv_cache_batch(c));
        return false;
    }
    const int64_t width = nb_kv_cache_rows_width(c, o->cache_layer, ROWS_NAME);
    if (width != want) {
        if (width < 0) { /* the cache said what it lacks */
            blk_module_error(&m->base);
            return false;
        }
        nb_error("MLA",
                 "'%s': layer %d of the cache keeps rows '" ROWS_NAME "' of width %lld, this "
                 "layer kv_rank + rope_dim = %lld (blk_mla_cache_new makes its cache)",
                 nb_module_path(&m->base), o->cache_layer, (long long)width, (long long)want);
        return false;
    }
    return true;
}

/* Bottom-right causal mask [T, S] for new queries at positions S - T .. S - 1 over keys
 * 0 .. S - 1 (true = blocked: key j > the query's position); NULL for one query, which sees
 * every key. */
static nb_tensor *new_queries_mask(int64_t T, int64_t S) {
    if (T == 1) return NULL;
    return nb_gt(nb_view(nb_arange(NB_F64, 0, (double)S, 1), NB_SHAPE(1, S)),
                 nb_view(nb_arange(NB_F64, (double)(S - T), (double)S, 1), NB_SHAPE(T, 1)));
}

/* The absorbed attention of the new tokens x against the rows. */
static nb_tensor *absorbed(blk_mla *m, const nb_tensor *x, const blk_attn_opts *o) {
    const blk_mla_config *c = &m->cfg;
    const int64_t B = x->shape[0], T = x->shape[1], H = c->n_heads, R = c->kv_rank;
    blk_rope_tables rope;
    nb_tensor *q_nope, *q_pe, *latent, *k_pe;
    if (!blk_rope_tables_make(x->dtype, T, c->rope_dim, nb_kv_cache_len(o->cache), c->rope_base,
                              &rope) ||
        !blk_mla_query(m, x, &rope, &q_nope, &q_pe) || !blk_mla_latent(m, x, &rope, &latent, &k_pe))
        return NULL;
    nb_tensor *rows = nb_kv_cache_append(o->cache, o->cache_layer, ROWS_NAME,
                                         nb_concat(2, (nb_tensor *[]){latent, k_pe}, 2));
    if (!rows) return NULL; /* [B, S, R + rope_dim], S = len + T */
    /* wkv_b's weight [H * (nope + v), R] as [H, nope + v, R]: W_uk, then W_uv, per head */
    nb_tensor *w = nb_view(m->wkv_b->weight, NB_SHAPE(H, c->nope_dim + c->v_dim, R));
    nb_tensor *w_uk = nb_narrow(w, 1, 0, c->nope_dim),
              *w_uv = nb_narrow(w, 1, c->nope_dim, c->v_dim);
    nb_tensor *q_latent = nb_matmul(nb_transpose(q_nope, 1, 2), w_uk); /* [B, H, T, R] */
    nb_tensor *q = nb_concat(2, (nb_tensor *[]){q_latent, nb_transpose(q_pe, 1, 2)}, 3);
    /* one kv head, the rows, read by every query head as keys and as values; the values'
     * rotary columns give context columns R.. that are dropped (nb_sdpa takes v of k's
     * shape) */
    nb_tensor *kv = nb_unsqueeze(rows, 1), *mask = new_queries_mask(T, rows->shape[1]);
    if (!q || !kv || (T > 1 && !mask)) return NULL;
    nb_tensor *ctx =
        nb_sdpa(q, kv, kv, mask, false, 1.0 / sqrt((double)(c->nope_dim + c->rope_dim)));
    nb_tensor *heads = nb_matmul(nb_narrow(ctx, 3, 0, R), nb_transpose(w_uv, 1, 2));
    return nb_linear_forward(m->wo,
                             nb_reshape(nb_transpose(heads, 1, 2), NB_SHAPE(B, T, H * c->v_dim)));
}

nb_tensor *blk_mla_forward_cached(blk_mla *m, const nb_tensor *x, const blk_attn_opts *opts) {
    if (!blk_attn_cached_opts_ok(&m->base, opts) || !cache_fits(m, x, opts)) return NULL;
    const bool grad = nb_set_grad_enabled(false); /* inference */
    nb_tensor *y = absorbed(m, x, opts);
    nb_set_grad_enabled(grad);
    return y ? y : blk_module_error(&m->base);
}

nb_kv_cache *blk_mla_cache_new(int n_layers, blk_mla *const *layers, int64_t batch,
                               int64_t max_len) {
    if (!layers || n_layers < 1)
        return nb_error("MLA", "blk_mla_cache_new needs 1 or more layers, got %d", n_layers);
    for (int i = 0; i < n_layers; i++)
        if (!layers[i]) return nb_error("MLA", "blk_mla_cache_new: layer %d is NULL", i);
    nb_kv_cache *c = nb_kv_cache_empty(n_layers, batch, max_len, nb_module_dtype(&layers[0]->base));
    for (int i = 0; c && i < n_layers; i++)
        if (!nb_kv_cache_add_rows(c, i, ROWS_NAME,
                                  layers[i]->cfg.kv_rank + layers[i]->cfg.rope_dim)) {
            nb_kv_cache_free(c);
            return NULL;
        }
    return c;
}

int64_t blk_mla_cache_bytes_per_token(const blk_mla *m, int64_t *mha_bytes) {
    if (!m) return blk_null_argument("MLA"), -1;
    const blk_mla_config *c = &m->cfg;
    const int64_t size = (int64_t)nb_dtype_size(nb_module_dtype(&m->base));
    if (mha_bytes) *mha_bytes = c->n_heads * (c->nope_dim + c->rope_dim + c->v_dim) * size;
    return (c->kv_rank + c->rope_dim) * size;
}
