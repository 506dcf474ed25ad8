/* Every view op against hand-computed shapes, strides, offsets and values; views of views;
 * shared storage; the transpose-then-view error; contiguous round trips; concat/stack/split.
 * Throughout, x = arange(n).view(...) so element values equal their row-major position,
 * which makes each expected value a small hand computation from the indices. */
#include "harness.h"

#include <stdio.h>

#define DIMS(...)                                                                                  \
    (const int64_t[]) {                                                                            \
        __VA_ARGS__                                                                                \
    }

/* Checks ndim, shape, strides and offset at once, printing what differs. */
static bool layout_is(const nb_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                      int64_t offset) {
    if (!t) {
        fprintf(stderr, "layout_is: NULL tensor (%s)\n", nb_last_error());
        return false;
    }
    bool ok = t->ndim == ndim && t->offset == offset;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i] && t->strides[i] == strides[i];
    if (!ok) {
        fprintf(stderr, "layout_is: got ndim %d offset %lld shape/strides", t->ndim,
                (long long)t->offset);
        for (int i = 0; i < t->ndim; i++)
            fprintf(stderr, " %lld/%lld", (long long)t->shape[i], (long long)t->strides[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}
#define ASSERT_LAYOUT(t, nd, shape, strides, off)                                                  \
    CU_ASSERT(layout_is((t), (nd), shape, strides, off))

static nb_tensor *ramp(nb_dtype dt, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return nb_view(nb_arange(dt, 0, (double)n, 1), ndim, shape);
}

/* ---- view -------------------------------------------------------------------------------- */

static void test_view_infers_minus_one(void) {
    nb_tensor *x = nb_arange(NB_F64, 0, 24, 1);
    nb_tensor *v = nb_view(x, NB_SHAPE(2, -1, 4));
    ASSERT_LAYOUT(v, 3, DIMS(2, 3, 4), DIMS(12, 4, 1), 0);
    CU_ASSERT_PTR_EQUAL(v->storage, x->storage);
    ASSERT_LAYOUT(nb_view(v, NB_SHAPE(-1)), 1, DIMS(24), DIMS(1), 0);
    ASSERT_LAYOUT(nb_view(v, NB_SHAPE(-1, 6)), 2, DIMS(4, 6), DIMS(6, 1), 0);
    ASSERT_LAYOUT(nb_view(v, NB_SHAPE(1, 24, 1)), 3, DIMS(1, 24, 1), DIMS(24, 1, 1), 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(v, NB_IDX(1, 2, 3)), 12 + 8 + 3, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(v, NB_IDX(-1, -3, 0)), 12 + 0 + 0, 0);
    /* A 0-d tensor views as [1] and back. */
    nb_tensor *s = nb_scalar(NB_F32, 5);
    nb_tensor *s1 = nb_view(s, NB_SHAPE(1, -1));
    ASSERT_LAYOUT(s1, 2, DIMS(1, 1), DIMS(1, 1), 0);
    nb_tensor *s0 = nb_view(s1, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s0);
    CU_ASSERT_EQUAL(s0->ndim, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(s0), 5, 0);
}

/* A narrowed last dim keeps dims 0 and 1 mergeable (stride 12 = 3 * 4) but not dim 2. */
static void test_view_of_compatible_strided_layout(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(2, 3, 4));
    nb_tensor *t = nb_narrow(x, 2, 1, 2); /* t[i][j][c] = 12i + 4j + 1 + c */
    ASSERT_LAYOUT(t, 3, DIMS(2, 3, 2), DIMS(12, 4, 1), 1);
    CU_ASSERT_FALSE(nb_is_contiguous(t));
    nb_tensor *v = nb_view(t, NB_SHAPE(6, 2)); /* row r = 3i + j starts at 4r + 1 */
    ASSERT_LAYOUT(v, 2, DIMS(6, 2), DIMS(4, 1), 1);
    NBT_ASSERT_VALUES(v, 0, 1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22);
    /* Splitting a merged dim again: [6, 2] -> [2, 3, 1, 2]. */
    ASSERT_LAYOUT(nb_view(v, NB_SHAPE(2, 3, 1, 2)), 4, DIMS(2, 3, 1, 2), DIMS(12, 4, 2, 1), 1);
    /* Merging the narrowed dim with its neighbour is impossible. */
    CU_ASSERT_PTR_NULL(nb_view(t, NB_SHAPE(2, 6)));
    CU_ASSERT_PTR_NULL(nb_view(t, NB_SHAPE(12)));

    /* A transposed [3, 2] (strides [1, 3]) can still gain size-1 dims anywhere. Each inserted
     * size-1 dim takes the stride of the size-1 position computed by PyTorch's rule:
     * t.transpose(0,1).view(3,1,2).stride() == (1, 6, 3). */
    nb_tensor *tt = nb_transpose(ramp(NB_F32, NB_SHAPE(2, 3)), 0, 1);
    ASSERT_LAYOUT(nb_view(tt, NB_SHAPE(3, 1, 2)), 3, DIMS(3, 1, 2), DIMS(1, 6, 3), 0);
    ASSERT_LAYOUT(nb_view(tt, NB_SHAPE(1, 3, 2)), 3, DIMS(1, 3, 2), DIMS(3, 1, 3), 0);
}

/* ---- transpose then view: the PyTorch error ---------------------------------------------- */

static void test_transpose_then_view_fails(void) {
    nb_tensor *x = ramp(NB_F32, NB_SHAPE(2, 3, 4));
    nb_tensor *t = nb_transpose(x, 1, 2); /* [2, 4, 3] */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_view(t, NB_SHAPE(2, 12)));
    NBT_ASSERT_ERROR("view");
    NBT_ASSERT_ERROR("contiguous()");
    NBT_ASSERT_ERROR("reshape()");
    NBT_ASSERT_ERROR("[2, 12]");
    NBT_ASSERT_ERROR("[2, 4, 3]");
    /* The suggested fix works and gives the transposed order. */
    nb_tensor *v = nb_view(nb_contiguous(t), NB_SHAPE(2, 12));
    ASSERT_LAYOUT(v, 2, DIMS(2, 12), DIMS(12, 1), 0);
    /* row 0 = x[0].T flattened: columns of [[0,1,2,3],[4,5,6,7],[8,9,10,11]] */
    NBT_ASSERT_VALUES(nb_select(v, 0, 0), 0, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);
    /* So does reshape, which copies here. */
    nb_tensor *r = nb_reshape(t, NB_SHAPE(2, 12));
    CU_ASSERT_PTR_NOT_EQUAL(r->storage, x->storage);
    NBT_ASSERT_CLOSE(r, v, 0, 0);
}

