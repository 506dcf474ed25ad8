/* Every length from 0 to 37 (and a few past the 256-element chunks): the elementwise kernels'
 * vector loops, their partial last vectors included, give bit for bit what a plain scalar loop
 * over the same formula gives, forward and backward, in float32 and float64. The loops below
 * are the references, written element by element in each kernel's operation order; where a
 * formula goes through one of SLEEF's functions, the reference calls that function over the
 * whole array (vecmath.h, a dependency with its own tests, lane by lane the same at any
 * position) and does the rest element by element. */
#include "harness.h"
#include "tensor/kernels/normal_cdf_f32.h"
#include "tensor/vecmath.h"

#include <stdio.h>
#include <stdlib.h>

/* sqrt(2 / pi), the cubic coefficient of tanh's gelu, 1 / sqrt(2 pi), 1 / sqrt(2) */
#define BETA 0.7978845608028654
#define KAPPA 0.044715
#define INV_SQRT_2PI 0.3989422804014327
#define SQRT1_2 0.70710678118654752440

static const int64_t long_lengths[] = {255, 256, 257, 263, 517};

/* Reports the op and the length when got's n elements differ in any bit from want's. */
static void assert_bits(const char *what, int64_t n, const nb_tensor *got, const void *want,
                        size_t es) {
    bool same = got && memcmp(nb_data(got), want, (size_t)n * es) == 0;
    if (!same) fprintf(stderr, "%s: n = %lld differs from the scalar loop\n", what, (long long)n);
    CU_ASSERT(same);
}

/* The gradient of op at x for the incoming gradient g (a fresh leaf each time). */
static const nb_tensor *grad_of(nb_tensor *(*op)(const nb_tensor *), const nb_tensor *x,
                                const nb_tensor *g) {
    nb_tensor *leaf = nb_requires_grad_(nb_detach(x), true);
    nb_tensor *y = op(leaf);
    if (!y || !nb_backward(y, g)) return NULL;
    return nb_grad(leaf);
}

static nb_tensor *square(const nb_tensor *x) {
    return nb_pow_scalar(x, 2);
}
static nb_tensor *scale_by_2_5(const nb_tensor *x) {
    return nb_mul_scalar(x, 2.5);
}

/* Phi(x) for gelu, element by element in the kernels' order, with SLEEF's exp over the array:
 * in float32 as normal_cdf_f32.h writes it (e = exp(-x^2 / 2) after x^2's rounding error is
 * added back), in float64 (1 + erf(x / sqrt 2)) / 2 and e = exp(x x (-1/2)). */
static void normal_cdf_f32(float *cdf, float *e, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float ax = fabsf(x[i]), xc = ax < 16 ? ax : 16;
        e[i] = xc * xc * -0.5f;
    }
    nbt_vexp_f32(e, e, n);
    for (int64_t i = 0; i < n; i++) {
        float ax = fabsf(x[i]), xc = ax < 16 ? ax : 16;
        uint32_t bits;
        memcpy(&bits, &xc, sizeof bits);
        bits &= 0xfffff000u;
        float hi;
        memcpy(&hi, &bits, sizeof hi);
        float lo = xc - hi, sq = xc * xc;
        float sq_err = ((hi * hi - sq) + 2 * (hi * lo)) + lo * lo;
        e[i] = e[i] + e[i] * (sq_err * -0.5f);
        float t = 1 / (1 + ax), q = nbk_cdf_tail_q[9], r = nbk_cdf_small_r[5];
        for (int k = 8; k >= 0; k--) q = q * t + nbk_cdf_tail_q[k];
        for (int k = 4; k >= 0; k--) r = r * sq + nbk_cdf_small_r[k];
        float lower_tail = e[i] * (t * q);
        cdf[i] = ax < NBK_CDF_SMALL ? 0.5f + x[i] * r : x[i] < 0 ? lower_tail : 1 - lower_tail;
    }
}
static void normal_cdf_f64(double *cdf, double *e, const double *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) cdf[i] = x[i] * SQRT1_2, e[i] = x[i] * x[i] * -0.5;
    nbt_verf_f64(cdf, cdf, n);
    nbt_vexp_f64(e, e, n);
    for (int64_t i = 0; i < n; i++) cdf[i] = 0.5 * (1 + cdf[i]);
}

/* One dtype's checks at length n: x and b random normal times 3 (reaching erf's and tanh's
 * flat parts), x[0] = -0 and x[1] = 0 (relu keeps a -0 it is given, and passes no gradient
 * at 0), pos = |x| + 0.25 (log, sqrt), g a random incoming gradient. */
