/* What every optimizer shares: parameter validation, state tensors in a private scope, the
 * checked step loop, zero_grad, the learning rate and the named view of the state. */
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

/* The shared list check, then what only an optimizer needs: it updates parameters in place. */
static bool check_params(const char *op, nb_tensor *const *params, int n) {
    if (!nbn_check_param_list(op, params, n)) return false;
    for (int i = 0; i < n; i++) {
        const nb_tensor *p = params[i];
        for (int d = 0; d < p->ndim; d++)
            if (p->shape[d] > 1 && p->strides[d] == 0)
                return nbt_error(op,
                                 "parameter %d (shape %s) is an expanded view; updating it in "
                                 "place would hit shared elements",
                                 i, nbt_shape(p)),
                       false;
    }
    return true;
}

nb_optimizer *nbo_create(const char *op, nb_tensor *const *params, int n, double lr, int nstate,
                         const nbo_state_kind *kinds, nbo_update_fn update) {
    if (!check_params(op, params, n) || !nbo_check_nonneg(op, "lr", lr)) return NULL;
    nb_optimizer *o = nbt_malloc(sizeof *o);
    if (!o) return nbt_error(op, "out of memory");
    memset(o, 0, sizeof *o);
    o->op = op;
    o->update = update;
    o->lr = lr;
    o->n = n;
    o->nstate = nstate;
    memcpy(o->kinds, kinds, sizeof *kinds * (size_t)nstate);
    o->params = nbt_malloc(sizeof *o->params * (size_t)n);
    o->state = nbt_malloc(sizeof *o->state * (size_t)(n * nstate + 1));
    o->segments = nbt_malloc(sizeof *o->segments * (size_t)n);
    o->scope = nb_scope_create();
    if (!o->params || !o->state || !o->segments || !o->scope) {
        nb_optimizer_free(o);
        return nbt_error(op, "out of memory");
    }
    memcpy(o->params, params, sizeof *params * (size_t)n);
    for (int i = 0; i < n && !o->shared_storage; i++)
        for (int j = 0; j < i; j++)
            if (params[i]->storage == params[j]->storage) o->shared_storage = true;
    bool ok = true;
    nb_scope_push(o->scope);
    for (int i = 0; ok && i < n; i++)
        for (int k = 0; ok && k < nstate; k++) {
            const nb_tensor *p = params[i];
            /* A non-NULL shape even for 0 dims: nbt_new memcpy's from it. */
            static const int64_t no_dims[1] = {0};
            nb_tensor *s = kinds[k].is_step ? nb_zeros(NB_I64, 0, no_dims)
                                            : nb_zeros(p->dtype, p->ndim, p->shape);
            o->state[i * nstate + k] = s;
            ok = s != NULL;
        }
    nb_scope_pop();
    if (!ok) {
        nb_optimizer_free(o);
        return NULL;
    }
    return o;
}

void nb_optimizer_free(nb_optimizer *o) {
    if (!o) return;
    if (o->scope) nb_scope_destroy(o->scope);
    nbt_free(o->params);
    nbt_free(o->state);
    nbt_free(o->segments);
    nbt_free(o->named);
    nbt_free(o);
}

static void run_segments(nb_optimizer *o);

bool nb_optimizer_step(nb_optimizer *o) {
    if (!o) return nbt_error("nb_optimizer_step", "optimizer is NULL"), false;
    /* Check every gradient first so a bad one leaves all parameters untouched. */
    for (int i = 0; i < o->n; i++) {
        const nb_tensor *p = o->params[i], *g = p->grad;
        if (g && (g->dtype != p->dtype || !nb_same_shape(g, p)))
            return nbt_error("nb_optimizer_step",
                             "parameter %d has shape %s (%s) but its gradient has shape %s (%s)", i,
                             nbt_shape(p), nb_dtype_name(p->dtype), nbt_shape(g),
                             nb_dtype_name(g->dtype)),
                   false;
        /* State written behind the optimizer's back (a checkpoint loaded without its check)
         * must not turn into NaN weights or an overflowing count. */
        for (int k = 0; g && k < o->nstate; k++) {
            int64_t step = o->kinds[k].is_step ? *(const int64_t *)nbt_ptr(nbo_state(o, i, k)) : 0;
            if (step < 0 || step >= NBO_MAX_STEP)
                return nbt_error("nb_optimizer_step",
                                 "parameter %d (shape %s) has step count %lld, out of range [0, "
                                 "2^53)",
                                 i, nbt_shape(p), (long long)step),
                       false;
        }
    }
    o->nsegments = 0;
    for (int i = 0; i < o->n; i++)
        if (o->params[i]->grad) o->update(o, i);
    run_segments(o);
    return true;
}

