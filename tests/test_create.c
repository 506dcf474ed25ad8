/* Creation, dtype conversion, element access, fills and copies. Expected values are worked
 * out by hand (or, for arange sizes and float->int conversions, by PyTorch's documented
 * rules, noted beside each). */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

static bool contiguous_layout(const nb_tensor *t, nb_dtype dt, int ndim, const int64_t *shape) {
    if (!t || t->dtype != dt || t->ndim != ndim || t->offset != 0) return false;
    int64_t stride = 1; /* PyTorch's contiguous strides: a size-0 dim counts as 1 */
    for (int i = ndim - 1; i >= 0; i--) {
        if (t->shape[i] != shape[i] || t->strides[i] != stride) return false;
        stride *= shape[i] > 0 ? shape[i] : 1;
    }
    return !t->requires_grad && t->node == NULL;
}
#define ASSERT_CONTIGUOUS(t, dt, ...) CU_ASSERT(contiguous_layout((t), (dt), NB_SHAPE(__VA_ARGS__)))

static void test_empty_zeros_ones_full(void) {
    nb_tensor *e = nb_empty(NB_F32, NB_SHAPE(2, 3, 4));
    ASSERT_CONTIGUOUS(e, NB_F32, 2, 3, 4);
    CU_ASSERT_EQUAL(nb_numel(e), 24);
    CU_ASSERT_EQUAL(nb_size(e, -1), 4);
    CU_ASSERT_EQUAL(nb_size(e, 0), 2);
    CU_ASSERT_EQUAL(nb_size(e, 3), -1);
    CU_ASSERT_EQUAL(nb_size(e, -4), -1);
    /* Storage is 64-byte aligned. */
    CU_ASSERT_EQUAL((uintptr_t)nb_data(e) % 64, 0);

    const nb_dtype all[] = {NB_F32, NB_F64, NB_I64, NB_BOOL};
    for (int k = 0; k < 4; k++) {
        nb_tensor *z = nb_zeros(all[k], NB_SHAPE(3, 2));
        ASSERT_CONTIGUOUS(z, all[k], 3, 2);
        NBT_ASSERT_VALUES(z, 0, 0, 0, 0, 0, 0, 0);
        nb_tensor *o = nb_ones(all[k], NB_SHAPE(2));
        ASSERT_CONTIGUOUS(o, all[k], 2);
        NBT_ASSERT_VALUES(o, 0, 1, 1);
    }
    /* Zeros really writes zeros even into recycled buffers: dirty one first. */
    nb_scope_begin();
    nb_fill_(nb_empty(NB_F64, NB_SHAPE(5)), 3);
    nb_scope_end();
    NBT_ASSERT_VALUES(nb_zeros(NB_F64, NB_SHAPE(5)), 0, 0, 0, 0, 0, 0);

    NBT_ASSERT_VALUES(nb_full(NB_F64, NB_SHAPE(2, 2), -2.5), 0, -2.5, -2.5, -2.5, -2.5);
    NBT_ASSERT_VALUES(nb_full(NB_F32, NB_SHAPE(1), 0.1), 0, (double)0.1f);
    NBT_ASSERT_VALUES(nb_full(NB_I64, NB_SHAPE(2), -7), 0, -7, -7);
    NBT_ASSERT_VALUES(nb_full(NB_BOOL, NB_SHAPE(2), 0.5), 0, 1, 1); /* nonzero is true */
    /* Empty shapes are fine. */
    nb_tensor *none = nb_zeros(NB_F32, NB_SHAPE(3, 0));
    ASSERT_CONTIGUOUS(none, NB_F32, 3, 0);
    CU_ASSERT_EQUAL(nb_numel(none), 0);
}

static void test_scalar(void) {
    nb_tensor *s = nb_scalar(NB_F64, 2.25);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->ndim, 0);
    CU_ASSERT_EQUAL(nb_numel(s), 1);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(s), 2.25, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(s, NULL), 2.25, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_scalar(NB_I64, 42)), 42, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_scalar(NB_BOOL, -3)), 1, 0);
}

