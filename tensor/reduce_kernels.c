/* Sums, maxima and scatter-add along dims (see reduce_kernels.h for the summation order).
 *
 * Sums take one of three paths, all producing the same bits:
 * - rows: the reduced elements of each output are one contiguous run (sum over the last
 *   dims of a contiguous tensor, or of everything): eight lanes walk the run;
 * - columns: the kept elements are one contiguous run for each reduced index (sum over
 *   leading dims, e.g. a batch): each reduced index adds its row into lane r % 8 of a
 *   [8, K] accumulator, which vectorises over the kept elements;
 * - otherwise the input is copied with kept dims first and reduced dims last, then rows. */
#include "reduce_kernels.h"
#include "isa.h"

#include <math.h>
#include <string.h>

#define LANES 8
/* Column sums whose [lanes, K] accumulator fits this many doubles use a stack array. */
#define SMALL_COLUMN_ACC 512

bool nbt_reduce_dims(const char *op, const nb_tensor *a, int ndims, const int *dims, bool *reduce) {
    if (!a) return nbt_error(op, "NULL input"), false;
    if (ndims <= 0 || !dims)
        return nbt_error(op, "expected at least one dim for a tensor of shape %s, got %d%s",
                         nbt_shape(a), ndims, dims ? "" : " (dims is NULL)"),
               false;
    for (int i = 0; i < a->ndim; i++) reduce[i] = false;
    int range = a->ndim > 0 ? a->ndim : 1; /* a 0-d tensor takes dim 0 or -1 */
    for (int k = 0; k < ndims; k++) {
        int d = dims[k] < 0 ? dims[k] + range : dims[k];
        if (d < 0 || d >= range)
            return nbt_error(op,
                             "dim %d is out of range for a tensor of shape %s (expected %d "
                             "to %d)",
                             dims[k], nbt_shape(a), -range, range - 1),
                   false;
        for (int j = 0; j < k; j++) {
            int e = dims[j] < 0 ? dims[j] + range : dims[j];
            if (e == d)
                return nbt_error(op,
                                 "dim %d appears more than once in dims for a tensor of "
                                 "shape %s",
                                 dims[k], nbt_shape(a)),
                       false;
        }
        if (a->ndim > 0) reduce[d] = true;
    }
    return true;
}

/* ---- the fixed-order lane sums ---- */
static double combine(const double *l) {
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

#define ROW_SUM(S, T)                                                                              \
    static double row_sum_##S(const T *x, int64_t n) {                                             \
        double l[LANES] = {0};                                                                     \
        int64_t i = 0;                                                                             \
        for (; i + LANES <= n; i += LANES)                                                         \
            for (int k = 0; k < LANES; k++) l[k] += (double)x[i + k];                              \
        for (int k = 0; i + k < n; k++) l[k] += (double)x[i + k];                                  \
        return combine(l);                                                                         \
    }
ROW_SUM(f32, float)
ROW_SUM(f64, double)

/* acc[k] += x[k]; float32 rows go through the instruction set's kernel (kernels/column_sums.c),
 * which computes the same sums. */
static void add_row_f64(double *acc, const double *x, int64_t n) {
    for (int64_t k = 0; k < n; k++) acc[k] += x[k];
}

static double row_sum(nb_dtype dt, const char *x, int64_t n) {
    return dt == NB_F32 ? row_sum_f32((const float *)x, n) : row_sum_f64((const double *)x, n);
}

static void store(nb_dtype dt, char *out, int64_t k, double v) {
    if (dt == NB_F32)
        ((float *)out)[k] = (float)v;
    else
        ((double *)out)[k] = v;
}

/* out[k] + v rounded to dt, as adding a tensor holding v (in dt) to out would. */
static void add_to(nb_dtype dt, char *out, int64_t k, double v) {
    if (dt == NB_F32)
        ((float *)out)[k] = ((float *)out)[k] + (float)v;
    else
        ((double *)out)[k] = ((double *)out)[k] + v;
}

/* Walks a multi-index in row-major order, tracking the element offset. */
typedef struct {
    int nd;
    int64_t shape[NB_MAX_DIMS], stride[NB_MAX_DIMS], idx[NB_MAX_DIMS];
    int64_t off;
} odometer;

static void odo_next(odometer *o) {
    for (int d = o->nd - 1; d >= 0; d--) {
        o->off += o->stride[d];
        if (++o->idx[d] < o->shape[d]) return;
        o->off -= o->stride[d] * o->shape[d];
        o->idx[d] = 0;
    }
}