/* ---- reshape ------------------------------------------------------------------------------ */

static void test_reshape_view_or_copy(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(3, 4));
    nb_tensor *r = nb_reshape(x, NB_SHAPE(2, -1, 3));
    ASSERT_LAYOUT(r, 3, DIMS(2, 2, 3), DIMS(6, 3, 1), 0);
    CU_ASSERT_PTR_EQUAL(r->storage, x->storage); /* contiguous: a view */

    nb_tensor *n = nb_narrow(x, 1, 0, 2); /* [3, 2] strides [4, 1]: a view can split dim 0 */
    nb_tensor *rn = nb_reshape(n, NB_SHAPE(3, 1, 2));
    CU_ASSERT_PTR_EQUAL(rn->storage, x->storage);
    ASSERT_LAYOUT(rn, 3, DIMS(3, 1, 2), DIMS(4, 2, 1), 0);

    nb_tensor *t = nb_transpose(x, 0, 1); /* [4, 3] strides [1, 4] */
    nb_tensor *rt = nb_reshape(t, NB_SHAPE(-1));
    CU_ASSERT_PTR_NOT_EQUAL(rt->storage, x->storage); /* not viewable: a copy */
    ASSERT_LAYOUT(rt, 1, DIMS(12), DIMS(1), 0);
    NBT_ASSERT_VALUES(rt, 0, 0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11);
    /* The copy does not alias x. */
    nb_set(rt, NB_IDX(0), 100);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(x, NB_IDX(0, 0)), 0, 0);
    /* Shape errors name reshape, not view, on both paths. */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_reshape(t, NB_SHAPE(5, -1)));
    NBT_ASSERT_ERROR("reshape: ");
    NBT_ASSERT_ERROR("[5, -1]");
    NBT_ASSERT_ERROR("size 12");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_reshape(x, NB_SHAPE(5, 5)));
    NBT_ASSERT_ERROR("reshape: ");
    NBT_ASSERT_ERROR("[5, 5]");
}