static void test_arange(void) {
    nb_tensor *a = nb_arange(NB_F64, 0, 5, 1);
    ASSERT_CONTIGUOUS(a, NB_F64, 5);
    NBT_ASSERT_VALUES(a, 0, 0, 1, 2, 3, 4);
    NBT_ASSERT_VALUES(nb_arange(NB_F32, 1, 2, 0.25), 0, 1, 1.25, 1.5, 1.75);
    NBT_ASSERT_VALUES(nb_arange(NB_F64, 5, 0, -1.5), 0, 5, 3.5, 2, 0.5);
    NBT_ASSERT_VALUES(nb_arange(NB_I64, 0, 5, 2), 0, 0, 2, 4);
    NBT_ASSERT_VALUES(nb_arange(NB_F64, -3, -1, 1), 0, -3, -2);
    /* Size is ceil((end - start) / step), as in PyTorch: (1 - 0) / 0.1 is 10 in doubles and
     * 0.3 / 0.1 is 2.9999999999999996, so 10 and 3 elements. */
    nb_tensor *tenth = nb_arange(NB_F64, 0, 1, 0.1);
    CU_ASSERT_EQUAL(nb_numel(tenth), 10);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(tenth, NB_IDX(7)), 0.7, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(tenth, NB_IDX(9)), 0.9, 1e-15);
    NBT_ASSERT_VALUES(nb_arange(NB_F64, 0, 0.3, 0.1), 1e-15, 0, 0.1, 0.2);
    /* An empty range is empty, not an error. */
    CU_ASSERT_EQUAL(nb_numel(nb_arange(NB_F32, 2, 2, 1)), 0);
    /* Step 0 and a step going the wrong way are errors naming arange. */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_arange(NB_F32, 0, 1, 0));
    NBT_ASSERT_ERROR("arange: ");
    NBT_ASSERT_ERROR("steps of 0");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_arange(NB_F32, 0, 1, -1));
    NBT_ASSERT_ERROR("arange: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_arange(NB_F64, 0, NAN, 1));
    NBT_ASSERT_ERROR("arange: ");
    /* Too many elements: an error, not a cast overflow. */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_arange(NB_F64, -1e308, 1e308, 1));
    NBT_ASSERT_ERROR("arange: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_arange(NB_F64, 0, 1e30, 1));
    NBT_ASSERT_ERROR("arange: ");
}

static void test_from_array(void) {
    float f[] = {1.5f, -2, 3, 4, 5, 6};
    nb_tensor *t = nb_from_array(NB_F32, NB_SHAPE(2, 3), f);
    ASSERT_CONTIGUOUS(t, NB_F32, 2, 3);
    f[0] = 100; /* the tensor holds a copy */
    NBT_ASSERT_VALUES(t, 0, 1.5, -2, 3, 4, 5, 6);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(t, NB_IDX(1, 0)), 4, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(t, NB_IDX(-1, -1)), 6, 0);
    NBT_ASSERT_VALUES(nb_from_array(NB_F64, NB_SHAPE(2), (double[]){0.1, 1e300}), 0, 0.1, 1e300);
    nb_tensor *i = nb_from_array(NB_I64, NB_SHAPE(2), (int64_t[]){INT64_MAX, -1});
    CU_ASSERT_EQUAL(((int64_t *)nb_data(i))[0], INT64_MAX);
    NBT_ASSERT_VALUES(nb_from_array(NB_BOOL, NB_SHAPE(3), (uint8_t[]){0, 1, 0}), 0, 0, 1, 0);
    /* 0-d and empty. */
    nb_tensor *s = nb_from_array(NB_F64, 0, NULL, (double[]){8});
    CU_ASSERT_EQUAL(s->ndim, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(s), 8, 0);
    CU_ASSERT_PTR_NOT_NULL(nb_from_array(NB_F32, NB_SHAPE(0, 4), NULL));
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_from_array(NB_F32, NB_SHAPE(2, 2), NULL));
    NBT_ASSERT_ERROR("from_array: ");
    NBT_ASSERT_ERROR("[2, 2]");
}

