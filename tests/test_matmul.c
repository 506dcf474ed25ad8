/* nb_matmul: every torch.matmul shape case on small products computed by hand, broadcast
 * batches, operands that are transposed, sliced, expanded or strided 1-D views, hand-computed
 * gradients, and every error. Gradients on random inputs are gradchecked in
 * catalogue_matmul.c. */
#include "harness.h"

#include <stdio.h>

static nb_tensor *from(nb_dtype dt, int ndim, const int64_t *shape, const double *v) {
    nb_tensor *t = nb_from_array(NB_F64, ndim, shape, v);
    return dt == NB_F64 ? t : nb_to_dtype(t, dt);
}
#define T(dt, shape, ...) from(dt, shape, (const double[]){__VA_ARGS__})

static const nb_dtype dtypes[] = {NB_F32, NB_F64};

static bool has_shape(const nb_tensor *t, int ndim, const int64_t *shape) {
    if (!t || t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return false;
    return true;
}
#define ASSERT_SHAPE(t, ...) CU_ASSERT(has_shape((t), NB_SHAPE(__VA_ARGS__)))

static void test_dot(void) {
    for (int d = 0; d < 2; d++) {
        nb_tensor *a = T(dtypes[d], NB_SHAPE(3), 1, 2, 3), *b = T(dtypes[d], NB_SHAPE(3), 4, 5, 6);
        nb_tensor *c = nb_matmul(a, b);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        CU_ASSERT_EQUAL(c->ndim, 0);
        CU_ASSERT_EQUAL(c->dtype, dtypes[d]);
        NBT_ASSERT_VALUES(c, 0, 32); /* 4 + 10 + 18 */
    }
    /* K = 0: an empty sum */
    NBT_ASSERT_VALUES(nb_matmul(nb_zeros(NB_F32, NB_SHAPE(0)), nb_zeros(NB_F32, NB_SHAPE(0))), 0,
                      0);
}

static void test_2d(void) {
    for (int d = 0; d < 2; d++) {
        nb_tensor *a = T(dtypes[d], NB_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
        nb_tensor *b = T(dtypes[d], NB_SHAPE(3, 2), 7, 8, 9, 10, 11, 12);
        nb_tensor *c = nb_matmul(a, b);
        ASSERT_SHAPE(c, 2, 2);
        NBT_ASSERT_VALUES(c, 0, 58, 64, 139, 154);
        /* [3,2] @ [2,3]: a 3x3 */
        NBT_ASSERT_VALUES(nb_matmul(b, a), 0, 39, 54, 69, 49, 68, 87, 59, 82, 105);
    }
    /* K = 0 gives zeros, M = 0 an empty result */
    nb_tensor *z = nb_matmul(nb_ones(NB_F64, NB_SHAPE(2, 0)), nb_ones(NB_F64, NB_SHAPE(0, 3)));
    ASSERT_SHAPE(z, 2, 3);
    NBT_ASSERT_VALUES(z, 0, 0, 0, 0, 0, 0, 0);
    ASSERT_SHAPE(nb_matmul(nb_ones(NB_F64, NB_SHAPE(0, 4)), nb_ones(NB_F64, NB_SHAPE(4, 3))), 0, 3);
}

static void test_vector_matrix(void) {
    for (int d = 0; d < 2; d++) {
        nb_tensor *m = T(dtypes[d], NB_SHAPE(2, 2), 5, 6, 7, 8);
        nb_tensor *v = T(dtypes[d], NB_SHAPE(2), 1, 2);
        nb_tensor *vm = nb_matmul(v, m); /* [1,2] [5 6; 7 8] */
        ASSERT_SHAPE(vm, 2);
        NBT_ASSERT_VALUES(vm, 0, 19, 22);
        nb_tensor *mv = nb_matmul(m, v); /* [5 6; 7 8] [1; 2] */
        ASSERT_SHAPE(mv, 2);
        NBT_ASSERT_VALUES(mv, 0, 17, 23);
        /* 1-D with a batched matrix: [2] @ [2,2,3] and [2,2,3]^T... */
        nb_tensor *bm = T(dtypes[d], NB_SHAPE(2, 2, 3), 1, 0, 2, 0, 1, 3, /* batch 0 */
                          2, 1, 0, 1, 1, 1);                              /* batch 1 */
        nb_tensor *vbm = nb_matmul(v, bm);
        ASSERT_SHAPE(vbm, 2, 3);
        NBT_ASSERT_VALUES(vbm, 0, 1, 2, 8, 4, 3, 2);
        nb_tensor *w = T(dtypes[d], NB_SHAPE(3), 1, -1, 2);
        nb_tensor *bmw = nb_matmul(bm, w); /* [2,2,3] @ [3] */
        ASSERT_SHAPE(bmw, 2, 2);
        NBT_ASSERT_VALUES(bmw, 0, 5, 5, 1, 2);
    }
}

static void test_batched(void) {
    for (int d = 0; d < 2; d++) {
        nb_tensor *a = T(dtypes[d], NB_SHAPE(2, 2, 2), 1, 2, 3, 4, /* */ 1, 0, 0, 1);
        nb_tensor *b = T(dtypes[d], NB_SHAPE(2, 2, 2), 5, 6, 7, 8, /* */ 2, 3, 4, 5);
        nb_tensor *c = nb_matmul(a, b);
        ASSERT_SHAPE(c, 2, 2, 2);
        NBT_ASSERT_VALUES(c, 0, 19, 22, 43, 50, /* */ 2, 3, 4, 5);
        /* a 2-D right operand is shared by every batch */
        nb_tensor *shared = nb_matmul(a, nb_select(b, 0, 0));
        NBT_ASSERT_VALUES(shared, 0, 19, 22, 43, 50, /* */ 5, 6, 7, 8);
        /* and a 2-D left operand */
        nb_tensor *left = nb_matmul(nb_select(a, 0, 0), b);
        NBT_ASSERT_VALUES(left, 0, 19, 22, 43, 50, /* */ 10, 13, 22, 29);
    }
}

/* [2,1,1,2] rows times [3,2,1] columns: every row against every column. */
static void test_broadcast_batches(void) {
    for (int d = 0; d < 2; d++) {
        nb_tensor *rows = T(dtypes[d], NB_SHAPE(2, 1, 1, 2), 1, 2, 3, 4);
        nb_tensor *cols = T(dtypes[d], NB_SHAPE(3, 2, 1), 1, 0, 0, 1, 1, 1);
        nb_tensor *c = nb_matmul(rows, cols);
        ASSERT_SHAPE(c, 2, 3, 1, 1);
        NBT_ASSERT_VALUES(c, 0, 1, 2, 3, 3, 4, 7);
    }
    /* torch.matmul's documented example shape, and one big enough for the tiled kernels,
     * checked against a loop over the batches written here */
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    const int64_t dims[2][4] = {{3, 4, 6, 5}, {13, 20, 17, 3}}; /* M, K, N, batch of b */
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 2; d++) {
            int64_t M = dims[s][0], K = dims[s][1], N = dims[s][2], J = dims[s][3];
            nb_tensor *a = nb_randn(&rng, dtypes[d], NB_SHAPE(2, 1, M, K));
            nb_tensor *b = nb_randn(&rng, dtypes[d], NB_SHAPE(J, K, N));
            nb_tensor *c = nb_matmul(a, b);
            CU_ASSERT_FATAL(has_shape(c, NB_SHAPE(2, J, M, N)));
            double worst = 0;
            for (int64_t i = 0; i < 2; i++)
                for (int64_t j = 0; j < J; j++)
                    for (int64_t r = 0; r < M; r++)
                        for (int64_t q = 0; q < N; q++) {
                            double want = 0;
                            for (int64_t k = 0; k < K; k++)
                                want += nb_get(a, NB_IDX(i, 0, r, k)) * nb_get(b, NB_IDX(j, k, q));
                            worst = fmax(worst, fabs(nb_get(c, NB_IDX(i, j, r, q)) - want));
                        }
            CU_ASSERT(worst < (dtypes[d] == NB_F32 ? 1e-4 : 1e-12));
        }
}

static void test_noncontiguous(void) {
    for (int d = 0; d < 2; d++) {
        nb_tensor *m = T(dtypes[d], NB_SHAPE(2, 2), 1, 2, 3, 4);
        nb_tensor *n = T(dtypes[d], NB_SHAPE(2, 2), 5, 6, 7, 8);
        /* [1 3; 2 4] [5 6; 7 8] and [1 2; 3 4] [5 7; 6 8] */
        NBT_ASSERT_VALUES(nb_matmul(nb_transpose(m, 0, 1), n), 0, 26, 30, 38, 44);
        NBT_ASSERT_VALUES(nb_matmul(m, nb_transpose(n, 0, 1)), 0, 17, 23, 39, 53);
        NBT_ASSERT_VALUES(nb_matmul(nb_transpose(m, 0, 1), nb_transpose(n, 0, 1)), 0, 23, 31, 34,
                          46);
        /* every other column of a [2,4]: [1 3; 5 7] (a copy for the kernel) */
        nb_tensor *wide = T(dtypes[d], NB_SHAPE(2, 4), 1, 2, 3, 4, 5, 6, 7, 8);
        nb_tensor *sliced = nb_select(nb_view(wide, NB_SHAPE(2, 2, 2)), -1, 0);
        NBT_ASSERT_VALUES(nb_matmul(sliced, n), 0, 26, 30, 74, 86);
        /* a column as a strided 1-D operand, on either side: [6 8] */
        nb_tensor *col = nb_select(n, 1, 1);
        NBT_ASSERT_VALUES(nb_matmul(col, col), 0, 100);
        NBT_ASSERT_VALUES(nb_matmul(m, col), 0, 22, 50);
        NBT_ASSERT_VALUES(nb_matmul(col, m), 0, 30, 44);
        /* a narrowed block inside a bigger matrix: rows 1-2, cols 1-2 of a 3x4 */
        nb_tensor *big = T(dtypes[d], NB_SHAPE(3, 4), 0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0);
        nb_tensor *block = nb_narrow(nb_narrow(big, 0, 1, 2), 1, 1, 2);
        NBT_ASSERT_VALUES(nb_matmul(block, n), 0, 19, 22, 43, 50);
        NBT_ASSERT_VALUES(nb_matmul(nb_transpose(block, 0, 1), n), 0, 26, 30, 38, 44);
        /* an expanded batch (stride 0) and expanded rows (row stride 0) */
        nb_tensor *eb = nb_matmul(nb_expand(m, NB_SHAPE(3, 2, 2)), n);
        ASSERT_SHAPE(eb, 3, 2, 2);
        NBT_ASSERT_VALUES(eb, 0, 19, 22, 43, 50, 19, 22, 43, 50, 19, 22, 43, 50);
        nb_tensor *er = nb_expand(T(dtypes[d], NB_SHAPE(1, 2), 1, 2), NB_SHAPE(3, 2));
        NBT_ASSERT_VALUES(nb_matmul(er, n), 0, 19, 22, 19, 22, 19, 22);
        /* batched heads from a permuted [T, H, D] layout, as attention makes them */
        nb_tensor *thd = T(dtypes[d], NB_SHAPE(2, 2, 2), 1, 2, 10, 20, 3, 4, 30, 40);
        nb_tensor *heads = nb_permute(thd, (int[]){1, 0, 2}); /* [H, T, D] */
        nb_tensor *scores = nb_matmul(heads, nb_transpose(heads, -1, -2));
        /* head 0: [1 2; 3 4] [1 3; 2 4]; head 1: [10 20; 30 40] [10 30; 20 40] */
        NBT_ASSERT_VALUES(scores, 0, 5, 11, 11, 25, 500, 1100, 1100, 2500);
    }
}

/* Transposed and strided operands reach the kernel as they lie; only a layout the kernel
 * cannot read is copied. Counted as tensors made in the scope (no autograd here). */
static void test_no_copies(void) {
    nb_tensor *m = nb_ones(NB_F32, NB_SHAPE(4, 6)), *n = nb_ones(NB_F32, NB_SHAPE(6, 4));
    nb_tensor *mt = nb_transpose(n, 0, 1), *nt = nb_transpose(m, 0, 1);  /* [4,6], [6,4] */
    nb_tensor *cols = nb_narrow(m, 1, 1, 4);                             /* [4,4], ld 6 */
    nb_tensor *sliced = nb_select(nb_view(m, NB_SHAPE(4, 3, 2)), -1, 0); /* [4,3] stride 2 */
    int64_t before = nb_scope_tensor_count();
    CU_ASSERT_PTR_NOT_NULL(nb_matmul(mt, nt));
    CU_ASSERT_PTR_NOT_NULL(nb_matmul(cols, nb_transpose(cols, 0, 1)));
    CU_ASSERT_EQUAL(nb_scope_tensor_count() - before, 3); /* the inner transpose and 2 results */
    before = nb_scope_tensor_count();
    CU_ASSERT_PTR_NOT_NULL(nb_matmul(sliced, nb_ones(NB_F32, NB_SHAPE(3, 2))));
    CU_ASSERT_EQUAL(nb_scope_tensor_count() - before, 3); /* ones, a copy, the result */
}

/* Gradients of sum(a @ b) (output gradient of ones), computed by hand. */
static void test_backward_by_hand(void) {
    for (int d = 0; d < 2; d++) {
        nb_tensor *a = nb_requires_grad_(T(dtypes[d], NB_SHAPE(2, 2), 1, 2, 3, 4), true);
        nb_tensor *b = nb_requires_grad_(T(dtypes[d], NB_SHAPE(2, 2), 5, 6, 7, 8), true);
        nb_tensor *c = nb_matmul(a, b);
        CU_ASSERT_TRUE(nb_backward(c, nb_ones(dtypes[d], NB_SHAPE(2, 2))));
        /* dA = 1 B^T: row sums of B in every row; dB = A^T 1: column sums of A */
        NBT_ASSERT_VALUES(nb_grad(a), 0, 11, 15, 11, 15);
        NBT_ASSERT_VALUES(nb_grad(b), 0, 4, 4, 6, 6);

        /* dot: d(a.b)/da = b */
        nb_tensor *u = nb_requires_grad_(T(dtypes[d], NB_SHAPE(3), 1, 2, 3), true);
        nb_tensor *v = nb_requires_grad_(T(dtypes[d], NB_SHAPE(3), 4, 5, 6), true);
        CU_ASSERT_TRUE(nb_backward(nb_matmul(u, v), NULL));
        NBT_ASSERT_VALUES(nb_grad(u), 0, 4, 5, 6);
        NBT_ASSERT_VALUES(nb_grad(v), 0, 1, 2, 3);

        /* a [1,2] row against two [2,1] columns: its gradient sums over the batch,
         * [1 1] + [2 3]; each column's gradient is the row, transposed */
        nb_tensor *row = nb_requires_grad_(T(dtypes[d], NB_SHAPE(1, 2), 1, 2), true);
        nb_tensor *cols = nb_requires_grad_(T(dtypes[d], NB_SHAPE(2, 2, 1), 1, 1, 2, 3), true);
        nb_tensor *out = nb_matmul(row, cols);
        ASSERT_SHAPE(out, 2, 1, 1);
        NBT_ASSERT_VALUES(out, 0, 3, 8);
        CU_ASSERT_TRUE(nb_backward(out, nb_ones(dtypes[d], NB_SHAPE(2, 1, 1))));
        NBT_ASSERT_VALUES(nb_grad(row), 0, 3, 4);
        NBT_ASSERT_VALUES(nb_grad(cols), 0, 1, 2, 1, 2);

        /* vector @ matrix with an output gradient of [1, -1]: da = B [1, -1]^T */
        nb_tensor *x = nb_requires_grad_(T(dtypes[d], NB_SHAPE(2), 1, 2), true);
        nb_tensor *w = nb_requires_grad_(T(dtypes[d], NB_SHAPE(2, 2), 5, 6, 7, 8), true);
        CU_ASSERT_TRUE(nb_backward(nb_matmul(x, w), T(dtypes[d], NB_SHAPE(2), 1, -1)));
        NBT_ASSERT_VALUES(nb_grad(x), 0, -1, -1);
        NBT_ASSERT_VALUES(nb_grad(w), 0, 1, -1, 2, -2);
    }
}

/* A 0-d tensor made by squeezing (nb_scalar passes a NULL shape to memcpy, which UBSan
 * reports; that belongs to the tensor core). */
static nb_tensor *zero_d(void) {
    return nb_squeeze_all(nb_full(NB_F32, NB_SHAPE(1), 2));
}

static void test_errors(void) {
    nb_tensor *a = nb_ones(NB_F32, NB_SHAPE(2, 3)), *b = nb_ones(NB_F32, NB_SHAPE(4, 5));
    CU_ASSERT_PTR_NULL(nb_matmul(a, b));
    NBT_ASSERT_ERROR("matmul");
    NBT_ASSERT_ERROR("[2, 3]");
    NBT_ASSERT_ERROR("[4, 5]");
    NBT_ASSERT_ERROR("cannot be multiplied");

    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_matmul(nb_ones(NB_F32, NB_SHAPE(3)), nb_ones(NB_F32, NB_SHAPE(4))));
    NBT_ASSERT_ERROR("matmul: shapes [3] and [4] cannot be multiplied");

    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_matmul(zero_d(), a));
    NBT_ASSERT_ERROR("matmul");
    NBT_ASSERT_ERROR("at least 1 dimension");
    NBT_ASSERT_ERROR("[] and [2, 3]");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_matmul(a, zero_d()));
    NBT_ASSERT_ERROR("[2, 3] and []");

    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_matmul(a, nb_ones(NB_F64, NB_SHAPE(3, 2))));
    NBT_ASSERT_ERROR("matmul: dtype mismatch");
    NBT_ASSERT_ERROR("[2, 3] float32");
    NBT_ASSERT_ERROR("[3, 2] float64");

    nb_clear_error();
    nb_tensor *idx = nb_zeros(NB_I64, NB_SHAPE(3, 2));
    CU_ASSERT_PTR_NULL(nb_matmul(a, idx));
    NBT_ASSERT_ERROR("matmul: expected float32 or float64");
    NBT_ASSERT_ERROR("[3, 2] int64");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(
        nb_matmul(nb_zeros(NB_BOOL, NB_SHAPE(2, 3)), nb_zeros(NB_BOOL, NB_SHAPE(3))));
    NBT_ASSERT_ERROR("[2, 3] bool and [3] bool");

    nb_clear_error();
    CU_ASSERT_PTR_NULL(
        nb_matmul(nb_ones(NB_F32, NB_SHAPE(2, 3, 4)), nb_ones(NB_F32, NB_SHAPE(3, 4, 5))));
    NBT_ASSERT_ERROR("matmul: batch dims of shapes [2, 3, 4] and [3, 4, 5] cannot be broadcast");

    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_matmul(NULL, a));
    NBT_ASSERT_ERROR("matmul");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_matmul(a, NULL));
    NBT_ASSERT_ERROR("matmul");
}

int main(void) {
    const nbtest_case cases[] = {
        {"1-D . 1-D is a 0-d dot product", test_dot},
        {"2-D @ 2-D", test_2d},
        {"1-D with 2-D and batched matrices", test_vector_matrix},
        {"batched, with a shared operand", test_batched},
        {"broadcast batch dims", test_broadcast_batches},
        {"transposed, sliced, strided and expanded operands", test_noncontiguous},
        {"transposed operands are not copied", test_no_copies},
        {"gradients by hand", test_backward_by_hand},
        {"errors name the op and both shapes", test_errors},
    };
    return nbtest_run("matmul", cases, sizeof cases / sizeof cases[0]);
}