/* ---- transpose and permute ------------------------------------------------------------------ */

static void test_transpose(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(2, 3, 4)); /* x[i][j][k] = 12i + 4j + k */
    nb_tensor *t = nb_transpose(x, 0, 2);
    ASSERT_LAYOUT(t, 3, DIMS(4, 3, 2), DIMS(1, 4, 12), 0);
    CU_ASSERT_PTR_EQUAL(t->storage, x->storage);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(t, NB_IDX(3, 1, 1)), 12 + 4 + 3, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(t, NB_IDX(2, 2, 0)), 8 + 2, 0);
    ASSERT_LAYOUT(nb_transpose(x, -1, -3), 3, DIMS(4, 3, 2), DIMS(1, 4, 12), 0);
    ASSERT_LAYOUT(nb_transpose(x, 1, 1), 3, DIMS(2, 3, 4), DIMS(12, 4, 1), 0);
    /* Transposing twice gives the original layout back. */
    ASSERT_LAYOUT(nb_transpose(t, 2, 0), 3, DIMS(2, 3, 4), DIMS(12, 4, 1), 0);
    /* 2-D values: [[0,1,2],[3,4,5]]^T */
    NBT_ASSERT_VALUES(nb_transpose(ramp(NB_I64, NB_SHAPE(2, 3)), 0, 1), 0, 0, 3, 1, 4, 2, 5);
}

static void test_permute(void) {
    nb_tensor *x = ramp(NB_F32, NB_SHAPE(2, 3, 4));
    nb_tensor *p = nb_permute(x, (int[]){1, 2, 0});
    ASSERT_LAYOUT(p, 3, DIMS(3, 4, 2), DIMS(4, 1, 12), 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(p, NB_IDX(2, 3, 1)), 12 + 8 + 3, 0); /* x[1][2][3] */
    ASSERT_LAYOUT(nb_permute(x, (int[]){-2, -1, 0}), 3, DIMS(3, 4, 2), DIMS(4, 1, 12), 0);
    ASSERT_LAYOUT(nb_permute(x, (int[]){0, 1, 2}), 3, DIMS(2, 3, 4), DIMS(12, 4, 1), 0);
    /* Permuting a permutation composes: (1,2,0) then (2,0,1) is the identity. */
    ASSERT_LAYOUT(nb_permute(p, (int[]){2, 0, 1}), 3, DIMS(2, 3, 4), DIMS(12, 4, 1), 0);
    /* [2, 3] permuted (1, 0): values of the transpose */
    NBT_ASSERT_VALUES(nb_permute(ramp(NB_F32, NB_SHAPE(2, 3)), (int[]){1, 0}), 0, 0, 3, 1, 4, 2, 5);
}

/* ---- unsqueeze, squeeze ---------------------------------------------------------------------- */

static void test_unsqueeze(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(2, 3));
    ASSERT_LAYOUT(nb_unsqueeze(x, 0), 3, DIMS(1, 2, 3), DIMS(6, 3, 1), 0);
    ASSERT_LAYOUT(nb_unsqueeze(x, 1), 3, DIMS(2, 1, 3), DIMS(3, 3, 1), 0);
    ASSERT_LAYOUT(nb_unsqueeze(x, 2), 3, DIMS(2, 3, 1), DIMS(3, 1, 1), 0);
    ASSERT_LAYOUT(nb_unsqueeze(x, -1), 3, DIMS(2, 3, 1), DIMS(3, 1, 1), 0);
    ASSERT_LAYOUT(nb_unsqueeze(x, -3), 3, DIMS(1, 2, 3), DIMS(6, 3, 1), 0);
    /* On a transposed [3, 2] (strides [1, 3]): the new dim's stride is size * stride of the
     * dim it is inserted before, 1 if it is last (PyTorch: (1, 6, 3) and (1, 3, 1)). */
    nb_tensor *t = nb_transpose(x, 0, 1);
    ASSERT_LAYOUT(nb_unsqueeze(t, 1), 3, DIMS(3, 1, 2), DIMS(1, 6, 3), 0);
    ASSERT_LAYOUT(nb_unsqueeze(t, 2), 3, DIMS(3, 2, 1), DIMS(1, 3, 1), 0);
    /* 0-d -> [1] */
    ASSERT_LAYOUT(nb_unsqueeze(nb_scalar(NB_F32, 2), 0), 1, DIMS(1), DIMS(1), 0);
    NBT_ASSERT_VALUES(nb_unsqueeze(t, 1), 0, 0, 3, 1, 4, 2, 5);
}

