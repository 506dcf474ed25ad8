/* Elementwise ops: values by hand (or from Python's math module / PyTorch where noted),
 * broadcasting, non-contiguous inputs, NaN and inf, backward values and every error path. */
#include "harness.h"
#include "tensor/elementwise_kernels.h"

#include <stdlib.h>

#define D(...)                                                                                     \
    (const double[]) {                                                                             \
        __VA_ARGS__                                                                                \
    }
#define F(...)                                                                                     \
    (const float[]) {                                                                              \
        __VA_ARGS__                                                                                \
    }

/* A 0-d tensor. nb_scalar hands a NULL shape to memcpy in tensor/memory.c, which UBSan stops
 * on, so these tests pass an empty non-NULL shape instead until that is fixed. */
static nb_tensor *scalar(nb_dtype dt, double value) {
    return nb_full(dt, 0, (const int64_t[1]){0}, value);
}

/* The five points most unary checks use. */
static nb_tensor *five(nb_dtype dt) {
    return dt == NB_F64 ? nb_from_array(NB_F64, NB_SHAPE(5), D(-2, -0.5, 0, 0.5, 2))
                        : nb_from_array(NB_F32, NB_SHAPE(5), F(-2, -0.5f, 0, 0.5f, 2));
}

/* ---- binary forward ---- */
static void test_binary_same_shape(void) {
    nb_tensor *a = nb_from_array(NB_F64, NB_SHAPE(2, 3), D(1, 2, 3, 4, 5, 6));
    nb_tensor *b = nb_from_array(NB_F64, NB_SHAPE(2, 3), D(6, 5, 4, 3, 2, 1));
    nb_tensor *sum = nb_add(a, b);
    NBT_ASSERT_SHAPE(sum, 2, 3);
    CU_ASSERT_EQUAL(sum->dtype, NB_F64);
    NBT_ASSERT_VALUES(sum, 0, 7, 7, 7, 7, 7, 7);
    NBT_ASSERT_VALUES(nb_sub(a, b), 0, -5, -3, -1, 1, 3, 5);
    NBT_ASSERT_VALUES(nb_mul(a, b), 0, 6, 10, 12, 12, 10, 6);
    NBT_ASSERT_VALUES(nb_div(a, b), 1e-15, 1.0 / 6, 0.4, 0.75, 4.0 / 3, 2.5, 6);
}

static void test_binary_f32(void) {
    nb_tensor *a = nb_from_array(NB_F32, NB_SHAPE(4), F(1, 2, 3, 4));
    nb_tensor *b = nb_from_array(NB_F32, NB_SHAPE(4), F(0.5f, -2, 8, 3));
    nb_tensor *q = nb_div(a, b);
    CU_ASSERT_EQUAL(q->dtype, NB_F32);
    NBT_ASSERT_VALUES(q, 1e-7, 2, -1, 0.375, 4.0 / 3);
    NBT_ASSERT_VALUES(nb_mul(a, b), 0, 0.5, -4, 24, 12);
    NBT_ASSERT_VALUES(nb_sub(a, b), 0, 0.5, 4, -5, 1);
    NBT_ASSERT_VALUES(nb_add(a, b), 0, 1.5, 0, 11, 7);
}

/* [3,1] op [4] -> [3,4]: the column repeats along rows, the row along columns. */
static void test_broadcast_column_with_row(void) {
    nb_tensor *col = nb_from_array(NB_F64, NB_SHAPE(3, 1), D(1, 2, 3));
    nb_tensor *row = nb_from_array(NB_F64, NB_SHAPE(4), D(10, 20, 30, 40));
    nb_tensor *s = nb_add(col, row);
    NBT_ASSERT_SHAPE(s, 3, 4);
    NBT_ASSERT_VALUES(s, 0, 11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43);
    NBT_ASSERT_VALUES(nb_sub(row, col), 0, 9, 19, 29, 39, 8, 18, 28, 38, 7, 17, 27, 37);
    NBT_ASSERT_VALUES(nb_mul(col, row), 0, 10, 20, 30, 40, 20, 40, 60, 80, 30, 60, 90, 120);
    NBT_ASSERT_VALUES(nb_div(col, row), 1e-15, 0.1, 0.05, 1.0 / 30, 0.025, 0.2, 0.1, 2.0 / 30, 0.05,
                      0.3, 0.15, 0.1, 0.075);
    /* float32 takes the same paths */
    nb_tensor *col32 = nb_from_array(NB_F32, NB_SHAPE(3, 1), F(1, 2, 3));
    nb_tensor *row32 = nb_from_array(NB_F32, NB_SHAPE(4), F(10, 20, 30, 40));
    NBT_ASSERT_VALUES(nb_add(col32, row32), 0, 11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43);
}

