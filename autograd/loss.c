/* Losses: cross entropy on class indices (through a row-wise log-sum-exp, so large logits
 * never overflow) and mean squared error.
 *
 * Cross entropy with every target equal to ignore_index and NB_REDUCE_MEAN gives 0 with a
 * zero gradient; PyTorch divides 0 by 0 there and gives NaN. Ignored entries of an
 * NB_REDUCE_NONE result are 0, as in PyTorch. */
#include "node.h"
#include "../tensor/vecmath.h"
#include "../tensor/rows.h"

#include <math.h>
#include <string.h>

/* A 0-d tensor holding v, for the reduced losses. */
static nb_tensor *scalar(const char *op, nb_dtype dt, double v) {
    static const int64_t no_dims[1] = {0}; /* nbt_new copies ndim (0) entries from here */
    nb_tensor *t = nbt_new(op, dt, 0, no_dims);
    if (t && dt == NB_F32)
        *(float *)nbt_ptr(t) = (float)v;
    else if (t)
        *(double *)nbt_ptr(t) = v;
    return t;
}

static bool check_reduction(const char *op, nb_reduction r) {
    if (r == NB_REDUCE_MEAN || r == NB_REDUCE_SUM || r == NB_REDUCE_NONE) return true;
    nbt_error(op, "unknown reduction %d (expected NB_REDUCE_MEAN, NB_REDUCE_SUM or NB_REDUCE_NONE)",
              (int)r);
    return false;
}

/* ---- cross entropy ---- */

/* Row kernels for one float type; rows of C logits, t holds one class index per row. */
#define DEFINE_CE_KERNELS(T, SUF)                                                                  \
    /* lse[r] = log(sum(exp(x[r]))), loss[r] = lse[r] - x[r, t[r]] (0 where ignored), and the      \
     * same loss unrounded in exact[r]. e is scratch for one row. */                               \
    static void ce_rows_##SUF(int64_t r0, int64_t r1, int64_t C, const T *x, const int64_t *t,     \
                              int64_t ignore, T *lse, T *loss, double *exact, T *e) {              \
        x += r0 * C;                                                                               \
        for (int64_t r = r0; r < r1; r++, x += C) {                                                \
            if (t[r] == ignore) {                                                                  \
                lse[r] = loss[r] = 0;                                                              \
                exact[r] = 0;                                                                      \
                continue;                                                                          \
            }                                                                                      \
            const T max = nbt_row_max_##SUF(x, C);                                                 \
            nbt_row_shift_##SUF(e, x, -max, C);                                                    \
            nbt_vexp_##SUF(e, e, C);                                                               \
            const double l = (double)max + log(nbt_row_sum_##SUF(e, C));                           \
            lse[r] = (T)l;                                                                         \
            loss[r] = (T)(l - (double)x[t[r]]);                                                    \
            exact[r] = l - (double)x[t[r]];                                                        \
        }                                                                                          \
    }                                                                                              \
    /* dx[r] = w_r * (softmax(x[r]) - onehot(t[r])) with w_r = g[r * gstep] * factor; ignored      \
     * rows get 0. */                                                                              \
    static void ce_backward_rows_##SUF(int64_t r0, int64_t r1, int64_t C, const T *x,              \
                                       const int64_t *t, int64_t ignore, const T *lse, const T *g, \
                                       int64_t gstep, double factor, T *dx) {                      \
        x += r0 * C, dx += r0 * C;                                                                 \
        for (int64_t r = r0; r < r1; r++, x += C, dx += C) {                                       \
            if (t[r] == ignore) {                                                                  \
                memset(dx, 0, sizeof(T) * (size_t)C);                                              \
                continue;                                                                          \
            }                                                                                      \
            const T w = (T)((double)g[r * gstep] * factor);                                        \
            nbt_row_shift_##SUF(dx, x, -lse[r], C);                                                \
            nbt_vexp_##SUF(dx, dx, C);                                                             \
            nbt_row_scale_##SUF(dx, dx, w, C);                                                     \
            dx[t[r]] -= w;                                                                         \
        }                                                                                          \
    }

DEFINE_CE_KERNELS(float, f32)
DEFINE_CE_KERNELS(double, f64)

/* Rows on nabla's threads: at least this many elements a slice (the rows are independent, so
 * the split changes nothing; the loss is summed afterwards in row order). */
static int64_t ce_grain(int64_t C) {
    return C < 8192 ? 8192 / (C > 0 ? C : 1) : 1;
}

