/* What every optimizer shares: parameter validation and groups, state tensors made lazily in
 * a private scope, the checked step loop, zero_grad, and the step's one pool job. */
#include "optim_impl.h"
#include "param_list.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

bool nbo_check_nonneg(const char *op, const char *what, double x) {
    if (isfinite(x) && x >= 0) return true;
    nbt_error(op, "%s is %g, expected a finite value >= 0", what, x);
    return false;
}

bool nbo_check_beta(const char *op, const char *what, double x) {
    if (x >= 0 && x < 1) return true;
    nbt_error(op, "%s is %g, expected a value in [0, 1)", what, x);
    return false;
}

/* A copy of the n_old items of *array (item bytes each) in room for n_new, replacing it. */
static bool regrow(void *array, size_t item, int n_old, int n_new) {
    void **p = array;
    void *grown = nbt_malloc(item * (size_t)(n_new > 0 ? n_new : 1));
    if (!grown) return false;
    if (n_old > 0) memcpy(grown, *p, item * (size_t)n_old);
    memset((char *)grown + item * (size_t)n_old, 0, item * (size_t)(n_new - n_old));
    nbt_free(*p);
    *p = grown;
    return true;
}

/* The shared list check, then what only an optimizer needs: one dtype over every group, each
 * parameter in one group only, and no expanded views (it updates parameters in place). */
static bool check_params(const nb_optimizer *o, const char *op, nb_tensor *const *params, int n) {
    if (!nbn_check_param_list(op, params, n, 0, false, o->n)) return false;
    for (int i = 0; i < n; i++) {
        const nb_tensor *p = params[i];
        const int at = o->n + i;
        for (int d = 0; d < p->ndim; d++)
            if (p->shape[d] > 1 && p->strides[d] == 0)
                return nbt_error(op,
                                 "parameter %s is an expanded view; updating it in place would "
                                 "hit shared elements",
                                 nbn_param_label(p, at)),
                       false;
        if (o->n > 0 && p->dtype != o->params[0]->dtype)
            return nbt_error(op,
                             "parameter %s is %s but the optimizer's parameters are %s: all "
                             "parameters must share one dtype",
                             nbn_param_label(p, at), nb_dtype_name(p->dtype),
                             nb_dtype_name(o->params[0]->dtype)),
                   false;
        for (int j = 0; j < o->n; j++)
            if (o->params[j] == p)
                return nbt_error(op, "parameter %s is already in group %d, as parameter %d",
                                 nbn_param_label(p, at), o->group_of[j], j),
                       false;
    }
    return true;
}

int nbo_add_group(nb_optimizer *o, const char *op, nb_tensor *const *params, int n, double lr,
                  double weight_decay) {
    if (!check_params(o, op, params, n) || !nbo_check_nonneg(op, "lr", lr) ||
        !nbo_check_nonneg(op, "weight_decay", weight_decay))
        return -1;
    const int old = o->n, total = o->n + n, ns = o->nstate;
    if (!regrow(&o->params, sizeof *o->params, old, total) ||
        !regrow(&o->group_of, sizeof *o->group_of, old, total) ||
        !regrow(&o->state, sizeof *o->state, old * ns, total * ns) ||
        !regrow(&o->has_state, sizeof *o->has_state, old, total) ||
        !regrow(&o->had_state, sizeof *o->had_state, old, total) ||
        !regrow(&o->segments, sizeof *o->segments, old, total) ||
        !regrow(&o->groups, sizeof *o->groups, o->ngroups, o->ngroups + 1))
        return nbt_error(op, "out of memory for %d parameters", total), -1;
    const int g = o->ngroups++;
    o->groups[g] = (nbo_group){.lr = lr, .initial_lr = lr, .weight_decay = weight_decay};
    for (int i = 0; i < n; i++) {
        o->params[old + i] = params[i];
        o->group_of[old + i] = g;
        for (int j = 0; j < old + i; j++)
            if (params[i]->storage == o->params[j]->storage) o->shared_storage = true;
    }
    o->n = total;
    return g;
}

