/* The index and selection ops beyond their catalogue entries and PyTorch goldens: every bad
 * index (out of range, wrong dtype, wrong shape) and bad operand is an error naming the op and
 * the shapes; index_add's sums over repeated indices are bitwise the same for 1 and 2
 * threads, equal to a plain loop adding in index order; topk picks equal values and NaNs as
 * PyTorch does (expected indices recorded from torch 1.13's CPU topk). */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define I64(...) ((const int64_t[]){__VA_ARGS__})

static void test_where_errors(void) {
    nb_tensor *a = nb_zeros(NB_F32, NB_SHAPE(3, 4)), *b = nb_zeros(NB_F32, NB_SHAPE(4));
    nb_tensor *cond = nb_full(NB_BOOL, NB_SHAPE(3, 4), 1);
    EXPECT_NULL(nb_where(nb_zeros(NB_F32, NB_SHAPE(3, 4)), a, b), "where: ", "bool", "float32",
                "[3, 4]");
    EXPECT_NULL(nb_where(nb_zeros(NB_I64, NB_SHAPE(3, 4)), a, b), "where: ", "int64");
    EXPECT_NULL(nb_where(cond, a, nb_zeros(NB_F64, NB_SHAPE(4))), "where: ", "float64", "float32");
    EXPECT_NULL(nb_where(cond, a, nb_zeros(NB_F32, NB_SHAPE(5))), "where: ", "[3, 4]", "[5]");
    EXPECT_NULL(nb_where(nb_full(NB_BOOL, NB_SHAPE(2, 1), 1), a, b), "where: ", "[2, 1]", "[3, 4]");
    EXPECT_NULL(nb_where(NULL, a, b), "where: ", "NULL");
    EXPECT_NULL(nb_where(cond, a, nb_from_array(NB_I64, NB_SHAPE(1), I64(0))), "where: ", "int64",
                "[1]");
}

static void test_gather_errors(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(3, 4));
    nb_tensor *ok = nb_from_array(NB_I64, NB_SHAPE(2, 2), I64(0, 3, 1, 2));
    CU_ASSERT_PTR_NOT_NULL(nb_gather(x, 1, ok));
    /* out of range: past the end and negative (PyTorch refuses both) */
    EXPECT_NULL(nb_gather(x, 1, nb_from_array(NB_I64, NB_SHAPE(2, 2), I64(0, 4, 1, 2))),
                "gather: ", "index 4", "position [0, 1]", "dim 1 of size 4", "x [3, 4]",
                "index [2, 2]");
    EXPECT_NULL(nb_gather(x, 0, nb_from_array(NB_I64, NB_SHAPE(2, 2), I64(0, 1, -1, 2))),
                "gather: ", "index -1", "position [1, 0]", "dim 0 of size 3");
    /* wrong dtype */
    EXPECT_NULL(nb_gather(x, 1, nb_zeros(NB_F32, NB_SHAPE(2, 2))), "gather: ", "int64", "float32",
                "[2, 2]");
    EXPECT_NULL(nb_gather(x, 1, nb_zeros(NB_BOOL, NB_SHAPE(2, 2))), "gather: ", "bool");
    EXPECT_NULL(nb_gather(nb_zeros(NB_I64, NB_SHAPE(3, 4)), 1, ok), "gather: ", "int64", "[3, 4]");
    /* wrong shape: other ndim, larger than x outside dim */
    EXPECT_NULL(nb_gather(x, 1, nb_zeros(NB_I64, NB_SHAPE(2))), "gather: ", "[2]", "[3, 4]");
    EXPECT_NULL(nb_gather(x, 1, nb_zeros(NB_I64, NB_SHAPE(4, 1))), "gather: ", "[4, 1]", "[3, 4]",
                "dim 1");
    /* bad dim, 0-d x, NULL */
    EXPECT_NULL(nb_gather(x, 2, ok), "gather: ", "dim 2");
    EXPECT_NULL(nb_gather(x, -3, ok), "gather: ", "dim -3");
    EXPECT_NULL(nb_gather(nb_zeros(NB_F32, 0, NULL), 0, nb_zeros(NB_I64, 0, NULL)),
                "gather: ", "[]");
    EXPECT_NULL(nb_gather(x, 1, NULL), "gather: ", "NULL");
    /* An index larger than x along dim itself is fine (each entry is checked, not the size). */
    nb_tensor *long_index = nb_from_array(NB_I64, NB_SHAPE(1, 6), I64(3, 3, 2, 1, 0, 0));
    CU_ASSERT_PTR_NOT_NULL(nb_gather(x, 1, long_index));
}

