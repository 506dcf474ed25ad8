/* RMSNorm (Llama's normalisation): x * rsqrt(mean(x^2) + eps) * weight over the last dim. */
#include <nabla/blocks.h>
#include "errors.h"

#include <math.h>

/* One node for the whole normalisation (nabla's function API): the op-by-op form (square,
 * mean, add, power, two products) recorded six nodes and kept five [..., D] intermediates
 * for backward; this keeps x and one inverse rms per row. With xh = x * r, r = 1 / rms:
 *   y = xh * w,  dw = sum over rows of g * xh,  dx = r * (g w - xh * mean(g w * xh)).
 * Sums run in double for either dtype; a row's sums keep 8 running partial sums (added up in
 * one fixed order at the end), so they vectorise: one running sum is a chain of dependent
 * additions the compiler may not reorder. The loops run on nabla's threads (nb_parallel_for):
 * y, r and dx by rows; dw, a sum over rows, by columns, each column summing the rows in
 * order, so the results are the same bits for any thread count. The loops are built once per
 * instruction set (simd_sets.h), the same bits in each.
 * blk_rms_norm_forward_add's node (add_rms_norm) also adds the residual in forward's row pass
 * (sum = x + res, normalised) and in backward adds the sum's own gradient to dx, which it
 * returns for both added inputs: the residual stream's add and the sum of its two gradients
 * were two more passes (and jobs) each. */
typedef struct {
    const void *x, *w, *g, *r;  /* r: one inverse rms per row, written by forward */
    const void *res, *g_sum;    /* add_rms_norm: the added input, the sum's gradient */
    void *y, *r_out, *dx, *sum; /* sum: x + res, written by forward when res is there */
    double *dw;
    int64_t rows, d;
    double eps;
} rms_job;

/* result = the sum over i < d of term (a double expression of i), as 8 partial sums added
 * up in one fixed order. */