nb_optimizer *nbo_create(const char *op, nb_tensor *const *params, int n, double lr,
                         double weight_decay, int nstate, const nbo_state_kind *kinds,
                         nbo_update_fn update) {
    nb_optimizer *o = nbt_malloc(sizeof *o);
    if (!o) return nbt_error(op, "out of memory");
    memset(o, 0, sizeof *o);
    o->op = op;
    o->update = update;
    o->nstate = nstate;
    memcpy(o->kinds, kinds, sizeof *kinds * (size_t)nstate);
    o->scope = nb_scope_new();
    if (!o->scope) {
        nb_optimizer_free(o);
        return nbt_error(op, "out of memory");
    }
    if (nbo_add_group(o, op, params, n, lr, weight_decay) < 0) {
        nb_optimizer_free(o);
        return NULL;
    }
    return o;
}

bool nbo_make_state(nb_optimizer *o, const char *op, int i) {
    const nb_tensor *p = o->params[i];
    bool ok = true;
    nb_scope_push(o->scope);
    for (int k = 0; ok && k < o->nstate; k++) {
        nb_tensor **s = &o->state[i * o->nstate + k];
        if (*s) {
            ok = nb_fill_(*s, 0.0);
            continue;
        }
        /* A non-NULL shape even for 0 dims: nbt_new memcpy's from it. */
        static const int64_t no_dims[1] = {0};
        *s = o->kinds[k].is_step ? nb_zeros(NB_I64, 0, no_dims)
                                 : nb_zeros(p->dtype, p->ndim, p->shape);
        ok = *s != NULL;
    }
    nb_scope_pop();
    if (!ok)
        return nbt_error(op, "out of memory for the state of parameter %s", nbn_param_label(p, i)),
               false;
    o->has_state[i] = true;
    return true;
}

void nb_optimizer_free(nb_optimizer *o) {
    if (!o) return;
    if (o->scope) nb_scope_free(o->scope);
    nbt_free(o->params);
    nbt_free(o->group_of);
    nbt_free(o->groups);
    nbt_free(o->state);
    nbt_free(o->has_state);
    nbt_free(o->had_state);
    nbt_free(o->segments);
    nbt_free(o->named);
    nbt_free(o);
}

static void run_segments(nb_optimizer *o);

/* A parameter takes part in a step if it requires grad and has a gradient (torch steps every
 * parameter with a gradient; a frozen one here keeps any gradient it had, and is left alone). */
static bool steps(const nb_tensor *p) {
    return p->requires_grad && p->grad;
}

bool nb_optimizer_step(nb_optimizer *o) {
    const char *op = "nb_optimizer_step";
    if (!o) return nbt_error(op, "optimizer is NULL"), false;
    /* Check every gradient first so a bad one leaves all parameters untouched. */
    for (int i = 0; i < o->n; i++) {
        const nb_tensor *p = o->params[i], *g = p->grad;
        if (!steps(p)) continue;
        if (g->dtype != p->dtype || !nb_same_shape(g, p))
            return nbt_error(op, "parameter %s is %s but its gradient has shape %s (%s)",
                             nbn_param_label(p, i), nb_dtype_name(p->dtype), nbt_shape(g),
                             nb_dtype_name(g->dtype)),
                   false;
        /* State written behind the optimizer's back (a checkpoint loaded without its check)
         * must not turn into NaN weights or an overflowing count. */
        for (int k = 0; o->has_state[i] && k < o->nstate; k++) {
            int64_t step = o->kinds[k].is_step ? *(const int64_t *)nbt_ptr(nbo_state(o, i, k)) : 0;
            if (step < 0 || step >= NBO_MAX_STEP)
                return nbt_error(op, "parameter %s has step count %lld, out of range [0, 2^53)",
                                 nbn_param_label(p, i), (long long)step),
                       false;
        }
    }
    /* State for the parameters stepped for the first time (torch makes it lazily too); if
     * memory runs out, those given state here lose it again. */
    for (int i = 0; i < o->n; i++) {
        o->had_state[i] = o->has_state[i];
        if (o->nstate == 0 || !steps(o->params[i]) || o->has_state[i]) continue;
        if (!nbo_make_state(o, op, i)) {
            for (int j = 0; j < i; j++) o->has_state[j] = o->had_state[j];
            return false;
        }
    }
    o->nsegments = 0;
    for (int i = 0; i < o->n; i++)
        if (steps(o->params[i])) o->update(o, i);
    run_segments(o);
    return true;
}

