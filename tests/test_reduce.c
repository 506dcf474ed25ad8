/* Reductions: values by hand, keepdim shapes, negative dims, non-contiguous inputs, the
 * documented summation order (same bits for every layout), float32 accuracy, empty inputs,
 * max values and indices (ties, NaN), backward values and every error path. */
#include "harness.h"
#include "tensor/reduce_kernels.h"

#include <stdlib.h>

#define D(...)                                                                                     \
    (const double[]) {                                                                             \
        __VA_ARGS__                                                                                \
    }
#define DIMS(...)                                                                                  \
    (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (const int[]) {                             \
        __VA_ARGS__                                                                                \
    }

/* A 0-d tensor. nb_scalar hands a NULL shape to memcpy in tensor/memory.c, which UBSan stops
 * on, so these tests pass an empty non-NULL shape instead until that is fixed. */
static nb_tensor *scalar(nb_dtype dt, double value) {
    return nb_full(dt, 0, (const int64_t[1]){0}, value);
}

#define ASSERT_0D(t) CU_ASSERT_TRUE((t) && (t)->ndim == 0)

/* x[i,j,k] = 12 i + 4 j + k */
static nb_tensor *ramp234(nb_dtype dt) {
    return nb_view(nb_arange(dt, 0, 24, 1), NB_SHAPE(2, 3, 4));
}

static void test_sum_mean_all(void) {
    nb_tensor *x = nb_view(nb_arange(NB_F64, 0, 6, 1), NB_SHAPE(2, 3));
    nb_tensor *s = nb_sum(x);
    ASSERT_0D(s);
    CU_ASSERT_EQUAL(s->dtype, NB_F64);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(s), 15, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_mean(x)), 2.5, 0);
    nb_tensor *x32 = nb_view(nb_arange(NB_F32, 0, 6, 1), NB_SHAPE(2, 3));
    nb_tensor *m32 = nb_mean(x32);
    ASSERT_0D(m32);
    CU_ASSERT_EQUAL(m32->dtype, NB_F32);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(m32), 2.5, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_sum(scalar(NB_F32, -4))), -4, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_mean(scalar(NB_F64, 7))), 7, 0);
}

static void test_sum_dims_values_and_shapes(void) {
    nb_tensor *x = ramp234(NB_F64);
    nb_tensor *s0 = nb_sum_dims(x, DIMS(0), false);
    NBT_ASSERT_SHAPE(s0, 3, 4);
    NBT_ASSERT_VALUES(s0, 0, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34);
    nb_tensor *s2 = nb_sum_dims(x, DIMS(-1), false);
    NBT_ASSERT_SHAPE(s2, 2, 3);
    NBT_ASSERT_VALUES(s2, 0, 6, 22, 38, 54, 70, 86);
    nb_tensor *s2k = nb_sum_dims(x, DIMS(2), true);
    NBT_ASSERT_SHAPE(s2k, 2, 3, 1);
    NBT_ASSERT_VALUES(s2k, 0, 6, 22, 38, 54, 70, 86);
    nb_tensor *s02 = nb_sum_dims(x, DIMS(0, 2), false);
    NBT_ASSERT_SHAPE(s02, 3);
    NBT_ASSERT_VALUES(s02, 0, 60, 92, 124);
    nb_tensor *s20k = nb_sum_dims(x, DIMS(2, -3), true);
    NBT_ASSERT_SHAPE(s20k, 1, 3, 1);
    NBT_ASSERT_VALUES(s20k, 0, 60, 92, 124);
    nb_tensor *all = nb_sum_dims(x, DIMS(1, 0, 2), false);
    ASSERT_0D(all);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(all), 276, 0);
    NBT_ASSERT_SHAPE(nb_sum_dims(x, DIMS(0, 1, 2), true), 1, 1, 1);
    /* mean_dims divides by the count of reduced elements */
    nb_tensor *m02 = nb_mean_dims(x, DIMS(0, -1), false);
    NBT_ASSERT_VALUES(m02, 0, 7.5, 11.5, 15.5);
    nb_tensor *m1 = nb_mean_dims(x, DIMS(1), true);
    NBT_ASSERT_SHAPE(m1, 2, 1, 4);
    NBT_ASSERT_VALUES(m1, 0, 4, 5, 6, 7, 16, 17, 18, 19);
    /* float32 */
    nb_tensor *m32 = nb_mean_dims(ramp234(NB_F32), DIMS(1), false);
    CU_ASSERT_EQUAL(m32->dtype, NB_F32);
    NBT_ASSERT_VALUES(m32, 0, 4, 5, 6, 7, 16, 17, 18, 19);
    /* a 0-d tensor accepts dim 0 and -1 (PyTorch's rule) */
    nb_tensor *z = nb_sum_dims(scalar(NB_F64, 3), DIMS(0), true);
    ASSERT_0D(z);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(z), 3, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_mean_dims(scalar(NB_F64, 3), DIMS(-1), false)), 3, 0);
}