static void test_eye(void) {
    nb_tensor *e = nb_eye(NB_F32, 3);
    ASSERT_CONTIGUOUS(e, NB_F32, 3, 3);
    NBT_ASSERT_VALUES(e, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1);
    NBT_ASSERT_VALUES(nb_eye(NB_I64, 1), 0, 1);
    nb_tensor *z = nb_eye(NB_F64, 0);
    ASSERT_CONTIGUOUS(z, NB_F64, 0, 0);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_eye(NB_F32, -2));
    NBT_ASSERT_ERROR("eye: ");
    NBT_ASSERT_ERROR("-2");
}

static void test_tril_triu(void) {
    /* m = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]; entry (i, j) is kept by tril(k)
     * when j - i <= k and by triu(k) when j - i >= k. */
    nb_tensor *m = nb_view(nb_arange(NB_F64, 1, 13, 1), NB_SHAPE(3, 4));
    NBT_ASSERT_VALUES(nb_tril(m, 0), 0, 1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0);
    NBT_ASSERT_VALUES(nb_tril(m, 1), 0, 1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12);
    NBT_ASSERT_VALUES(nb_tril(m, -1), 0, 0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0);
    NBT_ASSERT_VALUES(nb_triu(m, 0), 0, 1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12);
    NBT_ASSERT_VALUES(nb_triu(m, 1), 0, 0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12);
    NBT_ASSERT_VALUES(nb_triu(m, -1), 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12);
    NBT_ASSERT_VALUES(nb_triu(m, 4), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    NBT_ASSERT_VALUES(nb_tril(m, -3), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    NBT_ASSERT_VALUES(nb_tril(m, 3), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
    /* The input is untouched; the result has its own storage. */
    nb_tensor *l = nb_tril(m, 0);
    CU_ASSERT_PTR_NOT_EQUAL(l->storage, m->storage);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(m, NB_IDX(0, 3)), 4, 0);
    /* Transposed input: mt = [[1,5,9],[2,6,10],[3,7,11],[4,8,12]]. */
    nb_tensor *mt = nb_transpose(m, 0, 1);
    NBT_ASSERT_VALUES(nb_triu(mt, 0), 0, 1, 5, 9, 0, 6, 10, 0, 0, 11, 0, 0, 0);
    /* Batched: each [2, 2] matrix of a [2, 2, 2] independently. */
    nb_tensor *b = nb_view(nb_arange(NB_I64, 1, 9, 1), NB_SHAPE(2, 2, 2));
    nb_tensor *bl = nb_tril(b, 0);
    CU_ASSERT_EQUAL(bl->dtype, NB_I64);
    CU_ASSERT_EQUAL(bl->ndim, 3);
    NBT_ASSERT_VALUES(bl, 0, 1, 0, 3, 4, 5, 0, 7, 8);
    NBT_ASSERT_VALUES(nb_triu(b, 1), 0, 0, 2, 0, 0, 0, 6, 0, 0);
    /* The causal mask of attention: triu(ones, 1) as bool. */
    nb_tensor *mask = nb_triu(nb_ones(NB_BOOL, NB_SHAPE(3, 3)), 1);
    NBT_ASSERT_VALUES(mask, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0);
    /* Fewer than 2 dims is an error naming the op and shape. */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_tril(nb_ones(NB_F32, NB_SHAPE(4)), 0));
    NBT_ASSERT_ERROR("tril: ");
    NBT_ASSERT_ERROR("[4]");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_triu(NULL, 0));
    NBT_ASSERT_ERROR("triu");
}