/* The forward's grain: ce_grain, raised so that there are at most CE_SCRATCH_ROWS slices. A
 * slice's rows use one scratch row of C, scratch row begin / grain (slices are at least grain
 * rows long, so no two share one); with ce_grain alone a large vocabulary (grain 1) made the
 * scratch as large as the logits. */
#define CE_SCRATCH_ROWS 64
static int64_t ce_forward_grain(int64_t rows, int64_t C) {
    const int64_t grain = ce_grain(C), least = (rows + CE_SCRATCH_ROWS - 1) / CE_SCRATCH_ROWS;
    return grain > least ? grain : least;
}

typedef struct {
    int64_t C, ignore, gstep, grain;
    const void *x, *g, *lse_in;
    const int64_t *t;
    void *lse, *loss, *e, *dx;
    double *exact, factor;
    bool f32;
} ce_job;

static void ce_forward_range(int64_t r0, int64_t r1, void *vjob) {
    const ce_job *j = vjob;
    const size_t row = (size_t)(r0 / j->grain * j->C);
    if (j->f32)
        ce_rows_f32(r0, r1, j->C, j->x, j->t, j->ignore, j->lse, j->loss, j->exact,
                    (float *)j->e + row);
    else
        ce_rows_f64(r0, r1, j->C, j->x, j->t, j->ignore, j->lse, j->loss, j->exact,
                    (double *)j->e + row);
}

static void ce_backward_range(int64_t r0, int64_t r1, void *vjob) {
    const ce_job *j = vjob;
    if (j->f32)
        ce_backward_rows_f32(r0, r1, j->C, j->x, j->t, j->ignore, j->lse_in, j->g, j->gstep,
                             j->factor, j->dx);
    else
        ce_backward_rows_f64(r0, r1, j->C, j->x, j->t, j->ignore, j->lse_in, j->g, j->gstep,
                             j->factor, j->dx);
}

/* Checks every target is a class in [0, C) or ignore_index; the error names the first bad
 * value and its position. */
static bool check_targets(const nb_tensor *logits, const nb_tensor *t, int64_t ignore) {
    const int64_t *v = (const int64_t *)nbt_ptr(t);
    int64_t C = logits->shape[logits->ndim - 1], n = nbt_numel(t);
    for (int64_t k = 0; k < n; k++) {
        if (v[k] == ignore || (v[k] >= 0 && v[k] < C)) continue;
        int64_t idx[NB_MAX_DIMS], rest = k;
        for (int i = t->ndim - 1; i >= 0; i--) {
            idx[i] = rest % t->shape[i];
            rest /= t->shape[i];
        }
        nbt_error("cross_entropy",
                  "target %lld at position %s is outside [0, %lld) and is not ignore_index "
                  "%lld (logits %s, target %s)",
                  (long long)v[k], nbt_dims(t->ndim, idx), (long long)C, (long long)ignore,
                  nbt_shape(logits), nbt_shape(t));
        return false;
    }
    return true;
}

/* saved: [0] contiguous logits, [1] contiguous target, [2] per-row log-sum-exp;
 * i[0] ignore_index, i[1] reduction; f[0] the factor applied to the output gradient. */
static void cross_entropy_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->saved[0], *t = n->saved[1], *lse = n->saved[2];
    nb_tensor *g = nbt_contiguous(gout);
    nb_tensor *dx = nbt_new("backward", x->dtype, x->ndim, x->shape);
    if (!g || !dx) return;
    int64_t C = x->shape[x->ndim - 1], rows = nbt_numel(t);
    ce_job job = {.C = C,
                  .ignore = n->i[0],
                  .gstep = n->i[1] == NB_REDUCE_NONE ? 1 : 0,
                  .x = nbt_ptr(x),
                  .g = nbt_ptr(g),
                  .lse_in = nbt_ptr(lse),
                  .t = (const int64_t *)nbt_ptr(t),
                  .dx = nbt_ptr(dx),
                  .factor = n->f[0],
                  .f32 = x->dtype == NB_F32};
    nbt_parallel_ranges(rows, ce_grain(C), ce_backward_range, &job);
    nba_accumulate(n, 0, dx);
}

