/* Layer normalisation over the trailing dims, one row at a time: the forward keeps each row's
 * mean and 1/sqrt(var + eps) so the backward can rebuild the normalised row instead of
 * storing it. Statistics and reductions accumulate in double.
 *
 * add_layer_norm is a pre-norm block's residual add and the norm after it as one node: its
 * forward adds x + res row by row just before normalising the row (while it is in cache), and
 * its backward adds the sum's own gradient to the norm's input gradient chunk by chunk, which
 * is the gradient of both added inputs. Apart they were two more passes over the residual
 * stream each way (and jobs on the threads); the bits are the same, as a + b == b + a. */
#include "node.h"
#include "../tensor/rows.h"
#include "../tensor/isa.h"

#include <math.h>
#include <string.h>

/* Row kernels for one float type; rows of D contiguous elements, w and b may be NULL. */
#define DEFINE_LAYER_NORM_KERNELS(T, SUF)                                                          \
    static void layer_norm_rows_##SUF(int64_t rows, int64_t D, const T *x0, const T *res,          \
                                      const T *w, const T *b, double eps, T *y, T *sum_out,        \
                                      T *mean, T *rstd) {                                          \
        for (int64_t r = 0; r < rows; r++, y += D) {                                               \
            const T *x = x0 + r * D;                                                               \
            if (res) { /* the row normalised is x + res, written to sum first */                   \
                T *s = sum_out + r * D;                                                            \
                for (int64_t j = 0; j < D; j++) s[j] = x[j] + res[r * D + j];                      \
                x = s;                                                                             \
            }                                                                                      \
            const double mu = nbt_row_sum_##SUF(x, D) / (double)D;                                 \
            double sq = 0;                                                                         \
            for (int64_t j = 0; j < D; j++) sq += ((double)x[j] - mu) * ((double)x[j] - mu);       \
            const double rs = 1.0 / sqrt(sq / (double)D + eps);                                    \
            const T m = (T)mu, q = (T)rs;                                                          \
            mean[r] = m, rstd[r] = q;                                                              \
            for (int64_t j = 0; j < D; j++) {                                                      \
                T v = (x[j] - m) * q;                                                              \
                if (w) v *= w[j];                                                                  \
                if (b) v += b[j];                                                                  \
                y[j] = v;                                                                          \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* With xh the normalised row and gh = g * w: dx = rstd * (gh - mean(gh) - xh *                \
     * mean(gh * xh)), dw += g * xh, db += g. Any of dx, dw, db may be NULL. */                    \
    static void layer_norm_backward_rows_##SUF(int64_t rows, int64_t D, const T *x, const T *w,    \
                                               const T *mean, const T *rstd, const T *g,           \
                                               const T *g_sum, T *dx, double *dw, double *db) {    \
        for (int64_t r = 0; r < rows; r++, x += D, g += D) {                                       \
            const T m = mean[r], q = rstd[r];                                                      \
            double sum_gh = 0, sum_ghxh = 0;                                                       \
            for (int64_t j = 0; j < D; j++) {                                                      \
                const T xh = (x[j] - m) * q;                                                       \
                const T gh = w ? g[j] * w[j] : g[j];                                               \
                sum_gh += gh;                                                                      \
                sum_ghxh += (double)gh * (double)xh;                                               \
                if (dw) dw[j] += (double)g[j] * (double)xh;                                        \
                if (db) db[j] += g[j];                                                             \
            }                                                                                      \
            if (!dx) continue;                                                                     \
            const T a = (T)(sum_gh / (double)D), c = (T)(sum_ghxh / (double)D);                    \
            for (int64_t j = 0; j < D; j++) {                                                      \
                const T xh = (x[j] - m) * q;                                                       \
                const T gh = w ? g[j] * w[j] : g[j];                                               \
                dx[j] = q * (gh - a - xh * c);                                                     \
                if (g_sum) dx[j] += g_sum[j];                                                      \
            }                                                                                      \
            dx += D;                                                                               \
            if (g_sum) g_sum += D;                                                                 \
        }                                                                                          \
    }

DEFINE_LAYER_NORM_KERNELS(double, f64)

#define F32(t) ((t) ? (float *)nbt_ptr(t) : NULL)
#define F64(t) ((t) ? (double *)nbt_ptr(t) : NULL)

/* Rows are independent in the forward, so slices of them run on separate threads. With res
 * (add_layer_norm), x + res is written to sum and normalised. */
typedef struct {
    int64_t D;
    double eps;
    const nb_tensor *x, *w, *b, *y, *mean, *rstd;
    const nb_tensor *res, *sum;
} layer_norm_job;

static void layer_norm_slice(int64_t begin, int64_t end, void *vjob) {
    const layer_norm_job *j = vjob;
    int64_t at = begin * j->D;
    const bool add = j->res != NULL;
    if (j->x->dtype == NB_F32)
        nbt_kernels()->layer_norm_rows_f32(end - begin, j->D, F32(j->x) + at,
                                           add ? F32(j->res) + at : NULL, F32(j->w), F32(j->b),
                                           j->eps, F32(j->y) + at, add ? F32(j->sum) + at : NULL,
                                           F32(j->mean) + begin, F32(j->rstd) + begin);
    else
        layer_norm_rows_f64(end - begin, j->D, F64(j->x) + at, add ? F64(j->res) + at : NULL,
                            F64(j->w), F64(j->b), j->eps, F64(j->y) + at,
                            add ? F64(j->sum) + at : NULL, F64(j->mean) + begin,
                            F64(j->rstd) + begin);
}

/* The backward splits rows into a number of chunks fixed by the size alone, never by the
 * thread count: each chunk sums its own dw/db partials and the partials are added in chunk
 * order, so the gradients are bitwise the same for any number of threads. */
#define BACKWARD_MAX_CHUNKS 16
#define BACKWARD_CHUNK_WORK 8192 /* elements per chunk, at least */

typedef struct {
    int64_t rows, D, nchunks;
    const nb_tensor *x, *w, *mean, *rstd, *g, *dx;
    double *dw_parts, *db_parts; /* nchunks rows of D, zeroed; NULL when not needed */
    const nb_tensor *g_sum;      /* add_layer_norm: the sum's own gradient, added to dx */
} layer_norm_backward_job;

static void layer_norm_backward_chunks(int64_t begin, int64_t end, void *vjob) {
    const layer_norm_backward_job *j = vjob;
    for (int64_t c = begin; c < end; c++) {
        int64_t r0 = c * j->rows / j->nchunks, r1 = (c + 1) * j->rows / j->nchunks;
        int64_t at = r0 * j->D;
        double *dw = j->dw_parts ? j->dw_parts + c * j->D : NULL;
        double *db = j->db_parts ? j->db_parts + c * j->D : NULL;
        const bool add = j->g_sum && j->dx;
        if (j->x->dtype == NB_F32)
            nbt_kernels()->layer_norm_backward_rows_f32(
                r1 - r0, j->D, F32(j->x) + at, F32(j->w), F32(j->mean) + r0, F32(j->rstd) + r0,
                F32(j->g) + at, add ? F32(j->g_sum) + at : NULL, j->dx ? F32(j->dx) + at : NULL, dw,
                db);
        else
            layer_norm_backward_rows_f64(r1 - r0, j->D, F64(j->x) + at, F64(j->w),
                                         F64(j->mean) + r0, F64(j->rstd) + r0, F64(j->g) + at,
                                         add ? F64(j->g_sum) + at : NULL,
                                         j->dx ? F64(j->dx) + at : NULL, dw, db);
    }
}

/* Partial sums for input i (nchunks rows of D, zeroed), or NULL when it needs no gradient. */
static nb_tensor *partials(const nb_node *n, int i, int64_t nchunks, int64_t D) {
    if (!nba_input_needs_grad(n, i)) return NULL;
    return nb_zeros(NB_F64, 2, (int64_t[]){nchunks, D});
}

/* The gradient of input i from its per-chunk partials, added in chunk order. */
static nb_tensor *combine(const nb_node *n, int i, const nb_tensor *parts, int64_t nchunks,
                          int64_t D) {
    const nb_tensor *t = n->inputs[i];
    nb_tensor *sum = nbt_new("backward", NB_F64, t->ndim, t->shape);
    if (!sum) return NULL;
    double *out = F64(sum);
    const double *p = F64(parts);
    /* With no rows D is 0 while the parameter is not empty: its gradient is all zeros. */
    for (int64_t k = 0; k < nbt_numel(sum); k++) out[k] = 0;
    for (int64_t c = 0; c < nchunks; c++)
        for (int64_t k = 0; k < D; k++) out[k] += p[c * D + k];
    return t->dtype == NB_F64 ? sum : nbt_contiguous_as(sum, t->dtype);
}

/* The norm's gradients from g (the normalised output's gradient, or NULL: none) and g_sum
 * (add_layer_norm's sum's gradient, or NULL): returns dx (plus g_sum), the gradient of inputs
 * [0, nx), and accumulates dw and db into inputs nx and nx + 1. saved: [0] contiguous x (the
 * sum for add_layer_norm), [1] contiguous weight or NULL, [2] per-row mean, [3] per-row rstd. */
static void norm_backward(nb_node *n, const nb_tensor *gout, const nb_tensor *g_sum, int nx) {
    const nb_tensor *x = n->saved[0], *w = n->saved[1], *mean = n->saved[2], *rstd = n->saved[3];
    if (!gout) { /* only the sum was used: its gradient passes to both added inputs */
        for (int i = 0; i < nx; i++) nba_accumulate(n, i, g_sum);
        return;
    }
    bool needs_dx = false;
    for (int i = 0; i < nx; i++) needs_dx |= nba_input_needs_grad(n, i);
    int64_t rows = nbt_numel(mean), D = rows ? nbt_numel(x) / rows : 0;
    int64_t nchunks = nbt_numel(x) / BACKWARD_CHUNK_WORK;
    if (nchunks > BACKWARD_MAX_CHUNKS) nchunks = BACKWARD_MAX_CHUNKS;
    if (nchunks > rows) nchunks = rows;
    if (nchunks < 1) nchunks = 1;
    nb_tensor *g = nbt_contiguous(gout);
    nb_tensor *gs = g_sum && needs_dx ? nbt_contiguous(g_sum) : NULL;
    nb_tensor *dx = needs_dx ? nbt_new("backward", x->dtype, x->ndim, x->shape) : NULL;
    nb_tensor *dw = partials(n, nx, nchunks, D), *db = partials(n, nx + 1, nchunks, D);
    if (!g || (needs_dx && !dx) || (g_sum && needs_dx && !gs) ||
        (nba_input_needs_grad(n, nx) && !dw) || (nba_input_needs_grad(n, nx + 1) && !db))
        return;
    layer_norm_backward_job job = {rows, D, nchunks, x, w, mean, rstd, g, dx, F64(dw), F64(db), gs};
    nbt_parallel_ranges(nchunks, 1, layer_norm_backward_chunks, &job);
    for (int i = 0; dx && i < nx; i++) nba_accumulate(n, i, dx);
    if (dw) nba_accumulate(n, nx, combine(n, nx, dw, nchunks, D));
    if (db) nba_accumulate(n, nx + 1, combine(n, nx + 1, db, nchunks, D));
}

/* inputs: x, weight, bias (either may be NULL). */
static void layer_norm_backward(nb_node *n, const nb_tensor *gout) {
    norm_backward(n, gout, NULL, 1);
}

/* inputs: x, res, weight, bias; outputs: x + res, its norm. */
static void add_layer_norm_backward(nb_node *n, const nb_tensor *gout) {
    (void)gout;
    norm_backward(n, n->grads[1], n->grads[0], 2);
}

/* Checks an optional affine parameter: x's dtype and exactly the normalised shape. */
static bool check_param(const char *op, const char *name, const nb_tensor *p, const nb_tensor *x,
                        int k) {
    if (!p) return true;
    if (!nba_check_same_float(op, x, p)) return false;
    if (p->ndim == k && memcmp(p->shape, x->shape + x->ndim - k, sizeof(int64_t) * (size_t)k) == 0)
        return true;
    nbt_error(op, "%s of shape %s does not match the normalised shape %s of input %s", name,
              nbt_shape(p), nbt_dims(k, x->shape + x->ndim - k), nbt_shape(x));
    return false;
}

/* layer_norm(x) or, with res, layer_norm(x + res) with *sum = x + res (add_layer_norm). */
static nb_tensor *norm(const char *op, const nb_tensor *x, const nb_tensor *res,
                       const nb_tensor *weight, const nb_tensor *bias, double eps,
                       nb_tensor **sum_out) {
    if (!nba_check_inputs(op, sum_out ? 2 : 1, (const nb_tensor *[]){x, res}) ||
        !nba_check_float(op, x) || (sum_out && !nba_check_same_float(op, x, res)))
        return NULL;
    if (res && !nb_same_shape(x, res))
        return nbt_error(op, "x %s and res %s must have the same shape", nbt_shape(x),
                         nbt_shape(res));
    int k = weight ? weight->ndim : 1;
    if (k < 1 || x->ndim < k)
        return nbt_error(op, "cannot normalise the last %d dims of input %s (weight %s)", k,
                         nbt_shape(x), weight ? nbt_shape(weight) : "NULL");
    if (!check_param(op, "weight", weight, x, k) || !check_param(op, "bias", bias, x, k))
        return NULL;
    if (!(eps >= 0)) return nbt_error(op, "eps must be >= 0, got %g", eps);
    int64_t D = 1;
    for (int i = x->ndim - k; i < x->ndim; i++) D *= x->shape[i];
    int64_t rows = D ? nbt_numel(x) / D : 0;
    nb_tensor *xc = nbt_contiguous(x), *rc = res ? nbt_contiguous(res) : NULL;
    nb_tensor *sum = res ? nbt_new(op, x->dtype, x->ndim, x->shape) : NULL;
    nb_tensor *w = weight ? nbt_contiguous(weight) : NULL;
    nb_tensor *b = bias ? nbt_contiguous(bias) : NULL;
    nb_tensor *y = nbt_new(op, x->dtype, x->ndim, x->shape);
    nb_tensor *mean = nbt_new(op, x->dtype, 1, &rows), *rstd = nbt_new(op, x->dtype, 1, &rows);
    if (!xc || (res && (!rc || !sum)) || (weight && !w) || (bias && !b) || !y || !mean || !rstd)
        return NULL;
    layer_norm_job job = {D, eps, xc, w, b, y, mean, rstd, rc, sum};
    nbt_parallel_ranges(rows, 16384 / (D > 0 ? D : 1) + 1, layer_norm_slice, &job);
    nb_node *n =
        res ? nba_record_outputs(op, 2, (nb_tensor *[]){sum, y}, 4,
                                 (const nb_tensor *[]){x, res, weight, bias},
                                 add_layer_norm_backward)
            : nba_record(op, y, 3, (const nb_tensor *[]){x, weight, bias}, layer_norm_backward);
    if (n) n->saved[0] = res ? sum : xc, n->saved[1] = w, n->saved[2] = mean, n->saved[3] = rstd;
    if (sum_out) *sum_out = sum;
    return y;
}

nb_tensor *nb_f_layer_norm(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias,
                           double eps) {
    return norm("layer_norm", x, NULL, weight, bias, eps, NULL);
}

nb_tensor *nb_f_add_layer_norm(const nb_tensor *x, const nb_tensor *res, const nb_tensor *weight,
                               const nb_tensor *bias, double eps, nb_tensor **sum) {
    if (!sum) return nbt_error("add_layer_norm", "NULL sum (where x + res is returned)");
    *sum = NULL;
    return norm("add_layer_norm", x, res, weight, bias, eps, sum);
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h) ---- */
#include "op_def.h"

static nb_tensor *cat_affine(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_layer_norm(in[0], in[1], in[2], 1e-5);
}
static nb_tensor *cat_plain(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_layer_norm(in[0], NULL, NULL, 1e-5);
}
static nb_tensor *cat_weight_only(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_layer_norm(in[0], in[1], NULL, 1e-5);
}
static nb_tensor *cat_bias_only(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_layer_norm(in[0], NULL, in[1], 1e-5);
}

/* Golden runner: inputs "x", optional "weight" and "bias", parameter "eps". */
static int golden_layer_norm(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_f_layer_norm(c->input(c, "x", true), c->input(c, "weight", false),
                             c->input(c, "bias", false), c->number(c, "eps"));
    return 1;
}

/* clang-format off */
static const nba_entry layer_norm_entries[] = {
    {"layer_norm [3,5] with weight and bias", NBA_RANDOM, cat_affine, 3, {IN(3, 5), IN(5), IN(5)}, NULL},
    {"layer_norm [2,40] with weight and bias (f32: vector rows)", NBA_RANDOM, cat_affine, 3, {IN(2, 40), IN(40), IN(40)}, NULL},
    {"layer_norm over 2 dims: [2,3,4], weight/bias [3,4]", NBA_STRIDED, cat_affine, 3,
     {IN_T(2, 3, 4), IN_S(3, 4), IN_T(3, 4)}, NULL},
    {"layer_norm without weight or bias, transposed [4,6]", NBA_STRIDED, cat_plain, 1, {IN_T(4, 6)}, NULL},
    {"layer_norm without weight or bias, sliced [2,3,4]", NBA_STRIDED, cat_plain, 1, {IN_S(2, 3, 4)}, NULL},
    {"layer_norm weight only [3,4]", NBA_STRIDED, cat_weight_only, 2, {IN(3, 4), IN_S(4)}, NULL},
    {"layer_norm bias only [3,4]", NBA_STRIDED, cat_bias_only, 2, {IN_T(3, 4), IN(4)}, NULL},
};
/* clang-format on */
/* Over one element x - mean is exactly 0, and so are the x and weight gradients; PyTorch's
 * float32 backward leaves ~4e-6 of rounding there, so that f32 case comes from float64. */
static const nba_golden_case layer_norm_cases[] = {
    {"x: [4,6]; weight: [6]; bias: [6]", "eps=1e-5"},
    {"x: [2,3,6]; weight: [6]; bias: [6]", "eps=1e-5"},
    {"x: [2,3,4]; weight: [3,4]; bias: [3,4]", "eps=1e-3"},
    {"x: [4,6]", "eps=1e-5"},
    {"x: [3,5]; weight: [5]", "eps=1e-6"},
    {"x: [3,5]; bias: [5]", "eps=1e-5"},
    {"x: [2,1]; weight: [1]; bias: [1]", "eps=1e-5, _f32_via_f64=True"}};
static const nba_golden layer_norm_goldens[] = {
    NBA_GOLDEN("f_layer_norm", golden_layer_norm,
               "F.layer_norm(x, weight.shape if weight is not None else x.shape[-1:], weight, "
               "bias, eps)",
               layer_norm_cases)};
NBA_OP_DEF(nba_op_layer_norm, "layer_norm", layer_norm_entries, layer_norm_goldens,
           .not_applicable = {[NBA_BROADCAST] = "weight and bias have the normalized shape, as "
                                                "in F.layer_norm: nothing broadcasts"});

/* Both outputs in one value, so that gradcheck sends a gradient through each: the norm plus
 * the sum squared (the sum alone would be linear in the inputs). */
static nb_tensor *both_outputs(nb_tensor *y, nb_tensor *sum) {
    return nb_add(y, nb_mul(sum, sum));
}
static nb_tensor *cat_add_affine(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *sum;
    nb_tensor *y = nb_f_add_layer_norm(in[0], in[1], in[2], in[3], 1e-5, &sum);
    return both_outputs(y, sum);
}
static nb_tensor *cat_add_plain(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *sum;
    nb_tensor *y = nb_f_add_layer_norm(in[0], in[1], NULL, NULL, 1e-5, &sum);
    return both_outputs(y, sum);
}
/* Only one output used: the other's gradient never arrives (NULL in backward). */
static nb_tensor *cat_add_norm_only(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *sum;
    return nb_f_add_layer_norm(in[0], in[1], in[2], in[3], 1e-5, &sum);
}
/* (without weight and bias, which would get no gradient at all) */
static nb_tensor *cat_add_sum_only(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *sum;
    nb_f_add_layer_norm(in[0], in[1], NULL, NULL, 1e-5, &sum);
    return nb_mul(sum, sum);
}

static int golden_add_layer_norm(nba_golden_call *c, nb_tensor **out) {
    out[1] = nb_f_add_layer_norm(c->input(c, "x", true), c->input(c, "res", true),
                                 c->input(c, "weight", false), c->input(c, "bias", false),
                                 c->number(c, "eps"), &out[0]);
    return 2;
}

/* clang-format off */
static const nba_entry add_layer_norm_entries[] = {
    {"add_layer_norm [3,5] + [3,5] with weight and bias", NBA_RANDOM, cat_add_affine, 4, {IN(3, 5), IN(3, 5), IN(5), IN(5)}, NULL},
    {"add_layer_norm [2,3,40] (f32: vector rows)", NBA_RANDOM, cat_add_affine, 4, {IN(2, 3, 40), IN(2, 3, 40), IN(40), IN(40)}, NULL},
    {"add_layer_norm, the norm only", NBA_RANDOM, cat_add_norm_only, 4, {IN(3, 6), IN(3, 6), IN(6), IN(6)}, NULL},
    {"add_layer_norm, the sum only", NBA_RANDOM, cat_add_sum_only, 2, {IN(3, 6), IN(3, 6)}, NULL},
    {"add_layer_norm, transposed x, sliced res and weight", NBA_STRIDED, cat_add_affine, 4,
     {IN_T(4, 6), IN_S(4, 6), IN_S(6), IN(6)}, NULL},
    {"add_layer_norm without weight or bias, sliced [2,3,4] + transposed", NBA_STRIDED, cat_add_plain, 2,
     {IN_S(2, 3, 4), IN_T(2, 3, 4)}, NULL},
};
/* clang-format on */
static const nba_golden_case add_layer_norm_cases[] = {
    {"x: [4,6]; res: [4,6]; weight: [6]; bias: [6]", "eps=1e-5"},
    {"x: [2,3,6]; res: [2,3,6]; weight: [6]; bias: [6]", "eps=1e-5"},
    {"x: [3,5]; res: [3,5]", "eps=1e-5"}};
static const nba_golden add_layer_norm_goldens[] = {NBA_GOLDEN(
    "f_add_layer_norm", golden_add_layer_norm,
    "(x + res, F.layer_norm(x + res, x.shape[-1:], weight, bias, eps))", add_layer_norm_cases)};
NBA_OP_DEF(nba_op_add_layer_norm, "add_layer_norm", add_layer_norm_entries, add_layer_norm_goldens,
           .not_applicable = {[NBA_BROADCAST] = "x and res have one shape, and weight and bias "
                                                "the normalized shape: nothing broadcasts"});
#endif /* NABLA_TESTS */