static void test_index_select_errors(void) {
    nb_tensor *x = nb_zeros(NB_F64, NB_SHAPE(4, 3));
    EXPECT_NULL(nb_index_select(x, 0, nb_from_array(NB_I64, NB_SHAPE(3), I64(1, 4, 0))),
                "index_select: ", "index 4", "position [1]", "dim 0 of size 4", "x [4, 3]",
                "index [3]");
    EXPECT_NULL(nb_index_select(x, -1, nb_from_array(NB_I64, NB_SHAPE(2), I64(-1, 0))),
                "index_select: ", "index -1", "dim 1 of size 3");
    EXPECT_NULL(nb_index_select(x, 0, nb_zeros(NB_F64, NB_SHAPE(2))), "index_select: ", "int64",
                "float64", "[2]");
    EXPECT_NULL(nb_index_select(x, 0, nb_zeros(NB_I64, NB_SHAPE(2, 2))), "index_select: ", "1-D",
                "[2, 2]", "[4, 3]");
    EXPECT_NULL(nb_index_select(x, 2, nb_zeros(NB_I64, NB_SHAPE(2))), "index_select: ", "dim 2");
    EXPECT_NULL(nb_index_select(nb_zeros(NB_I64, 0, NULL), 0, nb_zeros(NB_I64, NB_SHAPE(1))),
                "index_select: ", "[]");
}

/* Rows of int64 and bool tensors (class labels, masks), as torch.index_select takes any dtype:
 * copied exactly, with no autograd. */
static void test_index_select_any_dtype(void) {
    nb_tensor *idx = nb_from_array(NB_I64, NB_SHAPE(3), I64(2, 0, 2));
    int64_t big = (int64_t)1 << 60; /* beyond a double's exact integers */
    nb_tensor *labels =
        nb_from_array(NB_I64, NB_SHAPE(3, 2), I64(1, big + 1, -3, 4, 5, -(big + 7)));
    nb_tensor *rows = nb_index_select(labels, 0, idx);
    NBT_ASSERT_SHAPE(rows, 3, 2);
    CU_ASSERT_EQUAL(rows->dtype, NB_I64);
    const int64_t *r = nb_data(rows);
    const int64_t want[] = {5, -(big + 7), 1, big + 1, 5, -(big + 7)};
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(r[i], want[i]);
    CU_ASSERT_PTR_NULL(rows->node);
    nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(2, 3), (const uint8_t[]){1, 0, 0, 0, 1, 1});
    nb_tensor *cols = nb_index_select(mask, 1, idx);
    NBT_ASSERT_SHAPE(cols, 2, 3);
    CU_ASSERT_EQUAL(cols->dtype, NB_BOOL);
    NBT_ASSERT_VALUES(cols, 0, 0, 1, 0, 1, 0, 1);
}