/* True if an odometer's dims step through memory as one unit-stride run. */
static bool is_flat(const odometer *o) {
    int64_t s = 1;
    for (int d = o->nd - 1; d >= 0; d--) {
        if (o->stride[d] != s) return false;
        s *= o->shape[d];
    }
    return true;
}

/* Splits a's dims (size-1 dims dropped) into kept and reduced walks starting at offset 0. */
static void split_dims(const nb_tensor *a, const bool *reduce, odometer *kept, odometer *red) {
    memset(kept, 0, sizeof *kept);
    memset(red, 0, sizeof *red);
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] == 1) continue;
        odometer *o = reduce[i] ? red : kept;
        o->shape[o->nd] = a->shape[i];
        o->stride[o->nd++] = a->strides[i];
    }
}

static int64_t count(const odometer *o) {
    int64_t n = 1;
    for (int d = 0; d < o->nd; d++) n *= o->shape[d];
    return n;
}

static void sum_rows(const nb_tensor *a, odometer *kept, int64_t R, char *out, double scale) {
    int64_t K = count(kept);
    size_t es = nbt_esize(a->dtype);
    const char *base = nbt_ptr(a);
    for (int64_t k = 0; k < K; k++, odo_next(kept))
        store(a->dtype, out, k, row_sum(a->dtype, base + kept->off * (int64_t)es, R) * scale);
}

/* Columns [k0, k1) of every reduced row into their lanes of the [lanes, K] accumulator. */
typedef struct {
    const nb_tensor *a;
    odometer red; /* at the first row */
    int64_t R, K;
    double *acc;
} columns_job;

/* The reduced rows' one stride when they are evenly spaced (dims that merge into one), else 0. */
static int64_t even_stride(const odometer *o) {
    for (int d = 0; d + 1 < o->nd; d++)
        if (o->stride[d] != o->stride[d + 1] * o->shape[d + 1]) return 0;
    return o->nd > 0 ? o->stride[o->nd - 1] : 0;
}

static void sum_column_range(int64_t k0, int64_t k1, void *vjob) {
    const columns_job *j = vjob;
    void (*add_row_f32)(double *, const float *, int64_t) = nbt_kernels()->add_row_f32;
    odometer red = j->red;
    size_t es = nbt_esize(j->a->dtype);
    const char *base = nbt_ptr(j->a);
    const int64_t ldx = even_stride(&red);
    if (j->a->dtype == NB_F32 && ldx > 0 && j->R >= LANES) { /* the lanes in registers */
        nbt_kernels()->add_rows_f32(j->acc + k0, j->K, (const float *)base + red.off + k0, ldx,
                                    j->R, k1 - k0);
        return;
    }
    for (int64_t r = 0; r < j->R; r++, odo_next(&red)) {
        const char *row = base + (red.off + k0) * (int64_t)es;
        double *lane = j->acc + (r % LANES) * j->K + k0;
        if (j->a->dtype == NB_F32)
            add_row_f32(lane, (const float *)row, k1 - k0);
        else
            add_row_f64(lane, (const double *)row, k1 - k0);
    }
}

/* Returns false only when the accumulator cannot be allocated. Threads take slices of the
 * columns: each column's sum runs over the rows in the same order whoever computes it. With
 * add, each sum (rounded to a's dtype) is added to out[k] instead of stored there. */
static bool sum_columns(const nb_tensor *a, odometer *red, int64_t K, char *out, double scale,
                        bool add) {
    int64_t R = count(red);
    int64_t lanes = R < LANES ? R : LANES;
    /* A small accumulator lives on the stack and the sum stays on this thread (it is below
     * the split's grain anyway): a bias gradient of a few rows is then no tensor and no pool
     * call, which were most of its cost in the smallest workload. */
    double small[SMALL_COLUMN_ACC];
    nb_tensor *acc_t = NULL;
    double *acc = small;
    if (lanes * K <= SMALL_COLUMN_ACC && R * K <= 32768) {
        memset(small, 0, sizeof(double) * (size_t)(lanes * K));
    } else {
        if (!(acc_t = nb_zeros(NB_F64, 2, (int64_t[]){lanes, K}))) return false;
        acc = nb_data(acc_t);
    }
    columns_job job = {a, *red, R, K, acc};
    if (acc == small)
        sum_column_range(0, K, &job);
    else
        nbt_parallel_ranges(K, 32768 / R + 1, sum_column_range, &job);
    for (int64_t k = 0; k < K; k++) {
        double l[LANES] = {0};
        for (int64_t j = 0; j < lanes; j++) l[j] = acc[j * K + k];
        (add ? add_to : store)(a->dtype, out, k, combine(l) * scale);
    }
    return true;
}