static void test_broadcast_0d_scalar(void) {
    nb_tensor *s = scalar(NB_F64, 2);
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(2, 3), D(1, 2, 3, 4, 5, 6));
    nb_tensor *p = nb_mul(x, s);
    NBT_ASSERT_SHAPE(p, 2, 3);
    NBT_ASSERT_VALUES(p, 0, 2, 4, 6, 8, 10, 12);
    NBT_ASSERT_VALUES(nb_sub(s, x), 0, 1, 0, -1, -2, -3, -4);
    NBT_ASSERT_VALUES(nb_div(s, x), 1e-15, 2, 1, 2.0 / 3, 0.5, 0.4, 1.0 / 3);
    nb_tensor *ss = nb_add(s, scalar(NB_F64, 0.25));
    CU_ASSERT_EQUAL(ss->ndim, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(ss), 2.25, 0);
    /* a [1,1] tensor is a one-element operand too, and keeps its dims */
    nb_tensor *one = nb_from_array(NB_F64, NB_SHAPE(1, 1), D(-1));
    nb_tensor *q = nb_add(one, nb_from_array(NB_F64, NB_SHAPE(3), D(1, 2, 3)));
    NBT_ASSERT_SHAPE(q, 1, 3);
    NBT_ASSERT_VALUES(q, 0, 0, 1, 2);
}

/* A contiguous operand repeating every row, on either side, and a middle broadcast dim. */
static void test_broadcast_rows(void) {
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(2, 3), D(1, 2, 3, 4, 5, 6));
    nb_tensor *r = nb_from_array(NB_F64, NB_SHAPE(3), D(10, 20, 30));
    NBT_ASSERT_VALUES(nb_add(x, r), 0, 11, 22, 33, 14, 25, 36);
    NBT_ASSERT_VALUES(nb_div(r, x), 1e-14, 10, 10, 10, 2.5, 4, 5);
    nb_tensor *r13 = nb_from_array(NB_F64, NB_SHAPE(1, 3), D(1, 1, 1));
    NBT_ASSERT_VALUES(nb_sub(r13, x), 0, 0, -1, -2, -3, -4, -5);
    nb_tensor *y = nb_from_array(NB_F64, NB_SHAPE(2, 1, 3), D(1, 2, 3, -1, -2, -3));
    nb_tensor *m = nb_mul(y, x);
    NBT_ASSERT_SHAPE(m, 2, 2, 3);
    NBT_ASSERT_VALUES(m, 0, 1, 4, 9, 4, 10, 18, -1, -4, -9, -4, -10, -18);
}

static void test_non_contiguous_inputs(void) {
    /* t = [[0, 3], [1, 4], [2, 5]] with strides (1, 3) */
    nb_tensor *t = nb_transpose(nb_view(nb_arange(NB_F64, 0, 6, 1), NB_SHAPE(2, 3)), 0, 1);
    CU_ASSERT_FALSE(nb_is_contiguous(t));
    nb_tensor *c = nb_from_array(NB_F64, NB_SHAPE(3, 2), D(10, 20, 30, 40, 50, 60));
    NBT_ASSERT_VALUES(nb_add(t, c), 0, 10, 23, 31, 44, 52, 65);
    NBT_ASSERT_VALUES(nb_mul(c, t), 0, 0, 60, 30, 160, 100, 300);
    /* every other element: [0, 2, 4] */
    nb_tensor *sliced = nb_select(nb_view(nb_arange(NB_F64, 0, 6, 1), NB_SHAPE(3, 2)), 1, 0);
    NBT_ASSERT_VALUES(nb_sub(sliced, scalar(NB_F64, 1)), 0, -1, 1, 3);
    /* expanded (stride 0) with transposed */
    nb_tensor *e = nb_expand(nb_from_array(NB_F64, NB_SHAPE(3, 1), D(1, 2, 3)), NB_SHAPE(3, 2));
    NBT_ASSERT_VALUES(nb_mul(e, t), 0, 0, 3, 2, 8, 6, 15);
    /* unary ops on strided inputs */
    NBT_ASSERT_VALUES(nb_neg(t), 0, 0, -3, -1, -4, -2, -5);
    NBT_ASSERT_VALUES(nb_exp(sliced), 1e-15, 1, 7.38905609893065, 54.598150033144236);
    NBT_ASSERT_VALUES(nb_relu(nb_add_scalar(t, -2.5)), 0, 0, 0.5, 0, 1.5, 0, 2.5);
}

/* Element-by-element references in plain C for larger, odd-sized tensors: every path
 * (flat, rows, iterate with unit, zero and other strides) must match them exactly. */
