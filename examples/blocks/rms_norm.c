/* RMSNorm (Llama's normalisation): x * rsqrt(mean(x^2) + eps) * weight over the last dim. */
#include "blocks.h"
#include "errors.h"

#include <math.h>

/* One node for the whole normalisation (nabla's function API): the op-by-op form (square,
 * mean, add, power, two products) recorded six nodes and kept five [..., D] intermediates
 * for backward; this keeps x and one inverse rms per row. With xh = x * r, r = 1 / rms:
 *   y = xh * w,  dw = sum over rows of g * xh,  dx = r * (g w - xh * mean(g w * xh)).
 * Sums run in double for either dtype. */
#define RMS_ROWS(T)                                                                                \
    static void rms_forward_##T(const T *x, const T *w, T *y, T *r, int64_t rows, int64_t d,       \
                                double eps) {                                                      \
        for (int64_t i = 0; i < rows; i++, x += d, y += d) {                                       \
            double sq = 0;                                                                         \
            for (int64_t j = 0; j < d; j++) sq += (double)x[j] * x[j];                             \
            double inv = 1 / sqrt(sq / (double)d + eps);                                           \
            r[i] = (T)inv;                                                                         \
            for (int64_t j = 0; j < d; j++) y[j] = (T)((double)x[j] * inv * w[j]);                 \
        }                                                                                          \
    }                                                                                              \
    static void rms_backward_##T(const T *x, const T *w, const T *r, const T *g, T *dx,            \
                                 double *dw, int64_t rows, int64_t d) {                            \
        for (int64_t i = 0; i < rows; i++, x += d, g += d) {                                       \
            double dot = 0, inv = r[i];                                                            \
            for (int64_t j = 0; j < d; j++) {                                                      \
                dot += (double)g[j] * w[j] * x[j] * inv;                                           \
                dw[j] += (double)g[j] * x[j] * inv;                                                \
            }                                                                                      \
            dot /= (double)d;                                                                      \
            if (dx)                                                                                \
                for (int64_t j = 0; j < d; j++, dx++)                                              \
                    *dx = (T)(inv * ((double)g[j] * w[j] - (double)x[j] * inv * dot));             \
        }                                                                                          \
    }
RMS_ROWS(float)
RMS_ROWS(double)

static bool rms_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                        nb_tensor **out) {
    (void)nin, (void)nout;
    const nb_tensor *x = nb_contiguous(in[0]), *w = nb_contiguous(in[1]);
    if (!x || !w) return false;
    int64_t d = x->shape[x->ndim - 1], rows = d ? nb_numel(x) / d : 0;
    nb_tensor *r = nb_empty(x->dtype, NB_SHAPE(rows));
    out[0] = nb_empty(x->dtype, x->ndim, x->shape);
    if (!r || !out[0]) return false;
    double eps = *(const double *)nb_ctx_user(ctx);
    if (x->dtype == NB_F32)
        rms_forward_float(nb_data(x), nb_data(w), nb_data(out[0]), nb_data(r), rows, d, eps);
    else
        rms_forward_double(nb_data(x), nb_data(w), nb_data(out[0]), nb_data(r), rows, d, eps);
    return nb_ctx_save(ctx, x) && nb_ctx_save(ctx, w) && nb_ctx_save(ctx, r);
}

static bool rms_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                         nb_tensor **gin) {
    (void)nout, (void)nin;
    const nb_tensor *x = nb_ctx_saved(ctx, 0), *w = nb_ctx_saved(ctx, 1), *r = nb_ctx_saved(ctx, 2);
    const nb_tensor *g = nb_contiguous(gout[0]);
    if (!x || !w || !r || !g) return false;
    int64_t d = x->shape[x->ndim - 1], rows = d ? nb_numel(x) / d : 0;
    nb_tensor *dx = nb_ctx_needs_input_grad(ctx, 0) ? nb_empty(x->dtype, x->ndim, x->shape) : NULL;
    nb_tensor *dw = nb_zeros(NB_F64, NB_SHAPE(d)); /* summed in double for either dtype */
    if (!dw) return false;
    if (x->dtype == NB_F32)
        rms_backward_float(nb_data(x), nb_data(w), nb_data(r), nb_data(g), dx ? nb_data(dx) : NULL,
                           nb_data(dw), rows, d);
    else
        rms_backward_double(nb_data(x), nb_data(w), nb_data(r), nb_data(g), dx ? nb_data(dx) : NULL,
                            nb_data(dw), rows, d);
    gin[0] = dx;
    if (nb_ctx_needs_input_grad(ctx, 1))
        gin[1] = x->dtype == NB_F64 ? dw : nb_to_dtype(dw, x->dtype);
    return true;
}

static const nb_function rms_norm_fn = {"rms_norm", rms_forward, rms_backward};

nb_tensor *blk_rms_norm(const nb_tensor *x, const nb_tensor *weight, double eps) {
    if (!x) return blk_null_argument("rms_norm");
    if (!nb_is_float(x) || x->ndim < 1)
        return nb_error("rms_norm", "expects a float tensor [..., D], got %s %s",
                        nb_dtype_name(x->dtype), nb_shape_text(x));
    int64_t dim = x->shape[x->ndim - 1];
    if (weight && (weight->ndim != 1 || weight->shape[0] != dim || weight->dtype != x->dtype))
        return nb_error("rms_norm", "weight must be %s [%lld] for x %s, got %s %s",
                        nb_dtype_name(x->dtype), (long long)dim, nb_shape_text(x),
                        nb_dtype_name(weight->dtype), nb_shape_text(weight));
    if (!(eps >= 0)) return nb_error("rms_norm", "eps must be >= 0, got %g", eps);
    const nb_tensor *w = weight ? weight : nb_ones(x->dtype, NB_SHAPE(dim));
    /* eps travels as the user pointer: only forward reads it, before this returns */
    return nb_function_apply1(&rms_norm_fn, 2, (const nb_tensor *[]){x, w}, &eps);
}

blk_rmsnorm *blk_rmsnorm_new(nb_module *parent, const char *name, int64_t dim, double eps) {
    if (dim <= 0 || !(eps >= 0))
        return nb_error("RMSNorm", "needs dim > 0 and eps >= 0, got %lld and %g", (long long)dim,
                        eps);
    blk_rmsnorm *m = nb_module_new(parent, name, "RMSNorm", sizeof *m);
    if (!m) return NULL;
    m->eps = eps;
    if (!(m->weight = nb_module_add_param(&m->base, "weight", NB_SHAPE(dim), nb_init_ones())))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *blk_rmsnorm_forward(blk_rmsnorm *m, const nb_tensor *x) {
    if (!m) return blk_null_argument("RMSNorm");
    nb_tensor *y = blk_rms_norm(x, m->weight, m->eps);
    if (!y && x) return blk_module_error(&m->base);
    return y;
}
