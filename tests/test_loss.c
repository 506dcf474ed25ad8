/* cross_entropy and mse_loss: values and gradients by hand and from PyTorch, reductions,
 * ignore_index, and bad input. */
#include "harness.h"

static const nb_dtype dtypes[] = {NB_F32, NB_F64};
static double tol(nb_dtype dt) {
    return dt == NB_F32 ? 2e-6 : 1e-12;
}

static nb_tensor *values(nb_dtype dt, int ndim, const int64_t *shape, const double *v) {
    return nb_to_dtype(nb_from_array(NB_F64, ndim, shape, v), dt);
}
static nb_tensor *leaf(nb_dtype dt, int ndim, const int64_t *shape, const double *v) {
    return nb_requires_grad_(values(dt, ndim, shape, v), true);
}
/* A 0-d tensor, as a view of a one-element tensor. */
static nb_tensor *zero_d(nb_dtype dt, double v) {
    return nb_select(nb_full(dt, NB_SHAPE(1), v), 0, 0);
}
#define D(...) ((const double[]){__VA_ARGS__})
#define IDX64(...) ((const int64_t[]){__VA_ARGS__})
#define TARGET(ndim_shape, ...) nb_from_array(NB_I64, ndim_shape, IDX64(__VA_ARGS__))

/* By hand, logits [[1, 2, 3], [1, 1, 1]]:
 *   row 0, target 2: log(e + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2) = 0.4076059644443806
 *   row 1, target 0: log(3 e) - 1 = log 3 = 1.0986122886681098
 * and d loss_r / d logits_r = softmax(row) - onehot(target). */
#define L0 0.4076059644443806
#define L1 1.0986122886681098
#define SM0 0.09003057317038046
#define SM1 0.24472847105479764
#define SM2 0.66524095577481770

static nb_tensor *logits_2x3(nb_dtype dt) {
    return leaf(dt, NB_SHAPE(2, 3), D(1, 2, 3, 1, 1, 1));
}

static void test_cross_entropy_by_hand(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = logits_2x3(dt);
        nb_tensor *t = TARGET(NB_SHAPE(2), 2, 0);
        nb_tensor *mean = nb_cross_entropy(x, t, -100, NB_REDUCE_MEAN);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mean);
        CU_ASSERT_EQUAL(mean->ndim, 0);
        CU_ASSERT_DOUBLE_EQUAL(nb_item(mean), (L0 + L1) / 2, tol(dt));
        CU_ASSERT_TRUE(nb_backward(mean, NULL));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt), SM0 / 2, SM1 / 2, (SM2 - 1) / 2, (1.0 / 3 - 1) / 2,
                          1.0 / 6, 1.0 / 6);

        nb_tensor *xs = logits_2x3(dt);
        nb_tensor *sum = nb_cross_entropy(xs, t, -100, NB_REDUCE_SUM);
        CU_ASSERT_DOUBLE_EQUAL(nb_item(sum), L0 + L1, tol(dt));
        CU_ASSERT_TRUE(nb_backward(sum, NULL));
        NBT_ASSERT_VALUES(nb_grad(xs), tol(dt), SM0, SM1, SM2 - 1, 1.0 / 3 - 1, 1.0 / 3, 1.0 / 3);

        nb_tensor *xn = logits_2x3(dt);
        nb_tensor *none = nb_cross_entropy(xn, t, -100, NB_REDUCE_NONE);
        CU_ASSERT_TRUE(nb_same_shape(none, t));
        NBT_ASSERT_VALUES(none, tol(dt), L0, L1);
        /* Per-element weights 2 and -1. */
        CU_ASSERT_TRUE(nb_backward(none, values(dt, NB_SHAPE(2), D(2, -1))));
        NBT_ASSERT_VALUES(nb_grad(xn), tol(dt), 2 * SM0, 2 * SM1, 2 * (SM2 - 1), -(1.0 / 3 - 1),
                          -1.0 / 3, -1.0 / 3);
    }
}

static void test_large_logits_are_stable(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = values(dt, NB_SHAPE(1, 3), D(1001, 1002, 1003));
        nb_tensor *l = nb_cross_entropy(x, TARGET(NB_SHAPE(1), 2), -100, NB_REDUCE_MEAN);
        CU_ASSERT_DOUBLE_EQUAL(nb_item(l), L0, tol(dt));
    }
}