nb_tensor *nb_cross_entropy(const nb_tensor *logits, const nb_tensor *target, int64_t ignore_index,
                            nb_reduction reduction) {
    const char *op = "cross_entropy";
    if (!nba_check_inputs(op, 2, (const nb_tensor *[]){logits, target})) return NULL;
    if (!nba_check_float(op, logits) || !check_reduction(op, reduction)) return NULL;
    if (logits->ndim == 0)
        return nbt_error(op, "logits must have a class dim [..., C], got a 0-d tensor");
    if (target->dtype != NB_I64)
        return nbt_error(op, "target must hold int64 class indices, got %s of shape %s",
                         nb_dtype_name(target->dtype), nbt_shape(target));
    if (target->ndim != logits->ndim - 1 ||
        memcmp(target->shape, logits->shape, sizeof(int64_t) * (size_t)target->ndim) != 0)
        return nbt_error(op, "target of shape %s does not match logits of shape %s (expected %s)",
                         nbt_shape(target), nbt_shape(logits),
                         nbt_dims(logits->ndim - 1, logits->shape));
    nb_tensor *x = nbt_contiguous(logits), *t = nbt_contiguous(target);
    if (!x || !t || !check_targets(logits, t, ignore_index)) return NULL;
    int64_t C = logits->shape[logits->ndim - 1], rows = nbt_numel(t);
    nb_tensor *lse = nbt_new(op, x->dtype, t->ndim, t->shape);
    nb_tensor *loss = nbt_new(op, x->dtype, t->ndim, t->shape);
    const int64_t grain = ce_forward_grain(rows, C), slices = rows / grain + 1;
    nb_tensor *scratch = nbt_new(op, x->dtype, 2, (int64_t[]){slices, C});
    nb_tensor *exact = nbt_new(op, NB_F64, t->ndim, t->shape);
    if (!lse || !loss || !scratch || !exact) return NULL;
    ce_job job = {.C = C,
                  .ignore = ignore_index,
                  .grain = grain,
                  .x = nbt_ptr(x),
                  .t = (const int64_t *)nbt_ptr(t),
                  .lse = nbt_ptr(lse),
                  .loss = nbt_ptr(loss),
                  .e = nbt_ptr(scratch),
                  .exact = (double *)nbt_ptr(exact),
                  .f32 = x->dtype == NB_F32};
    nbt_parallel_ranges(rows, grain, ce_forward_range, &job);
    const int64_t *tv = (const int64_t *)nbt_ptr(t);
    int64_t counted = 0;
    double total = 0;
    for (int64_t r = 0; r < rows; r++) counted += tv[r] != ignore_index, total += job.exact[r];
    double factor = 1.0;
    nb_tensor *out = loss;
    if (reduction != NB_REDUCE_NONE) {
        if (reduction == NB_REDUCE_MEAN) factor = counted ? 1.0 / (double)counted : 0.0;
        out = scalar(op, x->dtype, total * factor);
    }
    nb_node *node = nba_record(op, out, 1, &logits, cross_entropy_backward);
    if (node) {
        node->saved[0] = x, node->saved[1] = t, node->saved[2] = lse;
        node->i[0] = ignore_index, node->i[1] = reduction;
        node->f[0] = factor;
    }
    return out;
}

/* ---- mean squared error ---- */

/* operands: out, a, b: out = a - b */
static void sub_f32(int64_t n, char **p, const int64_t *s, void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        *(float *)(p[0] + i * s[0]) =
            *(const float *)(p[1] + i * s[1]) - *(const float *)(p[2] + i * s[2]);
}

static void sub_f64(int64_t n, char **p, const int64_t *s, void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        *(double *)(p[0] + i * s[0]) =
            *(const double *)(p[1] + i * s[1]) - *(const double *)(p[2] + i * s[2]);
}

/* dst = k * g * diff over contiguous arrays; g is one value (gstep 0) or one per element. */
#define DEFINE_MSE_KERNELS(T, SUF)                                                                 \
    static void scaled_product_##SUF(int64_t n, const T *diff, const T *g, int64_t gstep,          \
                                     double k, T *dst) {                                           \
        const T kk = (T)k;                                                                         \
        for (int64_t i = 0; i < n; i++) dst[i] = kk * g[i * gstep] * diff[i];                      \
    }                                                                                              \
    static double sum_squares_##SUF(int64_t n, const T *diff, T *sq) {                             \
        double total = 0;                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                          \
            sq[i] = diff[i] * diff[i];                                                             \
            total += (double)diff[i] * (double)diff[i];                                            \
        }                                                                                          \
        return total;                                                                              \
    }

DEFINE_MSE_KERNELS(float, f32)
DEFINE_MSE_KERNELS(double, f64)

/* d/da = 2 w (a - b) and d/db = -2 w (a - b), w the output gradient times f[0].
 * saved[0]: a - b (contiguous, a's shape); i[0]: reduction. */
