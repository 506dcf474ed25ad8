/* softmax, log_softmax, masked_fill and masked_softmax: values by hand and from PyTorch,
 * gradients, fully blocked rows, and bad input. */
#include "harness.h"

#include <stdio.h>

static const nb_dtype dtypes[] = {NB_F32, NB_F64};
static double tol(nb_dtype dt) {
    return dt == NB_F32 ? 2e-6 : 1e-12;
}

/* A leaf of dtype dt holding the given doubles (row-major). */
static nb_tensor *leaf(nb_dtype dt, int ndim, const int64_t *shape, const double *v) {
    nb_tensor *t = nb_to_dtype(nb_from_array(NB_F64, ndim, shape, v), dt);
    return nb_requires_grad_(t, true);
}
static nb_tensor *values(nb_dtype dt, int ndim, const int64_t *shape, const double *v) {
    return nb_to_dtype(nb_from_array(NB_F64, ndim, shape, v), dt);
}
/* A 0-d tensor, as a view of a one-element tensor. */
static nb_tensor *zero_d(nb_dtype dt, double v) {
    return nb_select(nb_full(dt, NB_SHAPE(1), v), 0, 0);
}
#define D(...) ((const double[]){__VA_ARGS__})
#define U8(...) ((const uint8_t[]){__VA_ARGS__})

/* True when t holds no NaN. */
static bool no_nan(const nb_tensor *t) {
    double v[256];
    if (!t || nb_numel(t) > 256 || !nb_to_doubles(t, v)) return false;
    for (int64_t k = 0; k < nb_numel(t); k++)
        if (isnan(v[k])) return false;
    return true;
}

/* By hand: softmax([1, 2, 3]) = [1, e, e^2] / (1 + e + e^2). */
#define SM0 0.09003057317038046
#define SM1 0.24472847105479764
#define SM2 0.66524095577481770
/* log(1 + e + e^2), so log_softmax([1, 2, 3]) = [0, 1, 2] - LSE_012. */
#define LSE_012 2.4076059644443806

static void test_rows_sum_to_one(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = nb_uniform(&rng, dt, NB_SHAPE(5, 7), -6, 6);
        for (int dim = 0; dim < 2; dim++) {
            nb_tensor *y = nb_softmax(x, dim);
            CU_ASSERT_PTR_NOT_NULL_FATAL(y);
            CU_ASSERT_EQUAL(y->ndim, 2);
            CU_ASSERT(nb_is_contiguous(y));
            int64_t rows = dim == 0 ? 7 : 5, len = dim == 0 ? 5 : 7;
            for (int64_t r = 0; r < rows; r++) {
                double sum = 0;
                for (int64_t j = 0; j < len; j++) {
                    double v = nb_get(y, dim == 0 ? NB_IDX(j, r) : NB_IDX(r, j));
                    CU_ASSERT(v > 0 && v < 1);
                    sum += v;
                }
                CU_ASSERT_DOUBLE_EQUAL(sum, 1.0, dt == NB_F32 ? 1e-6 : 1e-14);
            }
        }
    }
}

static void test_three_elements_by_hand(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = leaf(dt, NB_SHAPE(3), D(1, 2, 3));
        nb_tensor *y = nb_softmax(x, 0);
        NBT_ASSERT_VALUES(y, tol(dt), SM0, SM1, SM2);
        /* d softmax / dx with g = e_0: y * (g - y_0) = [y0 (1 - y0), -y1 y0, -y2 y0]. */
        CU_ASSERT_TRUE(nb_backward(y, values(dt, NB_SHAPE(3), D(1, 0, 0))));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt), SM0 * (1 - SM0), -SM1 * SM0, -SM2 * SM0);

        nb_tensor *z = leaf(dt, NB_SHAPE(3), D(1, 2, 3));
        nb_tensor *ly = nb_log_softmax(z, -1);
        NBT_ASSERT_VALUES(ly, tol(dt), -LSE_012, 1 - LSE_012, 2 - LSE_012);
        /* d log_softmax / dx with g = e_2: g - softmax * sum(g) = [-y0, -y1, 1 - y2]. */
        CU_ASSERT_TRUE(nb_backward(ly, values(dt, NB_SHAPE(3), D(0, 0, 1))));
        NBT_ASSERT_VALUES(nb_grad(z), tol(dt), -SM0, -SM1, 1 - SM2);
    }
}