static void test_non_contiguous_inputs(void) {
    nb_tensor *x = ramp234(NB_F64);
    nb_tensor *t = nb_transpose(x, 0, 2); /* [4,3,2], t[k,j,i] = x[i,j,k] */
    /* over t's last dim (x's first): neither side is one run, so the copy path */
    NBT_ASSERT_VALUES(nb_sum_dims(t, DIMS(2), false), 0, 12, 20, 28, 14, 22, 30, 16, 24, 32, 18, 26,
                      34);
    /* over t's first dim (x's last, stride 1): each output's elements are one run */
    NBT_ASSERT_VALUES(nb_sum_dims(t, DIMS(0), false), 0, 6, 54, 22, 70, 38, 86);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_sum(t)), 276, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_mean(t)), 11.5, 0);
    /* every other element of the last dim: [[0, 2], [4, 6], [8, 10]] (as 4 j + 2 k) */
    nb_tensor *sliced = nb_select(nb_view(nb_arange(NB_F64, 0, 12, 1), NB_SHAPE(3, 2, 2)), 2, 0);
    NBT_ASSERT_VALUES(nb_sum_dims(sliced, DIMS(0), false), 0, 12, 18);
    NBT_ASSERT_VALUES(nb_sum_dims(sliced, DIMS(1), false), 0, 2, 10, 18);
    /* an expanded input: each value counted once per copy */
    nb_tensor *e = nb_expand(nb_from_array(NB_F64, NB_SHAPE(3, 1), D(1, 2, 3)), NB_SHAPE(2, 3, 4));
    NBT_ASSERT_VALUES(nb_sum_dims(e, DIMS(0, 2), false), 0, 8, 16, 24);
    NBT_ASSERT_VALUES(nb_mean_dims(e, DIMS(1), false), 0, 2, 2, 2, 2, 2, 2, 2, 2);
}

/* The order documented in reduce_kernels.h, written out plainly: lane r % 8 in double, from
 * 0, then ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). */