static void test_paths_match_plain_loops(void) {
    enum { R = 37, C = 301 };
    nb_rng rng;
    nb_rng_seed(&rng, 7);
    nb_tensor *a = nb_randn(&rng, NB_F32, NB_SHAPE(R, C));
    nb_tensor *b = nb_randn(&rng, NB_F32, NB_SHAPE(R, C));
    nb_tensor *row = nb_randn(&rng, NB_F32, NB_SHAPE(C));
    nb_tensor *col = nb_randn(&rng, NB_F32, NB_SHAPE(R, 1));
    const float *pa = nb_data(a), *pb = nb_data(b), *pr = nb_data(row), *pc = nb_data(col);
    nb_tensor *want_ab = nb_empty(NB_F32, NB_SHAPE(R, C));
    nb_tensor *want_row = nb_empty(NB_F32, NB_SHAPE(R, C));
    nb_tensor *want_col = nb_empty(NB_F32, NB_SHAPE(R, C));
    nb_tensor *want_t = nb_empty(NB_F32, NB_SHAPE(C, R));
    float *wab = nb_data(want_ab), *wr = nb_data(want_row), *wc = nb_data(want_col),
          *wt = nb_data(want_t);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            wab[i * C + j] = pa[i * C + j] * pb[i * C + j];
            wr[i * C + j] = pa[i * C + j] - pr[j];
            wc[i * C + j] = pa[i * C + j] / pc[i];
            wt[j * R + i] = pa[i * C + j] + pb[i * C + j];
        }
    NBT_ASSERT_CLOSE(nb_mul(a, b), want_ab, 0, 0);
    NBT_ASSERT_CLOSE(nb_sub(a, row), want_row, 0, 0);
    NBT_ASSERT_CLOSE(nb_div(a, col), want_col, 0, 0);
    NBT_ASSERT_CLOSE(nb_add(nb_transpose(a, 0, 1), nb_transpose(b, 0, 1)), want_t, 0, 0);
    /* transcendental kernels: contiguous, transposed and sliced layouts give the same bits,
     * and agree with libm to a few float32 ulps */
    nb_tensor *wide = nb_randn(&rng, NB_F32, NB_SHAPE(R, C, 2));
    nb_tensor *sliced = nb_select(wide, 2, 1);
    nb_tensor *dense = nb_contiguous(sliced);
    nb_tensor *(*ops[])(const nb_tensor *) = {nb_exp, nb_tanh, nb_sigmoid, nb_gelu, nb_gelu_tanh};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        nb_tensor *ref = ops[k](dense);
        NBT_ASSERT_CLOSE(ops[k](sliced), ref, 0, 0);
        NBT_ASSERT_CLOSE(nb_transpose(ops[k](nb_transpose(dense, 0, 1)), 0, 1), ref, 0, 0);
    }
    nb_tensor *want_exp = nb_empty(NB_F32, NB_SHAPE(R, C));
    float *we = nb_data(want_exp);
    const float *pd = nb_data(dense);
    for (int k = 0; k < R * C; k++) we[k] = expf(pd[k]);
    NBT_ASSERT_CLOSE(nb_exp(sliced), want_exp, 0, 3e-7);
    nb_tensor *pos = nb_add_scalar(nb_mul(dense, dense), 0.01);
    nb_tensor *want_log = nb_empty(NB_F32, NB_SHAPE(R, C));
    float *wl = nb_data(want_log);
    const float *pp = nb_data(pos);
    for (int k = 0; k < R * C; k++) wl[k] = logf(pp[k]);
    NBT_ASSERT_CLOSE(nb_log(nb_transpose(nb_contiguous(nb_transpose(pos, 0, 1)), 0, 1)), want_log,
                     1e-7, 3e-7);
}