static void test_large_logits_are_stable(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        /* Without the max subtraction exp(1000) overflows. */
        nb_tensor *x = values(dt, NB_SHAPE(2, 3), D(1000, 1001, 1002, -1000, -1001, -1002));
        NBT_ASSERT_VALUES(nb_softmax(x, 1), tol(dt), SM0, SM1, SM2, SM2, SM1, SM0);
        NBT_ASSERT_VALUES(nb_log_softmax(x, 1), tol(dt) * 4, -LSE_012, 1 - LSE_012, 2 - LSE_012,
                          2 - LSE_012, 1 - LSE_012, -LSE_012);
    }
}

/* Softmax over dim 0 of a transposed input is the transpose of softmax over dim 1. */
static void test_any_dim_and_layout(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = values(dt, NB_SHAPE(2, 3), D(1, 2, 3, 3, 2, 1));
        nb_tensor *xt = nb_transpose(x, 0, 1); /* [3, 2], strided */
        NBT_ASSERT_VALUES(nb_softmax(xt, 0), tol(dt), SM0, SM2, SM1, SM1, SM2, SM0);
        NBT_ASSERT_VALUES(nb_softmax(xt, -2), tol(dt), SM0, SM2, SM1, SM1, SM2, SM0);
        NBT_ASSERT_VALUES(nb_log_softmax(xt, 0), tol(dt) * 4, -LSE_012, 2 - LSE_012, 1 - LSE_012,
                          1 - LSE_012, 2 - LSE_012, -LSE_012);
        /* A middle dim of a 3-d tensor. */
        nb_tensor *c = values(dt, NB_SHAPE(1, 3, 2), D(1, 3, 2, 2, 3, 1));
        NBT_ASSERT_VALUES(nb_softmax(c, 1), tol(dt), SM0, SM2, SM1, SM1, SM2, SM0);
    }
}

/* PyTorch 1.13: x.log_softmax(0).backward(g) on a [3, 4] float64 x. */
static void test_log_softmax_dim0_against_torch(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x =
            leaf(dt, NB_SHAPE(3, 4),
                 D(0.2, 1.53, -0.67, 0.68, -1.46, 1.07, -1.14, -0.97, -0.97, -0.24, -2.67, 1.27));
        nb_tensor *g =
            values(dt, NB_SHAPE(3, 4),
                   D(0.37, -0.2, -0.27, -0.89, 0.41, 0.85, -1.01, -1.81, 2.02, 3.57, -0.85, -1.73));
        nb_tensor *y = nb_log_softmax(x, 0);
        NBT_ASSERT_VALUES(y, tol(dt) * 2, -0.40580233215308115, -0.5886843920091616,
                          -0.5655055812965613, -1.097290857301668, -2.065802332153081,
                          -1.0486843920091615, -1.0355055812965612, -2.7472908573016683,
                          -1.575802332153081, -2.3586843920091614, -2.565505581296561,
                          -0.5072908573016679);
        CU_ASSERT_TRUE(nb_backward(y, g));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt) * 4, -1.4960372879096115, -2.5423407175433286,
                          0.9399952069770016, 0.5886192701493896, 0.05519357324545906,
                          -0.6286813871900616, -0.2537502510281781, -1.5260313042829237,
                          1.4408437146641526, 3.17102210473339, -0.6862449559488236,
                          0.9374120341335338);
    }
}

static void test_masked_fill(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = leaf(dt, NB_SHAPE(2, 3), D(1, 2, 3, 4, 5, 6));
        nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(3), U8(0, 1, 0)); /* broadcast */
        nb_tensor *y = nb_masked_fill(x, mask, 9.5);
        NBT_ASSERT_VALUES(y, 0, 1, 9.5, 3, 4, 9.5, 6);
        CU_ASSERT_TRUE(nb_backward(y, values(dt, NB_SHAPE(2, 3), D(1, 2, 3, 4, 5, 6))));
        NBT_ASSERT_VALUES(nb_grad(x), 0, 1, 0, 3, 4, 0, 6); /* zero where filled */
    }
}

/* softmax([1, x, 3]) with the middle blocked: [1, e^2] / (1 + e^2) at the ends, 0 between. */
#define SIG_M2 0.11920292202211755 /* 1 / (1 + e^2) */
#define SIG_P2 0.88079707797788245 /* e^2 / (1 + e^2) */
#define S_M1 0.2689414213699951    /* 1 / (1 + e) */
#define S_P1 0.7310585786300049    /* e / (1 + e) */

