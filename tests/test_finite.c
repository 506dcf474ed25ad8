/* nb_all_finite: NaN and both infinities found wherever they sit in a view, and nothing
 * else counted as non-finite (the largest finite values, subnormals, negative zero). */
#include "harness.h"

#include <float.h>

/* A [3, 5] tensor of dt holding ordinary values, with bad at flat index at (if at >= 0). */
static nb_tensor *grid(nb_dtype dt, int64_t at, double bad) {
    double v[15];
    for (int i = 0; i < 15; i++) v[i] = (i - 7) * 0.25;
    if (at >= 0) v[at] = bad;
    nb_tensor *t = nb_empty(dt, NB_SHAPE(3, 5));
    for (int64_t i = 0; i < 15; i++) nb_set(t, NB_IDX(i / 5, i % 5), v[i]);
    return t;
}

static void test_finds_every_non_finite_anywhere(void) {
    const nb_dtype dts[] = {NB_F32, NB_F64};
    const double bads[] = {NAN, INFINITY, -INFINITY, -NAN};
    for (int d = 0; d < 2; d++) {
        CU_ASSERT_TRUE(nb_all_finite(grid(dts[d], -1, 0)));
        for (int b = 0; b < 4; b++)
            for (int64_t at = 0; at < 15; at++) {
                nb_tensor *t = grid(dts[d], at, bads[b]);
                CU_ASSERT_FALSE(nb_all_finite(t));
                /* The same element seen through a transposed (non-contiguous) view. */
                CU_ASSERT_FALSE(nb_all_finite(nb_transpose(t, 0, 1)));
            }
    }
}

static void test_finite_extremes_are_finite(void) {
    const float f[] = {FLT_MAX, -FLT_MAX, FLT_MIN, FLT_TRUE_MIN, -0.0f, 0.0f};
    CU_ASSERT_TRUE(nb_all_finite(nb_from_array(NB_F32, NB_SHAPE(6), f)));
    const double d[] = {DBL_MAX, -DBL_MAX, DBL_MIN, DBL_TRUE_MIN, -0.0, 0.0};
    CU_ASSERT_TRUE(nb_all_finite(nb_from_array(NB_F64, NB_SHAPE(6), d)));
}

static void test_only_the_viewed_elements_count(void) {
    nb_tensor *t = grid(NB_F32, 2, NAN); /* row 0, column 2 */
    CU_ASSERT_TRUE(nb_all_finite(nb_narrow(t, 0, 1, 2)));
    CU_ASSERT_TRUE(nb_all_finite(nb_narrow(t, 1, 3, 2)));
    CU_ASSERT_FALSE(nb_all_finite(nb_narrow(t, 1, 2, 1)));
    CU_ASSERT_FALSE(nb_all_finite(nb_select(t, 0, 0)));
    CU_ASSERT_TRUE(nb_all_finite(nb_select(t, 0, 2)));
    /* An expanded (stride 0) view repeats one bad element. */
    nb_tensor *row = nb_select(t, 0, 0);
    CU_ASSERT_FALSE(nb_all_finite(nb_expand(row, NB_SHAPE(4, 5))));
    /* A 0-dim element. */
    CU_ASSERT_FALSE(nb_all_finite(nb_select(row, 0, 2)));
    CU_ASSERT_TRUE(nb_all_finite(nb_select(row, 0, 1)));
}

static void test_long_runs(void) {
    /* Long enough for any vector width and remainder: one NaN at each of a few places. */
    const int64_t n = 1000;
    const int64_t places[] = {0, 1, 7, 8, 15, 16, 31, 500, 998, 999};
    for (size_t k = 0; k < sizeof places / sizeof places[0]; k++) {
        nb_tensor *t = nb_zeros(NB_F32, NB_SHAPE(n));
        CU_ASSERT_TRUE(nb_all_finite(t));
        nb_set(t, NB_IDX(places[k]), NAN);
        CU_ASSERT_FALSE(nb_all_finite(t));
    }
}

static void test_other_dtypes_and_empty(void) {
    CU_ASSERT_TRUE(nb_all_finite(nb_full(NB_I64, NB_SHAPE(3), 7)));
    CU_ASSERT_TRUE(nb_all_finite(nb_full(NB_BOOL, NB_SHAPE(3), 1)));
    CU_ASSERT_TRUE(nb_all_finite(nb_zeros(NB_F32, NB_SHAPE(0, 4))));
    CU_ASSERT_TRUE(nb_all_finite(nb_zeros(NB_F64, NB_SHAPE(4, 0))));
}

static void test_null_is_an_error(void) {
    nb_clear_error();
    CU_ASSERT_FALSE(nb_all_finite(NULL));
    NBT_ASSERT_ERROR("all_finite");
}

int main(void) {
    const nbtest_case cases[] = {
        {"finds every non-finite anywhere", test_finds_every_non_finite_anywhere},
        {"finite extremes are finite", test_finite_extremes_are_finite},
        {"only the viewed elements count", test_only_the_viewed_elements_count},
        {"long runs", test_long_runs},
        {"other dtypes and empty", test_other_dtypes_and_empty},
        {"NULL is an error", test_null_is_an_error},
    };
    return nbtest_run("finite", cases, sizeof cases / sizeof cases[0]);
}