void nb_optimizer_zero_grad(nb_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) nb_zero_grad(o->params[i]);
}

double nb_optimizer_lr(const nb_optimizer *o) {
    if (!o) return nbt_error("nb_optimizer_lr", "optimizer is NULL"), NAN;
    return o->lr;
}

bool nb_optimizer_set_lr(nb_optimizer *o, double lr) {
    if (!o) return nbt_error("nb_optimizer_set_lr", "optimizer is NULL"), false;
    if (!nbo_check_nonneg("nb_optimizer_set_lr", "lr", lr)) return false;
    o->lr = lr;
    return true;
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

int nb_optimizer_state(nb_optimizer *o, const char *prefix, const nb_named_tensor **out) {
    if (!o || !out)
        return nbt_error("nb_optimizer_state", "%s is NULL", o ? "out" : "optimizer"), -1;
    if (!prefix) prefix = "";
    int count = o->n * o->nstate;
    /* Longest name: prefix, the kind, '.', up to 11 digits and the terminator. */
    size_t longest = 0;
    for (int k = 0; k < o->nstate; k++)
        if (strlen(o->kinds[k].name) > longest) longest = strlen(o->kinds[k].name);
    size_t name_cap = strlen(prefix) + longest + 13;
    nb_named_tensor *named =
        nbt_malloc(sizeof *named * (size_t)(count + 1) + name_cap * (size_t)count);
    if (!named) return nbt_error("nb_optimizer_state", "out of memory"), -1;
    char *names = (char *)(named + count + 1);
    for (int i = 0; i < o->n; i++)
        for (int k = 0; k < o->nstate; k++) {
            char *name = names + name_cap * (size_t)(i * o->nstate + k);
            snprintf(name, name_cap, "%s%s.%d", prefix, o->kinds[k].name, i);
            named[i * o->nstate + k] = (nb_named_tensor){name, nbo_state(o, i, k)};
        }
    nbt_free(o->named);
    o->named = named;
    *out = named;
    return count;
}

/* ---- values loaded from a checkpoint ---- */
static const char *check_floats(const nb_tensor *dest, const void *bytes, bool nonneg) {
    static _Thread_local char why[160];
    int64_t n = nbt_numel(dest);
    for (int64_t k = 0; k < n; k++) {
        double v = dest->dtype == NB_F32 ? ((const float *)bytes)[k] : ((const double *)bytes)[k];
        if (isfinite(v) && (!nonneg || v >= 0)) continue;
        snprintf(why, sizeof why, "element %lld is %g, expected a finite value%s", (long long)k, v,
                 nonneg ? " >= 0" : "");
        return why;
    }
    return NULL;
}

const char *nbo_check_loaded_state(const nb_tensor *dest, const void *bytes, void *ctx) {
    const nb_optimizer *o = ctx;
    for (int i = 0; i < o->n; i++)
        for (int k = 0; k < o->nstate; k++) {
            if (nbo_state(o, i, k) != dest) continue;
            if (!o->kinds[k].is_step)
                return check_floats(dest, bytes, strcmp(o->kinds[k].name, "exp_avg_sq") == 0);
            int64_t step = *(const int64_t *)bytes;
            if (step >= 0 && step < NBO_MAX_STEP) return NULL;
            static _Thread_local char why[96];
            snprintf(why, sizeof why, "step count %lld is out of range [0, 2^53)", (long long)step);
            return why;
        }
    return NULL;
}