static void test_index_add_errors(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(5, 3)), *src = nb_zeros(NB_F32, NB_SHAPE(4, 3));
    nb_tensor *idx = nb_from_array(NB_I64, NB_SHAPE(4), I64(0, 4, 0, 2));
    CU_ASSERT_PTR_NOT_NULL(nb_index_add(x, 0, idx, src, 1));
    EXPECT_NULL(nb_index_add(x, 0, nb_from_array(NB_I64, NB_SHAPE(4), I64(0, 5, 0, 2)), src, 1),
                "index_add: ", "index 5", "position [1]", "dim 0 of size 5", "x [5, 3]");
    EXPECT_NULL(nb_index_add(x, 0, nb_from_array(NB_I64, NB_SHAPE(4), I64(0, 1, -2, 2)), src, 1),
                "index_add: ", "index -2", "position [2]");
    EXPECT_NULL(nb_index_add(x, 0, nb_zeros(NB_F32, NB_SHAPE(4)), src, 1), "index_add: ", "int64",
                "float32", "[4]");
    EXPECT_NULL(nb_index_add(x, 0, nb_zeros(NB_I64, NB_SHAPE(4, 1)), src, 1), "index_add: ", "1-D",
                "[4, 1]");
    /* source: index length at dim, x's size elsewhere, same ndim, same dtype */
    EXPECT_NULL(nb_index_add(x, 0, nb_zeros(NB_I64, NB_SHAPE(3)), src, 1),
                "index_add: ", "source [4, 3]", "[5, 3]", "length 3");
    EXPECT_NULL(nb_index_add(x, 0, idx, nb_zeros(NB_F32, NB_SHAPE(4, 2)), 1),
                "index_add: ", "source [4, 2]", "[5, 3]");
    EXPECT_NULL(nb_index_add(x, 0, idx, nb_zeros(NB_F32, NB_SHAPE(4, 3, 1)), 1),
                "index_add: ", "source [4, 3, 1]");
    EXPECT_NULL(nb_index_add(x, 0, idx, nb_zeros(NB_F64, NB_SHAPE(4, 3)), 1),
                "index_add: ", "float32", "float64");
    EXPECT_NULL(nb_index_add(x, -3, idx, src, 1), "index_add: ", "dim -3");
    EXPECT_NULL(nb_index_add(x, 0, idx, NULL, 1), "index_add: ", "NULL");
}

/* Empty indices and empty dims give empty results or x unchanged, as in PyTorch. */
static void test_empty_indices(void) {
    nb_tensor *x = nb_arange(NB_F32, 0, 6, 1);
    nb_tensor *x23 = nb_view(x, NB_SHAPE(2, 3));
    nb_tensor *none = nb_zeros(NB_I64, NB_SHAPE(0));
    nb_tensor *sel = nb_index_select(x23, 1, none);
    NBT_ASSERT_SHAPE(sel, 2, 0);
    nb_tensor *added = nb_index_add(x23, 1, none, nb_zeros(NB_F32, NB_SHAPE(2, 0)), 1);
    CU_ASSERT_TRUE(nbtest_close(added, x23, 0, 0));
    NBT_ASSERT_SHAPE(nb_gather(x23, 0, nb_zeros(NB_I64, NB_SHAPE(0, 3))), 0, 3);
}

/* index_add with many repeated indices, [O, D, I] = [2, 7, 600] from [2, 600, 600] rows of
 * source: equal bitwise for 1 and 2 threads and to adding row by row in index order. */
static void check_index_add_order(nb_dtype dt, double alpha) {
    const int64_t O = 2, D = 7, K = 600, I = 600;
    nb_rng rng;
    nb_rng_seed(&rng, 26);
    nb_tensor *x = nb_randn(&rng, dt, NB_SHAPE(O, D, I));
    nb_tensor *src = nb_randn(&rng, dt, NB_SHAPE(O, K, I));
    int64_t *iv = malloc(sizeof(int64_t) * (size_t)K);
    for (int64_t k = 0; k < K; k++) iv[k] = (int64_t)(nb_rng_next(&rng) % (uint64_t)D);
    nb_tensor *idx = nb_from_array(NB_I64, NB_SHAPE(K), iv);
    /* The reference: each output row gets its source rows in index order. */
    nb_tensor *want = nb_clone(x);
    for (int64_t o = 0; o < O; o++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t i = 0; i < I; i++) {
                int64_t to = (o * D + iv[k]) * I + i, from = (o * K + k) * I + i;
                if (dt == NB_F32) {
                    float *w = nb_data(want);
                    w[to] += (float)alpha * ((const float *)nb_data(src))[from];
                } else {
                    double *w = nb_data(want);
                    w[to] += alpha * ((const double *)nb_data(src))[from];
                }
            }
    free(iv);
    int before = nb_get_num_threads();
    nb_tensor *got[2];
    for (int t = 0; t < 2; t++) {
        nb_set_num_threads(t + 1);
        got[t] = nb_index_add(x, 1, idx, src, alpha);
        CU_ASSERT_PTR_NOT_NULL_FATAL(got[t]);
    }
    nb_set_num_threads(before);
    size_t bytes = (size_t)(O * D * I) * nb_dtype_size(dt);
    CU_ASSERT_EQUAL(memcmp(nb_data(got[0]), nb_data(got[1]), bytes), 0);
    CU_ASSERT_EQUAL(memcmp(nb_data(got[0]), nb_data(want), bytes), 0);
}

