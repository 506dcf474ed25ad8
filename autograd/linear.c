/* nb_f_linear: y = x W^T + b as one op (PyTorch's F.linear). Fusing the transpose, the product
 * and the bias saves two nodes and two temporaries per layer, which is most of the cost of
 * the tiny models the tutorials train; the GEMM reads W through a transpose flag. */
#include "node.h"
#include "gemm_operand.h"
#include "../tensor/gemm.h"
#include "../tensor/reduce_kernels.h"

#include <string.h>

/* out [M, N] (contiguous) = x W^T + bias with the bias contiguous: the GEMM sets each strip of
 * rows to the bias as it reaches it. */
static bool gemm_with_bias(const nba_matrix *x, const nba_matrix *w, const nb_tensor *bias,
                           nb_dtype dt, char *out, int64_t M, int64_t N) {
    int64_t K = x->cols;
    if (dt == NB_F32)
        return nbt_sgemm_bias(x->trans, !w->trans, M, N, K, (const float *)x->ptr, x->ld,
                              (const float *)w->ptr, w->ld, (const float *)nbt_ptr(bias),
                              (float *)out, N);
    return nbt_dgemm_bias(x->trans, !w->trans, M, N, K, (const double *)x->ptr, x->ld,
                          (const double *)w->ptr, w->ld, (const double *)nbt_ptr(bias),
                          (double *)out, N);
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

/* out [M, N] (contiguous) = bias broadcast over the rows. */
static bool broadcast_bias(nb_tensor *out, int64_t M, int64_t N, const nb_tensor *bias) {
    if (N > 1 && bias->strides[0] != 1) {
        nb_tensor *rows = nbt_view(out, 2, (int64_t[]){M, N});
        return rows && nbt_copy(rows, bias);
    }
    bias_rows_job job = {nbt_ptr(out), nbt_ptr(bias), (size_t)N * nbt_esize(out->dtype)};
    nbt_parallel_ranges(M, 32768 / (N > 0 ? N : 1) + 1, fill_bias_rows, &job);
    return true;
}

static void linear_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0], *w = n->inputs[1];
    int64_t out_f = w->shape[0], in_f = w->shape[1];
    nba_matrix g, wm;
    if (!nba_matrix_of(gout, &g) || !nba_matrix_of(w, &wm)) return; /* g: [M, out] */
    /* db first, while g, which the op before has just written, may still be in cache; it was
     * the third pass over g, after dx and dW. In turns on Zen 3: lm's step 0.988 and 0.994 of
     * its time at two threads, 0.992 and 0.995 at one (lmbig 0.95-0.98 in a few blocks). */
    if (n->ninputs > 2 && nba_input_needs_grad(n, 2)) {
        /* db = g summed over all but the last dim, straight into b's gradient if it has one */
        nb_tensor *into = nba_leaf_grad(n, 2);
        if (!into || !nbt_add_row_sums(into, gout)) {
            bool over[NB_MAX_DIMS];
            for (int i = 0; i < gout->ndim; i++) over[i] = i < gout->ndim - 1;
            nba_accumulate(n, 2, nbt_sum_dims(gout, over, false, 1.0));
        }
    }
    if (nba_input_needs_grad(n, 0)) { /* dx = g W */
        nb_tensor *dx = nbt_new("linear", x->dtype, x->ndim, x->shape);
        if (dx && nba_gemm(&g, false, &wm, false, x->dtype, nbt_ptr(dx), in_f, g.rows, in_f, false))
            nba_accumulate(n, 0, dx);
    }
    nba_matrix xm;
    if (nba_input_needs_grad(n, 1) && nba_matrix_of(x, &xm)) /* dW = g^T x */
        nba_weight_grad(n, 1, "linear", &g, &xm, w->dtype, out_f, in_f);
}

