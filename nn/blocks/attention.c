/* The Llama-style attention module: projections, RoPE on q and k, grouped-query attention. */
#include <nabla/blocks.h>
#include "attn_mask.h"
#include "errors.h"
#include "qkv_rope.h"

#include <math.h>

blk_attention *blk_attention_new(nb_module *parent, const char *name, int64_t dim, int64_t n_heads,
                                 int64_t n_kv_heads, double rope_base) {
    if (dim <= 0 || n_heads <= 0 || n_kv_heads <= 0 || dim % n_heads != 0 ||
        (dim / n_heads) % 2 != 0 || n_heads % n_kv_heads != 0 || !(rope_base > 0))
        return nb_error("Attention",
                        "needs n_kv_heads dividing n_heads dividing dim with an even head dim "
                        "and rope_base > 0, got dim %lld, n_heads %lld, n_kv_heads %lld, "
                        "rope_base %g",
                        (long long)dim, (long long)n_heads, (long long)n_kv_heads, rope_base);
    blk_attention *m = nb_module_new(parent, name, "Attention", sizeof *m);
    if (!m) return NULL;
    m->dim = dim;
    m->n_heads = n_heads;
    m->n_kv_heads = n_kv_heads;
    m->head_dim = dim / n_heads;
    m->rope_base = rope_base;
    int64_t kv_dim = n_kv_heads * m->head_dim;
    if (!(m->wq = nb_linear_new(&m->base, "wq", dim, dim, false)) ||
        !(m->wk = nb_linear_new(&m->base, "wk", dim, kv_dim, false)) ||
        !(m->wv = nb_linear_new(&m->base, "wv", dim, kv_dim, false)) ||
        !(m->wo = nb_linear_new(&m->base, "wo", dim, dim, false)))
        return nb_module_discard(&m->base);
    return m;
}

/* [B, T, heads * hd] rotated at the tables' positions, in the same layout (what
 * nb_kv_cache_attend reads). */
static nb_tensor *rotated(const blk_attention *m, const nb_tensor *x, int64_t n,
                          const blk_rope_tables *rope) {
    if (!x) return NULL;
    const int64_t B = x->shape[0], T = x->shape[1];
    nb_tensor *h = blk_rope_apply(nb_view(x, NB_SHAPE(B, T, n, m->head_dim)), 1, rope);
    return h ? nb_view(h, NB_SHAPE(B, T, n * m->head_dim)) : NULL;
}

/* The tables for x's tokens at positions offset onward: opts->rope if given (checked), else
 * new ones. False with an error. */
static bool rope_tables(const blk_attention *m, const nb_tensor *x, const blk_attn_opts *opts,
                        int64_t offset, blk_rope_tables *out) {
    if (!opts || !opts->rope)
        return blk_rope_tables_make(x->dtype, x->shape[1], m->head_dim, offset, m->rope_base, out);
    const nb_tensor *c = opts->rope->cos, *s = opts->rope->sin;
    const int64_t want[2] = {x->shape[1], m->head_dim / 2};
    for (int i = 0; i < 2; i++) {
        const nb_tensor *t = i ? s : c;
        if (!t || t->dtype != x->dtype || t->ndim != 2 || t->shape[0] != want[0] ||
            t->shape[1] != want[1])
            return nb_error("Attention",
                            "'%s': the given RoPE %s table is %s %s; x %s %s needs %s [%lld, %lld]",
                            nb_module_path(&m->base), i ? "sin" : "cos",
                            t ? nb_dtype_name(t->dtype) : "NULL", t ? nb_shape_text(t) : "",
                            nb_dtype_name(x->dtype), nb_shape_text(x), nb_dtype_name(x->dtype),
                            (long long)want[0], (long long)want[1]),
                   false;
    }
    *out = *opts->rope;
    return true;
}

/* The forward against opts->cache (inference: autograd off). The projections and the rotation
 * are training's; the cache writes the rotated keys and the values at positions len.. and
 * attends causally, reading its kv heads for groups of query heads as training does. */
static nb_tensor *attention_cached(blk_attention *m, const nb_tensor *x, const blk_attn_opts *o) {
    if (!blk_attn_cached_opts_ok(&m->base, o)) return NULL;
    const bool grad = nb_set_grad_enabled(false);
    blk_rope_tables rope;
    nb_tensor *y = NULL;
    if (rope_tables(m, x, o, nb_kv_cache_len(o->cache), &rope)) {
        nb_tensor *qkv[3]; /* one job for the three products of a decoded token */
        const bool projected = nb_linears_forward(3, (nb_linear *[]){m->wq, m->wk, m->wv}, x, qkv);
        nb_tensor *q = projected ? rotated(m, qkv[0], m->n_heads, &rope) : NULL;
        nb_tensor *k = q ? rotated(m, qkv[1], m->n_kv_heads, &rope) : NULL;
        nb_tensor *v = k ? qkv[2] : NULL;
        nb_tensor *ctx = v ? nb_kv_cache_attend(o->cache, o->cache_layer, q, k, v, m->n_heads)
                           : NULL; /* [B, T, dim] */
        y = ctx ? nb_linear_forward(m->wo, ctx) : NULL;
    }
    nb_set_grad_enabled(grad);
    return y ? y : blk_module_error(&m->base);
}

nb_tensor *blk_attention_forward(blk_attention *m, const nb_tensor *x, const blk_attn_opts *opts) {
    if (!m || !x) return blk_null_argument("Attention");
    if (x->ndim != 3 || x->shape[2] != m->dim)
        return nb_error("Attention", "'%s' expects x [B, T, %lld], got %s",
                        nb_module_path(&m->base), (long long)m->dim, nb_shape_text(x));
    if (opts && opts->cache) return attention_cached(m, x, opts);
    int64_t B = x->shape[0], T = x->shape[1], offset = opts ? opts->offset : 0;
    nb_tensor *mask;
    if (!blk_attn_mask(&m->base, opts, B, T, &mask)) return NULL;
    if (offset < 0)
        return nb_error("Attention", "'%s': offset must be >= 0, got %lld",
                        nb_module_path(&m->base), (long long)offset);
    blk_rope_tables rope; /* q and k are rotated at the same positions: one set of tables */
    if (!rope_tables(m, x, opts, offset, &rope)) return NULL;
    nb_tensor *q, *k, *v; /* [B, T, heads, hd] */
    if (!blk_qkv_rope(x, m->wq->weight, m->wk->weight, m->wv->weight, m->n_heads, m->n_kv_heads,
                      &rope, &q, &k, &v))
        return blk_module_error(&m->base);
    q = nb_transpose(q, 1, 2), k = nb_transpose(k, 1, 2), v = nb_transpose(v, 1, 2);
    const bool causal = opts && opts->causal;
    const double scale = 1.0 / sqrt((double)m->head_dim);
    nb_tensor *ctx = opts && opts->attn_weights
                         ? blk_gqa_attention(q, k, v, mask, causal, scale, opts->attn_weights)
                         : nb_sdpa(q, k, v, mask, causal, scale); /* [B, H, T, hd] */
    if (!ctx) return blk_module_error(&m->base);
    /* nb_sdpa stores its result as [B, T, H, hd], so this contiguous is no copy */
    ctx = nb_view(nb_contiguous(nb_transpose(ctx, 1, 2)), NB_SHAPE(B, T, m->dim));
    return nb_linear_forward(m->wo, ctx);
}