static double documented_sum(const double *v, int64_t n) {
    double l[8] = {0};
    for (int64_t r = 0; r < n; r++) l[r % 8] += v[r];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* For x [A,B,C] and a set of reduced dims: every output element's inputs in row-major order
 * of the reduced dims, summed in the documented order. */
static nb_tensor *reference_sum(const nb_tensor *x, const bool *reduce) {
    int64_t A = x->shape[0], B = x->shape[1], C = x->shape[2];
    int64_t out_shape[3], on = 0, R = 1;
    for (int d = 0; d < 3; d++) {
        if (!reduce[d])
            out_shape[on++] = x->shape[d];
        else
            R *= x->shape[d];
    }
    nb_tensor *out = nb_empty(x->dtype, (int)on, out_shape);
    int64_t K = nb_numel(out);
    double *vals = malloc(sizeof(double) * (size_t)(K * R));
    int64_t *fill = calloc((size_t)K, sizeof(int64_t));
    for (int64_t i = 0; i < A; i++)
        for (int64_t j = 0; j < B; j++)
            for (int64_t k = 0; k < C; k++) {
                int64_t idx[3] = {i, j, k}, o = 0;
                for (int d = 0; d < 3; d++)
                    if (!reduce[d]) o = o * x->shape[d] + idx[d];
                vals[o * R + fill[o]++] = nb_get(x, idx);
            }
    for (int64_t o = 0; o < K; o++) {
        int64_t at[3] = {0}, rest = o;
        for (int d = (int)on - 1; d >= 0; d--) at[d] = rest % out_shape[d], rest /= out_shape[d];
        nb_set(out, at, documented_sum(vals + o * R, R)); /* rounds once for float32 */
    }
    free(vals);
    free(fill);
    return out;
}

/* Every path (rows, columns, copy) and every layout give the documented bits. float64 data
 * shows the order (float32 sums of a few dozen values are exact in float64 lanes anyway). */
static void check_order(nb_dtype dt) {
    nb_rng rng;
    nb_rng_seed(&rng, 11);
    nb_tensor *x = nb_randn(&rng, dt, NB_SHAPE(37, 29, 5));
    /* the same values in two other layouts */
    nb_tensor *last_first =
        nb_permute(nb_contiguous(nb_permute(x, (int[]){2, 0, 1})), (int[]){1, 2, 0});
    nb_tensor *wide = nb_zeros(dt, NB_SHAPE(37, 29, 10));
    nb_tensor *sliced = nb_narrow(wide, 2, 3, 5);
    nb_copy_(sliced, x);
    nb_tensor *layouts[3] = {x, last_first, sliced};
    const int sets[7][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 0},
                            {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};
    for (int s = 0; s < 7; s++) {
        bool reduce[3] = {sets[s][0], sets[s][1], sets[s][2]};
        int dims[3], nd = 0;
        for (int d = 0; d < 3; d++)
            if (reduce[d]) dims[nd++] = d;
        nb_tensor *want = reference_sum(x, reduce);
        for (int l = 0; l < 3; l++) {
            nb_tensor *got = nb_sum_dims(layouts[l], nd, dims, false);
            if (!nbtest_close(got, want, 0, 0))
                fprintf(stderr, "  %s: dims set %d, layout %d differs\n", nb_dtype_name(dt), s, l);
            NBT_ASSERT_CLOSE(got, want, 0, 0);
        }
    }
    nb_tensor *want_all = reference_sum(x, (bool[]){true, true, true});
    NBT_ASSERT_CLOSE(nb_sum(last_first), want_all, 0, 0);
    NBT_ASSERT_CLOSE(nb_sum(sliced), want_all, 0, 0);
}

static void test_summation_order_is_fixed(void) {
    check_order(NB_F64);
    check_order(NB_F32);
}

/* A column sum's lanes, by hand: in every column rows 0, 1 and 2 hold 2^60, -2^60 and 1, and
 * rows 8 and 9 hold 1. Row r goes to lane r % 8, so lane 0 is 2^60 + 1, which rounds to 2^60,
 * lane 1 is -2^60 + 1, which rounds to -2^60, and lane 2 is 1; ((l0 + l1) + (l2 + l3)) + ... =
 * 1. Rows in the wrong lanes give 0 (2^60 and -2^60 not paired first) or 2 or 3 (a 1 of rows
 * 8 and 9 kept). 11 rows leave three after a group of eight; 21 columns cover a vector block
 * and a tail on every instruction set. */
static void test_column_sum_lanes(void) {
    const nb_dtype types[] = {NB_F32, NB_F64};
    for (int t = 0; t < 2; t++) {
        nb_tensor *x = nb_zeros(types[t], NB_SHAPE(11, 21));
        for (int64_t k = 0; k < 21; k++) {
            nb_set(x, (int64_t[]){0, k}, ldexp(1, 60));
            nb_set(x, (int64_t[]){1, k}, -ldexp(1, 60));
            nb_set(x, (int64_t[]){2, k}, 1);
            nb_set(x, (int64_t[]){8, k}, 1);
            nb_set(x, (int64_t[]){9, k}, 1);
        }
        nb_tensor *s = nb_sum_dims(x, DIMS(0), false);
        int64_t wrong = 0;
        for (int64_t k = 0; k < 21; k++) wrong += nb_get(s, (int64_t[]){k}) != 1;
        CU_ASSERT_EQUAL(wrong, 0);
        /* the same rows as [11, 1, 21]: two reduced dims that merge into one stride */
        nb_tensor *s3 = nb_sum_dims(nb_view(x, NB_SHAPE(11, 1, 21)), DIMS(0, 1), false);
        NBT_ASSERT_CLOSE(s3, s, 0, 0);
    }
}

/* float32 sums accumulate in float64: no drift, no cancellation loss. */
static void test_float32_accuracy(void) {
    enum { N = 1000000 };
    nb_tensor *tenths = nb_full(NB_F32, NB_SHAPE(N), 0.1);
    double exact = (double)N * (double)0.1f; /* 100000.00149..., a float32 sum drifts by ~1000 */
    CU_ASSERT_EQUAL((float)nb_item(nb_sum(tenths)), (float)exact);
    CU_ASSERT_EQUAL((float)nb_item(nb_mean(tenths)), 0.1f);
    nb_tensor *cancel = nb_from_array(NB_F32, NB_SHAPE(4), (const float[]){1e8f, 1, -1e8f, 1});
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_sum(cancel)), 2, 0); /* in float32 order: 1 */
    nb_tensor *third = nb_from_array(NB_F32, NB_SHAPE(3), (const float[]){1, 2, 4});
    CU_ASSERT_EQUAL((float)nb_item(nb_mean(third)), (float)(7.0 / 3.0));
    /* a column sum over a batch of rows takes the same care */
    nb_tensor *rows = nb_full(NB_F32, NB_SHAPE(N / 4, 4), 0.1);
    nb_tensor *cols = nb_sum_dims(rows, DIMS(0), false);
    CU_ASSERT_EQUAL((float)nb_get(cols, NB_IDX(3)), (float)((double)(N / 4) * (double)0.1f));
}

