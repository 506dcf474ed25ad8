/* Exact GELU over contiguous arrays for one instruction set (kernels.h), in one pass of the
 * set's SLEEF vectors (sleef_vectors.h): y = x / 2 (1 + erf(x / sqrt 2)), and for a forward
 * whose backward will run, its derivative d = gelu'(x) = Phi(x) + x phi(x) as well, Phi =
 * (1 + erf(x / sqrt 2)) / 2 and phi the normal density. Each element is loaded once and its
 * results stored once, with erf and exp on the widest vectors the set has: 16 floats on
 * AVX-512, where the 4-wide SSE2 passes around erf (the generic vectors of tensor/simd.h,
 * through an L1 buffer) took a third of GELU's time. y keeps the roundings of the forward
 * alone (x * 0.5 * (1 + e)) and d those of PyTorch's backward (Phi rounded, then Phi + x phi);
 * lanes are independent, so a tail run through a zero-padded vector gives the same bits. */
#include "kernels.h"
#include "sleef_vectors.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 1 / sqrt(2 pi), the standard normal density at 0. */
#define INV_SQRT_2PI 0.3989422804014327

/* V: the set's vector of W elements of type T; FN(fn): SLEEF's fn on it. */
#define GELU_KERNELS(S, T, V, W, LOAD, STORE, FN)                                                  \
    static inline V gelu_##S(V x) {                                                                \
        return x * (T)0.5 * (1 + FN(erf)(x * (T)M_SQRT1_2));                                       \
    }                                                                                              \
    /* halving is exact, so x * Phi rounds as x * 0.5 * (1 + e) does */                            \
    static inline void gelu_derivative_##S(V x, V *y, V *d) {                                      \
        V phi_cdf = (T)0.5 * (1 + FN(erf)(x * (T)M_SQRT1_2));                                      \
        *y = x * phi_cdf;                                                                          \
        *d = phi_cdf + x * ((T)INV_SQRT_2PI * FN(exp)(x * x * (T)-0.5));                           \
    }                                                                                              \
    void NBK_FN(nbk_gelu_##S)(int64_t n, T * y, const T *x) {                                      \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) STORE(y + i, gelu_##S(LOAD(x + i)));                            \
        if (i < n) {                                                                               \
            T buf[W] = {0};                                                                        \
            memcpy(buf, x + i, sizeof(T) * (size_t)(n - i));                                       \
            STORE(buf, gelu_##S(LOAD(buf)));                                                       \
            memcpy(y + i, buf, sizeof(T) * (size_t)(n - i));                                       \
        }                                                                                          \
    }                                                                                              \
    void NBK_FN(nbk_gelu_derivative_##S)(int64_t n, T * y, T * d, const T *x) {                    \
        int64_t i = 0;                                                                             \
        V vy, vd;                                                                                  \
        for (; i + W <= n; i += W) {                                                               \
            gelu_derivative_##S(LOAD(x + i), &vy, &vd);                                            \
            STORE(y + i, vy);                                                                      \
            STORE(d + i, vd);                                                                      \
        }                                                                                          \
        if (i < n) {                                                                               \
            T buf[W] = {0};                                                                        \
            memcpy(buf, x + i, sizeof(T) * (size_t)(n - i));                                       \
            gelu_derivative_##S(LOAD(buf), &vy, &vd);                                              \
            STORE(buf, vy);                                                                        \
            memcpy(y + i, buf, sizeof(T) * (size_t)(n - i));                                       \
            STORE(buf, vd);                                                                        \
            memcpy(d + i, buf, sizeof(T) * (size_t)(n - i));                                       \
        }                                                                                          \
    }

GELU_KERNELS(f32, float, VF, WF, LF, SF, F)
GELU_KERNELS(f64, double, VD, WD, LD, SD, D)