static void test_squeeze(void) {
    nb_tensor *x = nb_view(nb_arange(NB_F64, 0, 6, 1), NB_SHAPE(1, 3, 1, 2));
    ASSERT_LAYOUT(x, 4, DIMS(1, 3, 1, 2), DIMS(6, 2, 2, 1), 0);
    ASSERT_LAYOUT(nb_squeeze(x, 0), 3, DIMS(3, 1, 2), DIMS(2, 2, 1), 0);
    ASSERT_LAYOUT(nb_squeeze(x, 1), 4, DIMS(1, 3, 1, 2), DIMS(6, 2, 2, 1), 0); /* size 3 */
    ASSERT_LAYOUT(nb_squeeze(x, -2), 3, DIMS(1, 3, 2), DIMS(6, 2, 1), 0);
    ASSERT_LAYOUT(nb_squeeze_all(x), 2, DIMS(3, 2), DIMS(2, 1), 0);
    NBT_ASSERT_VALUES(nb_squeeze_all(x), 0, 0, 1, 2, 3, 4, 5);
    /* Squeezing a [1, 1] leaves a 0-d tensor with the one element. */
    nb_tensor *one = nb_select(nb_view(nb_arange(NB_F32, 0, 4, 1), NB_SHAPE(4, 1, 1)), 0, 3);
    nb_tensor *s = nb_squeeze_all(one);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->ndim, 0);
    CU_ASSERT_EQUAL(s->offset, 3);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(s), 3, 0);
    /* A tensor with no size-1 dims is unchanged. */
    ASSERT_LAYOUT(nb_squeeze_all(nb_zeros(NB_F32, NB_SHAPE(2, 3))), 2, DIMS(2, 3), DIMS(3, 1), 0);
}

/* ---- expand ---------------------------------------------------------------------------------- */

static void test_expand(void) {
    nb_tensor *x = nb_view(nb_arange(NB_F64, 0, 3, 1), NB_SHAPE(3, 1));
    nb_tensor *e = nb_expand(x, NB_SHAPE(2, 3, 4));
    ASSERT_LAYOUT(e, 3, DIMS(2, 3, 4), DIMS(0, 1, 0), 0);
    CU_ASSERT_PTR_EQUAL(e->storage, x->storage);
    CU_ASSERT_FALSE(nb_is_contiguous(e));
    CU_ASSERT_DOUBLE_EQUAL(nb_get(e, NB_IDX(1, 2, 3)), 2, 0);
    NBT_ASSERT_VALUES(nb_select(e, 0, 1), 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2);
    ASSERT_LAYOUT(nb_expand(x, NB_SHAPE(2, -1, 4)), 3, DIMS(2, 3, 4), DIMS(0, 1, 0), 0);
    ASSERT_LAYOUT(nb_expand(x, NB_SHAPE(3, 1)), 2, DIMS(3, 1), DIMS(1, 1), 0);
    /* Expanding a row of a strided tensor keeps its stride. */
    nb_tensor *col = nb_select(ramp(NB_F32, NB_SHAPE(2, 3)), 1, 1); /* [1, 4], stride 3 */
    nb_tensor *ec = nb_expand(col, NB_SHAPE(2, 2));
    ASSERT_LAYOUT(ec, 2, DIMS(2, 2), DIMS(0, 3), 1);
    NBT_ASSERT_VALUES(ec, 0, 1, 4, 1, 4);
    /* Writing through the source shows up in every expanded copy. */
    nb_set(x, NB_IDX(0, 0), 7);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(e, NB_IDX(1, 0, 3)), 7, 0);
    /* Contiguous of an expanded tensor materialises the copies. */
    nb_tensor *c = nb_contiguous(nb_expand(nb_arange(NB_I64, 1, 3, 1), NB_SHAPE(3, 2)));
    ASSERT_LAYOUT(c, 2, DIMS(3, 2), DIMS(2, 1), 0);
    NBT_ASSERT_VALUES(c, 0, 1, 2, 1, 2, 1, 2);
}