/* alpha 0.5 scales exactly, so contracting the multiply-add into an FMA cannot differ. */
static void test_index_add_order(void) {
    check_index_add_order(NB_F32, 1);
    check_index_add_order(NB_F64, 1);
    check_index_add_order(NB_F32, 0.5);
}

/* The backward of index_select is an index_add of the gradient: the same order, for any
 * thread count. */
static void test_index_select_backward_threads(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 7);
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, NB_F32, NB_SHAPE(5, 2000)), true);
    int64_t iv[900];
    for (int k = 0; k < 900; k++) iv[k] = (int64_t)(nb_rng_next(&rng) % 5);
    nb_tensor *idx = nb_from_array(NB_I64, NB_SHAPE(900), iv);
    nb_tensor *g = nb_randn(&rng, NB_F32, NB_SHAPE(900, 2000));
    nb_tensor *grads[2];
    int before = nb_get_num_threads();
    for (int t = 0; t < 2; t++) {
        nb_set_num_threads(t + 1);
        nb_zero_grad(x);
        CU_ASSERT_TRUE_FATAL(nb_backward(nb_index_select(x, 0, idx), g));
        grads[t] = nb_clone(nb_grad(x));
    }
    nb_set_num_threads(before);
    CU_ASSERT_EQUAL(memcmp(nb_data(grads[0]), nb_data(grads[1]), sizeof(float) * 5 * 2000), 0);
}

/* topk of the values with k and largest; checks the values and indices against PyTorch's. */
static void check_topk(nb_dtype dt, int n, const double *x, int64_t k, bool largest,
                       const double *want_values, const int64_t *want_indices) {
    nb_tensor *t = nb_to_dtype(nb_from_array(NB_F64, NB_SHAPE(n), x), dt);
    nb_tensor *idx = NULL;
    nb_tensor *v = nb_topk(t, k, 0, largest, &idx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(idx);
    NBT_ASSERT_SHAPE(v, k);
    NBT_ASSERT_SHAPE(idx, k);
    for (int64_t e = 0; e < k; e++) {
        double got = nb_get(v, NB_IDX(e)), want = want_values[e];
        CU_ASSERT_TRUE(isnan(want) ? isnan(got) : got == want);
        CU_ASSERT_EQUAL(((const int64_t *)nb_data(idx))[e], want_indices[e]);
    }
}

#define F64(...) ((const double[]){__VA_ARGS__})
static void test_topk_ties_and_nan(void) {
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F64 : NB_F32;
        /* Not lowest index first: PyTorch's nth_element and sort leave [2, 4, 1]. */
        check_topk(dt, 6, F64(1, 3, 3, 2, 3, 1), 3, true, F64(3, 3, 3), I64(2, 4, 1));
        check_topk(dt, 8, F64(0, 0, 0, 0, 0, 0, 0, 0), 1, true, F64(0), I64(6));
        check_topk(dt, 4, F64(2, 2, 1, 1), 2, false, F64(1, 1), I64(2, 3));
        /* NaN is the largest value: first when largest, last when smallest. */
        check_topk(dt, 5, F64(1, NAN, 3, NAN, 2), 3, true, F64(NAN, NAN, 3), I64(1, 3, 2));
        check_topk(dt, 5, F64(1, NAN, 3, NAN, 2), 4, false, F64(1, 2, 3, NAN), I64(0, 4, 2, 3));
    }
}