static void test_clone(void) {
    nb_tensor *x = nb_view(nb_arange(NB_F32, 0, 6, 1), NB_SHAPE(2, 3));
    nb_tensor *c = nb_clone(x);
    ASSERT_CONTIGUOUS(c, NB_F32, 2, 3);
    CU_ASSERT_PTR_NOT_EQUAL(c->storage, x->storage);
    NBT_ASSERT_CLOSE(c, x, 0, 0);
    nb_set(c, NB_IDX(0, 0), 9);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(x, NB_IDX(0, 0)), 0, 0);
    /* A clone of a strided view is contiguous with the view's values. */
    nb_tensor *ct = nb_clone(nb_transpose(x, 0, 1));
    ASSERT_CONTIGUOUS(ct, NB_F32, 3, 2);
    NBT_ASSERT_VALUES(ct, 0, 0, 3, 1, 4, 2, 5);
    /* A clone of a parameter has no autograd history and does not require grad. */
    nb_tensor *p = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2)), true);
    nb_tensor *pc = nb_clone(p);
    CU_ASSERT_FALSE(pc->requires_grad);
    CU_ASSERT_PTR_NULL(pc->node);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_clone(NULL));
    NBT_ASSERT_ERROR("clone");
}

static void test_to_dtype(void) {
    nb_tensor *f = nb_from_array(NB_F32, NB_SHAPE(5), (float[]){0.1f, -2.7f, 2.7f, 0, 3});
    nb_tensor *d = nb_to_dtype(f, NB_F64);
    ASSERT_CONTIGUOUS(d, NB_F64, 5);
    /* float -> double is exact: 0.1f is 0.100000001490116119384765625 */
    CU_ASSERT_EQUAL(((double *)nb_data(d))[0], 0.100000001490116119384765625);
    /* float -> int64 truncates toward zero (C and PyTorch) */
    nb_tensor *i = nb_to_dtype(f, NB_I64);
    ASSERT_CONTIGUOUS(i, NB_I64, 5);
    int64_t *iv = nb_data(i);
    CU_ASSERT(iv[0] == 0 && iv[1] == -2 && iv[2] == 2 && iv[3] == 0 && iv[4] == 3);
    /* float -> bool: nonzero is true */
    nb_tensor *b = nb_to_dtype(f, NB_BOOL);
    ASSERT_CONTIGUOUS(b, NB_BOOL, 5);
    uint8_t *bv = nb_data(b);
    CU_ASSERT(bv[0] == 1 && bv[1] == 1 && bv[2] == 1 && bv[3] == 0 && bv[4] == 1);
    /* bool -> float and int64: 0 and 1 */
    NBT_ASSERT_VALUES(nb_to_dtype(b, NB_F32), 0, 1, 1, 1, 0, 1);
    NBT_ASSERT_VALUES(nb_to_dtype(b, NB_I64), 0, 1, 1, 1, 0, 1);
    /* double -> float rounds to nearest: 1 + 2^-30 is not representable in float */
    nb_tensor *dd = nb_from_array(NB_F64, NB_SHAPE(2), (double[]){1 + 0x1p-30, 1e-50});
    float *fv = nb_data(nb_to_dtype(dd, NB_F32));
    CU_ASSERT(fv[0] == 1.0f && fv[1] == 0.0f);
    /* int64 -> double: 2^53 + 1 rounds to 2^53 (nearest even) */
    nb_tensor *big = nb_from_array(NB_I64, NB_SHAPE(2), (int64_t[]){(1LL << 53) + 1, -5});
    double *bd = nb_data(nb_to_dtype(big, NB_F64));
    CU_ASSERT(bd[0] == 9007199254740992.0 && bd[1] == -5);
    /* int64 -> bool */
    NBT_ASSERT_VALUES(
        nb_to_dtype(nb_from_array(NB_I64, NB_SHAPE(3), (int64_t[]){0, -1, 7}), NB_BOOL), 0, 0, 1,
        1);
    /* Non-finite floats to int64 give INT64_MIN, what PyTorch prints on x86, without
     * undefined behaviour (the sanitizer pass checks). NaN to bool is true. */
    nb_tensor *odd = nb_from_array(NB_F64, NB_SHAPE(4), (double[]){NAN, INFINITY, -1e300, 1e19});
    int64_t *ov = nb_data(nb_to_dtype(odd, NB_I64));
    CU_ASSERT(ov[0] == INT64_MIN && ov[1] == INT64_MIN && ov[2] == INT64_MIN && ov[3] == INT64_MIN);
    NBT_ASSERT_VALUES(nb_to_dtype(odd, NB_BOOL), 0, 1, 1, 1, 1);
    /* Always a copy, even to the same dtype, and of a strided input in logical order. */
    nb_tensor *m = nb_view(nb_arange(NB_F64, 0, 6, 1), NB_SHAPE(2, 3));
    nb_tensor *same = nb_to_dtype(nb_transpose(m, 0, 1), NB_F64);
    CU_ASSERT_PTR_NOT_EQUAL(same->storage, m->storage);
    NBT_ASSERT_VALUES(same, 0, 0, 3, 1, 4, 2, 5);
    /* Unknown dtype and NULL are errors. */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_to_dtype(m, (nb_dtype)7));
    NBT_ASSERT_ERROR("to_dtype: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_to_dtype(NULL, NB_F32));
    NBT_ASSERT_ERROR("to_dtype");
}