/* ---- unary forward ---- */
static void test_unary_values_f64(void) {
    nb_tensor *x = five(NB_F64);
    NBT_ASSERT_VALUES(nb_neg(x), 0, 2, 0.5, 0, -0.5, -2);
    NBT_ASSERT_VALUES(nb_add_scalar(x, 1.5), 0, -0.5, 1, 1.5, 2, 3.5);
    NBT_ASSERT_VALUES(nb_mul_scalar(x, -3), 0, 6, 1.5, 0, -1.5, -6);
    NBT_ASSERT_VALUES(nb_pow_scalar(x, 2), 0, 4, 0.25, 0, 0.25, 4);
    NBT_ASSERT_VALUES(nb_pow_scalar(x, 3), 0, -8, -0.125, 0, 0.125, 8);
    /* Python math: exp, tanh, 1 / (1 + exp(-x)), x * Phi(x), PyTorch's tanh-approximate gelu */
    NBT_ASSERT_VALUES(nb_exp(x), 1e-15, 0.1353352832366127, 0.6065306597126334, 1,
                      1.6487212707001282, 7.38905609893065);
    NBT_ASSERT_VALUES(nb_tanh(x), 1e-15, -0.9640275800758169, -0.46211715726000974, 0,
                      0.46211715726000974, 0.9640275800758169);
    NBT_ASSERT_VALUES(nb_sigmoid(x), 1e-15, 0.11920292202211755, 0.3775406687981454, 0.5,
                      0.6224593312018546, 0.8807970779778823);
    NBT_ASSERT_VALUES(nb_relu(x), 0, 0, 0, 0, 0.5, 2);
    NBT_ASSERT_VALUES(nb_gelu(x), 1e-15, -0.04550026389635842, -0.15426876936299344, 0,
                      0.34573123063700656, 1.9544997361036416);
    NBT_ASSERT_VALUES(nb_gelu_tanh(x), 1e-15, -0.04540230591222494, -0.15428599017485606, 0,
                      0.34571400982514394, 1.954597694087775);
    nb_tensor *p = nb_from_array(NB_F64, NB_SHAPE(4), D(0.25, 1, 2, 9));
    NBT_ASSERT_VALUES(nb_sqrt(p), 1e-15, 0.5, 1, 1.4142135623730951, 3);
    NBT_ASSERT_VALUES(nb_pow_scalar(p, 1.5), 1e-14, 0.125, 1, 2.8284271247461903, 27);
    NBT_ASSERT_VALUES(nb_pow_scalar(p, -0.5), 1e-15, 2, 1, 0.7071067811865475, 0.3333333333333333);
    NBT_ASSERT_VALUES(nb_log(p), 1e-15, -1.3862943611198906, 0, 0.6931471805599453,
                      2.1972245773362196);
}

static void test_unary_values_f32(void) {
    nb_tensor *x = five(NB_F32);
    nb_tensor *e = nb_exp(x);
    CU_ASSERT_EQUAL(e->dtype, NB_F32);
    NBT_ASSERT_VALUES(e, 1e-6, 0.1353352832366127, 0.6065306597126334, 1, 1.6487212707001282,
                      7.38905609893065);
    NBT_ASSERT_VALUES(nb_tanh(x), 1e-7, -0.9640275800758169, -0.46211715726000974, 0,
                      0.46211715726000974, 0.9640275800758169);
    NBT_ASSERT_VALUES(nb_sigmoid(x), 1e-7, 0.11920292202211755, 0.3775406687981454, 0.5,
                      0.6224593312018546, 0.8807970779778823);
    /* the exact values, to about one float32 ulp (PyTorch's own float32 gelu(2) is two ulps
     * off, 1.95449996) */
    NBT_ASSERT_VALUES(nb_gelu(x), 1.5e-7, -0.04550026389635842, -0.15426876936299344, 0,
                      0.34573123063700656, 1.9544997361036416);
    NBT_ASSERT_VALUES(nb_gelu_tanh(x), 1.5e-7, -0.04540230591222494, -0.15428599017485606, 0,
                      0.34571400982514394, 1.954597694087775);
    NBT_ASSERT_VALUES(nb_pow_scalar(nb_add_scalar(x, 3), 0.5), 1e-7, 1, 1.5811388300841898,
                      1.7320508075688772, 1.8708286933869707, 2.23606797749979);
    NBT_ASSERT_VALUES(nb_log(nb_add_scalar(x, 3)), 1e-7, 0, 0.9162907318741551, 1.0986122886681098,
                      1.252762968495368, 1.6094379124341003);
    NBT_ASSERT_VALUES(nb_mul_scalar(x, 0.1), 1e-8, -0.2, -0.05, 0, 0.05, 0.2);
}

/* NaN and inf where the definitions matter: relu keeps NaN and -0 (as PyTorch), exp and
 * sigmoid saturate without NaN, log of 0 and of a negative. */
static void test_nan_and_inf(void) {
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(6), D(NAN, -INFINITY, INFINITY, -0.0, -1, 2));
    nb_tensor *r = nb_relu(x);
    NBT_ASSERT_VALUES(r, 0, NBT_NAN, 0, INFINITY, 0, 0, 2);
    CU_ASSERT_TRUE(signbit(nb_get(r, NB_IDX(3))));
    nb_tensor *r32 = nb_relu(nb_to_dtype(x, NB_F32));
    NBT_ASSERT_VALUES(r32, 0, NBT_NAN, 0, INFINITY, 0, 0, 2);

    nb_tensor *big = nb_from_array(NB_F64, NB_SHAPE(5), D(-INFINITY, INFINITY, 1000, -1000, NAN));
    NBT_ASSERT_VALUES(nb_exp(big), 0, 0, INFINITY, INFINITY, 0, NBT_NAN);
    nb_tensor *big32 = nb_from_array(NB_F32, NB_SHAPE(3), F(100, -200, 88));
    NBT_ASSERT_VALUES(nb_exp(big32), 1e32, INFINITY, 0, 1.6516362549940018e38);
    NBT_ASSERT_VALUES(nb_sigmoid(big), 0, 0, 1, 1, 0, NBT_NAN);
    NBT_ASSERT_VALUES(nb_sigmoid(nb_to_dtype(big, NB_F32)), 0, 0, 1, 1, 0, NBT_NAN);
    NBT_ASSERT_VALUES(nb_tanh(big), 0, -1, 1, 1, -1, NBT_NAN);
    nb_tensor *l = nb_log(nb_from_array(NB_F64, NB_SHAPE(3), D(0, -1, INFINITY)));
    NBT_ASSERT_VALUES(l, 0, -INFINITY, NBT_NAN, INFINITY);
}

