/* DeepSeek-V2's multi-head latent attention: the module, its projections and the forward
 * without a cache (training; the cached, absorbed forward is in mla_cache.c). */
#include <nabla/blocks.h>
#include "attn_mask.h"
#include "errors.h"
#include "mla_parts.h"

#include <math.h>

blk_mla *blk_mla_new(nb_module *parent, const char *name, const blk_mla_config *cfg) {
    if (!cfg) return blk_null_argument("MLA");
    const blk_mla_config c = *cfg;
    if (c.dim <= 0 || c.n_heads <= 0 || c.q_rank < 0 || c.kv_rank <= 0 || c.nope_dim <= 0 ||
        c.rope_dim <= 0 || c.rope_dim % 2 != 0 || c.v_dim <= 0 || !(c.norm_eps >= 0) ||
        !(c.rope_base > 0))
        return nb_error("MLA",
                        "needs positive dim, n_heads, kv_rank, nope_dim, v_dim, an even positive "
                        "rope_dim, q_rank >= 0, norm_eps >= 0 and rope_base > 0, got dim %lld, "
                        "n_heads %lld, q_rank %lld, kv_rank %lld, nope_dim %lld, rope_dim %lld, "
                        "v_dim %lld, norm_eps %g, rope_base %g",
                        (long long)c.dim, (long long)c.n_heads, (long long)c.q_rank,
                        (long long)c.kv_rank, (long long)c.nope_dim, (long long)c.rope_dim,
                        (long long)c.v_dim, c.norm_eps, c.rope_base);
    blk_mla *m = nb_module_new(parent, name, "MLA", sizeof *m);
    if (!m) return NULL;
    m->cfg = c;
    const int64_t H = c.n_heads, qk = c.nope_dim + c.rope_dim;
    bool ok = c.q_rank == 0
                  ? (m->wq = nb_linear_new(&m->base, "wq", c.dim, H * qk, false)) != NULL
                  : (m->wq_a = nb_linear_new(&m->base, "wq_a", c.dim, c.q_rank, false)) &&
                        (m->q_norm = blk_rms_norm_new(&m->base, "q_norm", c.q_rank, c.norm_eps)) &&
                        (m->wq_b = nb_linear_new(&m->base, "wq_b", c.q_rank, H * qk, false));
    ok = ok &&
         (m->wkv_a = nb_linear_new(&m->base, "wkv_a", c.dim, c.kv_rank + c.rope_dim, false)) &&
         (m->kv_norm = blk_rms_norm_new(&m->base, "kv_norm", c.kv_rank, c.norm_eps)) &&
         (m->wkv_b =
              nb_linear_new(&m->base, "wkv_b", c.kv_rank, H * (c.nope_dim + c.v_dim), false)) &&
         (m->wo = nb_linear_new(&m->base, "wo", H * c.v_dim, c.dim, false));
    return ok ? m : nb_module_discard(&m->base);
}

bool blk_mla_query(const blk_mla *m, const nb_tensor *x, const blk_rope_tables *rope,
                   nb_tensor **nope, nb_tensor **pe) {
    const blk_mla_config *c = &m->cfg;
    nb_tensor *q =
        m->wq ? nb_linear_forward(m->wq, x)
              : nb_linear_forward(m->wq_b,
                                  blk_rms_norm_forward(m->q_norm, nb_linear_forward(m->wq_a, x)));
    if (!q) return false;
    q = nb_view(q, NB_SHAPE(x->shape[0], x->shape[1], c->n_heads, c->nope_dim + c->rope_dim));
    *nope = nb_narrow(q, 3, 0, c->nope_dim);
    *pe = blk_rope_apply(nb_narrow(q, 3, c->nope_dim, c->rope_dim), 1, rope);
    return *nope && *pe;
}