#define TAIL_CHECKS(S, T, DT, FN)                                                                  \
    static void check_##S(int64_t n) {                                                             \
        nb_rng rng;                                                                                \
        nb_rng_seed(&rng, 1000 + (uint64_t)n);                                                     \
        nb_tensor *xt = nb_mul_scalar(nb_randn(&rng, DT, NB_SHAPE(n)), 3);                         \
        nb_tensor *bt = nb_mul_scalar(nb_randn(&rng, DT, NB_SHAPE(n)), 3);                         \
        nb_tensor *gt = nb_randn(&rng, DT, NB_SHAPE(n));                                           \
        T *x = nb_data(xt);                                                                        \
        if (n > 0) x[0] = -(T)0;                                                                   \
        if (n > 1) x[1] = 0;                                                                       \
        const T *b = nb_data(bt), *g = nb_data(gt);                                                \
        nb_tensor *post = nb_empty(DT, NB_SHAPE(n));                                               \
        T *pos = nb_data(post);                                                                    \
        for (int64_t i = 0; i < n; i++) pos[i] = FN(fabs)(x[i]) + (T)0.25;                         \
        nb_tensor *b0 = nb_full(DT, 0, (const int64_t[1]){0}, -1.75);                              \
        const T s = (T)-1.75;                                                                      \
        T *w = calloc((size_t)n + 1, sizeof(T)), *e = calloc((size_t)n + 1, sizeof(T));            \
        T *d = calloc((size_t)n + 1, sizeof(T));                                                   \
        /* binary: both contiguous, then each side a single element */                             \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] + b[i];                                        \
        assert_bits("add", n, nb_add(xt, bt), w, sizeof(T));                                       \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] - b[i];                                        \
        assert_bits("sub", n, nb_sub(xt, bt), w, sizeof(T));                                       \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] * b[i];                                        \
        assert_bits("mul", n, nb_mul(xt, bt), w, sizeof(T));                                       \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] / b[i];                                        \
        assert_bits("div", n, nb_div(xt, bt), w, sizeof(T));                                       \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] / s;                                           \
        assert_bits("div by one element", n, nb_div(xt, b0), w, sizeof(T));                        \
        for (int64_t i = 0; i < n; i++) w[i] = s - x[i];                                           \
        assert_bits("one element minus", n, nb_sub(b0, xt), w, sizeof(T));                         \
        /* unary forwards */                                                                       \
        for (int64_t i = 0; i < n; i++) w[i] = -x[i];                                              \
        assert_bits("neg", n, nb_neg(xt), w, sizeof(T));                                           \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] + (T)-1.5;                                     \
        assert_bits("add_scalar", n, nb_add_scalar(xt, -1.5), w, sizeof(T));                       \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] * (T)2.5;                                      \
        assert_bits("mul_scalar", n, nb_mul_scalar(xt, 2.5), w, sizeof(T));                        \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] * x[i];                                        \
        assert_bits("pow_scalar 2", n, nb_pow_scalar(xt, 2), w, sizeof(T));                        \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] < 0 ? 0 : x[i];                                \
        assert_bits("relu", n, nb_relu(xt), w, sizeof(T));                                         \
        for (int64_t i = 0; i < n; i++) e[i] = -x[i];                                              \
        nbt_vexp_##S(e, e, n);                                                                     \
        for (int64_t i = 0; i < n; i++) w[i] = 1 / (1 + e[i]);                                     \
        assert_bits("sigmoid", n, nb_sigmoid(xt), w, sizeof(T));                                   \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] / (1 + e[i]);                                  \
        assert_bits("silu", n, nb_silu(xt), w, sizeof(T));                                         \
        normal_cdf_##S(e, d, x, n);                                                                \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] * e[i];                                        \
        assert_bits("gelu", n, nb_gelu(xt), w, sizeof(T));                                         \
        for (int64_t i = 0; i < n; i++) e[i] = (T)BETA * (x[i] + (T)KAPPA * (x[i] * x[i] * x[i])); \
        nbt_vtanh_##S(e, e, n);                                                                    \
        for (int64_t i = 0; i < n; i++) w[i] = (T)0.5 * x[i] * (1 + e[i]);                         \
        assert_bits("gelu_tanh", n, nb_gelu_tanh(xt), w, sizeof(T));                               \
        /* derivatives, from the output where the op's derivative reads it */                      \
        for (int64_t i = 0; i < n; i++) w[i] = -g[i];                                              \
        assert_bits("neg backward", n, grad_of(nb_neg, xt, gt), w, sizeof(T));                     \
        for (int64_t i = 0; i < n; i++) w[i] = g[i] * (T)2.5;                                      \
        assert_bits("mul_scalar backward", n, grad_of(scale_by_2_5, xt, gt), w, sizeof(T));        \
        for (int64_t i = 0; i < n; i++) w[i] = g[i] * (2 * x[i]);                                  \
        assert_bits("pow_scalar 2 backward", n, grad_of(square, xt, gt), w, sizeof(T));            \
        nbt_vexp_##S(e, x, n);                                                                     \
        for (int64_t i = 0; i < n; i++) w[i] = g[i] * e[i];                                        \
        assert_bits("exp backward", n, grad_of(nb_exp, xt, gt), w, sizeof(T));                     \
        for (int64_t i = 0; i < n; i++) w[i] = g[i] / pos[i];                                      \
        assert_bits("log backward", n, grad_of(nb_log, post, gt), w, sizeof(T));                   \
        for (int64_t i = 0; i < n; i++) w[i] = g[i] / (2 * FN(sqrt)(pos[i]));                      \
        assert_bits("sqrt backward", n, grad_of(nb_sqrt, post, gt), w, sizeof(T));                 \
        nbt_vtanh_##S(e, x, n);                                                                    \
        for (int64_t i = 0; i < n; i++) w[i] = g[i] * (1 - e[i] * e[i]);                           \
        assert_bits("tanh backward", n, grad_of(nb_tanh, xt, gt), w, sizeof(T));                   \
        for (int64_t i = 0; i < n; i++) e[i] = -x[i];                                              \
        nbt_vexp_##S(e, e, n);                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T y = 1 / (1 + e[i]);                                                                  \
            w[i] = g[i] * (1 - y) * y;                                                             \
        }                                                                                          \
        assert_bits("sigmoid backward", n, grad_of(nb_sigmoid, xt, gt), w, sizeof(T));             \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T sv = 1 / (1 + e[i]);                                                                 \
            w[i] = g[i] * sv * (1 + x[i] * (1 - sv));                                              \
        }                                                                                          \
        assert_bits("silu backward", n, grad_of(nb_silu, xt, gt), w, sizeof(T));                   \
        for (int64_t i = 0; i < n; i++) w[i] = x[i] <= 0 ? 0 : g[i];                               \
        assert_bits("relu backward", n, grad_of(nb_relu, xt, gt), w, sizeof(T));                   \
        for (int64_t i = 0; i < n; i++) e[i] = (T)BETA * (x[i] + (T)KAPPA * (x[i] * x[i] * x[i])); \
        nbt_vtanh_##S(e, e, n);                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T v = x[i], th = e[i];                                                                 \
            T dright = (T)0.5 * v * (1 - th * th) * (T)BETA * (1 + 3 * (T)KAPPA * v * v);          \
            w[i] = g[i] * ((T)0.5 * (1 + th) + dright);                                            \
        }                                                                                          \
        assert_bits("gelu_tanh backward", n, grad_of(nb_gelu_tanh, xt, gt), w, sizeof(T));         \
        /* gelu' = Phi + x phi, phi = exp(-x^2 / 2) / sqrt(2 pi) */                                \
        normal_cdf_##S(e, d, x, n);                                                                \
        for (int64_t i = 0; i < n; i++) w[i] = g[i] * (e[i] + x[i] * ((T)INV_SQRT_2PI * d[i]));    \
        assert_bits("gelu backward", n, grad_of(nb_gelu, xt, gt), w, sizeof(T));                   \
        free(w), free(e), free(d);                                                                 \
    }
#define FN_F32(name) name##f
#define FN_F64(name) name
TAIL_CHECKS(f32, float, NB_F32, FN_F32)
TAIL_CHECKS(f64, double, NB_F64, FN_F64)

static void test_short_lengths_f32(void) {
    for (int64_t n = 0; n <= 37; n++) check_f32(n);
}
static void test_short_lengths_f64(void) {
    for (int64_t n = 0; n <= 37; n++) check_f64(n);
}
static void test_across_chunks(void) {
    for (size_t k = 0; k < sizeof long_lengths / sizeof long_lengths[0]; k++) {
        check_f32(long_lengths[k]);
        check_f64(long_lengths[k]);
    }
}

int main(void) {
    const nbtest_case cases[] = {
        {"lengths 0-37 match scalar loops bit for bit, float32", test_short_lengths_f32},
        {"lengths 0-37 match scalar loops bit for bit, float64", test_short_lengths_f64},
        {"lengths across 256-element chunks", test_across_chunks},
    };
    return nbtest_run("elementwise_tails", cases, sizeof cases / sizeof cases[0]);
}
