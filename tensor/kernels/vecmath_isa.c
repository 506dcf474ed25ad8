/* One instruction set's SLEEF loops (kernels.h: built once per set, with the -m flags that make
 * SLEEF's header expose the set's vector types; the generic build uses SSE2, the x86-64
 * baseline). */
#include "kernels.h"

#include <immintrin.h>
#include <sleef.h>
#include <stdint.h>

#ifdef __AVX512F__
#define VF __m512
#define VD __m512d
#define WF 16
#define WD 8
#define LF(p) _mm512_loadu_ps(p)
#define SF(p, v) _mm512_storeu_ps(p, v)
#define LD(p) _mm512_loadu_pd(p)
#define SD(p, v) _mm512_storeu_pd(p, v)
#define F(fn) Sleef_##fn##f16_u10avx512f
#define D(fn) Sleef_##fn##d8_u10avx512f
#elif defined(__AVX2__)
#define VF __m256
#define VD __m256d
#define WF 8
#define WD 4
#define LF(p) _mm256_loadu_ps(p)
#define SF(p, v) _mm256_storeu_ps(p, v)
#define LD(p) _mm256_loadu_pd(p)
#define SD(p, v) _mm256_storeu_pd(p, v)
#define F(fn) Sleef_##fn##f8_u10avx2
#define D(fn) Sleef_##fn##d4_u10avx2
#else
#define VF __m128
#define VD __m128d
#define WF 4
#define WD 2
#define LF(p) _mm_loadu_ps(p)
#define SF(p, v) _mm_storeu_ps(p, v)
#define LD(p) _mm_loadu_pd(p)
#define SD(p, v) _mm_storeu_pd(p, v)
#define F(fn) Sleef_##fn##f4_u10
#define D(fn) Sleef_##fn##d2_u10
#endif

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