/* ---- narrow and select ------------------------------------------------------------------------
 */

static void test_narrow(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(4, 5)); /* x[i][j] = 5i + j */
    nb_tensor *n = nb_narrow(x, 1, 1, 3);
    ASSERT_LAYOUT(n, 2, DIMS(4, 3), DIMS(5, 1), 1);
    CU_ASSERT_FALSE(nb_is_contiguous(n));
    NBT_ASSERT_VALUES(nb_narrow(n, 0, 2, 1), 0, 11, 12, 13);
    ASSERT_LAYOUT(nb_narrow(x, 0, -2, 2), 2, DIMS(2, 5), DIMS(5, 1), 10);
    CU_ASSERT_TRUE(nb_is_contiguous(nb_narrow(x, 0, 1, 2)));
    ASSERT_LAYOUT(nb_narrow(x, -1, 4, 1), 2, DIMS(4, 1), DIMS(5, 1), 4);
    NBT_ASSERT_VALUES(nb_narrow(x, -1, 4, 1), 0, 4, 9, 14, 19);
    /* An empty range is a valid empty view. */
    ASSERT_LAYOUT(nb_narrow(x, 1, 5, 0), 2, DIMS(4, 0), DIMS(5, 1), 5);
    CU_ASSERT_EQUAL(nb_numel(nb_narrow(x, 1, 5, 0)), 0);
}

static void test_select(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(2, 3, 4));
    nb_tensor *s = nb_select(x, 1, 2);
    ASSERT_LAYOUT(s, 2, DIMS(2, 4), DIMS(12, 1), 8);
    NBT_ASSERT_VALUES(s, 0, 8, 9, 10, 11, 20, 21, 22, 23);
    nb_tensor *last = nb_select(x, -1, -1);
    ASSERT_LAYOUT(last, 2, DIMS(2, 3), DIMS(12, 4), 3);
    NBT_ASSERT_VALUES(last, 0, 3, 7, 11, 15, 19, 23);
    nb_tensor *e = nb_select(nb_select(s, 0, 1), 0, 2); /* 0-d: x[1][2][2] */
    CU_ASSERT_EQUAL(e->ndim, 0);
    CU_ASSERT_EQUAL(e->offset, 22);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(e), 22, 0);
}

/* ---- views of views, shared storage -----------------------------------------------------------
 */

static void test_views_of_views(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(3, 4, 5)); /* x[i][j][k] = 20i + 5j + k */
    nb_tensor *t = nb_transpose(x, 0, 2);           /* t[k][j][i], strides [1, 5, 20] */
    nb_tensor *n = nb_narrow(t, 1, 1, 2);           /* j = j' + 1 */
    ASSERT_LAYOUT(n, 3, DIMS(5, 2, 3), DIMS(1, 5, 20), 5);
    nb_tensor *s = nb_select(n, 0, 3); /* k = 3: s[j'][i] = 20i + 5(j'+1) + 3 */
    ASSERT_LAYOUT(s, 2, DIMS(2, 3), DIMS(5, 20), 8);
    NBT_ASSERT_VALUES(s, 0, 8, 28, 48, 13, 33, 53);
    nb_tensor *u = nb_unsqueeze(nb_transpose(s, 0, 1), 0); /* [1, 3, 2] */
    ASSERT_LAYOUT(u, 3, DIMS(1, 3, 2), DIMS(60, 20, 5), 8);
    nb_tensor *e = nb_expand(u, NB_SHAPE(2, 3, 2));
    ASSERT_LAYOUT(e, 3, DIMS(2, 3, 2), DIMS(0, 20, 5), 8);
    NBT_ASSERT_VALUES(e, 0, 8, 13, 28, 33, 48, 53, 8, 13, 28, 33, 48, 53);
    /* Every one of them is a window on the same storage. */
    CU_ASSERT_PTR_EQUAL(e->storage, x->storage);
}