/* The gradient of each picked value lands at its index, also among ties, and nowhere else
 * (indices and gradient from PyTorch). */
static void test_topk_backward_at_ties(void) {
    nb_tensor *x = nb_requires_grad_(
        nb_from_array(NB_F64, NB_SHAPE(2, 6), F64(1, 3, 3, 2, 3, 1, 5, 4, 4, 4, 0, 4)), true);
    nb_tensor *idx = NULL;
    nb_tensor *v = nb_topk(x, 3, 1, true, &idx);
    nb_tensor *g = nb_from_array(NB_F64, NB_SHAPE(2, 3), F64(10, 20, 30, 40, 50, 60));
    CU_ASSERT_TRUE_FATAL(nb_backward(v, g));
    CU_ASSERT_TRUE(nbtest_values(idx, F64(2, 4, 1, 0, 3, 5), 6, 0));
    CU_ASSERT_TRUE(nbtest_values(nb_grad(x), F64(0, 30, 10, 0, 20, 0, 40, 0, 0, 50, 0, 60), 12, 0));
}

static void test_topk_errors_and_edges(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(3, 4));
    EXPECT_NULL(nb_topk(x, 5, 1, true, NULL), "topk: ", "k 5", "dim 1 of size 4", "[3, 4]");
    EXPECT_NULL(nb_topk(x, -1, 0, true, NULL), "topk: ", "k -1", "dim 0 of size 3");
    EXPECT_NULL(nb_topk(x, 1, 2, true, NULL), "topk: ", "dim 2");
    EXPECT_NULL(nb_topk(nb_zeros(NB_I64, NB_SHAPE(3, 4)), 1, 1, true, NULL), "topk: ", "int64",
                "[3, 4]");
    EXPECT_NULL(nb_topk(nb_zeros(NB_F64, 0, NULL), 2, 0, true, NULL), "topk: ", "k 2", "[]");
    EXPECT_NULL(nb_topk(nb_zeros(NB_F64, 0, NULL), 1, 1, true, NULL), "topk: ", "dim 1", "[]");
    EXPECT_NULL(nb_topk(NULL, 1, 0, true, NULL), "topk: ", "NULL");
    /* k = 0 gives empty values and indices, as in PyTorch; indices may be left out. */
    nb_tensor *idx = NULL;
    NBT_ASSERT_SHAPE(nb_topk(x, 0, 1, true, &idx), 3, 0);
    NBT_ASSERT_SHAPE(idx, 3, 0);
    NBT_ASSERT_SHAPE(nb_topk(x, 2, 0, false, NULL), 2, 4);
}

int main(void) {
    const nbtest_case cases[] = {
        {"where: bad cond, operands and shapes name the op", test_where_errors},
        {"gather: bad indices name the op and the shapes", test_gather_errors},
        {"index_select: bad indices name the op and the shapes", test_index_select_errors},
        {"index_select: int64 and bool rows, copied exactly", test_index_select_any_dtype},
        {"index_add: bad indices and sources name the op and the shapes", test_index_add_errors},
        {"empty indices", test_empty_indices},
        {"index_add: repeated indices add in index order, any thread count", test_index_add_order},
        {"index_select backward: the same for 1 and 2 threads", test_index_select_backward_threads},
        {"topk: ties and NaN as PyTorch picks them", test_topk_ties_and_nan},
        {"topk: gradients land at the picked ties", test_topk_backward_at_ties},
        {"topk: bad k and dims name the op and the shapes; k = 0", test_topk_errors_and_edges},
    };
    return nbtest_run("index_ops", cases, sizeof cases / sizeof cases[0]);
}