static void test_detach(void) {
    nb_tensor *p = nb_requires_grad_(nb_arange(NB_F64, 0, 4, 1), true);
    nb_tensor *v = nb_transpose(nb_view(p, NB_SHAPE(2, 2)), 0, 1);
    CU_ASSERT_TRUE(v->requires_grad);
    CU_ASSERT_PTR_NOT_NULL(v->node);
    nb_tensor *d = nb_detach(v);
    CU_ASSERT_FALSE(d->requires_grad);
    CU_ASSERT_PTR_NULL(d->node);
    CU_ASSERT_PTR_EQUAL(d->storage, p->storage);
    CU_ASSERT_EQUAL(d->strides[0], 1);
    CU_ASSERT_EQUAL(d->strides[1], 2);
    NBT_ASSERT_VALUES(d, 0, 0, 2, 1, 3);
    /* An op on the detached tensor records nothing. */
    nb_tensor *r = nb_reshape(d, NB_SHAPE(4));
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_PTR_NULL(r->node);
    CU_ASSERT_FALSE(r->requires_grad);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_detach(NULL));
    NBT_ASSERT_ERROR("detach");
}

static void test_get_set_item(void) {
    nb_tensor *t = nb_zeros(NB_F64, NB_SHAPE(2, 3));
    CU_ASSERT_TRUE(nb_set(t, NB_IDX(1, -1), 4.5));
    CU_ASSERT_TRUE(nb_set(t, NB_IDX(-2, 0), -1));
    NBT_ASSERT_VALUES(t, 0, -1, 0, 0, 0, 0, 4.5);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(t, NB_IDX(1, 2)), 4.5, 0);
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_get(t, NB_IDX(2, 0))));
    NBT_ASSERT_ERROR("get: ");
    NBT_ASSERT_ERROR("index 2");
    NBT_ASSERT_ERROR("[2, 3]");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_set(t, NB_IDX(0, -4), 1));
    NBT_ASSERT_ERROR("set: ");
    NBT_ASSERT_ERROR("index -4");
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_get(t, NULL)));
    NBT_ASSERT_ERROR("get: ");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_set(t, NULL, 1));
    NBT_ASSERT_ERROR("set: ");
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_get(NULL, NB_IDX(0))));
    NBT_ASSERT_ERROR("get: ");
    /* int64 and bool element types */
    nb_tensor *i = nb_zeros(NB_I64, NB_SHAPE(2));
    nb_set(i, NB_IDX(1), -3.9); /* truncated */
    CU_ASSERT_EQUAL(((int64_t *)nb_data(i))[1], -3);
    nb_tensor *b = nb_zeros(NB_BOOL, NB_SHAPE(2));
    nb_set(b, NB_IDX(0), 0.25);
    CU_ASSERT_EQUAL(((uint8_t *)nb_data(b))[0], 1);
    /* item: any one-element tensor, else NaN with an error */
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_full(NB_F32, NB_SHAPE(1, 1, 1), 3)), 3, 0);
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_item(t)));
    NBT_ASSERT_ERROR("item: ");
    NBT_ASSERT_ERROR("[2, 3]");
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_item(nb_zeros(NB_F32, NB_SHAPE(0)))));
    NBT_ASSERT_ERROR("item: ");
    /* to_doubles of a strided view goes in logical order */
    double out[6];
    CU_ASSERT_TRUE(nb_to_doubles(nb_transpose(t, 0, 1), out));
    CU_ASSERT(out[0] == -1 && out[1] == 0 && out[2] == 0 && out[3] == 0 && out[4] == 0 &&
              out[5] == 4.5);
    /* and of a contiguous view that starts inside its storage, in each element type: rows 1-2
     * of [[1, -2], [3.5, -4], [5, 6]] */
    const double rows[6] = {1, -2, 3.5, -4, 5, 6};
    const double want[4][4] = {{3.5, -4, 5, 6}, {3.5, -4, 5, 6}, {3, -4, 5, 6}, {1, 1, 1, 1}};
    const nb_dtype types[4] = {NB_F32, NB_F64, NB_I64, NB_BOOL};
    for (int k = 0; k < 4; k++) {
        nb_tensor *m = nb_to_dtype(nb_from_array(NB_F64, NB_SHAPE(3, 2), rows), types[k]);
        nb_tensor *tail = nb_narrow(m, 0, 1, 2);
        CU_ASSERT_TRUE(nb_is_contiguous(tail));
        CU_ASSERT_TRUE(nb_to_doubles(tail, out));
        for (int e = 0; e < 4; e++) CU_ASSERT_EQUAL(out[e], want[k][e]);
    }
}

