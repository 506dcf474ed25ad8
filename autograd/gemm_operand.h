/* Tensors read in place as GEMM operands, for the ops built on matrix products (linear.c,
 * qkv_attention.c). Internal to autograd/. */
#ifndef NABLA_GEMM_OPERAND_H
#define NABLA_GEMM_OPERAND_H

#include "node.h"
#include "../tensor/gemm.h"

/* A GEMM operand: a tensor [..., cols] read in place as a matrix [rows, cols] with a base
 * pointer, a leading dimension and a transpose flag. Reading in place, without a view
 * tensor per operand, is most of what a tiny layer costs. */
typedef struct {
    const char *ptr;
    int64_t rows, cols, ld;
    bool trans;
} nba_matrix;

/* False when the leading dims do not collapse to one row stride or neither of the two dims
 * has unit stride. */
static inline bool nba_matrix_in_place(const nb_tensor *t, nba_matrix *m) {
    int nd = t->ndim;
    int64_t cols = nd > 0 ? t->shape[nd - 1] : 1, col_stride = nd > 0 ? t->strides[nd - 1] : 1;
    int64_t rows = 1, row_stride = 0, next = 0;
    bool have_row_stride = false;
    for (int i = nd - 2; i >= 0; i--) {
        rows *= t->shape[i];
        if (t->shape[i] == 1) continue;
        if (!have_row_stride)
            row_stride = t->strides[i], have_row_stride = true;
        else if (t->strides[i] != next)
            return false;
        next = t->strides[i] * t->shape[i];
    }
    m->ptr = nbt_ptr(t), m->rows = rows, m->cols = cols;
    if (!have_row_stride) row_stride = cols; /* one row: any stride will do */
    if (col_stride == 1 || cols == 1) {
        m->ld = rows > 1 ? row_stride : cols, m->trans = false;
        return m->ld >= cols;
    }
    if (row_stride == 1 || rows == 1) {
        m->ld = col_stride, m->trans = true;
        return m->ld >= rows;
    }
    return false;
}

/* t as a GEMM operand, read in place if its layout allows, else from a contiguous copy (in
 * the current scope). False only when the copy fails. */
static inline bool nba_matrix_of(const nb_tensor *t, nba_matrix *m) {
    if (nbt_numel(t) == 0) { /* nothing to read: any pointer and leading dimension will do */
        int64_t rows = 1, cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
        for (int i = 0; i < t->ndim - 1; i++)
            if (__builtin_mul_overflow(rows, t->shape[i], &rows))
                return nbt_error("linear", "%s has more rows than int64 counts", nbt_shape(t)),
                       false;
        *m = (nba_matrix){.ptr = nbt_ptr(t), .rows = rows, .cols = cols, .ld = cols > 1 ? cols : 1};
        return true;
    }
    if (nba_matrix_in_place(t, m)) return true;
    nb_tensor *c = nbt_contiguous_as(t, t->dtype);
    return c && nba_matrix_in_place(c, m);
}

/* C [M, N] (row stride ldc) = op(A) op(B) (+ C if accumulate). False when the GEMM could not
 * get its buffers. */
static inline bool nba_gemm(const nba_matrix *a, bool ta, const nba_matrix *b, bool tb, nb_dtype dt,
                            char *c, int64_t ldc, int64_t M, int64_t N, bool accumulate) {
    int64_t K = ta ? a->rows : a->cols;
    bool trans_a = ta != a->trans, trans_b = tb != b->trans;
    if (dt == NB_F32)
        return nbt_sgemm(trans_a, trans_b, M, N, K, 1.0f, (const float *)a->ptr, a->ld,
                         (const float *)b->ptr, b->ld, accumulate ? 1.0f : 0.0f, (float *)c, ldc);
    return nbt_dgemm(trans_a, trans_b, M, N, K, 1.0, (const double *)a->ptr, a->ld,
                     (const double *)b->ptr, b->ld, accumulate ? 1.0 : 0.0, (double *)c, ldc);
}

/* The gradient of node input i, a weight [out, in], as g^T x (g [M, out], x [M, in]): added
 * straight into the weight's gradient when it has one (nba_leaf_grad), else computed into a
 * new tensor and accumulated. op names the new tensor's op. */
static inline void nba_weight_grad(nb_node *n, int i, const char *op, const nba_matrix *g,
                                   const nba_matrix *x, nb_dtype dt, int64_t out, int64_t in) {
    nb_tensor *into = nba_leaf_grad(n, i);
    if (into) {
        nba_gemm(g, true, x, false, dt, nbt_ptr(into), in, out, in, true);
        return;
    }
    nb_tensor *dw = nbt_new(op, dt, 2, (int64_t[]){out, in});
    if (dw && nba_gemm(g, true, x, false, dt, nbt_ptr(dw), in, out, in, false))
        nba_accumulate(n, i, dw);
}

#endif