static void test_minus_inf_masking(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(3), U8(0, 1, 0));
        nb_tensor *x = leaf(dt, NB_SHAPE(3), D(1, 2, 3));
        nb_tensor *y = nb_softmax(nb_masked_fill(x, mask, -INFINITY), 0);
        NBT_ASSERT_VALUES(y, tol(dt), SIG_M2, 0, SIG_P2);
        CU_ASSERT_TRUE(nb_backward(y, values(dt, NB_SHAPE(3), D(1, 1, 0))));
        /* g = [1, 1, 0]: dx = y * (g - y0) at the ends, 0 in the middle. */
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt), SIG_M2 * (1 - SIG_M2), 0, -SIG_P2 * SIG_M2);

        nb_tensor *x2 = leaf(dt, NB_SHAPE(3), D(1, 2, 3));
        nb_tensor *y2 = nb_masked_softmax(x2, mask, false, 1.0);
        NBT_ASSERT_VALUES(y2, tol(dt), SIG_M2, 0, SIG_P2);
        CU_ASSERT_TRUE(nb_backward(y2, values(dt, NB_SHAPE(3), D(1, 1, 0))));
        NBT_ASSERT_VALUES(nb_grad(x2), tol(dt), SIG_M2 * (1 - SIG_M2), 0, -SIG_P2 * SIG_M2);
    }
}

static void test_causal_pattern(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        /* Equal scores: query i spreads evenly over keys 0..i. */
        nb_tensor *y = nb_masked_softmax(nb_zeros(dt, NB_SHAPE(3, 3)), NULL, true, 1.0);
        NBT_ASSERT_VALUES(y, tol(dt), 1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3);
        /* Scores 0..8: row 1 sees [3, 4] = softmax([0, 1]), row 2 sees [6, 7, 8]. */
        nb_tensor *x = values(dt, NB_SHAPE(3, 3), D(0, 1, 2, 3, 4, 5, 6, 7, 8));
        NBT_ASSERT_VALUES(nb_masked_softmax(x, NULL, true, 1.0), tol(dt), 1, 0, 0, S_M1, S_P1, 0,
                          SM0, SM1, SM2);
        /* Batched [2, 3, 3]: the rule uses the row index within the second-to-last dim. */
        nb_tensor *b = nb_masked_softmax(nb_zeros(dt, NB_SHAPE(2, 3, 3)), NULL, true, 1.0);
        CU_ASSERT_DOUBLE_EQUAL(nb_get(b, NB_IDX(1, 0, 0)), 1.0, tol(dt));
        CU_ASSERT_DOUBLE_EQUAL(nb_get(b, NB_IDX(1, 0, 1)), 0.0, 0);
        CU_ASSERT_DOUBLE_EQUAL(nb_get(b, NB_IDX(1, 1, 1)), 0.5, tol(dt));
        CU_ASSERT_DOUBLE_EQUAL(nb_get(b, NB_IDX(1, 2, 2)), 1.0 / 3, tol(dt));
    }
}

static void test_fully_blocked_row(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        /* Row 0 all blocked; row 1 free. */
        nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(2, 3), U8(1, 1, 1, 0, 0, 0));
        nb_tensor *x = leaf(dt, NB_SHAPE(2, 3), D(5, -2, 7, 1, 2, 3));
        nb_tensor *y = nb_masked_softmax(x, mask, false, 1.0);
        NBT_ASSERT_VALUES(y, tol(dt), 0, 0, 0, SM0, SM1, SM2);
        CU_ASSERT_TRUE(nb_backward(y, values(dt, NB_SHAPE(2, 3), D(3, -1, 2, 1, 0, 0))));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt), 0, 0, 0, SM0 * (1 - SM0), -SM1 * SM0, -SM2 * SM0);
        CU_ASSERT(no_nan(y) && no_nan(nb_grad(x)));

        /* Causal plus a mask that blocks key 0: query 0 has nothing left. */
        nb_tensor *m0 = nb_from_array(NB_BOOL, NB_SHAPE(3), U8(1, 0, 0));
        nb_tensor *x2 =
            leaf(dt, NB_SHAPE(2, 3, 3), D(1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9));
        nb_tensor *y2 = nb_masked_softmax(x2, m0, true, 1.0);
        /* Query 1 sees key 1 only; query 2 sees keys 1, 2: softmax([8, 9]) = [s(-1), s(1)]. */
        NBT_ASSERT_VALUES(y2, tol(dt), 0, 0, 0, 0, 1, 0, 0, S_M1, S_P1, 0, 0, 0, 0, 1, 0, 0, S_M1,
                          S_P1);
        /* With g = x2: query 1 gets y (g - g_1) = 0, query 2 gets [0, -s(1)s(-1), s(1)s(-1)]. */
        CU_ASSERT_TRUE(nb_backward(y2, nb_detach(x2)));
        NBT_ASSERT_VALUES(nb_grad(x2), tol(dt) * 10, 0, 0, 0, 0, 0, 0, 0, -S_M1 * S_P1, S_M1 * S_P1,
                          0, 0, 0, 0, 0, 0, 0, -S_M1 * S_P1, S_M1 * S_P1);
        CU_ASSERT(no_nan(y2) && no_nan(nb_grad(x2)));

        /* Every entry blocked, and an all -inf row: zeros, not NaN. */
        nb_tensor *all = nb_from_array(NB_BOOL, NB_SHAPE(1), U8(1));
        nb_tensor *y3 = nb_masked_softmax(nb_ones(dt, NB_SHAPE(2, 4)), all, false, 1.0);
        NBT_ASSERT_VALUES(y3, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        nb_tensor *inf = nb_full(dt, NB_SHAPE(2), -INFINITY);
        NBT_ASSERT_VALUES(nb_masked_softmax(inf, NULL, false, 1.0), 0, 0, 0);
        /* NaN is never mistaken for a blocked row. */
        nb_tensor *nan_rows = values(dt, NB_SHAPE(2, 2), D(NAN, NAN, 1, NAN));
        NBT_ASSERT_VALUES(nb_masked_softmax(nan_rows, NULL, false, 1.0), 0, NBT_NAN, NBT_NAN, NBT_NAN, NBT_NAN);
        /* Plain softmax keeps PyTorch's NaN for an all -inf row. */
        CU_ASSERT(!no_nan(nb_softmax(inf, 0)));
    }
}

