/* DeepSeek-style mixture of experts: the module and its forward. The router is
 * moe_router.c, the dispatch plan moe_plan.c; blocks.h states the formulas and
 * docs/design.md ("Mixture of experts") the design. */
#include <nabla/blocks.h>
#include "errors.h"
#include "moe.h"

#include <math.h>
#include <stdio.h>

blk_moe *blk_moe_new(nb_module *parent, const char *name, const blk_moe_config *cfg) {
    if (!cfg) return blk_null_argument("MoE");
    if (cfg->dim <= 0 || cfg->hidden <= 0 || cfg->n_experts <= 0 || cfg->top_k <= 0 ||
        cfg->top_k > cfg->n_experts || cfg->n_shared < 0 || cfg->tile_rows < 0 ||
        !(cfg->aux_alpha >= 0) || !isfinite(cfg->aux_alpha))
        return nb_error("MoE",
                        "needs dim, hidden, n_experts > 0, top_k in 1..n_experts, n_shared >= 0, "
                        "tile_rows >= 0 and a finite aux_alpha >= 0, got dim %lld, hidden %lld, "
                        "n_experts %lld, top_k %lld, n_shared %lld, tile_rows %lld, aux_alpha %g",
                        (long long)cfg->dim, (long long)cfg->hidden, (long long)cfg->n_experts,
                        (long long)cfg->top_k, (long long)cfg->n_shared, (long long)cfg->tile_rows,
                        cfg->aux_alpha);
    const size_t size = sizeof(blk_moe) + sizeof(blk_swiglu *) * (size_t)cfg->n_experts;
    blk_moe *m = nb_module_new(parent, name, "MoE", size);
    if (!m) return NULL;
    m->cfg = *cfg;
    m->experts = (blk_swiglu **)(m + 1);
    if (!(m->gate = nb_linear_new(&m->base, "gate", cfg->dim, cfg->n_experts, false)) ||
        !(m->experts_container = nb_module_container(&m->base, "experts")))
        return nb_module_discard(&m->base);
    for (int64_t e = 0; e < cfg->n_experts; e++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%lld", (long long)e);
        if (!(m->experts[e] = blk_swiglu_new(m->experts_container, idx, cfg->dim, cfg->hidden)))
            return nb_module_discard(&m->base);
    }
    if (cfg->n_shared > 0 &&
        !(m->shared_experts =
              blk_swiglu_new(&m->base, "shared_experts", cfg->dim, cfg->n_shared * cfg->hidden)))
        return nb_module_discard(&m->base);
    return m;
}

/* nb_concat of the n tensors along dim 0, in concats of at most 4 tensors: a node keeps up to
 * 4 inputs in place and mallocs a list for more, every step. ts is overwritten. */
static nb_tensor *join_rows(int64_t n, nb_tensor **ts) {
    while (n > 1) {
        int64_t joined = 0;
        for (int64_t i = 0; i < n; i += 4) {
            int group = n - i < 4 ? (int)(n - i) : 4;
            if (!(ts[joined++] = group == 1 ? ts[i] : nb_concat(group, ts + i, 0))) return NULL;
        }
        n = joined;
    }
    return ts[0];
}

_Static_assert(sizeof(nb_tensor *) <= sizeof(int64_t), "a tile's tensor pointer in an int64");

/* The experts on their rows: [T R, D], tile t holding expert tile_expert[t]'s output for the
 * rows the plan gave it. */
static nb_tensor *run_experts(const blk_moe *m, const nb_tensor *x, const moe_plan *p) {
    const int64_t D = x->shape[1], R = p->tile_rows, T = p->tiles;
    if (T == 0) return nb_zeros(x->dtype, NB_SHAPE(0, D));
    /* [x; 0]: rows no slot fills read the zero row and give zeros (SwiGLU has no bias) */
    nb_tensor *padded =
        nb_concat(2, (nb_tensor *[]){(nb_tensor *)x, nb_zeros(x->dtype, NB_SHAPE(1, D))}, 0);
    nb_tensor *rows = nb_index_select(padded, 0, p->token_of_row);
    /* the tiles' outputs, listed in the step's scope rather than malloc'd */
    nb_tensor *list = nb_empty(NB_I64, NB_SHAPE(T));
    if (!rows || !list) return NULL;
    nb_tensor **outs = nb_data(list);
    const int64_t *tile_expert = nb_data(p->tile_expert);
    for (int64_t t = 0; t < T; t++) {
        const blk_swiglu *e = m->experts[tile_expert[t]];
        if (!(outs[t] = blk_f_swiglu(nb_narrow(rows, 0, t * R, R), e->w1->weight, e->w3->weight,
                                     e->w2->weight)))
            return NULL;
    }
    return join_rows(T, outs);
}

/* y [N, D] for x [N, D]; routing as blk_moe_forward's, for [N, ...]. */
static nb_tensor *moe_tokens(const blk_moe *m, const nb_tensor *x, blk_moe_routing *routing) {
    const int64_t N = x->shape[0], D = x->shape[1], k = m->cfg.top_k;
    moe_routes routes;
    moe_plan plan;
    if (!moe_route(x, m->gate->weight, k, &routes) ||
        !moe_plan_make(routes.experts, m->cfg.n_experts, m->cfg.tile_rows, &plan))
        return NULL;
    nb_tensor *slots = nb_index_select(run_experts(m, x, &plan), 0, plan.row_of_slot);
    nb_tensor *weighted = nb_mul(slots, nb_reshape(routes.weights, NB_SHAPE(N * k, 1)));
    const blk_swiglu *shared = m->shared_experts;
    nb_tensor *base =
        shared ? blk_f_swiglu(x, shared->w1->weight, shared->w3->weight, shared->w2->weight)
               : nb_zeros(x->dtype, NB_SHAPE(N, D));
    nb_tensor *y = nb_index_add(base, 0, plan.token_of_slot, weighted, 1.0);
    if (y && routing) {
        *routing = (blk_moe_routing){
            .experts = routes.experts,
            .weights = routes.weights,
            .load = plan.load,
            .aux_loss = moe_aux_loss(routes.probs, plan.load, k, m->cfg.aux_alpha)};
        if (!routing->aux_loss) return NULL;
    }
    return y;
}

nb_tensor *blk_moe_forward(blk_moe *m, const nb_tensor *x, blk_moe_routing *routing) {
    if (routing) *routing = (blk_moe_routing){0};
    if (!m || !x) return blk_null_argument("MoE");
    const int64_t D = m->cfg.dim;
    const nb_dtype dt = nb_module_dtype(&m->base);
    if (x->ndim < 1 || x->shape[x->ndim - 1] != D || x->dtype != dt)
        return nb_error("MoE", "'%s' expects x %s [..., %lld], got %s %s", nb_module_path(&m->base),
                        nb_dtype_name(dt), (long long)D, nb_dtype_name(x->dtype), nb_shape_text(x));
    const int64_t N = nb_numel(x) / D;
    nb_tensor *y = moe_tokens(m, nb_reshape(x, NB_SHAPE(N, D)), routing);
    if (!y) {
        if (routing) *routing = (blk_moe_routing){0};
        return blk_module_error(&m->base);
    }
    if (routing) { /* [N, k] -> [..., k] */
        int64_t shape[NB_MAX_DIMS];
        for (int i = 0; i < x->ndim - 1; i++) shape[i] = x->shape[i];
        shape[x->ndim - 1] = m->cfg.top_k;
        routing->experts = nb_reshape(routing->experts, x->ndim, shape);
        routing->weights = nb_reshape(routing->weights, x->ndim, shape);
    }
    return nb_reshape(y, x->ndim, x->shape);
}