static void test_empty_inputs(void) {
    nb_tensor *empty = nb_zeros(NB_F64, NB_SHAPE(0));
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_sum(empty)), 0, 0);
    CU_ASSERT_TRUE(isnan(nb_item(nb_mean(empty))));
    nb_tensor *e20 = nb_zeros(NB_F32, NB_SHAPE(2, 0));
    nb_tensor *s = nb_sum_dims(e20, DIMS(1), false);
    NBT_ASSERT_SHAPE(s, 2);
    NBT_ASSERT_VALUES(s, 0, 0, 0);
    NBT_ASSERT_VALUES(nb_mean_dims(e20, DIMS(1), true), 0, NBT_NAN, NBT_NAN);
    NBT_ASSERT_SHAPE(nb_sum_dims(e20, DIMS(0), false), 0);
}

/* ---- max ---- */
static void test_max_dim_values_and_indices(void) {
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(3, 3), D(1, 5, 5, 7, -1, 7, -3, -2, -9));
    nb_tensor *idx = NULL;
    nb_tensor *v = nb_max_dim(x, 1, false, &idx);
    NBT_ASSERT_SHAPE(v, 3);
    NBT_ASSERT_VALUES(v, 0, 5, 7, -2);
    NBT_ASSERT_SHAPE(idx, 3);
    CU_ASSERT_EQUAL(idx->dtype, NB_I64);
    NBT_ASSERT_VALUES(idx, 0, 1, 0, 1); /* ties: the first occurrence */
    v = nb_max_dim(x, 0, true, &idx);
    NBT_ASSERT_SHAPE(v, 1, 3);
    NBT_ASSERT_SHAPE(idx, 1, 3);
    NBT_ASSERT_VALUES(v, 0, 7, 5, 7);
    NBT_ASSERT_VALUES(idx, 0, 1, 0, 1);
    NBT_ASSERT_VALUES(nb_max_dim(x, -1, true, NULL), 0, 5, 7, -2);
    /* transposed input: max over x's dim 0 */
    v = nb_max_dim(nb_transpose(x, 0, 1), 1, false, &idx);
    NBT_ASSERT_VALUES(v, 0, 7, 5, 7);
    NBT_ASSERT_VALUES(idx, 0, 1, 0, 1);
    /* float32, 3-D, middle dim */
    nb_tensor *y =
        nb_view(nb_from_array(NB_F32, NB_SHAPE(8), (const float[]){3, 1, 2, 4, 0, 9, 9, 8}),
                NB_SHAPE(2, 2, 2));
    v = nb_max_dim(y, 1, false, &idx);
    CU_ASSERT_EQUAL(v->dtype, NB_F32);
    NBT_ASSERT_SHAPE(v, 2, 2);
    NBT_ASSERT_VALUES(v, 0, 3, 4, 9, 9);
    NBT_ASSERT_VALUES(idx, 0, 0, 1, 1, 0);
    /* 0-d: the element itself, index 0 */
    v = nb_max_dim(scalar(NB_F64, 3), -1, false, &idx);
    ASSERT_0D(v);
    ASSERT_0D(idx);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(v), 3, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(idx), 0, 0);
}

