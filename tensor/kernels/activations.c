/* The activations built around one SLEEF function (gelu, gelu_tanh, silu, sigmoid), and the
 * derivatives of the first three, over contiguous arrays for one instruction set (kernels.h).
 * Each is one pass of the set's SLEEF vectors (sleef_vectors.h): an element is loaded once and
 * its result stored once, with the SLEEF function and the arithmetic around it on the widest
 * vectors the set has (16 floats on AVX-512). They were three passes through an L1 buffer,
 * the arithmetic on the library's 4-wide SSE2 vectors (tensor/simd.h), which took a third of
 * GELU's time. Operation orders follow PyTorch's CPU kernels, but for float32 gelu's normal
 * CDF (normal_cdf_f32.h: from SLEEF's exp, without erf); lanes are independent and nothing is
 * fused (-ffp-contract=off), so a tail run through a zero-padded vector gives the bits a whole
 * vector would, in every set. */
#include "kernels.h"
#include "normal_cdf_f32.h"
#include "sleef_vectors.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 1 / sqrt(2 pi), the standard normal density at 0. */
#define INV_SQRT_2PI 0.3989422804014327

/* Lanes of float32 vectors as integers (bit masks, comparisons' results). */
typedef int32_t VIF __attribute__((vector_size(sizeof(VF))));

/* a where m's lane is all ones, b where it is 0 */
static inline VF select_f32(VIF m, VF a, VF b) {
    return (VF)((m & (VIF)a) | (~m & (VIF)b));
}
static inline VF splat_f32(float v) {
    return (VF){0} + v;
}
/* c[0] + c[1] v + ... + c[n-1] v^(n-1) */
static inline VF horner_f32(const float *c, int n, VF v) {
    VF acc = splat_f32(c[n - 1]);
    for (int k = n - 2; k >= 0; k--) acc = acc * v + c[k];
    return acc;
}

/* Phi(x) as normal_cdf_f32.h writes it, and e = exp(-x^2 / 2) in *e. |x| is clamped at 16 for
 * e, where e underflows anyway, so that x^2 and its rounding error stay finite. */
static inline VF normal_cdf_f32(VF x, VF *e) {
    VF ax = (VF)((VIF)x & 0x7fffffff);
    VF xc = select_f32(ax < splat_f32(16), ax, splat_f32(16));
    /* Dekker: xc = hi + lo with 12 significant bits each, so every product is exact and
     * sq_err is exactly xc^2 - sq */
    VF hi = (VF)((VIF)xc & (int32_t)0xfffff000), lo = xc - hi;
    VF sq = xc * xc;
    VF sq_err = ((hi * hi - sq) + 2 * (hi * lo)) + lo * lo;
    VF ex = F(exp)(sq * -0.5f);
    *e = ex + ex * (sq_err * -0.5f);
    VF t = 1 / (1 + ax);
    VF lower_tail = *e * (t * horner_f32(nbk_cdf_tail_q, 10, t));
    VF large = select_f32(x < splat_f32(0), lower_tail, 1 - lower_tail);
    VF small = 0.5f + x * horner_f32(nbk_cdf_small_r, 6, sq);
    return select_f32(ax < splat_f32(NBK_CDF_SMALL), small, large);
}

/* x Phi(x) */
static inline VF gelu_f32(VF x) {
    VF e;
    return x * normal_cdf_f32(x, &e);
}
/* x / 2 * (1 + erf(x / sqrt 2)) */
static inline VD gelu_f64(VD x) {
    return x * 0.5 * (1 + D(erf)(x * M_SQRT1_2));
}
/* y = x Phi(x) (the forward's bits) and d = gelu'(x) = Phi(x) + x phi(x) as PyTorch's backward
 * rounds it: Phi rounded, then Phi + x phi */
static inline VF gelu_derivative_f32(VF x, VF *d) {
    VF e, phi_cdf = normal_cdf_f32(x, &e);
    *d = phi_cdf + x * ((float)INV_SQRT_2PI * e);
    return x * phi_cdf;
}
/* halving is exact, so x Phi(x) gives gelu_f64's bits */
static inline VD gelu_derivative_f64(VD x, VD *d) {
    VD phi_cdf = 0.5 * (1 + D(erf)(x * M_SQRT1_2));
    *d = phi_cdf + x * (INV_SQRT_2PI * D(exp)(x * x * -0.5));
    return x * phi_cdf;
}