nb_tensor *nb_f_linear(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias) {
    if (!nba_check_same_float("linear", x, weight)) return NULL;
    if (bias && !nba_check_same_float("linear", x, bias)) return NULL;
    if (weight->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != weight->shape[1])
        return nbt_error("linear",
                         "input %s does not match weight %s: expected [..., %lld] and "
                         "[out, %lld]",
                         nbt_shape(x), nbt_shape(weight),
                         (long long)(weight->ndim == 2 ? weight->shape[1] : -1),
                         (long long)(weight->ndim == 2 ? weight->shape[1] : -1));
    if (bias && (bias->ndim != 1 || bias->shape[0] != weight->shape[0]))
        return nbt_error("linear", "bias %s does not match weight %s: expected [%lld]",
                         nbt_shape(bias), nbt_shape(weight), (long long)weight->shape[0]);
    nba_matrix xm, wm;
    if (!nba_matrix_of(x, &xm) || !nba_matrix_of(weight, &wm)) return NULL;
    int64_t shape[NB_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    int64_t M = xm.rows, N = weight->shape[0];
    shape[x->ndim - 1] = N;
    nb_tensor *out = nbt_new("linear", x->dtype, x->ndim, shape);
    if (!out) return NULL;
    /* The bias is broadcast into the output first, then the product accumulates onto it
     * (inside the GEMM, strip by strip, when the bias is contiguous). */
    bool done;
    if (bias && (bias->strides[0] == 1 || bias->shape[0] == 1))
        done = gemm_with_bias(&xm, &wm, bias, x->dtype, nbt_ptr(out), M, N);
    else
        done = (!bias || broadcast_bias(out, M, N, bias)) &&
               nba_gemm(&xm, false, &wm, true, x->dtype, nbt_ptr(out), N, M, N, bias != NULL);
    if (!done) return nbt_error("linear", "out of memory for GEMM buffers");
    nba_record("linear", out, bias ? 3 : 2, (const nb_tensor *[]){x, weight, bias},
               linear_backward);
    return out;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h) ---- */
#include "op_def.h"

static nb_tensor *cat_linear(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_f_linear(in[0], in[1], n > 2 ? in[2] : NULL);
}
/* The output transposed afterwards, so the gradient reaches linear's backward transposed. */
static nb_tensor *cat_linear_then_t(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_transpose(nb_f_linear(in[0], in[1], n > 2 ? in[2] : NULL), 0, -1);
}
/* x [3,2,4] with its first two dims swapped: rows contiguous, but the leading dims do not
 * collapse into one row stride. */
static nb_tensor *cat_linear_swapped_batch(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_f_linear(nb_transpose(in[0], 0, 1), in[1], n > 2 ? in[2] : NULL);
}

static int golden_f_linear(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_f_linear(c->input(c, "x", true), c->input(c, "weight", true),
                         c->input(c, "bias", false));
    return 1;
}

/* clang-format off */
static const nba_entry linear_entries[] = {
    {"linear [2,3,4] W [5,4] b [5]", NBA_RANDOM, cat_linear, 3, {IN(2, 3, 4), IN(5, 4), IN(5)}, NULL},
    {"linear transposed x, transposed W, sliced b", NBA_STRIDED, cat_linear, 3, {IN_T(3, 4), IN_T(5, 4), IN_S(5)}, NULL},
    {"linear sliced x (copied), no bias", NBA_STRIDED, cat_linear, 2, {IN_S(2, 4), IN(3, 4)}, NULL},
    {"linear [4] (1-D input) W [2,4]", NBA_STRIDED, cat_linear, 2, {IN(4), IN_S(2, 4)}, NULL},
    {"linear x [3,2,4] dims 0, 1 swapped", NBA_RANDOM, cat_linear_swapped_batch, 3, {IN(3, 2, 4), IN(5, 4), IN(5)}, NULL},
    {"linear 3-D transposed x [2,3,4]", NBA_STRIDED, cat_linear, 3, {IN_T(2, 3, 4), IN(5, 4), IN(5)}, NULL},
    {"linear [1,3,1,4] sliced x, size-1 dims", NBA_STRIDED, cat_linear, 3, {IN_S(1, 3, 1, 4), IN_T(2, 4), IN(2)}, NULL},
    {"linear, gradient transposed [3,4] W [5,4]", NBA_STRIDED, cat_linear_then_t, 3, {IN(3, 4), IN(5, 4), IN_S(5)}, NULL},
};
/* clang-format on */
static const nba_golden_case linear_cases[] = {{"x: [3,4]; weight: [5,4]; bias: [5]", ""},
                                               {"x: [2,3,4]; weight: [2,4]; bias: [2]", ""},
                                               {"x: [4]; weight: [3,4]; bias: [3]", ""},
                                               {"x: [2,3]; weight: [4,3]", ""}};
static const nba_golden linear_goldens[] = {
    NBA_GOLDEN("f_linear", golden_f_linear, "F.linear(x, weight, bias)", linear_cases)};
NBA_OP_DEF(nba_op_linear, "linear", linear_entries, linear_goldens,
           .not_applicable = {
               [NBA_BROADCAST] = "weight and bias have fixed shapes ([out, in], "
                                 "[out]); x's leading dims are rows, not a broadcast"});
#endif /* NABLA_TESTS */