static void test_fill(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(3, 4));
    CU_ASSERT_TRUE(nb_fill_(nb_narrow(nb_transpose(x, 0, 1), 0, 1, 2), 2));
    /* columns 1 and 2 of x */
    NBT_ASSERT_VALUES(x, 0, 0, 2, 2, 0, 0, 2, 2, 0, 0, 2, 2, 0);
    CU_ASSERT_TRUE(nb_fill_(x, -0.5));
    NBT_ASSERT_VALUES(nb_select(x, 0, 2), 0, -0.5, -0.5, -0.5, -0.5);
    nb_tensor *s = nb_scalar(NB_I64, 0);
    CU_ASSERT_TRUE(nb_fill_(s, 12));
    CU_ASSERT_DOUBLE_EQUAL(nb_item(s), 12, 0);
    CU_ASSERT_TRUE(nb_fill_(nb_zeros(NB_F64, NB_SHAPE(0, 3)), 1)); /* nothing to do */
    /* A contiguous float fill writes a first run and then doubles it by copies: every length
     * around the run (16 floats, 8 doubles) and its doublings fills exactly its elements, here
     * a window with one untouched element on each side. */
    const int64_t lengths[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 4099};
    const nb_dtype types[] = {NB_F32, NB_F64};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
            const int64_t n = lengths[i];
            nb_tensor *all = nb_full(types[k], NB_SHAPE(n + 2), 7);
            CU_ASSERT_TRUE(nb_fill_(nb_narrow(all, 0, 1, n), -1.25));
            double *v = malloc(sizeof(double) * (size_t)(n + 2));
            CU_ASSERT_TRUE(nb_to_doubles(all, v));
            int64_t wrong = 0;
            for (int64_t e = 1; e <= n; e++) wrong += v[e] != -1.25;
            CU_ASSERT_EQUAL(wrong, 0);
            CU_ASSERT_EQUAL(v[0], 7);
            CU_ASSERT_EQUAL(v[n + 1], 7);
            free(v);
        }
    nb_clear_error();
    CU_ASSERT_FALSE(nb_fill_(NULL, 1));
    NBT_ASSERT_ERROR("fill_");
}