/* A flat gradient's elements set to zero (all-zero bytes are 0 in every float type). */
static void zero_inner(int64_t n, char **p, const int64_t *strides, void *ctx) {
    (void)ctx;
    memset(p[0], 0, (size_t)n * (size_t)strides[0]);
}

/* Every flat gradient zeroed in one job, as the step updates them: one by one they were
 * memsets on the calling thread (lm's 1.7 MB of gradients, about 100 us a step). */
void nb_optimizer_zero_grad(nb_optimizer *o) {
    if (!o) return;
    o->nsegments = 0;
    for (int i = 0; i < o->n; i++) {
        nb_tensor *g = o->params[i]->grad;
        if (!g) continue;
        if (!nb_is_contiguous(g)) {
            nb_zero_grad(o->params[i]);
            continue;
        }
        nbo_segment *seg = &o->segments[o->nsegments++];
        seg->nops = 1, seg->n = nbt_numel(g), seg->fn = zero_inner;
        seg->base[0] = nbt_ptr(g);
    }
    run_segments(o);
}

/* The queued updates as one job: every queued parameter's elements in a row, cut into slices
 * of at least RUN_GRAIN that any thread may take. The update is elementwise, so every element
 * sees the same arithmetic for any thread count and any cut. One job for all parameters, not
 * one per parameter: the small ones (biases, norms) had run on the calling thread alone, and
 * each large one had been a pool job of its own. */
#define RUN_GRAIN 16384

static void run_segment_range(int64_t begin, int64_t end, void *vo) {
    const nb_optimizer *o = vo;
    const size_t es = nb_dtype_size(o->params[0]->dtype);
    int lo = 0, hi = o->nsegments - 1; /* the last segment starting at or before begin */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (o->segments[mid].first <= begin)
            lo = mid;
        else
            hi = mid - 1;
    }
    int64_t strides[NBT_ITER_MAX];
    for (int k = 0; k < NBT_ITER_MAX; k++) strides[k] = (int64_t)es;
    for (int s = lo; s < o->nsegments && o->segments[s].first < end; s++) {
        const nbo_segment *seg = &o->segments[s];
        int64_t from = begin > seg->first ? begin - seg->first : 0;
        int64_t to = end - seg->first < seg->n ? end - seg->first : seg->n;
        if (from >= to) continue;
        char *p[NBT_ITER_MAX];
        for (int k = 0; k < seg->nops; k++) p[k] = seg->base[k] + (size_t)from * es;
        seg->fn(to - from, p, strides, (void *)seg->ctx);
    }
}

static void run_segments(nb_optimizer *o) {
    int64_t total = 0;
    for (int s = 0; s < o->nsegments; s++) o->segments[s].first = total, total += o->segments[s].n;
    if (total > 0) nbt_parallel_ranges(total, RUN_GRAIN, run_segment_range, o);
    o->nsegments = 0;
}

void nbo_run(nb_optimizer *o, nb_tensor *param, const nb_tensor *grad, int nstate,
             nb_tensor *const *states, nbt_inner_fn fn, const void *ctx, size_t ctx_size) {
    const int nops = 2 + nstate;
    const nb_tensor *all[NBT_ITER_MAX] = {param, grad};
    for (int k = 0; k < nstate; k++) all[2 + k] = states[k];
    bool flat = true;
    for (int k = 0; k < nops; k++) flat = flat && nb_is_contiguous(all[k]);
    if (flat) {
        nbo_segment *seg = &o->segments[o->nsegments++];
        seg->nops = nops, seg->n = nbt_numel(param), seg->fn = fn;
        for (int k = 0; k < nops; k++) seg->base[k] = nbt_ptr(all[k]);
        memcpy(seg->ctx, ctx, ctx_size);
        if (o->shared_storage) run_segments(o); /* now, in parameter order */
        return;
    }
    nbt_operands ops = {.nops = nops};
    for (int k = 0; k < nops; k++) {
        ops.base[k] = nbt_ptr(all[k]);
        ops.elem[k] = nb_dtype_size(param->dtype);
        memcpy(ops.strides[k], all[k]->strides, sizeof(int64_t) * (size_t)param->ndim);
    }
    nbt_iterate(param->ndim, param->shape, &ops, fn, (void *)ctx);
}