nb_tensor *nbt_sum_dims(const nb_tensor *a, const bool *reduce, bool keepdim, double scale) {
    if (!a) return nbt_error("sum", "NULL input");
    if (!nb_is_float(a))
        return nbt_error("sum", "expected a float32 or float64 tensor, got %s of shape %s",
                         nb_dtype_name(a->dtype), nbt_shape(a));
    int64_t oshape[NB_MAX_DIMS];
    int ond = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (!reduce[i])
            oshape[ond++] = a->shape[i];
        else if (keepdim)
            oshape[ond++] = 1;
    }
    nb_tensor *out = nbt_new("sum", a->dtype, ond, oshape);
    if (!out) return NULL;
    int64_t K = nbt_numel(out), R = 1;
    for (int i = 0; i < a->ndim; i++)
        if (reduce[i]) R *= a->shape[i];
    if (K == 0) return out;
    if (R == 0) {
        nb_fill_(out, 0.0 * scale);
        return out;
    }
    odometer kept, red;
    split_dims(a, reduce, &kept, &red);
    if (is_flat(&red)) {
        sum_rows(a, &kept, R, nbt_ptr(out), scale);
        return out;
    }
    if (is_flat(&kept)) return sum_columns(a, &red, K, nbt_ptr(out), scale, false) ? out : NULL;
    /* Neither side is one run: copy with kept dims first, reduced dims last. */
    int perm[NB_MAX_DIMS], np = 0;
    for (int i = 0; i < a->ndim; i++)
        if (!reduce[i]) perm[np++] = i;
    for (int i = 0; i < a->ndim; i++)
        if (reduce[i]) perm[np++] = i;
    nb_tensor *p = nbt_permute(a, perm);
    nb_tensor *c = p ? nbt_contiguous_as(p, a->dtype) : NULL;
    if (!c) return NULL;
    memset(&kept, 0, sizeof kept); /* output k's row starts at k * R in the copy */
    kept.nd = 1, kept.shape[0] = K, kept.stride[0] = R;
    sum_rows(c, &kept, R, nbt_ptr(out), scale);
    return out;
}

bool nbt_add_row_sums(nb_tensor *into, const nb_tensor *a) {
    const int last = a->ndim - 1;
    if (a->ndim < 1 || !nb_is_float(a) || into->dtype != a->dtype || into->ndim != 1 ||
        into->shape[0] != a->shape[last] || into->strides[0] != 1 || a->shape[last] == 0)
        return false;
    bool reduce[NB_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) reduce[i] = i < last;
    odometer kept, red;
    split_dims(a, reduce, &kept, &red);
    if (!is_flat(&kept) || count(&red) == 0) return false;
    return sum_columns(a, &red, a->shape[last], nbt_ptr(into), 1.0, true);
}

/* ---- max ---- */
/* !(v <= best) is v > best or v NaN; once best is NaN it stays (the first NaN wins). */
#define ROW_MAX(S, T)                                                                              \
    static int64_t row_argmax_##S(const T *x, int64_t n, int64_t stride, T *best_out) {            \
        T best = x[0];                                                                             \
        int64_t arg = 0;                                                                           \
        for (int64_t i = 1; i < n && !isnan(best); i++) {                                          \
            T v = x[i * stride];                                                                   \
            if (!(v <= best)) best = v, arg = i;                                                   \
        }                                                                                          \
        *best_out = best;                                                                          \
        return arg;                                                                                \
    }
ROW_MAX(f32, float)
ROW_MAX(f64, double)