#define ROW_SUM(result, d, term)                                                                   \
    do {                                                                                           \
        double part_[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail_ = 0;                                     \
        for (int64_t k_ = 0; k_ + 8 <= (d); k_ += 8)                                               \
            for (int u_ = 0; u_ < 8; u_++) {                                                       \
                const int64_t i = k_ + u_;                                                         \
                part_[u_] += (term);                                                               \
            }                                                                                      \
        for (int64_t i = (d) / 8 * 8; i < (d); i++) tail_ += (term);                               \
        (result) = ((part_[0] + part_[1]) + (part_[2] + part_[3])) +                               \
                   ((part_[4] + part_[5]) + (part_[6] + part_[7])) + tail_;                        \
    } while (0)

#define RMS_LOOPS(T, SET)                                                                          \
    static void rms_forward_##T##_##SET(void *ctx, int64_t begin, int64_t end) {                   \
        const rms_job *j = ctx;                                                                    \
        const int64_t d = j->d;                                                                    \
        const T *x = (const T *)j->x + begin * d, *w = j->w, *res = j->res;                        \
        T *y = (T *)j->y + begin * d, *r = j->r_out, *sum = j->sum;                                \
        for (int64_t row = begin; row < end; row++, x += d, y += d) {                              \
            const T *xs = x; /* the row normalised: x, or x + res */                               \
            if (res) {                                                                             \
                const T *a = (const T *)j->x + row * d, *b = res + row * d;                        \
                T *s = sum + row * d;                                                              \
                for (int64_t k = 0; k < d; k++) s[k] = a[k] + b[k];                                \
                xs = s;                                                                            \
            }                                                                                      \
            double sq;                                                                             \
            ROW_SUM(sq, d, (double)xs[i] * xs[i]);                                                 \
            double inv = 1 / sqrt(sq / (double)d + j->eps);                                        \
            r[row] = (T)inv;                                                                       \
            for (int64_t k = 0; k < d; k++) y[k] = (T)((double)xs[k] * inv * w[k]);                \
        }                                                                                          \
    }                                                                                              \
    static void rms_input_grad_##T##_##SET(void *ctx, int64_t begin, int64_t end) {                \
        const rms_job *j = ctx;                                                                    \
        const int64_t d = j->d;                                                                    \
        const T *x = (const T *)j->x + begin * d, *g = (const T *)j->g + begin * d, *w = j->w;     \
        const T *r = j->r;                                                                         \
        const T *g_sum = j->g_sum ? (const T *)j->g_sum + begin * d : NULL;                        \
        T *dx = (T *)j->dx + begin * d;                                                            \
        for (int64_t row = begin; row < end; row++, x += d, g += d, dx += d) {                     \
            double dot, inv = r[row];                                                              \
            ROW_SUM(dot, d, (double)g[i] * w[i] * x[i]);                                           \
            dot *= inv / (double)d;                                                                \
            for (int64_t k = 0; k < d; k++)                                                        \
                dx[k] = (T)(inv * ((double)g[k] * w[k] - (double)x[k] * inv * dot));               \
            if (g_sum) { /* the sum's own gradient, added as autograd would add it */              \
                for (int64_t k = 0; k < d; k++) dx[k] += g_sum[k];                                 \
                g_sum += d;                                                                        \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void rms_weight_grad_##T##_##SET(void *ctx, int64_t begin, int64_t end) { /* columns */ \
        const rms_job *j = ctx;                                                                    \
        const int64_t d = j->d;                                                                    \
        const T *x = j->x, *g = j->g, *r = j->r;                                                   \
        for (int64_t i = 0; i < j->rows; i++, x += d, g += d) {                                    \
            double inv = r[i];                                                                     \
            for (int64_t k = begin; k < end; k++) j->dw[k] += (double)g[k] * x[k] * inv;           \
        }                                                                                          \
    }
#define BLK_SET_BODIES(SET) RMS_LOOPS(float, SET) RMS_LOOPS(double, SET)
#include "simd_sets.h"

/* Rows per thread-worthy piece of work: about 8K elements. */
static int64_t row_grain(int64_t d) {
    return d < 8192 ? 8192 / (d ? d : 1) : 1;
}

/* inputs: x, weight (rms_norm) or x, res, weight (add_rms_norm: outputs x + res, then its
 * norm); user: eps. Saves what was normalised, the weight and the inverse rms per row. */
static bool rms_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                        nb_tensor **out) {
    (void)nout;
    const bool add = nin == 3;
    const nb_tensor *x = nb_contiguous(in[0]), *res = add ? nb_contiguous(in[1]) : NULL,
                    *w = nb_contiguous(in[nin - 1]);
    if (!x || !w || (add && !res)) return false;
    int64_t d = x->shape[x->ndim - 1], rows = d ? nb_numel(x) / d : 0;
    nb_tensor *r = nb_empty(x->dtype, NB_SHAPE(rows)), *sum = NULL;
    if (add && !(sum = out[0] = nb_empty(x->dtype, x->ndim, x->shape))) return false;
    nb_tensor *y = out[add] = nb_empty(x->dtype, x->ndim, x->shape);
    if (!r || !y) return false;
    rms_job job = {.x = nb_data(x),
                   .w = nb_data(w),
                   .res = add ? nb_data(res) : NULL,
                   .y = nb_data(y),
                   .r_out = nb_data(r),
                   .sum = add ? nb_data(sum) : NULL,
                   .rows = rows,
                   .d = d,
                   .eps = *(const double *)nb_ctx_user(ctx)};
    return nb_parallel_for(rows, row_grain(d),
                           x->dtype == NB_F32 ? BLK_PICK(rms_forward_float)
                                              : BLK_PICK(rms_forward_double),
                           &job) &&
           nb_ctx_save(ctx, add ? sum : x) && nb_ctx_save(ctx, w) && nb_ctx_save(ctx, r);
}

/* add_rms_norm's two added inputs get one gradient: the norm's input gradient plus the sum's. */
static bool rms_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                         nb_tensor **gin) {
    const bool add = nin == 3;
    const nb_tensor *x = nb_ctx_saved(ctx, 0), *w = nb_ctx_saved(ctx, 1), *r = nb_ctx_saved(ctx, 2);
    const nb_tensor *g = nb_contiguous(gout[nout - 1]),
                    *g_sum = add ? nb_contiguous(gout[0]) : NULL;
    if (!x || !w || !r || !g || (add && !g_sum)) return false;
    int64_t d = x->shape[x->ndim - 1], rows = d ? nb_numel(x) / d : 0;
    rms_job job = {.x = nb_data(x),
                   .w = nb_data(w),
                   .g = nb_data(g),
                   .r = nb_data(r),
                   .g_sum = add ? nb_data(g_sum) : NULL,
                   .rows = rows,
                   .d = d};
    const bool f32 = x->dtype == NB_F32;
    if (nb_ctx_needs_input_grad(ctx, 0) || (add && nb_ctx_needs_input_grad(ctx, 1))) {
        if (!(gin[0] = nb_empty(x->dtype, x->ndim, x->shape))) return false;
        job.dx = nb_data(gin[0]);
        if (!nb_parallel_for(rows, row_grain(d),
                             f32 ? BLK_PICK(rms_input_grad_float) : BLK_PICK(rms_input_grad_double),
                             &job))
            return false;
        if (add) gin[1] = gin[0];
    }
    if (nb_ctx_needs_input_grad(ctx, nin - 1)) {
        nb_tensor *dw = nb_zeros(NB_F64, NB_SHAPE(d)); /* summed in double for either dtype */
        if (!dw) return false;
        job.dw = nb_data(dw);
        /* at least 16 columns a piece: 16 doubles are two cache lines no other piece writes */
        int64_t column_grain = rows < 8192 / 16 ? 8192 / (rows ? rows : 1) : 16;
        if (!nb_parallel_for(
                d, column_grain,
                f32 ? BLK_PICK(rms_weight_grad_float) : BLK_PICK(rms_weight_grad_double), &job))
            return false;
        if (!(gin[nin - 1] = x->dtype == NB_F64 ? dw : nb_to_dtype(dw, x->dtype))) return false;
    }
    return true;
}