static void test_scale(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        /* softmax(0.5 * [2, 4, 6]) = softmax([1, 2, 3]); dx = 0.5 y (g - sum(g y)). */
        nb_tensor *x = leaf(dt, NB_SHAPE(3), D(2, 4, 6));
        nb_tensor *y = nb_masked_softmax(x, NULL, false, 0.5);
        NBT_ASSERT_VALUES(y, tol(dt), SM0, SM1, SM2);
        CU_ASSERT_TRUE(nb_backward(y, values(dt, NB_SHAPE(3), D(1, 0, 0))));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt), 0.5 * SM0 * (1 - SM0), -0.5 * SM1 * SM0,
                          -0.5 * SM2 * SM0);
    }
}

/* PyTorch 1.13, float64: scores x [2, 3, 4], padding mask [2, 1, 4], causal, scale 0.5:
 *   y = softmax((x * 0.5).masked_fill(mask | ones(3, 4).triu(1), -inf), -1); y.backward(g) */
static void test_attention_against_torch(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x =
            leaf(dt, NB_SHAPE(2, 3, 4),
                 D(-3.47, -0.56, -1.59, 1.5, -1.33, -1.91, -0.93, -1.3, 0.36, 1.1, -1.98, 1.97,
                   -2.23, -1.07, 0.78, -1.43, 1.01, 1.57, 0.23, -1.12, -1.09, 0.13, -2.62, 1.56));
        nb_tensor *g =
            values(dt, NB_SHAPE(2, 3, 4),
                   D(1.2, 0.32, 0.2, -0.05, 0.69, 1.68, 0.55, -0.28, -1.69, -0.14, 1.5, -0.12, 0.27,
                     1.43, -2.64, 1.52, 1.12, -0.84, 0.11, 2.99, 0.67, 2.33, 0.08, 2.21));
        nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(2, 1, 4), U8(0, 0, 0, 1, 0, 0, 1, 0));
        /* Also through a non-contiguous input: the same scores, stored transposed. */
        nb_tensor *xt = nb_transpose(nb_contiguous(nb_transpose(x, 1, 2)), 1, 2);
        for (int layout = 0; layout < 2; layout++) {
            nb_zero_grad(x);
            nb_tensor *y = nb_masked_softmax(layout ? xt : x, mask, true, 0.5);
            NBT_ASSERT_VALUES(y, tol(dt), 1.0, 0.0, 0.0, 0.0, 0.5719961329315186,
                              0.42800386706848137, 0.0, 0.0, 0.3625682302562072, 0.5249025771191337,
                              0.11252919262465912, 0.0, 1.0, 0.0, 0.0, 0.0, 0.430453776060771,
                              0.569546223939229, 0.0, 0.0, 0.35205919791934975, 0.6479408020806503,
                              0.0, 0.0);
            CU_ASSERT_TRUE(nb_backward(y, g));
            NBT_ASSERT_VALUES(nb_grad(x), tol(dt) * 2, 0.0, 0.0, 0.0, 0.0, -0.12118419563723905,
                              0.12118419563723899, 0.0, 0.0, -0.21256779259755174,
                              0.09905774596127855, 0.11351004663627313, 0.0, 0.0, 0.0, 0.0, 0.0,
                              0.24026005628107872, -0.24026005628107874, 0.0, 0.0,
                              -0.1893342208361791, 0.18933422083617912, 0.0, 0.0);
        }
    }
}