static void mse_loss_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *diff = n->saved[0];
    nb_tensor *g = nbt_contiguous(gout);
    if (!g) return;
    int64_t gstep = n->i[0] == NB_REDUCE_NONE ? 1 : 0, count = nbt_numel(diff);
    for (int k = 0; k < 2; k++) {
        if (!nba_input_needs_grad(n, k)) continue;
        nb_tensor *d = nbt_new("backward", diff->dtype, diff->ndim, diff->shape);
        if (!d) return;
        double factor = (k == 0 ? 2.0 : -2.0) * n->f[0];
        if (diff->dtype == NB_F32)
            scaled_product_f32(count, (const float *)nbt_ptr(diff), (const float *)nbt_ptr(g),
                               gstep, factor, (float *)nbt_ptr(d));
        else
            scaled_product_f64(count, (const double *)nbt_ptr(diff), (const double *)nbt_ptr(g),
                               gstep, factor, (double *)nbt_ptr(d));
        nba_accumulate(n, k, d); /* sums over the dims where b was broadcast */
    }
}

nb_tensor *nb_mse_loss(const nb_tensor *a, const nb_tensor *b, nb_reduction reduction) {
    const char *op = "mse_loss";
    if (!nba_check_same_float(op, a, b) || !check_reduction(op, reduction)) return NULL;
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (b->ndim > a->ndim ||
        !nbt_broadcast_shape(op, a->ndim, a->shape, b->ndim, b->shape, &nd, shape) ||
        nd != a->ndim || memcmp(shape, a->shape, sizeof(int64_t) * (size_t)nd) != 0)
        return nbt_error(op, "target of shape %s does not broadcast to the input's shape %s",
                         nbt_shape(b), nbt_shape(a));
    nb_tensor *diff = nbt_new(op, a->dtype, a->ndim, a->shape);
    nb_tensor *sq = nbt_new(op, a->dtype, a->ndim, a->shape);
    if (!diff || !sq) return NULL;
    nbt_operands ops = {.nops = 3,
                        .base = {nbt_ptr(diff), nbt_ptr(a), nbt_ptr(b)},
                        .elem = {nbt_esize(a->dtype), nbt_esize(a->dtype), nbt_esize(a->dtype)}};
    memcpy(ops.strides[0], diff->strides, sizeof(int64_t) * (size_t)a->ndim);
    memcpy(ops.strides[1], a->strides, sizeof(int64_t) * (size_t)a->ndim);
    nbt_broadcast_strides(b, a->ndim, a->shape, ops.strides[2]);
    nbt_iterate(a->ndim, a->shape, &ops, a->dtype == NB_F32 ? sub_f32 : sub_f64, NULL);
    int64_t count = nbt_numel(a);
    double total =
        a->dtype == NB_F32
            ? sum_squares_f32(count, (const float *)nbt_ptr(diff), (float *)nbt_ptr(sq))
            : sum_squares_f64(count, (const double *)nbt_ptr(diff), (double *)nbt_ptr(sq));
    /* The mean of no elements is NaN, as in PyTorch. */
    double factor = reduction != NB_REDUCE_MEAN ? 1.0 : count ? 1.0 / (double)count : NAN;
    nb_tensor *out = reduction == NB_REDUCE_NONE ? sq : scalar(op, a->dtype, total * factor);
    nb_node *node = nba_record(op, out, 2, (const nb_tensor *[]){a, b}, mse_loss_backward);
    if (node) node->saved[0] = diff, node->i[0] = reduction, node->f[0] = factor;
    return out;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h). Class targets are built inside each function, so they are
 * constants of the check. ---- */
#include "op_def.h"

/* An int64 tensor from a literal: I64(NB_SHAPE(2), IDX(1, 0)). */
#define IDX(...) ((const int64_t[]){__VA_ARGS__})
#define I64(...) nb_from_array(NB_I64, __VA_ARGS__)

/* cross_entropy: logits [4, 5], the third target ignored. */
static nb_tensor *ce_targets(void) {
    return I64(NB_SHAPE(4), IDX(1, 0, -100, 4));
}
static nb_tensor *cat_ce(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return nb_cross_entropy(in[0], ce_targets(), -100, *(const nb_reduction *)ctx);
}
/* Logits [2, 3, 4] (batch, time, classes), ignore_index 2 is also a valid class. */
static nb_tensor *cat_ce_sequence(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_cross_entropy(in[0], I64(NB_SHAPE(2, 3), IDX(0, 2, 3, 1, 1, 2)), 2, NB_REDUCE_MEAN);
}
static nb_tensor *cat_mse(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return nb_mse_loss(in[0], in[1], *(const nb_reduction *)ctx);
}
static const nb_reduction red_mean = NB_REDUCE_MEAN, red_sum = NB_REDUCE_SUM,
                          red_none = NB_REDUCE_NONE;