static const nb_function rms_norm_fn = {"rms_norm", rms_forward, rms_backward};

static const nb_function add_rms_norm_fn = {"add_rms_norm", rms_forward, rms_backward};

/* Checks x, weight and eps for rms_norm; false with an error. */
static bool rms_args_ok(const nb_tensor *x, const nb_tensor *weight, double eps) {
    if (!nb_is_float(x) || x->ndim < 1)
        return nb_error("rms_norm", "expects a float tensor [..., D], got %s %s",
                        nb_dtype_name(x->dtype), nb_shape_text(x)),
               false;
    int64_t dim = x->shape[x->ndim - 1];
    if (weight && (weight->ndim != 1 || weight->shape[0] != dim || weight->dtype != x->dtype))
        return nb_error("rms_norm", "weight must be %s [%lld] for x %s, got %s %s",
                        nb_dtype_name(x->dtype), (long long)dim, nb_shape_text(x),
                        nb_dtype_name(weight->dtype), nb_shape_text(weight)),
               false;
    if (!(eps >= 0)) return nb_error("rms_norm", "eps must be >= 0, got %g", eps), false;
    return true;
}

nb_tensor *blk_f_rms_norm(const nb_tensor *x, const nb_tensor *weight, double eps) {
    if (!x) return blk_null_argument("rms_norm");
    if (!rms_args_ok(x, weight, eps)) return NULL;
    const nb_tensor *w = weight ? weight : nb_ones(x->dtype, NB_SHAPE(x->shape[x->ndim - 1]));
    /* eps travels as the user pointer: only forward reads it, before this returns */
    return nb_function_apply1(&rms_norm_fn, 2, (const nb_tensor *[]){x, w}, &eps);
}

nb_tensor *blk_rms_norm_forward_add(blk_rms_norm *m, const nb_tensor *x, const nb_tensor *res,
                                    nb_tensor **sum) {
    if (!sum) return blk_null_argument("RMSNorm");
    *sum = NULL;
    if (!m || !x || !res) return blk_null_argument("RMSNorm");
    if (!nb_same_shape(x, res) || x->dtype != res->dtype)
        return nb_error("RMSNorm", "'%s': x %s %s and residual %s %s differ in shape or dtype",
                        nb_module_path(&m->base), nb_dtype_name(x->dtype), nb_shape_text(x),
                        nb_dtype_name(res->dtype), nb_shape_text(res));
    nb_tensor *out[2];
    if (!rms_args_ok(x, m->weight, m->eps) ||
        !nb_function_apply(&add_rms_norm_fn, 3, (const nb_tensor *[]){x, res, m->weight}, 2, out,
                           &m->eps))
        return blk_module_error(&m->base);
    *sum = out[0];
    return out[1];
}

blk_rms_norm *blk_rms_norm_new(nb_module *parent, const char *name, int64_t dim, double eps) {
    if (dim <= 0 || !(eps >= 0))
        return nb_error("RMSNorm", "needs dim > 0 and eps >= 0, got %lld and %g", (long long)dim,
                        eps);
    blk_rms_norm *m = nb_module_new(parent, name, "RMSNorm", sizeof *m);
    if (!m) return NULL;
    m->eps = eps;
    if (!(m->weight = nb_module_add_param(&m->base, "weight", NB_SHAPE(dim), nb_init_ones())))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *blk_rms_norm_forward(blk_rms_norm *m, const nb_tensor *x) {
    if (!m) return blk_null_argument("RMSNorm");
    nb_tensor *y = blk_f_rms_norm(x, m->weight, m->eps);
    if (!y && x) return blk_module_error(&m->base);
    return y;
}
