/* One instruction set's SLEEF loops over contiguous arrays (kernels.h, sleef_vectors.h). */
#include "kernels.h"
#include "sleef_vectors.h"

#include <stdint.h>
#include <string.h>

/* Full vectors, then the tail through a zero-padded buffer (no scalar libm mix). */
#define LOOPS(fn)                                                                                  \
    void NBK_FN(nbt_v##fn##_f32)(float *y, const float *x, int64_t n) {                            \
        int64_t i = 0;                                                                             \
        for (; i + WF <= n; i += WF) SF(y + i, F(fn)(LF(x + i)));                                  \
        if (i < n) {                                                                               \
            float buf[WF] = {0};                                                                   \
            for (int64_t k = i; k < n; k++) buf[k - i] = x[k];                                     \
            SF(buf, F(fn)(LF(buf)));                                                               \
            for (int64_t k = i; k < n; k++) y[k] = buf[k - i];                                     \
        }                                                                                          \
    }                                                                                              \
    void NBK_FN(nbt_v##fn##_f64)(double *y, const double *x, int64_t n) {                          \
        int64_t i = 0;                                                                             \
        for (; i + WD <= n; i += WD) SD(y + i, D(fn)(LD(x + i)));                                  \
        if (i < n) {                                                                               \
            double buf[WD] = {0};                                                                  \
            for (int64_t k = i; k < n; k++) buf[k - i] = x[k];                                     \
            SD(buf, D(fn)(LD(buf)));                                                               \
            for (int64_t k = i; k < n; k++) y[k] = buf[k - i];                                     \
        }                                                                                          \
    }

LOOPS(exp)
LOOPS(log)
LOOPS(tanh)
LOOPS(erf)

/* A softmax row's exp in one pass (vecmath.h): exp(x + shift), each element rounded as the
 * shift and LOOPS' exp round it (SLEEF's lanes are independent, so a lane in the zero-padded
 * tail buffer gets the bits it would in a full vector), the bits of the passes they replace.
 * The sum adds element i into partial i % 8, in order of i, and the partials as nbt_row_sum
 * does (tensor/rows.h). The eight double partials live in vector registers while a block's
 * exps, already stored, are added (added right after each exp, they were stored and reloaded
 * around every call, and a 64-byte GCC vector went through memory on AVX2: both slower than
 * the three passes). */
#define EXP_BLOCK 64 /* elements: whole 8-element chunks of every set's vectors */
#if defined(__AVX512F__)
#define SUM8_DECL __m512d acc8 = _mm512_setzero_pd();
#define SUM8_ADD_f32(p) acc8 = _mm512_add_pd(acc8, _mm512_cvtps_pd(_mm256_loadu_ps(p)));
#define SUM8_ADD_f64(p) acc8 = _mm512_add_pd(acc8, _mm512_loadu_pd(p));
#define SUM8_STORE(out) _mm512_storeu_pd(out, acc8);
#elif defined(__AVX2__)
#define SUM8_DECL __m256d acc_lo = _mm256_setzero_pd(), acc_hi = _mm256_setzero_pd();
#define SUM8_ADD_f32(p)                                                                            \
    acc_lo = _mm256_add_pd(acc_lo, _mm256_cvtps_pd(_mm_loadu_ps(p)));                              \
    acc_hi = _mm256_add_pd(acc_hi, _mm256_cvtps_pd(_mm_loadu_ps((p) + 4)));
#define SUM8_ADD_f64(p)                                                                            \
    acc_lo = _mm256_add_pd(acc_lo, _mm256_loadu_pd(p));                                            \
    acc_hi = _mm256_add_pd(acc_hi, _mm256_loadu_pd((p) + 4));
#define SUM8_STORE(out) _mm256_storeu_pd(out, acc_lo), _mm256_storeu_pd((out) + 4, acc_hi);
#else
#define SUM8_DECL double acc8[8] = {0};
#define SUM8_ADD_f32(p)                                                                            \
    for (int l = 0; l < 8; l++) acc8[l] += (double)(p)[l];
#define SUM8_ADD_f64 SUM8_ADD_f32
#define SUM8_STORE(out) memcpy(out, acc8, sizeof acc8);
#endif
#define EXP_ROWS(T, V, W, L, S, E, SUF)                                                            \
    /* y[k] = exp(x[k] + shift) for k < n < EXP_BLOCK through a zero-padded buffer */              \
    static void exp_tail_##SUF(T *y, const T *x, T shift, int64_t n) {                             \
        T buf[EXP_BLOCK] = {0};                                                                    \
        for (int64_t k = 0; k < n; k++) buf[k] = x[k] + shift;                                     \
        for (int v = 0; v < n; v += W) S(buf + v, E(L(buf + v)));                                  \
        for (int64_t k = 0; k < n; k++) y[k] = buf[k];                                             \
    }                                                                                              \
    double NBK_FN(nbt_vexp_sum_##SUF)(T * y, const T *x, T shift, int64_t n) {                     \
        T splat[W];                                                                                \
        for (int l = 0; l < W; l++) splat[l] = shift;                                              \
        const V s = L(splat);                                                                      \
        SUM8_DECL                                                                                  \
        int64_t i = 0;                                                                             \
        for (; i + EXP_BLOCK <= n; i += EXP_BLOCK) {                                               \
            for (int v = 0; v < EXP_BLOCK; v += W) S(y + i + v, E(L(x + i + v) + s));              \
            for (int c = 0; c < EXP_BLOCK; c += 8) {                                               \
                SUM8_ADD_##SUF(y + i + c)                                                          \
            }                                                                                      \
        }                                                                                          \
        exp_tail_##SUF(y + i, x + i, shift, n - i);                                                \
        double acc[8];                                                                             \
        SUM8_STORE(acc)                                                                            \
        for (int64_t k = i; k < n; k++) acc[k & 7] += (double)y[k];                                \
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));  \
    }                                                                                              \
    void NBK_FN(nbt_vexp_scale_##SUF)(T * y, const T *x, T shift, T a, int64_t n) {                \
        T splat[W], factor[W];                                                                     \
        for (int l = 0; l < W; l++) splat[l] = shift, factor[l] = a;                               \
        const V s = L(splat), f = L(factor);                                                       \
        int64_t i = 0;                                                                             \
        for (; i + W <= n; i += W) S(y + i, E(L(x + i) + s) * f);                                  \
        if (i < n) {                                                                               \
            exp_tail_##SUF(y + i, x + i, shift, n - i);                                            \
            for (int64_t k = i; k < n; k++) y[k] = a * y[k];                                       \
        }                                                                                          \
    }
EXP_ROWS(float, VF, WF, LF, SF, F(exp), f32)
EXP_ROWS(double, VD, WD, LD, SD, D(exp), f64)