/* NaN wins over every number, the first NaN wins among NaNs (PyTorch); -inf rows work. */
static void test_max_dim_nan_and_inf(void) {
    nb_tensor *x = nb_from_array(
        NB_F64, NB_SHAPE(3, 4),
        D(1, NAN, 3, NAN, NAN, 5, INFINITY, 0, -INFINITY, -INFINITY, -INFINITY, -INFINITY));
    nb_tensor *idx;
    nb_tensor *v = nb_max_dim(x, 1, false, &idx);
    NBT_ASSERT_VALUES(v, 0, NBT_NAN, NBT_NAN, -INFINITY);
    NBT_ASSERT_VALUES(idx, 0, 1, 0, 0);
    v = nb_max_dim(nb_to_dtype(x, NB_F32), 0, false, &idx);
    NBT_ASSERT_VALUES(v, 0, NBT_NAN, NBT_NAN, INFINITY, NBT_NAN);
    NBT_ASSERT_VALUES(idx, 0, 1, 0, 1, 0);
}

static void test_max_dim_backward(void) {
    nb_tensor *x = nb_requires_grad_(
        nb_from_array(NB_F64, NB_SHAPE(3, 3), D(1, 5, 5, 7, -1, 7, -3, -2, -9)), true);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_max_dim(x, 1, false, NULL)), NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 1, 0, 1, 0, 0, 0, 1, 0);
    nb_zero_grad(x);
    nb_tensor *v = nb_max_dim(x, 1, true, NULL);
    CU_ASSERT_TRUE(nb_backward(v, nb_from_array(NB_F64, NB_SHAPE(3, 1), D(1, 2, 3))));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 1, 0, 2, 0, 0, 0, 3, 0);
    /* through a transposed input, over dim 0 of the transpose */
    nb_zero_grad(x);
    v = nb_max_dim(nb_transpose(x, 0, 1), 0, false, NULL); /* max of each row of x */
    CU_ASSERT_TRUE(nb_backward(v, nb_from_array(NB_F64, NB_SHAPE(3), D(10, 20, 30))));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 10, 0, 20, 0, 0, 0, 30, 0);
    /* 0-d */
    nb_tensor *s = nb_requires_grad_(scalar(NB_F64, 2), true);
    CU_ASSERT_TRUE(nb_backward(nb_max_dim(s, 0, false, NULL), NULL));
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_grad(s)), 1, 0);
}

/* ---- sum / mean backward ---- */
static void test_sum_mean_backward(void) {
    nb_tensor *x = nb_requires_grad_(ramp234(NB_F64), true);
    CU_ASSERT_TRUE(nb_backward(nb_sum(x), NULL));
    NBT_ASSERT_SHAPE(nb_grad(x), 2, 3, 4);
    double ones[24], inv24[24];
    for (int k = 0; k < 24; k++) ones[k] = 1, inv24[k] = 1.0 / 24;
    CU_ASSERT_TRUE(nbtest_values(nb_grad(x), ones, 24, 0));
    nb_zero_grad(x);
    CU_ASSERT_TRUE(nb_backward(nb_mean(x), NULL));
    CU_ASSERT_TRUE(nbtest_values(nb_grad(x), inv24, 24, 1e-17));
    /* sum over dims 1 with a strided grad_output g[i,k] (a transposed [4,2]): grad x = g */
    nb_zero_grad(x);
    nb_tensor *g = nb_transpose(nb_from_array(NB_F64, NB_SHAPE(4, 2), D(1, 2, 3, 4, 5, 6, 7, 8)), 0,
                                1); /* [2,4] */
    CU_ASSERT_TRUE(nb_backward(nb_sum_dims(x, DIMS(1), false), g));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7, 2, 4, 6, 8, 2, 4, 6, 8, 2,
                      4, 6, 8);
    /* mean over (0, 2) keepdim: grad = g[j] / 8 */
    nb_zero_grad(x);
    CU_ASSERT_TRUE(nb_backward(nb_mean_dims(x, DIMS(0, 2), true),
                               nb_from_array(NB_F64, NB_SHAPE(1, 3, 1), D(8, 16, 24))));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 3,
                      3, 3, 3);
    /* float32 mean over a transposed input */
    nb_tensor *y = nb_requires_grad_(nb_ones(NB_F32, NB_SHAPE(2, 4)), true);
    CU_ASSERT_TRUE(nb_backward(nb_mean(nb_transpose(y, 0, 1)), NULL));
    NBT_ASSERT_VALUES(nb_grad(y), 0, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125);
}