static void test_views_share_storage(void) {
    nb_tensor *x = ramp(NB_F32, NB_SHAPE(3, 4));
    nb_tensor *t = nb_transpose(x, 0, 1);
    nb_tensor *row = nb_select(x, 0, 2);
    nb_tensor *flat = nb_view(x, NB_SHAPE(12));
    /* Write through the transpose, read through the base and the other views. */
    CU_ASSERT_TRUE(nb_set(t, NB_IDX(3, 2), -1));
    CU_ASSERT_DOUBLE_EQUAL(nb_get(x, NB_IDX(2, 3)), -1, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(row, NB_IDX(3)), -1, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(flat, NB_IDX(11)), -1, 0);
    /* Fill a strided column through narrow; the rest is untouched. */
    CU_ASSERT_TRUE(nb_fill_(nb_narrow(x, 1, 1, 1), 9));
    NBT_ASSERT_VALUES(flat, 0, 0, 9, 2, 3, 4, 9, 6, 7, 8, 9, 10, -1);
    /* Copy into a transposed window of the base. */
    nb_tensor *src = nb_from_array(NB_F32, NB_SHAPE(2, 2), (float[]){100, 101, 102, 103});
    CU_ASSERT_TRUE(nb_copy_(nb_narrow(nb_narrow(t, 0, 2, 2), 1, 0, 2), src));
    /* t[2][0]=100 -> x[0][2], t[2][1]=101 -> x[1][2], t[3][0]=102 -> x[0][3], t[3][1]=103 */
    NBT_ASSERT_VALUES(x, 0, 0, 9, 100, 102, 4, 9, 101, 103, 8, 9, 10, -1);
    /* A detached tensor shares storage too. */
    nb_tensor *d = nb_detach(t);
    nb_set(d, NB_IDX(0, 0), 55);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(x, NB_IDX(0, 0)), 55, 0);
}

/* ---- contiguous and is_contiguous --------------------------------------------------------------
 */

static void test_contiguous_round_trip(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(2, 3));
    CU_ASSERT_PTR_EQUAL(nb_contiguous(x), x); /* already contiguous: the same tensor */
    nb_tensor *t = nb_transpose(x, 0, 1);
    nb_tensor *c = nb_contiguous(t);
    CU_ASSERT_PTR_NOT_EQUAL(c, t);
    CU_ASSERT_PTR_NOT_EQUAL(c->storage, x->storage);
    ASSERT_LAYOUT(c, 2, DIMS(3, 2), DIMS(2, 1), 0);
    NBT_ASSERT_VALUES(c, 0, 0, 3, 1, 4, 2, 5);
    CU_ASSERT_PTR_EQUAL(nb_contiguous(c), c);
    /* Back again: transpose of the copy, made contiguous, equals x. */
    nb_tensor *back = nb_contiguous(nb_transpose(c, 0, 1));
    NBT_ASSERT_CLOSE(back, x, 0, 0);
    /* A narrowed view is copied starting at its offset. */
    nb_tensor *n = nb_contiguous(nb_narrow(ramp(NB_I64, NB_SHAPE(3, 4)), 1, 2, 2));
    ASSERT_LAYOUT(n, 2, DIMS(3, 2), DIMS(2, 1), 0);
    NBT_ASSERT_VALUES(n, 0, 2, 3, 6, 7, 10, 11);
    /* The copy keeps its dtype. */
    CU_ASSERT_EQUAL(n->dtype, NB_I64);
}