bool nbt_max_dim(const nb_tensor *a, int dim, bool keepdim, nb_tensor **values,
                 nb_tensor **indices) {
    if (!a || !values || !indices) return nbt_error("max_dim", "NULL argument"), false;
    if (!nb_is_float(a))
        return nbt_error("max_dim", "expected a float32 or float64 tensor, got %s of shape %s",
                         nb_dtype_name(a->dtype), nbt_shape(a)),
               false;
    if (dim < 0 || dim >= a->ndim || a->shape[dim] == 0)
        return nbt_error("max_dim", "cannot reduce dim %d of shape %s", dim, nbt_shape(a)), false;
    bool reduce[NB_MAX_DIMS] = {false};
    reduce[dim] = true;
    int64_t oshape[NB_MAX_DIMS];
    int ond = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (i != dim)
            oshape[ond++] = a->shape[i];
        else if (keepdim)
            oshape[ond++] = 1;
    }
    *values = nbt_new("max_dim", a->dtype, ond, oshape);
    *indices = *values ? nbt_new("max_dim", NB_I64, ond, oshape) : NULL;
    if (!*indices) return false;
    odometer kept, red;
    split_dims(a, reduce, &kept, &red);
    int64_t K = nbt_numel(*values), n = a->shape[dim], stride = a->strides[dim];
    size_t es = nbt_esize(a->dtype);
    const char *base = nbt_ptr(a);
    int64_t *idx = nb_data(*indices);
    for (int64_t k = 0; k < K; k++, odo_next(&kept)) {
        const char *row = base + kept.off * (int64_t)es;
        if (a->dtype == NB_F32)
            idx[k] = row_argmax_f32((const float *)row, n, stride, (float *)nb_data(*values) + k);
        else
            idx[k] = row_argmax_f64((const double *)row, n, stride, (double *)nb_data(*values) + k);
    }
    return true;
}

/* ---- scatter-add ---- */
typedef struct {
    nb_dtype dtype;
    int64_t dim_stride; /* bytes between consecutive indices of dst's dim */
} scatter_ctx;

static void scatter_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    const scatter_ctx *c = vctx;
    for (int64_t i = 0; i < n; i++) {
        char *d = p[0] + i * s[0] + *(const int64_t *)(p[1] + i * s[1]) * c->dim_stride;
        const char *x = p[2] + i * s[2];
        if (c->dtype == NB_F32)
            *(float *)d += *(const float *)x;
        else
            *(double *)d += *(const double *)x;
    }
}

bool nbt_scatter_add_dim(nb_tensor *dst, int dim, const nb_tensor *index, const nb_tensor *src) {
    const char *op = "scatter_add";
    if (!dst || !index || !src) return nbt_error(op, "NULL argument"), false;
    if (!nb_is_float(dst) || src->dtype != dst->dtype || index->dtype != NB_I64)
        return nbt_error(op,
                         "expected float dst and src of one dtype and int64 index, got %s, "
                         "%s and %s",
                         nb_dtype_name(dst->dtype), nb_dtype_name(src->dtype),
                         nb_dtype_name(index->dtype)),
               false;
    if (dim < 0 || dim >= dst->ndim || !nb_same_shape(index, src) || index->ndim != dst->ndim)
        return nbt_error(op,
                         "index %s and src %s must share a shape with as many dims as dst "
                         "%s (dim %d)",
                         nbt_shape(index), nbt_shape(src), nbt_shape(dst), dim),
               false;
    for (int i = 0; i < dst->ndim; i++)
        if (i != dim && index->shape[i] > dst->shape[i])
            return nbt_error(op, "index %s is larger than dst %s outside dim %d", nbt_shape(index),
                             nbt_shape(dst), dim),
                   false;
    int64_t n = nbt_numel(index);
    for (int64_t k = 0; k < n; k++) {
        double j = nbt_get_linear(index, k);
        if (j < 0 || j >= (double)dst->shape[dim])
            return nbt_error(op, "index %.0f is out of range for dim %d of %s", j, dim,
                             nbt_shape(dst)),
                   false;
    }
    size_t es = nbt_esize(dst->dtype);
    nbt_operands ops = {.nops = 3,
                        .base = {nbt_ptr(dst), nbt_ptr(index), nbt_ptr(src)},
                        .elem = {es, sizeof(int64_t), es}};
    memcpy(ops.strides[0], dst->strides, sizeof(int64_t) * (size_t)dst->ndim);
    ops.strides[0][dim] = 0; /* the index picks the position along dim */
    memcpy(ops.strides[1], index->strides, sizeof(int64_t) * (size_t)index->ndim);
    memcpy(ops.strides[2], src->strides, sizeof(int64_t) * (size_t)src->ndim);
    scatter_ctx c = {dst->dtype, dst->strides[dim] * (int64_t)es};
    nbt_iterate(index->ndim, index->shape, &ops, scatter_inner, &c);
    return true;
}