static void test_bad_input(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    CU_ASSERT_PTR_NULL(nb_softmax(x, 2));
    NBT_ASSERT_ERROR("softmax: dim 2 is out of range for a tensor of shape [2, 3]");
    CU_ASSERT_PTR_NULL(nb_log_softmax(x, -3));
    NBT_ASSERT_ERROR("log_softmax: dim -3");
    CU_ASSERT_PTR_NULL(nb_softmax(nb_zeros(NB_I64, NB_SHAPE(3)), 0));
    NBT_ASSERT_ERROR("softmax: expected a float32 or float64 tensor, got int64");
    CU_ASSERT_PTR_NULL(nb_softmax(zero_d(NB_F32, 1), 0));
    NBT_ASSERT_ERROR("softmax: expected a tensor with at least 1 dim");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_softmax(NULL, 0));
    NBT_ASSERT_ERROR("softmax: input 0 is NULL");

    nb_tensor *mask23 = nb_zeros(NB_BOOL, NB_SHAPE(2, 3));
    CU_ASSERT_PTR_NULL(nb_masked_fill(x, nb_zeros(NB_F32, NB_SHAPE(2, 3)), 0));
    NBT_ASSERT_ERROR("masked_fill: mask must be bool, got float32 of shape [2, 3]");
    CU_ASSERT_PTR_NULL(nb_masked_fill(x, nb_zeros(NB_BOOL, NB_SHAPE(2)), 0));
    NBT_ASSERT_ERROR(
        "masked_fill: mask of shape [2] does not broadcast to the input's shape [2, 3]");
    /* The mask broadcasts to the input, never the input to the mask. */
    CU_ASSERT_PTR_NULL(nb_masked_fill(nb_zeros(NB_F32, NB_SHAPE(3)), mask23, 0));
    NBT_ASSERT_ERROR("mask of shape [2, 3] does not broadcast to the input's shape [3]");
    CU_ASSERT_PTR_NULL(nb_masked_fill(nb_zeros(NB_I64, NB_SHAPE(2, 3)), mask23, 0));
    NBT_ASSERT_ERROR("masked_fill: expected a float32 or float64 tensor");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_masked_fill(x, NULL, 0));
    NBT_ASSERT_ERROR("masked_fill: input 1 is NULL");

    CU_ASSERT_PTR_NULL(nb_masked_softmax(x, nb_zeros(NB_BOOL, NB_SHAPE(3, 3)), false, 1));
    NBT_ASSERT_ERROR("masked_softmax: mask of shape [3, 3] does not broadcast to the input's "
                     "shape [2, 3]");
    CU_ASSERT_PTR_NULL(nb_masked_softmax(x, nb_zeros(NB_I64, NB_SHAPE(3)), false, 1));
    NBT_ASSERT_ERROR("masked_softmax: mask must be bool, got int64");
    CU_ASSERT_PTR_NULL(nb_masked_softmax(nb_zeros(NB_F64, NB_SHAPE(4)), NULL, true, 1));
    NBT_ASSERT_ERROR("masked_softmax: causal masking needs a [..., queries, keys] tensor, got "
                     "shape [4]");
    CU_ASSERT_PTR_NULL(nb_masked_softmax(nb_zeros(NB_BOOL, NB_SHAPE(4)), NULL, false, 1));
    NBT_ASSERT_ERROR("masked_softmax: expected a float32 or float64 tensor, got bool");
}

int main(void) {
    const nbtest_case cases[] = {
        {"softmax rows sum to 1 (f32, f64, dim 0 and 1)", test_rows_sum_to_one},
        {"softmax and log_softmax of [1, 2, 3] by hand, with gradients",
         test_three_elements_by_hand},
        {"large logits do not overflow", test_large_logits_are_stable},
        {"softmax over any dim and layout", test_any_dim_and_layout},
        {"log_softmax over dim 0 against PyTorch", test_log_softmax_dim0_against_torch},
        {"masked_fill values and gradient", test_masked_fill},
        {"-inf masking: masked_fill + softmax and masked_softmax", test_minus_inf_masking},
        {"causal pattern on 3x3", test_causal_pattern},
        {"a fully blocked row gives zeros and zero gradient, no NaN", test_fully_blocked_row},
        {"masked_softmax scale", test_scale},
        {"masked causal attention against PyTorch", test_attention_against_torch},
        {"bad input is an error naming op and shapes", test_bad_input},
    };
    return nbtest_run("softmax", cases, sizeof cases / sizeof cases[0]);
}