/* ---- backward ---- */
/* grad of sum(f(x)), i.e. f'(x) elementwise. */
static nb_tensor *grad_of_sum(nb_tensor *(*f)(const nb_tensor *), nb_tensor *x) {
    nb_requires_grad_(x, true);
    nb_tensor *loss = nb_sum(f(x));
    if (!loss || !nb_backward(loss, NULL)) return NULL;
    return nb_grad(x);
}

static nb_tensor *square(const nb_tensor *x) {
    return nb_pow_scalar(x, 2);
}
static nb_tensor *pow_1_5(const nb_tensor *x) {
    return nb_pow_scalar(x, 1.5);
}
static nb_tensor *pow_0(const nb_tensor *x) {
    return nb_pow_scalar(x, 0);
}
static nb_tensor *plus_3(const nb_tensor *x) {
    return nb_add_scalar(x, 3);
}
static nb_tensor *times_3(const nb_tensor *x) {
    return nb_mul_scalar(x, -3);
}

static void test_unary_backward_values(void) {
    /* PyTorch float64 gradients at -2, -0.5, 0, 0.5, 2 */
    NBT_ASSERT_VALUES(grad_of_sum(nb_exp, five(NB_F64)), 1e-15, 0.1353352832366127,
                      0.6065306597126334, 1, 1.6487212707001282, 7.38905609893065);
    NBT_ASSERT_VALUES(grad_of_sum(nb_tanh, five(NB_F64)), 1e-15, 0.07065082485316443,
                      0.7864477329659274, 1, 0.7864477329659274, 0.07065082485316443);
    NBT_ASSERT_VALUES(grad_of_sum(nb_sigmoid, five(NB_F64)), 1e-15, 0.1049935854035065,
                      0.2350037122015945, 0.25, 0.2350037122015945, 0.10499358540350662);
    NBT_ASSERT_VALUES(grad_of_sum(nb_gelu, five(NB_F64)), 1e-15, -0.08523180107819692,
                      0.13250487534383712, 0.5, 0.8674951246561629, 1.085231801078197);
    NBT_ASSERT_VALUES(grad_of_sum(nb_gelu_tanh, five(NB_F64)), 1e-15, -0.0860992566236183,
                      0.13263009646535764, 0.5, 0.8673699035346424, 1.0860992566236183);
    /* by hand */
    NBT_ASSERT_VALUES(grad_of_sum(nb_neg, five(NB_F64)), 0, -1, -1, -1, -1, -1);
    NBT_ASSERT_VALUES(grad_of_sum(plus_3, five(NB_F64)), 0, 1, 1, 1, 1, 1);
    NBT_ASSERT_VALUES(grad_of_sum(times_3, five(NB_F64)), 0, -3, -3, -3, -3, -3);
    NBT_ASSERT_VALUES(grad_of_sum(square, five(NB_F64)), 0, -4, -1, 0, 1, 4);
    NBT_ASSERT_VALUES(grad_of_sum(nb_relu, five(NB_F64)), 0, 0, 0, 0, 1, 1);
    nb_tensor *p = nb_from_array(NB_F64, NB_SHAPE(4), D(0.25, 1, 2, 9));
    NBT_ASSERT_VALUES(grad_of_sum(nb_log, p), 1e-15, 4, 1, 0.5, 1.0 / 9);
    p = nb_from_array(NB_F64, NB_SHAPE(4), D(0.25, 1, 2, 9));
    NBT_ASSERT_VALUES(grad_of_sum(nb_sqrt, p), 1e-15, 1, 0.5, 0.35355339059327373, 1.0 / 6);
    p = nb_from_array(NB_F64, NB_SHAPE(4), D(0.25, 1, 2, 9));
    NBT_ASSERT_VALUES(grad_of_sum(pow_1_5, p), 1e-15, 0.75, 1.5, 2.121320343559643, 4.5);
    /* x^0 has gradient 0 everywhere, also at 0 (PyTorch's convention), never NaN */
    NBT_ASSERT_VALUES(grad_of_sum(pow_0, five(NB_F64)), 0, 0, 0, 0, 0, 0);
    /* relu passes the gradient where the output is NaN and blocks it at 0 (PyTorch) */
    nb_tensor *special = nb_from_array(NB_F64, NB_SHAPE(4), D(NAN, -1, 0, 2));
    NBT_ASSERT_VALUES(grad_of_sum(nb_relu, special), 0, 1, 0, 0, 1);
    nb_tensor *inf = nb_from_array(NB_F64, NB_SHAPE(2), D(-INFINITY, 0));
    NBT_ASSERT_VALUES(grad_of_sum(nb_exp, inf), 0, 0, 1);
    /* float32 gradients */
    NBT_ASSERT_VALUES(grad_of_sum(nb_tanh, five(NB_F32)), 1e-7, 0.07065082485316443,
                      0.7864477329659274, 1, 0.7864477329659274, 0.07065082485316443);
    NBT_ASSERT_VALUES(grad_of_sum(nb_gelu, five(NB_F32)), 2e-7, -0.08523180107819692,
                      0.13250487534383712, 0.5, 0.8674951246561629, 1.085231801078197);
}