static void test_ignore_index(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *t = TARGET(NB_SHAPE(2), 2, -100);
        nb_tensor *x = logits_2x3(dt);
        nb_tensor *mean = nb_cross_entropy(x, t, -100, NB_REDUCE_MEAN);
        /* The mean divides by the one counted target. */
        CU_ASSERT_DOUBLE_EQUAL(nb_item(mean), L0, tol(dt));
        CU_ASSERT_TRUE(nb_backward(mean, NULL));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt), SM0, SM1, SM2 - 1, 0, 0, 0);

        nb_tensor *none = nb_cross_entropy(logits_2x3(dt), t, -100, NB_REDUCE_NONE);
        NBT_ASSERT_VALUES(none, tol(dt), L0, 0);
        /* An ignore_index inside [0, C) ignores that class. */
        nb_tensor *s =
            nb_cross_entropy(logits_2x3(dt), TARGET(NB_SHAPE(2), 2, 0), 0, NB_REDUCE_SUM);
        CU_ASSERT_DOUBLE_EQUAL(nb_item(s), L0, tol(dt));

        /* Every target ignored: 0 and a zero gradient (PyTorch gives NaN). */
        nb_tensor *xa = logits_2x3(dt);
        nb_tensor *all = nb_cross_entropy(xa, TARGET(NB_SHAPE(2), -1, -1), -1, NB_REDUCE_MEAN);
        CU_ASSERT_EQUAL(nb_item(all), 0.0);
        CU_ASSERT_TRUE(nb_backward(all, NULL));
        NBT_ASSERT_VALUES(nb_grad(xa), 0, 0, 0, 0, 0, 0, 0);
    }
}

/* PyTorch 1.13, float64: F.cross_entropy(x.reshape(6, 5), t.reshape(6), ignore_index=-100)
 * on logits [2, 3, 5] with targets [[4, 0, -100], [2, 2, 1]], then .backward(). Here the
 * logits are stored transposed to exercise a strided input. */
static void test_cross_entropy_against_torch(void) {
    static const double x_vals[] = {-1.6,  2.32,  -0.97, 3.86, -3.04, -1.02, 0.65,  -0.55,
                                    -0.34, 3.23,  -1.48, 1.09, 0.01,  0.36,  -0.72, -0.39,
                                    0.9,   -2.32, -0.16, 1.52, 0.08,  -1.65, -1.01, -0.6,
                                    0.54,  -0.98, 1.78,  1.11, -0.78, -1.96};
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = leaf(dt, NB_SHAPE(2, 3, 5), x_vals);
        nb_tensor *xs = nb_transpose(nb_contiguous(nb_transpose(x, 0, 2)), 0, 2);
        nb_tensor *t = TARGET(NB_SHAPE(2, 3), 4, 0, -100, 2, 2, 1);
        nb_tensor *l = nb_cross_entropy(xs, t, -100, NB_REDUCE_MEAN);
        CU_ASSERT_DOUBLE_EQUAL(nb_item(l), 3.7708362994341997, tol(dt) * 2);
        CU_ASSERT_TRUE(nb_backward(l, NULL));
        NBT_ASSERT_VALUES(
            nb_grad(x), tol(dt), 0.00069297090081962, 0.0349260416195653, 0.00130112949450125,
            0.1629156739427507, -0.1998358159576369, -0.19749973284862127, 0.01328183864590404,
            0.0040004129236981, 0.00493522165473375, 0.17528225962428534, 0.0, 0.0, 0.0, 0.0, 0.0,
            0.01563767682602709, 0.05680834213679847, -0.19773021938023308, 0.01968158020851167,
            0.10560262020889584, 0.05549094127099401, 0.00983767878190132, -0.18134303029338014,
            0.02811265377024655, 0.08790175647023823, 0.00755245026521819, -0.08067247193500507,
            0.06106091967692229, 0.009224583584805, 0.00283451840805958);
        nb_tensor *none = nb_cross_entropy(x, t, -100, NB_REDUCE_NONE);
        NBT_ASSERT_VALUES(none, tol(dt) * 4, 7.105084637381168, 4.381919779831567, 0.0,
                          4.478634182999461, 2.3720975794599877, 0.5164453174988165);
    }
}

