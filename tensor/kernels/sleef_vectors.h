/* One instruction set's SLEEF vectors (kernels.h: built once per set, with the -m flags that
 * make SLEEF's header expose the set's vector types; the generic build uses SSE2, the x86-64
 * baseline): VF / VD hold WF floats / WD doubles, LF / SF and LD / SD load and store them
 * unaligned, F(fn) / D(fn) name SLEEF's 1-ULP function fn on them. GCC's vector extension
 * gives these types their arithmetic operators, each rounded as written. */
#ifndef NABLA_KERNELS_SLEEF_VECTORS_H
#define NABLA_KERNELS_SLEEF_VECTORS_H

#include <immintrin.h>
#include <sleef.h>

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

#endif