static void test_copy_broadcasting(void) {
    nb_tensor *dst = nb_zeros(NB_F64, NB_SHAPE(2, 3));
    /* a row broadcast over every row */
    CU_ASSERT_TRUE(nb_copy_(dst, nb_from_array(NB_F64, NB_SHAPE(3), (double[]){1, 2, 3})));
    NBT_ASSERT_VALUES(dst, 0, 1, 2, 3, 1, 2, 3);
    /* a column broadcast over every column, converting from int64 */
    CU_ASSERT_TRUE(nb_copy_(dst, nb_from_array(NB_I64, NB_SHAPE(2, 1), (int64_t[]){7, -8})));
    NBT_ASSERT_VALUES(dst, 0, 7, 7, 7, -8, -8, -8);
    /* a 0-d scalar everywhere */
    CU_ASSERT_TRUE(nb_copy_(dst, nb_scalar(NB_F32, 0.5)));
    NBT_ASSERT_VALUES(dst, 0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5);
    /* into a strided destination from a strided source */
    nb_tensor *src = nb_view(nb_arange(NB_F64, 0, 6, 1), NB_SHAPE(3, 2)); /* [[0,1],[2,3],[4,5]] */
    CU_ASSERT_TRUE(nb_copy_(nb_transpose(dst, 0, 1), src));
    NBT_ASSERT_VALUES(dst, 0, 0, 2, 4, 1, 3, 5);
    /* float to int64 truncates, to bool tests nonzero */
    nb_tensor *idst = nb_zeros(NB_I64, NB_SHAPE(3));
    CU_ASSERT_TRUE(nb_copy_(idst, nb_from_array(NB_F32, NB_SHAPE(3), (float[]){1.9f, -1.9f, 0})));
    NBT_ASSERT_VALUES(idst, 0, 1, -1, 0);
    /* A source that does not broadcast to the destination: error naming both shapes. */
    nb_clear_error();
    CU_ASSERT_FALSE(nb_copy_(dst, nb_zeros(NB_F64, NB_SHAPE(2))));
    NBT_ASSERT_ERROR("copy_: ");
    NBT_ASSERT_ERROR("[2]");
    NBT_ASSERT_ERROR("[2, 3]");
    /* The destination does not broadcast: a [3] cannot receive a [2, 3]. */
    nb_clear_error();
    CU_ASSERT_FALSE(nb_copy_(nb_zeros(NB_F64, NB_SHAPE(3)), dst));
    NBT_ASSERT_ERROR("copy_: ");
    NBT_ASSERT_ERROR("[2, 3]");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_copy_(dst, NULL));
    NBT_ASSERT_ERROR("copy_");
}

/* nb_same_shape: equal dims in equal number, a 0-d tensor like another 0-d one. */
static void test_same_shape(void) {
    nb_tensor *a = nb_zeros(NB_F32, NB_SHAPE(2, 3)), *b = nb_ones(NB_F64, NB_SHAPE(2, 3));
    CU_ASSERT_TRUE(nb_same_shape(a, b));
    CU_ASSERT_FALSE(nb_same_shape(a, nb_zeros(NB_F32, NB_SHAPE(3, 2))));
    CU_ASSERT_FALSE(nb_same_shape(a, nb_zeros(NB_F32, NB_SHAPE(2, 4))));
    CU_ASSERT_FALSE(nb_same_shape(a, nb_zeros(NB_F32, NB_SHAPE(2, 3, 1))));
    CU_ASSERT_TRUE(nb_same_shape(nb_scalar(NB_F32, 1), nb_scalar(NB_I64, 2)));
    CU_ASSERT_FALSE(nb_same_shape(nb_scalar(NB_F32, 1), nb_zeros(NB_F32, NB_SHAPE(1))));
}

int main(void) {
    const nbtest_case cases[] = {
        {"empty, zeros, ones, full", test_empty_zeros_ones_full},
        {"scalar", test_scalar},
        {"arange", test_arange},
        {"from_array", test_from_array},
        {"eye", test_eye},
        {"tril and triu", test_tril_triu},
        {"clone", test_clone},
        {"to_dtype", test_to_dtype},
        {"detach", test_detach},
        {"get, set, item", test_get_set_item},
        {"same_shape", test_same_shape},
        {"fill_", test_fill},
        {"copy_ with broadcasting", test_copy_broadcasting},
    };
    return nbtest_run("create", cases, sizeof cases / sizeof cases[0]);
}