/* Each formula on one vector V of W elements of type T; FN(fn) is SLEEF's fn on V. */
#define FORMULAS(S, T, V, FN)                                                                      \
    /* tanh(beta (x + kappa x^3)) */                                                               \
    static inline V gelu_tanh_inner_##S(V x) {                                                     \
        return FN(tanh)((T)NBK_GELU_BETA * (x + (T)NBK_GELU_KAPPA * (x * x * x)));                 \
    }                                                                                              \
    /* x / 2 * (1 + tanh(beta (x + kappa x^3))) */                                                 \
    static inline V gelu_tanh_##S(V x) {                                                           \
        return (T)0.5 * x * (1 + gelu_tanh_inner_##S(x));                                          \
    }                                                                                              \
    static inline V gelu_tanh_grad_##S(V g, V x) {                                                 \
        V th = gelu_tanh_inner_##S(x);                                                             \
        V dright =                                                                                 \
            (T)0.5 * x * (1 - th * th) * (T)NBK_GELU_BETA * (1 + 3 * (T)NBK_GELU_KAPPA * x * x);   \
        return g * ((T)0.5 * (1 + th) + dright);                                                   \
    }                                                                                              \
    /* x / (1 + exp(-x)): exp(-x) overflows to inf for very negative x, giving -0, not NaN */      \
    static inline V silu_##S(V x) {                                                                \
        return x / (1 + FN(exp)(-x));                                                              \
    }                                                                                              \
    /* s (1 + x (1 - s)), s = 1 / (1 + exp(-x)) */                                                 \
    static inline V silu_grad_##S(V g, V x) {                                                      \
        V s = 1 / (1 + FN(exp)(-x));                                                               \
        return g * s * (1 + x * (1 - s));                                                          \
    }                                                                                              \
    static inline V sigmoid_##S(V x) {                                                             \
        return 1 / (1 + FN(exp)(-x));                                                              \
    }

/* Loops over n elements: whole vectors, then the rest through zero-padded buffers. */
#define TAIL_IN(T, W, buf, p)                                                                      \
    T buf[W] = {0};                                                                                \
    memcpy(buf, p + i, sizeof(T) * (size_t)(n - i))
#define TAIL_OUT(T, STORE, p, v, buf)                                                              \
    do {                                                                                           \
        STORE(buf, v);                                                                             \
        memcpy(p + i, buf, sizeof(T) * (size_t)(n - i));                                           \
    } while (0)
/* y = f(x); y may be x */
#define MAP(S, T, W, LOAD, STORE, f)                                                               \
    void NBK_FN(nbt_v##f##_##S)(T * y, const T *x, int64_t n) {                                    \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) STORE(y + i, f##_##S(LOAD(x + i)));                             \
        if (i < n) {                                                                               \
            TAIL_IN(T, W, xt, x);                                                                  \
            TAIL_OUT(T, STORE, y, f##_##S(LOAD(xt)), xt);                                          \
        }                                                                                          \
    }
/* gx = f(g, x); gx may be g or x */
#define MAP2(S, T, W, LOAD, STORE, f)                                                              \
    void NBK_FN(nbt_v##f##_##S)(T * gx, const T *g, const T *x, int64_t n) {                       \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) STORE(gx + i, f##_##S(LOAD(g + i), LOAD(x + i)));               \
        if (i < n) {                                                                               \
            TAIL_IN(T, W, gt, g);                                                                  \
            TAIL_IN(T, W, xt, x);                                                                  \
            TAIL_OUT(T, STORE, gx, f##_##S(LOAD(gt), LOAD(xt)), xt);                               \
        }                                                                                          \
    }
/* y = gelu(x) and d = gelu'(x) */
#define GELU_DERIVATIVE(S, T, V, W, LOAD, STORE)                                                   \
    void NBK_FN(nbt_vgelu_derivative_##S)(T * y, T * d, const T *x, int64_t n) {                   \
        int64_t i = 0;                                                                             \
        V vd;                                                                                      \
        for (; i + W <= n; i += W) {                                                               \
            STORE(y + i, gelu_derivative_##S(LOAD(x + i), &vd));                                   \
            STORE(d + i, vd);                                                                      \
        }                                                                                          \
        if (i < n) {                                                                               \
            TAIL_IN(T, W, xt, x);                                                                  \
            V vy = gelu_derivative_##S(LOAD(xt), &vd);                                             \
            TAIL_OUT(T, STORE, y, vy, xt);                                                         \
            TAIL_OUT(T, STORE, d, vd, xt);                                                         \
        }                                                                                          \
    }

#define KERNELS(S, T, V, W, LOAD, STORE, FN)                                                       \
    FORMULAS(S, T, V, FN)                                                                          \
    MAP(S, T, W, LOAD, STORE, gelu)                                                                \
    MAP(S, T, W, LOAD, STORE, gelu_tanh)                                                           \
    MAP(S, T, W, LOAD, STORE, silu)                                                                \
    MAP(S, T, W, LOAD, STORE, sigmoid)                                                             \
    MAP2(S, T, W, LOAD, STORE, gelu_tanh_grad)                                                     \
    MAP2(S, T, W, LOAD, STORE, silu_grad)                                                          \
    GELU_DERIVATIVE(S, T, V, W, LOAD, STORE)

KERNELS(f32, float, VF, WF, LF, SF, F)
KERNELS(f64, double, VD, WD, LD, SD, D)