bool blk_mla_latent(const blk_mla *m, const nb_tensor *x, const blk_rope_tables *rope,
                    nb_tensor **latent, nb_tensor **k_pe) {
    const blk_mla_config *c = &m->cfg;
    nb_tensor *kv = nb_linear_forward(m->wkv_a, x); /* [B, T, kv_rank + rope_dim] */
    *latent = kv ? blk_rms_norm_forward(m->kv_norm, nb_narrow(kv, 2, 0, c->kv_rank)) : NULL;
    *k_pe = *latent ? blk_rope_apply(nb_narrow(kv, 2, c->kv_rank, c->rope_dim), 1, rope) : NULL;
    return *k_pe != NULL;
}

/* The full forward: per-head keys [k_nope, k_pe] and values up-projected from the latent. */
static nb_tensor *mla_full(blk_mla *m, const nb_tensor *x, const blk_attn_opts *opts) {
    const blk_mla_config *c = &m->cfg;
    const int64_t B = x->shape[0], T = x->shape[1], H = c->n_heads;
    const int64_t qk = c->nope_dim + c->rope_dim, offset = opts ? opts->offset : 0;
    nb_tensor *mask;
    if (!blk_attn_mask(&m->base, opts, B, T, &mask)) return NULL;
    if (offset < 0)
        return nb_error("MLA", "'%s': offset must be >= 0, got %lld", nb_module_path(&m->base),
                        (long long)offset);
    blk_rope_tables rope; /* q_pe and k_pe are rotated at the same positions */
    nb_tensor *q_nope, *q_pe, *latent, *k_pe;
    if (!blk_rope_tables_make(x->dtype, T, c->rope_dim, offset, c->rope_base, &rope) ||
        !blk_mla_query(m, x, &rope, &q_nope, &q_pe) || !blk_mla_latent(m, x, &rope, &latent, &k_pe))
        return blk_module_error(&m->base);
    nb_tensor *kv =
        nb_view(nb_linear_forward(m->wkv_b, latent), NB_SHAPE(B, T, H, c->nope_dim + c->v_dim));
    nb_tensor *k_shared = nb_expand(nb_unsqueeze(k_pe, 2), NB_SHAPE(B, T, H, c->rope_dim));
    nb_tensor *q = nb_transpose(nb_concat(2, (nb_tensor *[]){q_nope, q_pe}, 3), 1, 2);
    nb_tensor *k = nb_transpose(
        nb_concat(2, (nb_tensor *[]){nb_narrow(kv, 3, 0, c->nope_dim), k_shared}, 3), 1, 2);
    nb_tensor *v = nb_transpose(nb_narrow(kv, 3, c->nope_dim, c->v_dim), 1, 2);
    if (!q || !k || !v) return blk_module_error(&m->base);
    const bool causal = opts && opts->causal;
    const double scale = 1.0 / sqrt((double)qk);
    nb_tensor **weights = opts ? opts->attn_weights : NULL;
    /* nb_sdpa reads one head size for q, k and v */
    nb_tensor *ctx = !weights && c->v_dim == qk
                         ? nb_sdpa(q, k, v, mask, causal, scale)
                         : blk_gqa_attention(q, k, v, mask, causal, scale, weights);
    if (!ctx) return blk_module_error(&m->base); /* [B, H, T, v_dim] */
    ctx = nb_reshape(nb_transpose(ctx, 1, 2), NB_SHAPE(B, T, H * c->v_dim));
    return nb_linear_forward(m->wo, ctx);
}

nb_tensor *blk_mla_forward(blk_mla *m, const nb_tensor *x, const blk_attn_opts *opts) {
    if (!m || !x) return blk_null_argument("MLA");
    if (x->ndim != 3 || x->shape[2] != m->cfg.dim)
        return nb_error("MLA", "'%s' expects x [B, T, %lld], got %s", nb_module_path(&m->base),
                        (long long)m->cfg.dim, nb_shape_text(x));
    return opts && opts->cache ? blk_mla_forward_cached(m, x, opts) : mla_full(m, x, opts);
}