/* sum over [3,4] of col[3,1] op row[4]: gradients summed over the broadcast dims by hand. */
static void test_binary_backward_broadcast(void) {
    nb_tensor *(*ops[])(const nb_tensor *, const nb_tensor *) = {nb_add, nb_sub, nb_mul, nb_div};
    /* col = [1, 2, 3], row = [10, 20, 30, 40] */
    const double want_col[4][3] = {{4, 4, 4},
                                   {4, 4, 4},
                                   {100, 100, 100},
                                   {0.1 + 0.05 + 1.0 / 30 + 0.025, 0.1 + 0.05 + 1.0 / 30 + 0.025,
                                    0.1 + 0.05 + 1.0 / 30 + 0.025}};
    const double want_row[4][4] = {{3, 3, 3, 3},
                                   {-3, -3, -3, -3},
                                   {6, 6, 6, 6},
                                   {-6.0 / 100, -6.0 / 400, -6.0 / 900, -6.0 / 1600}};
    for (int k = 0; k < 4; k++) {
        nb_tensor *col = nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(3, 1), D(1, 2, 3)), true);
        nb_tensor *row =
            nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(4), D(10, 20, 30, 40)), true);
        CU_ASSERT_TRUE(nb_backward(nb_sum(ops[k](col, row)), NULL));
        NBT_ASSERT_SHAPE(nb_grad(col), 3, 1);
        NBT_ASSERT_SHAPE(nb_grad(row), 4);
        CU_ASSERT_TRUE(nbtest_values(nb_grad(col), want_col[k], 3, 1e-15));
        CU_ASSERT_TRUE(nbtest_values(nb_grad(row), want_row[k], 4, 1e-15));
    }
    /* a 0-d scalar times [2,3]: the scalar's gradient is the sum of the other operand */
    nb_tensor *s = nb_requires_grad_(scalar(NB_F64, 2), true);
    nb_tensor *x =
        nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(2, 3), D(1, 2, 3, 4, 5, 6)), true);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(s, x)), NULL));
    CU_ASSERT_EQUAL(nb_grad(s)->ndim, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_grad(s)), 21, 0);
    NBT_ASSERT_VALUES(nb_grad(x), 0, 2, 2, 2, 2, 2, 2);
    /* a/b with b a 0-d: d/db sum(a / b) = -sum(a) / b^2 */
    nb_tensor *b = nb_requires_grad_(scalar(NB_F64, 4), true);
    nb_tensor *a = nb_from_array(NB_F64, NB_SHAPE(3), D(1, 2, 5));
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_div(a, b)), NULL));
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_grad(b)), -8.0 / 16, 1e-15);
    CU_ASSERT_FALSE(a->requires_grad);
    CU_ASSERT_PTR_NULL(nb_grad(a));
}

/* Gradients through non-contiguous inputs land in each input's own layout. */
static void test_backward_non_contiguous(void) {
    nb_tensor *x = nb_requires_grad_(nb_arange(NB_F64, 0, 6, 1), true);
    nb_tensor *t = nb_transpose(nb_view(x, NB_SHAPE(2, 3)), 0, 1); /* [[0,3],[1,4],[2,5]] */
    nb_tensor *w = nb_from_array(NB_F64, NB_SHAPE(3, 2), D(1, 2, 3, 4, 5, 6));
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(t, w)), NULL));
    /* x[k] meets w at transposed position: x0-w0, x3-w1, x1-w2, x4-w3, x2-w4, x5-w5 */
    NBT_ASSERT_VALUES(nb_grad(x), 0, 1, 3, 5, 2, 4, 6);
}

