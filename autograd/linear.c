/* nb_f_linear: y = x W^T + b as one op (PyTorch's F.linear). Fusing the transpose, the product
 * and the bias saves two nodes and two temporaries per layer, which is most of the cost of
 * the tiny models the tutorials train; the GEMM reads W through a transpose flag. */
#include "node.h"
#include "../tensor/gemm.h"
#include "../tensor/reduce_kernels.h"

#include <string.h>

/* A 2-D tensor as a GEMM operand: base pointer, leading dimension and transpose flag.
 * False when neither dim has unit stride. */
static bool as_matrix(const nb_tensor *t, const char **ptr, int64_t *ld, bool *trans) {
    *ptr = nbt_ptr(t);
    if (t->strides[1] == 1 || t->shape[1] == 1) {
        *ld = t->shape[0] > 1 ? t->strides[0] : t->shape[1];
        *trans = false;
        return *ld >= t->shape[1];
    }
    if (t->strides[0] == 1 || t->shape[0] == 1) {
        *ld = t->strides[1];
        *trans = true;
        return *ld >= t->shape[0];
    }
    return false;
}

/* t as a GEMM operand, copying it only if its layout cannot be read directly. */
static const nb_tensor *matrix_operand(const nb_tensor *t, const char **ptr, int64_t *ld,
                                       bool *trans) {
    if (as_matrix(t, ptr, ld, trans)) return t;
    nb_tensor *c = nbt_contiguous_as(t, t->dtype);
    if (c) as_matrix(c, ptr, ld, trans);
    return c;
}

/* C = op(A) op(B) (+ C if accumulate), all 2-D tensors, any dtype-matched floats. */
static bool gemm(const nb_tensor *a, bool ta, const nb_tensor *b, bool tb, nb_tensor *c,
                 bool accumulate) {
    const char *pa, *pb;
    int64_t lda = 0, ldb = 0;
    bool fa = false, fb = false;
    if (!(a = matrix_operand(a, &pa, &lda, &fa)) || !(b = matrix_operand(b, &pb, &ldb, &fb)))
        return false;
    int64_t M = c->shape[0], N = c->shape[1], K = ta ? a->shape[0] : a->shape[1];
    bool trans_a = ta != fa, trans_b = tb != fb;
    if (c->dtype == NB_F32)
        return nbt_sgemm(trans_a, trans_b, M, N, K, 1.0f, (const float *)pa, lda,
                         (const float *)pb, ldb, accumulate ? 1.0f : 0.0f, (float *)nbt_ptr(c),
                         c->strides[0]);
    return nbt_dgemm(trans_a, trans_b, M, N, K, 1.0, (const double *)pa, lda, (const double *)pb,
                     ldb, accumulate ? 1.0 : 0.0, (double *)nbt_ptr(c), c->strides[0]);
}

/* out [M, N] (new, contiguous) = x W^T + bias with the bias contiguous: the GEMM sets each
 * strip of rows to the bias as it reaches it. */
static bool gemm_with_bias(const nb_tensor *x, const nb_tensor *w, const nb_tensor *bias,
                           nb_tensor *out) {
    const char *pa, *pb;
    int64_t lda = 0, ldb = 0;
    bool fa = false, fb = false;
    if (!(x = matrix_operand(x, &pa, &lda, &fa)) || !(w = matrix_operand(w, &pb, &ldb, &fb)))
        return false;
    int64_t M = out->shape[0], N = out->shape[1], K = x->shape[1];
    if (out->dtype == NB_F32)
        return nbt_sgemm_bias(fa, !fb, M, N, K, (const float *)pa, lda, (const float *)pb, ldb,
                              (const float *)nbt_ptr(bias), (float *)nbt_ptr(out), N);
    return nbt_dgemm_bias(fa, !fb, M, N, K, (const double *)pa, lda, (const double *)pb, ldb,
                          (const double *)nbt_ptr(bias), (double *)nbt_ptr(out), N);
}

/* x [..., in] as rows [M, in] (a view when the layout allows, else a copy). */
static nb_tensor *rows_of(const nb_tensor *x) {
    int64_t shape[2] = {-1, x->shape[x->ndim - 1]};
    nb_tensor *r = nbt_numel(x) ? nbt_view(x, 2, shape) : NULL;
    if (r) return r;
    nb_clear_error();
    nb_tensor *c = nbt_contiguous_as(x, x->dtype);
    if (!c) return NULL;
    shape[0] = nbt_numel(c) / (shape[1] ? shape[1] : 1);
    return nbt_view(c, 2, shape);
}