/* ---- errors ---- */
static void test_errors(void) {
    nb_tensor *x = ramp234(NB_F64);
    nb_tensor *i64 = nb_zeros(NB_I64, NB_SHAPE(2, 3));
    nb_tensor *mask = nb_zeros(NB_BOOL, NB_SHAPE(2));
    CU_ASSERT_PTR_NULL(nb_sum(NULL));
    NBT_ASSERT_ERROR("sum: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_mean(NULL));
    NBT_ASSERT_ERROR("mean: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_sum_dims(NULL, DIMS(0), false));
    NBT_ASSERT_ERROR("sum_dims: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_mean_dims(NULL, DIMS(0), false));
    NBT_ASSERT_ERROR("mean_dims: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_max_dim(NULL, 0, false, NULL));
    NBT_ASSERT_ERROR("max_dim: ");
    /* non-float inputs */
    CU_ASSERT_PTR_NULL(nb_sum(i64));
    NBT_ASSERT_ERROR("sum: ");
    NBT_ASSERT_ERROR("int64");
    CU_ASSERT_PTR_NULL(nb_mean(mask));
    NBT_ASSERT_ERROR("mean: ");
    NBT_ASSERT_ERROR("bool");
    CU_ASSERT_PTR_NULL(nb_sum_dims(i64, DIMS(0), false));
    NBT_ASSERT_ERROR("sum_dims: ");
    CU_ASSERT_PTR_NULL(nb_mean_dims(i64, DIMS(0), true));
    NBT_ASSERT_ERROR("mean_dims: ");
    CU_ASSERT_PTR_NULL(nb_max_dim(i64, 0, false, NULL));
    NBT_ASSERT_ERROR("max_dim: ");
    NBT_ASSERT_ERROR("[2, 3]");
    /* bad dims: out of range, repeated (also as a negative alias), none */
    CU_ASSERT_PTR_NULL(nb_sum_dims(x, DIMS(3), false));
    NBT_ASSERT_ERROR("sum_dims: dim 3 is out of range");
    NBT_ASSERT_ERROR("[2, 3, 4]");
    CU_ASSERT_PTR_NULL(nb_mean_dims(x, DIMS(0, -4), false));
    NBT_ASSERT_ERROR("mean_dims: dim -4 is out of range");
    CU_ASSERT_PTR_NULL(nb_sum_dims(x, DIMS(1, 1), false));
    NBT_ASSERT_ERROR("sum_dims: dim 1 appears more than once");
    NBT_ASSERT_ERROR("[2, 3, 4]");
    CU_ASSERT_PTR_NULL(nb_mean_dims(x, DIMS(2, 0, -1), true));
    NBT_ASSERT_ERROR("mean_dims: dim -1 appears more than once");
    CU_ASSERT_PTR_NULL(nb_sum_dims(x, 0, (const int[]){0}, false));
    NBT_ASSERT_ERROR("sum_dims: expected at least one dim");
    CU_ASSERT_PTR_NULL(nb_mean_dims(x, 1, NULL, false));
    NBT_ASSERT_ERROR("mean_dims: ");
    NBT_ASSERT_ERROR("NULL");
    CU_ASSERT_PTR_NULL(nb_sum_dims(scalar(NB_F64, 1), DIMS(1), false));
    NBT_ASSERT_ERROR("sum_dims: dim 1 is out of range");
    /* max_dim: bad dim, empty dim, 0-d with a dim other than 0 / -1 */
    CU_ASSERT_PTR_NULL(nb_max_dim(x, 3, false, NULL));
    NBT_ASSERT_ERROR("max_dim: dim 3 is out of range");
    CU_ASSERT_PTR_NULL(nb_max_dim(x, -4, true, NULL));
    NBT_ASSERT_ERROR("max_dim: ");
    nb_tensor *idx = NULL;
    CU_ASSERT_PTR_NULL(nb_max_dim(nb_zeros(NB_F32, NB_SHAPE(2, 0)), 1, false, &idx));
    NBT_ASSERT_ERROR("max_dim: cannot take the max over dim 1 of size 0");
    NBT_ASSERT_ERROR("[2, 0]");
    CU_ASSERT_PTR_NULL(idx);
    CU_ASSERT_PTR_NULL(nb_max_dim(scalar(NB_F64, 1), 1, false, NULL));
    NBT_ASSERT_ERROR("max_dim: dim 1 is out of range");
}

/* ---- raw kernels other layers use ---- */
static void test_scatter_add(void) {
    nb_tensor *dst = nb_zeros(NB_F64, NB_SHAPE(2, 3));
    nb_tensor *index = nb_from_array(NB_I64, NB_SHAPE(2, 1), (const int64_t[]){2, 0});
    nb_tensor *src = nb_from_array(NB_F64, NB_SHAPE(2, 1), D(5, 7));
    CU_ASSERT_TRUE(nbt_scatter_add_dim(dst, 1, index, src));
    NBT_ASSERT_VALUES(dst, 0, 0, 0, 5, 7, 0, 0);
    /* repeated indices accumulate */
    nb_tensor *row = nb_zeros(NB_F64, NB_SHAPE(1, 3));
    CU_ASSERT_TRUE(
        nbt_scatter_add_dim(row, 1, nb_from_array(NB_I64, NB_SHAPE(1, 2), (const int64_t[]){1, 1}),
                            nb_from_array(NB_F64, NB_SHAPE(1, 2), D(1, 2))));
    NBT_ASSERT_VALUES(row, 0, 0, 3, 0);
    /* an out-of-range index writes nothing */
    nb_tensor *bad = nb_from_array(NB_I64, NB_SHAPE(2, 1), (const int64_t[]){1, 3});
    CU_ASSERT_FALSE(nbt_scatter_add_dim(dst, 1, bad, src));
    NBT_ASSERT_ERROR("scatter_add: index 3 is out of range");
    NBT_ASSERT_VALUES(dst, 0, 0, 0, 5, 7, 0, 0);
    nb_tensor *neg = nb_from_array(NB_I64, NB_SHAPE(2, 1), (const int64_t[]){-1, 0});
    CU_ASSERT_FALSE(nbt_scatter_add_dim(dst, 1, neg, src));
    CU_ASSERT_FALSE(nbt_scatter_add_dim(dst, 1, src, src));
    NBT_ASSERT_ERROR("int64 index");
    CU_ASSERT_FALSE(nbt_scatter_add_dim(dst, 2, index, src));
    NBT_ASSERT_ERROR("dim 2");
    CU_ASSERT_FALSE(nbt_scatter_add_dim(dst, 0, nb_zeros(NB_I64, NB_SHAPE(2, 4)),
                                        nb_zeros(NB_F64, NB_SHAPE(2, 4))));
    NBT_ASSERT_ERROR("larger than dst");
    /* the raw sum with a scale and keepdim */
    bool reduce[2] = {false, true};
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(2, 2), D(1, 2, 3, 4));
    nb_tensor *half = nbt_sum_dims(x, reduce, true, 0.5);
    NBT_ASSERT_SHAPE(half, 2, 1);
    NBT_ASSERT_VALUES(half, 0, 1.5, 3.5);
}

int main(void) {
    const nbtest_case cases[] = {
        {"sum and mean of everything", test_sum_mean_all},
        {"sum_dims and mean_dims values and shapes", test_sum_dims_values_and_shapes},
        {"non-contiguous inputs", test_non_contiguous_inputs},
        {"summation order is fixed", test_summation_order_is_fixed},
        {"column sums' lanes, by hand", test_column_sum_lanes},
        {"float32 accuracy", test_float32_accuracy},
        {"empty inputs", test_empty_inputs},
        {"max_dim values and indices", test_max_dim_values_and_indices},
        {"max_dim with NaN and inf", test_max_dim_nan_and_inf},
        {"max_dim backward", test_max_dim_backward},
        {"sum and mean backward", test_sum_mean_backward},
        {"errors", test_errors},
        {"scatter_add and raw sums", test_scatter_add},
    };
    return nbtest_run("reduce", cases, sizeof cases / sizeof cases[0]);
}