static void test_fan_out(void) {
    nb_tensor *x = nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(3), D(-1, 0.5, 2)), true);
    nb_tensor *y = nb_add(nb_mul(x, x), x);
    NBT_ASSERT_VALUES(y, 0, 0, 0.75, 6);
    CU_ASSERT_TRUE(nb_backward(nb_sum(y), NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 0, -1, 2, 5); /* 2x + 1 */
}

static void test_grad_mode(void) {
    nb_tensor *a = nb_requires_grad_(nb_ones(NB_F32, NB_SHAPE(2)), true);
    nb_tensor *b = nb_ones(NB_F32, NB_SHAPE(2));
    CU_ASSERT_TRUE(nb_add(a, b)->requires_grad);
    CU_ASSERT_TRUE(nb_exp(a)->requires_grad);
    CU_ASSERT_FALSE(nb_exp(b)->requires_grad);
    CU_ASSERT_PTR_NULL(nb_mul(b, b)->node);
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *y = nb_mul(a, b);
    CU_ASSERT_FALSE(y->requires_grad);
    CU_ASSERT_PTR_NULL(y->node);
    nb_set_grad_enabled(prev);
}

/* ---- errors ---- */
typedef nb_tensor *(*binary_fn)(const nb_tensor *, const nb_tensor *);
static const struct {
    const char *name;
    binary_fn fn;
} binaries[] = {{"add", nb_add}, {"sub", nb_sub}, {"mul", nb_mul}, {"div", nb_div}};

static void test_binary_errors(void) {
    nb_tensor *a32 = nb_ones(NB_F32, NB_SHAPE(2, 3));
    nb_tensor *b64 = nb_ones(NB_F64, NB_SHAPE(3));
    nb_tensor *a64 = nb_ones(NB_F64, NB_SHAPE(2, 3));
    nb_tensor *c64 = nb_ones(NB_F64, NB_SHAPE(4));
    nb_tensor *i64 = nb_zeros(NB_I64, NB_SHAPE(2, 3));
    nb_tensor *mask = nb_zeros(NB_BOOL, NB_SHAPE(2, 3));
    char want[64];
    for (size_t k = 0; k < sizeof binaries / sizeof binaries[0]; k++) {
        snprintf(want, sizeof want, "%s: ", binaries[k].name);
        nb_clear_error();
        CU_ASSERT_PTR_NULL(binaries[k].fn(NULL, a64));
        NBT_ASSERT_ERROR(want);
        NBT_ASSERT_ERROR("NULL");
        nb_clear_error();
        CU_ASSERT_PTR_NULL(binaries[k].fn(a64, NULL));
        NBT_ASSERT_ERROR(want);
        /* mixed dtypes: both shapes and both dtypes are named */
        CU_ASSERT_PTR_NULL(binaries[k].fn(a32, b64));
        NBT_ASSERT_ERROR(want);
        NBT_ASSERT_ERROR("[2, 3] float32");
        NBT_ASSERT_ERROR("[3] float64");
        CU_ASSERT_PTR_NULL(binaries[k].fn(b64, a32));
        NBT_ASSERT_ERROR("[3] float64");
        NBT_ASSERT_ERROR("[2, 3] float32");
        /* shapes that do not broadcast */
        CU_ASSERT_PTR_NULL(binaries[k].fn(a64, c64));
        NBT_ASSERT_ERROR(want);
        NBT_ASSERT_ERROR("[2, 3]");
        NBT_ASSERT_ERROR("[4]");
        /* non-float operands */
        CU_ASSERT_PTR_NULL(binaries[k].fn(i64, a64));
        NBT_ASSERT_ERROR(want);
        NBT_ASSERT_ERROR("int64");
        CU_ASSERT_PTR_NULL(binaries[k].fn(a32, mask));
        NBT_ASSERT_ERROR("bool");
    }
}

/* Each unary op's own errors (NULL, int64, bool inputs naming the op, dtype and shape) are
 * checked for every registered op by test_catalogue, from the registry. */
static void test_error_chain(void) {
    /* the first error of a chain is the one kept */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_exp(nb_add(NULL, nb_ones(NB_F64, NB_SHAPE(2)))));
    NBT_ASSERT_ERROR("add: ");
}

/* ---- the raw kernel API other layers use ---- */

/* out = a (1 - b^2), tanh's derivative from its output, for nbt_map2. */
static void tanh_grad_f32(int64_t n, float *out, const float *a, const float *b, float p) {
    (void)p;
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * (1 - b[i] * b[i]);
}
static void tanh_grad_f64(int64_t n, double *out, const double *a, const double *b, double p) {
    (void)p;
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * (1 - b[i] * b[i]);
}
static const nbt_map2_kernel tanh_grad = {tanh_grad_f32, tanh_grad_f64};

