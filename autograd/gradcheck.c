/* nb_gradcheck: analytic vector-Jacobian products against central finite differences. */
#include "node.h"

#include <math.h>
#include <stdio.h>

/* sum(r * out) in double, for the numeric side. */
static double projected(const nb_tensor *out, const nb_tensor *r) {
    double acc = 0;
    int64_t n = nbt_numel(out);
    for (int64_t k = 0; k < n; k++) acc += nbt_get_linear(out, k) * nbt_get_linear(r, k);
    return acc;
}

/* Evaluates fn in its own scope and returns sum(r * fn(x)); NAN (error set) on failure. */
static double evaluate(nb_grad_fn fn, int ninputs, nb_tensor *const *inputs, void *ctx,
                       const nb_tensor *r) {
    nb_scope_begin();
    nb_tensor *out = fn(inputs, ninputs, ctx);
    double v = NAN;
    if (out && nb_same_shape(out, r)) v = projected(out, r);
    else if (out) nbt_error("gradcheck", "the function's output shape changed to %s", nbt_shape(out));
    nb_scope_end();
    return v;
}

/* Sets element k (row-major) of t through its strides; returns the old value. */
static double poke(nb_tensor *t, int64_t k, double v) {
    int64_t off = t->offset, rest = k;
    for (int i = t->ndim - 1; i >= 0; i--) {
        off += (rest % t->shape[i]) * t->strides[i];
        rest /= t->shape[i];
    }
    double *p = (double *)t->storage->data + off;
    double old = *p;
    *p = v;
    return old;
}

static bool overlaps_itself(const nb_tensor *t) {
    for (int i = 0; i < t->ndim; i++)
        if (t->strides[i] == 0 && t->shape[i] > 1) return true;
    return false;
}

bool nb_gradcheck(nb_grad_fn fn, int ninputs, nb_tensor *const *inputs, void *ctx,
                  const nb_gradcheck_opts *opts, nb_gradcheck_result *res) {
    nb_gradcheck_result local;
    if (!res) res = &local;
    *res = (nb_gradcheck_result){.worst_input = -1, .worst_index = -1};
    nb_gradcheck_opts o = {1e-6, 1e-5, 1e-3, 1};
    if (opts) o = *opts;
    if (!fn || ninputs <= 0 || !inputs) {
        nbt_error("gradcheck", "expected a function and at least one input");
        snprintf(res->message, sizeof res->message, "%s", nb_last_error());
        return false;
    }
    for (int i = 0; i < ninputs; i++) {
        const nb_tensor *x = inputs[i];
        const char *why = !x ? "is NULL"
                          : x->dtype != NB_F64 && x->requires_grad ? "must be float64"
                          : x->requires_grad && overlaps_itself(x) ? "overlaps itself (stride 0)"
                                                                   : NULL;
        if (why) {
            nbt_error("gradcheck", "input %d (shape %s) %s", i, nbt_shape(x), why);
            snprintf(res->message, sizeof res->message, "%s", nb_last_error());
            return false;
        }
    }
    nb_scope_begin();
    bool ok = false;
    /* Analytic side: one backward with a random projection vector as grad_output. */
    nb_tensor *out = fn(inputs, ninputs, ctx);
    if (!out) goto done;
    if (!out->requires_grad) {
        nbt_error("gradcheck", "the output (shape %s) does not depend on any input that requires "
                  "grad", nbt_shape(out));
        goto done;
    }
    nb_rng rng;
    nb_rng_seed(&rng, o.seed);
    nb_tensor *r = nb_randn(&rng, out->dtype, out->ndim, out->shape);
    for (int i = 0; i < ninputs; i++) nb_zero_grad(inputs[i]);
    if (!r || !nb_backward(out, r)) goto done;

    bool prev = nb_set_grad_enabled(false);
    double worst_ratio = -1;
    ok = true;
    for (int i = 0; i < ninputs && ok; i++) {
        nb_tensor *x = inputs[i];
        if (!x->requires_grad) continue;
        int64_t n = nbt_numel(x);
        for (int64_t k = 0; k < n; k++) {
            double x0 = poke(x, k, 0);
            uint64_t errors = nbt_error_count();
            poke(x, k, x0 + o.eps);
            double fp = evaluate(fn, ninputs, inputs, ctx, r);
            poke(x, k, x0 - o.eps);
            double fm = evaluate(fn, ninputs, inputs, ctx, r);
            poke(x, k, x0);
            if (isnan(fp) || isnan(fm)) {
                /* A failed evaluation, not a NaN value (nor an older error's message). */
                if (nbt_error_left_since(errors)) {
                    ok = false;
                    break;
                }
            }
            double numeric = (fp - fm) / (2 * o.eps);
            double analytic = x->grad ? nbt_get_linear(x->grad, k) : 0.0;
            double err = fabs(analytic - numeric);
            double ratio = err / (o.atol + o.rtol * fabs(numeric));
            if (isnan(err)) ratio = INFINITY;
            res->checked++;
            if (ratio > worst_ratio) {
                worst_ratio = ratio;
                res->worst_input = i;
                res->worst_index = k;
                res->analytic = analytic;
                res->numeric = numeric;
                res->error = err;
            }
        }
    }
    nb_set_grad_enabled(prev);
    if (ok) ok = worst_ratio <= 1.0;
done:
    nb_scope_end();
    res->ok = ok;
    if (res->worst_input >= 0)
        snprintf(res->message, sizeof res->message,
                 "gradcheck %s: worst at input %d element %lld: analytic %.10g numeric %.10g "
                 "error %.3g (%lld elements checked)",
                 ok ? "passed" : "FAILED", res->worst_input, (long long)res->worst_index,
                 res->analytic, res->numeric, res->error, (long long)res->checked);
    else
        snprintf(res->message, sizeof res->message, "gradcheck %s: %s", ok ? "passed" : "FAILED",
                 ok ? "no input requires grad" : nb_last_error());
    return ok;
}
