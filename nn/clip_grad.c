/* Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_ (norm type 2). */
#include "nabla/optim.h"
#include "tensor/nbt.h"

#include <math.h>

/* Sums of squares accumulate in double whatever the gradient dtype. */
typedef struct {
    double sum;
    nb_dtype dtype;
} squares_ctx;

static void sum_squares(int64_t n, char **ptr, const int64_t *bs, void *ctx) {
    squares_ctx *acc = ctx;
    double s = 0;
    if (acc->dtype == NB_F32)
        for (int64_t i = 0; i < n; i++) {
            double x = *(const float *)(ptr[0] + i * bs[0]);
            s += x * x;
        }
    else
        for (int64_t i = 0; i < n; i++) {
            double x = *(const double *)(ptr[0] + i * bs[0]);
            s += x * x;
        }
    acc->sum += s;
}

typedef struct {
    double coef;
    nb_dtype dtype;
} scale_ctx;

static void scale(int64_t n, char **ptr, const int64_t *bs, void *ctx) {
    const scale_ctx *c = ctx;
    if (c->dtype == NB_F32) {
        float coef = (float)c->coef;
        for (int64_t i = 0; i < n; i++) *(float *)(ptr[0] + i * bs[0]) *= coef;
    } else {
        for (int64_t i = 0; i < n; i++) *(double *)(ptr[0] + i * bs[0]) *= c->coef;
    }
}

static void iterate_grad(nb_tensor *g, nbt_inner_fn fn, void *ctx) {
    nbt_operands ops = {.nops = 1, .base = {nbt_ptr(g)}, .elem = {nb_dtype_size(g->dtype)}};
    for (int d = 0; d < g->ndim; d++) ops.strides[0][d] = g->strides[d];
    nbt_iterate(g->ndim, g->shape, &ops, fn, ctx);
}

double nb_clip_grad_norm(int n, nb_tensor *const *params, double max_norm) {
    const char *op = "nb_clip_grad_norm";
    if (n < 0) return nbt_error(op, "n is %d, expected >= 0", n), NAN;
    if (n > 0 && !params) return nbt_error(op, "params is NULL for n = %d", n), NAN;
    if (!(max_norm >= 0)) return nbt_error(op, "max_norm is %g, expected >= 0", max_norm), NAN;
    for (int i = 0; i < n; i++)
        if (!params[i]) return nbt_error(op, "parameter %d is NULL", i), NAN;
    /* torch takes the 2-norm of the per-gradient 2-norms: the same as one sum of squares. */
    double total = 0;
    for (int i = 0; i < n; i++) {
        nb_tensor *g = params[i]->grad;
        if (!g) continue;
        squares_ctx acc = {0, g->dtype};
        iterate_grad(g, sum_squares, &acc);
        total += acc.sum;
    }
    total = sqrt(total);
    scale_ctx c = {max_norm / (total + 1e-6), NB_F32};
    /* Not "coef < 1": a NaN norm scales every gradient to NaN, as in torch. */
    if (!(c.coef >= 1))
        for (int i = 0; i < n; i++) {
            nb_tensor *g = params[i]->grad;
            if (!g) continue;
            c.dtype = g->dtype;
            iterate_grad(g, scale, &c);
        }
    return total;
}