static void test_raw_kernels_in_place(void) {
    nb_tensor *a = nb_from_array(NB_F64, NB_SHAPE(2, 3), D(1, 2, 3, 4, 5, 6));
    nb_tensor *r = nb_from_array(NB_F64, NB_SHAPE(3), D(1, 10, 100));
    CU_ASSERT_TRUE(nbt_binary_into(a, NBT_MUL, a, r));
    NBT_ASSERT_VALUES(a, 0, 1, 20, 300, 4, 50, 600);
    /* a strided output: write the transpose of col + row into a [4,3] buffer */
    nb_tensor *buf = nb_zeros(NB_F64, NB_SHAPE(4, 3));
    nb_tensor *col = nb_from_array(NB_F64, NB_SHAPE(3, 1), D(1, 2, 3));
    nb_tensor *row = nb_from_array(NB_F64, NB_SHAPE(4), D(10, 20, 30, 40));
    CU_ASSERT_TRUE(nbt_binary_into(nb_transpose(buf, 0, 1), NBT_ADD, col, row));
    NBT_ASSERT_VALUES(buf, 0, 11, 12, 13, 21, 22, 23, 31, 32, 33, 41, 42, 43);
    /* unary in place on a strided view (gathered and scattered), neighbours untouched */
    nb_tensor *v = nb_from_array(NB_F64, NB_SHAPE(2, 2), D(-1, -2, 3, -4));
    nb_tensor *first_col = nb_select(v, 1, 0);
    CU_ASSERT_TRUE(nbt_unary_into(first_col, NBT_RELU, first_col, 0));
    NBT_ASSERT_VALUES(v, 0, 0, -2, 3, -4);
    CU_ASSERT_TRUE(nbt_unary_into(v, NBT_MUL_SCALAR, scalar(NB_F64, 2), 3));
    NBT_ASSERT_VALUES(v, 0, 6, 6, 6, 6);
    NBT_ASSERT_VALUES(nbt_scale(r, 0.5), 0, 0.5, 5, 50);
    /* a two-input kernel with its second input broadcast (a 0-d tensor) */
    NBT_ASSERT_VALUES(nbt_map2("tanh_grad", &tanh_grad, r, scalar(NB_F64, 0.5), 0), 0, 0.75, 7.5,
                      75);
    /* errors: outputs that the inputs do not broadcast to, wrong dtypes */
    CU_ASSERT_FALSE(nbt_binary_into(r, NBT_ADD, a, r));
    NBT_ASSERT_ERROR("add: ");
    NBT_ASSERT_ERROR("[2, 3]");
    CU_ASSERT_FALSE(nbt_binary_into(nb_zeros(NB_F32, NB_SHAPE(2, 3)), NBT_ADD, a, r));
    NBT_ASSERT_ERROR("float64");
    CU_ASSERT_FALSE(nbt_unary_into(r, NBT_EXP, a, 0));
    NBT_ASSERT_ERROR("exp: ");
    NBT_ASSERT_ERROR("[3]");
    CU_ASSERT_FALSE(nbt_unary_into(NULL, NBT_EXP, a, 0));
    NBT_ASSERT_ERROR("NULL");
    CU_ASSERT_FALSE(nbt_unary_into(nb_zeros(NB_F32, NB_SHAPE(2, 3)), NBT_EXP, a, 0));
    NBT_ASSERT_ERROR("dtype mismatch");
    CU_ASSERT_PTR_NULL(nbt_map2("tanh_grad", &tanh_grad, r, a, 0));
    NBT_ASSERT_ERROR("tanh_grad: ");
}

int main(void) {
    const nbtest_case cases[] = {
        {"binary ops on same shapes", test_binary_same_shape},
        {"binary ops in float32", test_binary_f32},
        {"broadcast [3,1] with [4]", test_broadcast_column_with_row},
        {"broadcast a 0-d scalar", test_broadcast_0d_scalar},
        {"broadcast rows", test_broadcast_rows},
        {"non-contiguous inputs", test_non_contiguous_inputs},
        {"every path matches plain loops", test_paths_match_plain_loops},
        {"unary values in float64", test_unary_values_f64},
        {"unary values in float32", test_unary_values_f32},
        {"NaN and inf", test_nan_and_inf},
        {"unary backward values", test_unary_backward_values},
        {"binary backward with broadcasting", test_binary_backward_broadcast},
        {"backward through non-contiguous inputs", test_backward_non_contiguous},
        {"fan-out", test_fan_out},
        {"grad mode and requires_grad", test_grad_mode},
        {"binary errors", test_binary_errors},
        {"the first error of a chain is kept", test_error_chain},
        {"raw kernels in place and their errors", test_raw_kernels_in_place},
    };
    return nbtest_run("elementwise", cases, sizeof cases / sizeof cases[0]);
}
