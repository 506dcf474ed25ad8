/* First light: creation, a view chain, backward through it, gradcheck. Values by hand. */
#include "harness.h"

static void test_view_chain_values(void) {
    nb_tensor *x = nb_arange(NB_F64, 0, 6, 1);
    nb_tensor *m = nb_transpose(nb_view(x, NB_SHAPE(2, 3)), 0, 1); /* [[0,3],[1,4],[2,5]] */
    CU_ASSERT_EQUAL(m->strides[0], 1);
    CU_ASSERT_EQUAL(m->strides[1], 3);
    NBT_ASSERT_VALUES(m, 0, 0, 3, 1, 4, 2, 5);
    CU_ASSERT_PTR_NULL(nb_view(m, NB_SHAPE(6)));
    NBT_ASSERT_ERROR("contiguous()");
}

static void test_backward_through_views(void) {
    nb_tensor *x = nb_requires_grad_(nb_arange(NB_F64, 0, 6, 1), true);
    nb_tensor *m = nb_transpose(nb_view(x, NB_SHAPE(2, 3)), 0, 1);
    nb_tensor *row = nb_select(m, 0, 1); /* elements 1 and 4 of x */
    nb_tensor *g = nb_from_array(NB_F64, NB_SHAPE(2), (double[]){10, 20});
    CU_ASSERT_TRUE(nb_backward(row, g));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 10, 0, 0, 20, 0);
}

static nb_tensor *narrow_fn(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_narrow(nb_transpose(in[0], 0, 1), 0, 1, 2);
}

static void test_gradcheck_runs(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 3);
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(2, 4)), true);
    nb_gradcheck_result res;
    CU_ASSERT_TRUE(nb_gradcheck(narrow_fn, 1, &x, NULL, NULL, &res));
    CU_ASSERT_EQUAL(res.checked, 8);
}

/* An op with a deliberately wrong backward (gradient doubled): gradcheck must catch it. */
#include "autograd/node.h"
static void wrong_backward(nb_node *n, const nb_tensor *gout) {
    nb_tensor *g = nb_clone(gout);
    nba_add_into(g, gout);
    nba_accumulate(n, 0, g);
}
static nb_tensor *wrong_fn(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *out = nb_clone(in[0]);
    nba_record("wrong", out, 1, (const nb_tensor *const *)in, wrong_backward);
    return out;
}

static void test_gradcheck_catches_wrong_backward(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 4);
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(3)), true);
    nb_gradcheck_result res;
    CU_ASSERT_FALSE(nb_gradcheck(wrong_fn, 1, &x, NULL, NULL, &res));
    CU_ASSERT_FALSE(res.ok);
    CU_ASSERT_DOUBLE_EQUAL(res.analytic, 2 * res.numeric, 1e-6);
    CU_ASSERT_PTR_NOT_NULL(strstr(res.message, "FAILED"));
}

/* The harness itself: NaN equals nothing, NaN included, unless the expected value is NBT_NAN. */
static void test_harness_nan_equals_nothing(void) {
    nb_tensor *nan2 = nb_full(NB_F64, NB_SHAPE(2), NAN), *one = nb_ones(NB_F64, NB_SHAPE(2));
    CU_ASSERT_FALSE(nbtest_close(nan2, nan2, 1, 1));
    CU_ASSERT_FALSE(nbtest_close(nan2, one, 1, 1));
    CU_ASSERT_FALSE(nbtest_close(one, nan2, 1, 1));
    CU_ASSERT_FALSE(nbtest_values(nan2, (const double[]){NAN, NAN}, 2, 1));
    CU_ASSERT_FALSE(nbtest_values(one, (const double[]){NBT_NAN, 1}, 2, 1));
    CU_ASSERT_FALSE(nbtest_values(nan2, (const double[]){NBT_NAN, 1}, 2, 1));
    CU_ASSERT_TRUE(nbtest_values(nan2, (const double[]){NBT_NAN, NBT_NAN}, 2, 0));
    CU_ASSERT_TRUE(nbtest_is_expected_nan(NBT_NAN));
    CU_ASSERT_FALSE(nbtest_is_expected_nan(NAN));
    CU_ASSERT_FALSE(nbtest_is_expected_nan(0.0 / nb_item(nb_zeros(NB_F64, NB_SHAPE(1)))));
    nb_tensor *inf = nb_full(NB_F32, NB_SHAPE(1), INFINITY);
    CU_ASSERT_TRUE(nbtest_close(inf, nb_full(NB_F64, NB_SHAPE(1), INFINITY), 0, 0));
    CU_ASSERT_FALSE(nbtest_close(inf, nb_full(NB_F64, NB_SHAPE(1), -INFINITY), 1, 1));
    CU_ASSERT_FALSE(nbtest_close(nb_ones(NB_F64, NB_SHAPE(1)), inf, 1, 1));
    CU_ASSERT_FALSE(nbtest_values(inf, (const double[]){1}, 1, INFINITY));
}

int main(void) {
    const nbtest_case cases[] = {
        {"the harness: NaN equals nothing unless NBT_NAN asks for it",
         test_harness_nan_equals_nothing},
        {"view chain values", test_view_chain_values},
        {"backward through views", test_backward_through_views},
        {"gradcheck runs", test_gradcheck_runs},
        {"gradcheck catches a wrong backward", test_gradcheck_catches_wrong_backward},
    };
    return nbtest_run("smoke", cases, sizeof cases / sizeof cases[0]);
}