static void test_is_contiguous(void) {
    nb_tensor *x = ramp(NB_F32, NB_SHAPE(2, 3, 4));
    CU_ASSERT_TRUE(nb_is_contiguous(x));
    CU_ASSERT_FALSE(nb_is_contiguous(nb_transpose(x, 0, 1)));
    CU_ASSERT_TRUE(nb_is_contiguous(nb_select(x, 0, 1)));  /* an offset is fine */
    CU_ASSERT_FALSE(nb_is_contiguous(nb_select(x, 1, 1))); /* a gap between rows */
    CU_ASSERT_TRUE(nb_is_contiguous(nb_narrow(x, 0, 1, 1)));
    CU_ASSERT_FALSE(nb_is_contiguous(nb_narrow(x, 2, 0, 3)));
    CU_ASSERT_TRUE(nb_is_contiguous(nb_scalar(NB_F64, 1)));
    /* Size-1 dims do not matter, whatever their stride. */
    CU_ASSERT_TRUE(nb_is_contiguous(nb_unsqueeze(x, 1)));
    CU_ASSERT_TRUE(nb_is_contiguous(nb_transpose(nb_zeros(NB_F32, NB_SHAPE(1, 5)), 0, 1)));
    CU_ASSERT_TRUE(nb_is_contiguous(nb_expand(nb_zeros(NB_F32, NB_SHAPE(1, 3)), NB_SHAPE(1, 3))));
    CU_ASSERT_FALSE(nb_is_contiguous(nb_expand(nb_zeros(NB_F32, NB_SHAPE(1, 3)), NB_SHAPE(2, 3))));
    CU_ASSERT_FALSE(nb_is_contiguous(NULL));
}

/* ---- concat, stack, split -----------------------------------------------------------------------
 */

static void test_concat(void) {
    nb_tensor *a = ramp(NB_F64, NB_SHAPE(2, 2));                     /* [[0,1],[2,3]] */
    nb_tensor *b = nb_full(NB_F64, NB_SHAPE(1, 2), 9);               /* [[9,9]] */
    nb_tensor *c = nb_transpose(ramp(NB_F64, NB_SHAPE(3, 2)), 0, 1); /* [[0,2,4],[1,3,5]] */
    nb_tensor *rows = nb_concat(2, (nb_tensor *[]){a, b}, 0);
    ASSERT_LAYOUT(rows, 2, DIMS(3, 2), DIMS(2, 1), 0);
    NBT_ASSERT_VALUES(rows, 0, 0, 1, 2, 3, 9, 9);
    nb_tensor *cols = nb_concat(2, (nb_tensor *[]){a, c}, -1);
    ASSERT_LAYOUT(cols, 2, DIMS(2, 5), DIMS(5, 1), 0);
    NBT_ASSERT_VALUES(cols, 0, 0, 1, 0, 2, 4, 2, 3, 1, 3, 5);
    /* One input: a copy. */
    nb_tensor *one = nb_concat(1, &c, 0);
    CU_ASSERT_PTR_NOT_EQUAL(one->storage, c->storage);
    NBT_ASSERT_VALUES(one, 0, 0, 2, 4, 1, 3, 5);
}

static void test_stack(void) {
    nb_tensor *a = nb_from_array(NB_F32, NB_SHAPE(2), (float[]){1, 2});
    nb_tensor *b = nb_from_array(NB_F32, NB_SHAPE(2), (float[]){3, 4});
    nb_tensor *s0 = nb_stack(2, (nb_tensor *[]){a, b}, 0);
    ASSERT_LAYOUT(s0, 2, DIMS(2, 2), DIMS(2, 1), 0);
    NBT_ASSERT_VALUES(s0, 0, 1, 2, 3, 4);
    nb_tensor *s1 = nb_stack(2, (nb_tensor *[]){a, b}, 1);
    NBT_ASSERT_VALUES(s1, 0, 1, 3, 2, 4);
    nb_tensor *sm = nb_stack(3, (nb_tensor *[]){a, b, a}, -1);
    ASSERT_LAYOUT(sm, 2, DIMS(2, 3), DIMS(3, 1), 0);
    NBT_ASSERT_VALUES(sm, 0, 1, 3, 1, 2, 4, 2);
    /* 2-D inputs, new middle dim. */
    nb_tensor *m = ramp(NB_F32, NB_SHAPE(2, 2));
    nb_tensor *st = nb_stack(2, (nb_tensor *[]){m, nb_transpose(m, 0, 1)}, 1);
    ASSERT_LAYOUT(st, 3, DIMS(2, 2, 2), DIMS(4, 2, 1), 0);
    NBT_ASSERT_VALUES(st, 0, 0, 1, 0, 2, 2, 3, 1, 3);
}