static void test_cross_entropy_errors(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    CU_ASSERT_PTR_NULL(nb_cross_entropy(x, TARGET(NB_SHAPE(2), 3, 0), -100, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("cross_entropy: target 3 at position [0] is outside [0, 3)");
    CU_ASSERT_PTR_NULL(nb_cross_entropy(x, TARGET(NB_SHAPE(2), 0, -1), -100, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("target -1 at position [1] is outside [0, 3) and is not ignore_index -100");
    nb_tensor *x3 = nb_zeros(NB_F64, NB_SHAPE(2, 2, 4));
    CU_ASSERT_PTR_NULL(
        nb_cross_entropy(x3, TARGET(NB_SHAPE(2, 2), 0, 1, 2, 7), -100, NB_REDUCE_SUM));
    NBT_ASSERT_ERROR("target 7 at position [1, 1] is outside [0, 4)");

    CU_ASSERT_PTR_NULL(nb_cross_entropy(x, TARGET(NB_SHAPE(3), 0, 1, 2), -100, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("cross_entropy: target of shape [3] does not match logits of shape [2, 3] "
                     "(expected [2])");
    CU_ASSERT_PTR_NULL(nb_cross_entropy(x, TARGET(NB_SHAPE(2, 1), 0, 1), -100, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("target of shape [2, 1] does not match logits of shape [2, 3]");
    CU_ASSERT_PTR_NULL(nb_cross_entropy(x, nb_zeros(NB_F32, NB_SHAPE(2)), -100, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("cross_entropy: target must hold int64 class indices, got float32");
    CU_ASSERT_PTR_NULL(nb_cross_entropy(nb_zeros(NB_I64, NB_SHAPE(2, 3)), TARGET(NB_SHAPE(2), 0, 1),
                                        -100, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("cross_entropy: expected a float32 or float64 tensor, got int64");
    CU_ASSERT_PTR_NULL(nb_cross_entropy(x, TARGET(NB_SHAPE(2), 0, 1), -100, (nb_reduction)7));
    NBT_ASSERT_ERROR("cross_entropy: unknown reduction 7");
    CU_ASSERT_PTR_NULL(
        nb_cross_entropy(zero_d(NB_F32, 1), TARGET(NB_SHAPE(1), 0), -100, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("cross_entropy: logits must have a class dim");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_cross_entropy(x, NULL, -100, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("cross_entropy: input 1 is NULL");
}

static void test_mse_by_hand(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        /* a - b = [-0.5, 0, -2], squares [0.25, 0, 4]: sum 4.25, mean 4.25 / 3. */
        nb_tensor *a = leaf(dt, NB_SHAPE(3), D(1, 2, 3));
        nb_tensor *b = leaf(dt, NB_SHAPE(3), D(1.5, 2, 5));
        nb_tensor *mean = nb_mse_loss(a, b, NB_REDUCE_MEAN);
        CU_ASSERT_DOUBLE_EQUAL(nb_item(mean), 4.25 / 3, tol(dt));
        CU_ASSERT_TRUE(nb_backward(mean, NULL));
        /* d/da = 2 (a - b) / 3, d/db = -d/da. */
        NBT_ASSERT_VALUES(nb_grad(a), tol(dt), -1.0 / 3, 0, -4.0 / 3);
        NBT_ASSERT_VALUES(nb_grad(b), tol(dt), 1.0 / 3, 0, 4.0 / 3);

        CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_mse_loss(a, b, NB_REDUCE_SUM)), 4.25, tol(dt));
        NBT_ASSERT_VALUES(nb_mse_loss(a, b, NB_REDUCE_NONE), tol(dt), 0.25, 0, 4);

        /* b [2] broadcast over a [2, 2] = [[1, 2], [3, 4]]: a - b = [[0, 1], [2, 3]]. */
        nb_tensor *a2 = leaf(dt, NB_SHAPE(2, 2), D(1, 2, 3, 4));
        nb_tensor *b2 = leaf(dt, NB_SHAPE(2), D(1, 1));
        nb_tensor *s = nb_mse_loss(a2, b2, NB_REDUCE_SUM);
        CU_ASSERT_DOUBLE_EQUAL(nb_item(s), 14, tol(dt));
        CU_ASSERT_TRUE(nb_backward(s, NULL));
        NBT_ASSERT_VALUES(nb_grad(a2), tol(dt), 0, 2, 4, 6);
        /* d/db sums -2 (a - b) over the broadcast rows: [-2 (0 + 2), -2 (1 + 3)]. */
        NBT_ASSERT_VALUES(nb_grad(b2), tol(dt), -4, -8);

        /* A transposed a against a scalar-like [1] target. */
        nb_tensor *at = nb_transpose(values(dt, NB_SHAPE(2, 2), D(1, 2, 3, 4)), 0, 1);
        NBT_ASSERT_VALUES(nb_mse_loss(at, values(dt, NB_SHAPE(1), D(2)), NB_REDUCE_NONE), tol(dt),
                          1, 1, 0, 4);
    }
}

static void test_mse_errors(void) {
    nb_tensor *a = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    CU_ASSERT_PTR_NULL(nb_mse_loss(a, nb_zeros(NB_F32, NB_SHAPE(2)), NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR(
        "mse_loss: target of shape [2] does not broadcast to the input's shape [2, 3]");
    /* b broadcasts to a, not the other way round. */
    CU_ASSERT_PTR_NULL(nb_mse_loss(nb_zeros(NB_F32, NB_SHAPE(3)), a, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR(
        "mse_loss: target of shape [2, 3] does not broadcast to the input's shape [3]");
    CU_ASSERT_PTR_NULL(nb_mse_loss(a, nb_zeros(NB_F64, NB_SHAPE(2, 3)), NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("mse_loss: dtype mismatch: [2, 3] float32 and [2, 3] float64");
    CU_ASSERT_PTR_NULL(nb_mse_loss(a, a, (nb_reduction)-1));
    NBT_ASSERT_ERROR("mse_loss: unknown reduction -1");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_mse_loss(NULL, a, NB_REDUCE_MEAN));
    NBT_ASSERT_ERROR("mse_loss: input 0 is NULL");
}

int main(void) {
    const nbtest_case cases[] = {
        {"cross_entropy on 2x3 logits by hand: mean, sum, none", test_cross_entropy_by_hand},
        {"cross_entropy of large logits is stable", test_large_logits_are_stable},
        {"cross_entropy ignore_index, all ignored gives 0", test_ignore_index},
        {"cross_entropy against PyTorch", test_cross_entropy_against_torch},
        {"cross_entropy bad input", test_cross_entropy_errors},
        {"mse_loss by hand, with broadcasting", test_mse_by_hand},
        {"mse_loss bad input", test_mse_errors},
    };
    return nbtest_run("loss", cases, sizeof cases / sizeof cases[0]);
}