/* Rows [r0, r1) of a contiguous output set to the bias, split across threads. */
typedef struct {
    char *out;
    const char *bias;
    size_t row_bytes;
} bias_rows_job;

static void fill_bias_rows(int64_t r0, int64_t r1, void *vjob) {
    const bias_rows_job *j = vjob;
    for (int64_t r = r0; r < r1; r++)
        memcpy(j->out + (size_t)r * j->row_bytes, j->bias, j->row_bytes);
}

/* out [M, N] (new, contiguous) = bias broadcast over the rows. */
static bool broadcast_bias(nb_tensor *out, const nb_tensor *bias) {
    int64_t M = out->shape[0], N = out->shape[1];
    if (N > 1 && bias->strides[0] != 1) return nbt_copy(out, bias);
    bias_rows_job job = {nbt_ptr(out), nbt_ptr(bias), (size_t)N * nbt_esize(out->dtype)};
    nbt_parallel_ranges(M, 32768 / (N > 0 ? N : 1) + 1, fill_bias_rows, &job);
    return true;
}

static void linear_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0], *w = n->inputs[1];
    int64_t out_f = w->shape[0], in_f = w->shape[1];
    nb_tensor *g = rows_of(gout); /* [M, out] */
    if (!g) return;
    if (nba_input_needs_grad(n, 0)) { /* dx = g W */
        int64_t shape[2] = {g->shape[0], in_f};
        nb_tensor *dx = nbt_new("linear", x->dtype, 2, shape);
        if (dx && gemm(g, false, w, false, dx, false))
            nba_accumulate(n, 0, nbt_view(dx, x->ndim, x->shape));
    }
    if (nba_input_needs_grad(n, 1)) { /* dW = g^T x, added straight into W's gradient */
        nb_tensor *xr = rows_of(x), *into = nba_leaf_grad(n, 1);
        if (into && w->ndim == 2) {
            if (xr) gemm(g, true, xr, false, into, true);
        } else {
            nb_tensor *dw = nbt_new("linear", w->dtype, 2, (int64_t[]){out_f, in_f});
            if (xr && dw && gemm(g, true, xr, false, dw, false)) nba_accumulate(n, 1, dw);
        }
    }
    if (n->ninputs > 2 && nba_input_needs_grad(n, 2)) /* db = sum of g over rows */
        nba_accumulate(n, 2, nbt_sum_dims(g, (bool[]){true, false}, false, 1.0));
}

nb_tensor *nb_f_linear(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias) {
    if (!nba_check_same_float("linear", x, weight)) return NULL;
    if (bias && !nba_check_same_float("linear", x, bias)) return NULL;
    if (weight->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != weight->shape[1])
        return nbt_error("linear", "input %s does not match weight %s: expected [..., %lld] and "
                         "[out, %lld]", nbt_shape(x), nbt_shape(weight),
                         (long long)(weight->ndim == 2 ? weight->shape[1] : -1),
                         (long long)(weight->ndim == 2 ? weight->shape[1] : -1));
    if (bias && (bias->ndim != 1 || bias->shape[0] != weight->shape[0]))
        return nbt_error("linear", "bias %s does not match weight %s: expected [%lld]",
                         nbt_shape(bias), nbt_shape(weight), (long long)weight->shape[0]);
    nb_tensor *xr = rows_of(x);
    int64_t shape[NB_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = weight->shape[0];
    nb_tensor *out = nbt_new("linear", x->dtype, x->ndim, shape);
    if (!xr || !out) return NULL;
    nb_tensor *out2 = nbt_view(out, 2, (int64_t[]){xr->shape[0], weight->shape[0]});
    /* The bias is broadcast into the output first, then the product accumulates onto it
     * (inside the GEMM, strip by strip, when the bias is contiguous). */
    bool done;
    if (bias && (bias->strides[0] == 1 || bias->shape[0] == 1))
        done = gemm_with_bias(xr, weight, bias, out2);
    else
        done = (!bias || broadcast_bias(out2, bias)) &&
               gemm(xr, false, weight, true, out2, bias != NULL);
    if (!done) return nbt_error("linear", "out of memory for GEMM buffers");
    nba_record("linear", out, bias ? 3 : 2, (const nb_tensor *[]){x, weight, bias},
               linear_backward);
    return out;
}