static void test_split(void) {
    nb_tensor *x = ramp(NB_F64, NB_SHAPE(2, 5));
    nb_tensor *parts[4] = {NULL};
    CU_ASSERT_EQUAL_FATAL(nb_split(x, 2, 1, parts, 4), 3);
    ASSERT_LAYOUT(parts[0], 2, DIMS(2, 2), DIMS(5, 1), 0);
    ASSERT_LAYOUT(parts[1], 2, DIMS(2, 2), DIMS(5, 1), 2);
    ASSERT_LAYOUT(parts[2], 2, DIMS(2, 1), DIMS(5, 1), 4);
    NBT_ASSERT_VALUES(parts[0], 0, 0, 1, 5, 6);
    NBT_ASSERT_VALUES(parts[1], 0, 2, 3, 7, 8);
    NBT_ASSERT_VALUES(parts[2], 0, 4, 9);
    CU_ASSERT_PTR_EQUAL(parts[1]->storage, x->storage); /* chunks are views */
    CU_ASSERT_PTR_NULL(parts[3]);
    /* Split along dim 0 with a size that divides exactly, negative dim. */
    CU_ASSERT_EQUAL_FATAL(nb_split(x, 1, -2, parts, 4), 2);
    NBT_ASSERT_VALUES(parts[1], 0, 5, 6, 7, 8, 9);
    /* A split size at least the dim gives one chunk. */
    CU_ASSERT_EQUAL_FATAL(nb_split(x, 7, 1, parts, 1), 1);
    ASSERT_LAYOUT(parts[0], 2, DIMS(2, 5), DIMS(5, 1), 0);
    CU_ASSERT_EQUAL(nb_split(x, INT64_MAX, 1, parts, 1), 1); /* no overflow counting chunks */
    /* Too little room in out is an error. */
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_split(x, 2, 1, parts, 2), -1);
    NBT_ASSERT_ERROR("split");
    NBT_ASSERT_ERROR("3 chunks");
}

/* ---- views on other dtypes ----------------------------------------------------------------------
 */

static void test_views_of_bool_and_i64(void) {
    nb_tensor *m = nb_from_array(NB_BOOL, NB_SHAPE(2, 3), (uint8_t[]){1, 0, 0, 1, 1, 0});
    nb_tensor *mt = nb_transpose(m, 0, 1);
    CU_ASSERT_EQUAL(mt->dtype, NB_BOOL);
    NBT_ASSERT_VALUES(mt, 0, 1, 1, 0, 1, 0, 0);
    NBT_ASSERT_VALUES(nb_reshape(mt, NB_SHAPE(6)), 0, 1, 1, 0, 1, 0, 0);
    nb_tensor *i = nb_from_array(NB_I64, NB_SHAPE(3), (int64_t[]){-5, 6, 1LL << 40});
    nb_tensor *ie = nb_expand(nb_unsqueeze(i, 0), NB_SHAPE(2, 3));
    NBT_ASSERT_VALUES(ie, 0, -5, 6, 1099511627776.0, -5, 6, 1099511627776.0);
    CU_ASSERT_EQUAL(((int64_t *)nb_data(nb_contiguous(ie)))[5], 1LL << 40);
}

int main(void) {
    const nbtest_case cases[] = {
        {"view infers -1", test_view_infers_minus_one},
        {"view of a compatible strided layout", test_view_of_compatible_strided_layout},
        {"transpose then view fails", test_transpose_then_view_fails},
        {"reshape is a view or a copy", test_reshape_view_or_copy},
        {"transpose", test_transpose},
        {"permute", test_permute},
        {"unsqueeze", test_unsqueeze},
        {"squeeze and squeeze_all", test_squeeze},
        {"expand", test_expand},
        {"narrow", test_narrow},
        {"select", test_select},
        {"views of views", test_views_of_views},
        {"views share storage", test_views_share_storage},
        {"contiguous round trip", test_contiguous_round_trip},
        {"is_contiguous", test_is_contiguous},
        {"concat", test_concat},
        {"stack", test_stack},
        {"split", test_split},
        {"views of bool and i64 tensors", test_views_of_bool_and_i64},
    };
    return nbtest_run("views", cases, sizeof cases / sizeof cases[0]);
}