/* Golden runners: parameter "reduction" is "mean", "sum" or "none". */
static nb_reduction golden_reduction(nba_golden_call *c) {
    const char *s = c->string(c, "reduction");
    return s && strcmp(s, "sum") == 0    ? NB_REDUCE_SUM
           : s && strcmp(s, "none") == 0 ? NB_REDUCE_NONE
                                         : NB_REDUCE_MEAN;
}
static int golden_cross_entropy(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_cross_entropy(c->input(c, "logits", true), c->input(c, "target", true),
                              c->integer(c, "ignore_index"), golden_reduction(c));
    return 1;
}
static int golden_mse_loss(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_mse_loss(c->input(c, "a", true), c->input(c, "b", true), golden_reduction(c));
    return 1;
}

/* clang-format off */
static const nba_entry cross_entropy_entries[] = {
    {"cross_entropy mean, ignore_index -100, [4,5]", NBA_RANDOM, cat_ce, 1, {IN(4, 5)}, &red_mean},
    {"cross_entropy sum of a transposed [4,5]", NBA_STRIDED, cat_ce, 1, {IN_T(4, 5)}, &red_sum},
    {"cross_entropy none of a sliced [4,5]", NBA_STRIDED, cat_ce, 1, {IN_S(4, 5)}, &red_none},
    {"cross_entropy mean [2,3,4], ignore_index 2", NBA_STRIDED, cat_ce_sequence, 1, {IN_T(2, 3, 4)}, NULL},
};
#define CE_CASES(inputs, ignore)                                                                   \
    {inputs, ignore ", reduction='mean'"}, {inputs, ignore ", reduction='sum'"},                   \
        {inputs, ignore ", reduction='none'"}
static const nba_golden_case cross_entropy_cases[] = {
    CE_CASES("logits: [4,5]; target: i64 [1,0,4,2]", "ignore_index=-100"),
    CE_CASES("logits: [4,5]; target: i64 [1,-100,4,-100]", "ignore_index=-100"),
    CE_CASES("logits: [2,3,4]; target: i64 [[0,2,3],[2,1,1]]", "ignore_index=2"),
    CE_CASES("logits: [1,3]; target: i64 [2]", "ignore_index=-100")};
static const nba_golden cross_entropy_goldens[] = {
    NBA_GOLDEN("cross_entropy", golden_cross_entropy,
               "cross_entropy_ref(logits, target, ignore_index, reduction)", cross_entropy_cases)};
NBA_OP_DEF(nba_op_cross_entropy, "cross_entropy", cross_entropy_entries, cross_entropy_goldens,
           .not_applicable = {[NBA_BROADCAST] = "target has the logits' shape without the class "
                                                "dim: nothing broadcasts"});

static const nba_entry mse_loss_entries[] = {
    {"mse_loss mean [3,4] vs transposed [3,4]", NBA_STRIDED, cat_mse, 2, {IN(3, 4), IN_T(3, 4)}, &red_mean},
    {"mse_loss sum sliced [3,4] vs broadcast [4]", NBA_STRIDED, cat_mse, 2, {IN_S(3, 4), IN(4)}, &red_sum},
    {"mse_loss none transposed [2,3,2] vs broadcast [3,1]", NBA_STRIDED, cat_mse, 2, {IN_T(2, 3, 2), IN(3, 1)}, &red_none},
    {"mse_loss mean [2,3] vs broadcast [3]", NBA_BROADCAST, cat_mse, 2, {IN(2, 3), IN(3)}, &red_mean},
    {"mse_loss mean against a constant target", NBA_RANDOM, cat_mse, 2, {IN(5), IN_C(5)}, &red_mean},
};
#define MSE_CASES(inputs)                                                                          \
    {inputs, "reduction='mean'"}, {inputs, "reduction='sum'"}, {inputs, "reduction='none'"}
static const nba_golden_case mse_loss_cases[] = {
    MSE_CASES("a: [3,4]; b: [3,4]"), MSE_CASES("a: [2,3,4]; b: [4]"),
    MSE_CASES("a: [5]; b: [5] const"), MSE_CASES("a: [2,3]; b: [2,1]")};
static const nba_golden mse_loss_goldens[] = {
    NBA_GOLDEN("mse_loss", golden_mse_loss, "mse_ref(a, b, reduction)", mse_loss_cases)};
NBA_OP_DEF(nba_op_mse_loss, "mse_loss", mse_loss_entries, mse_loss_goldens);
/* clang-format on */
#endif /* NABLA_TESTS */
