/* Adam's and AdamW's update over one contiguous run (nn/optim_adam.c) for one instruction set
 * (kernels.h), written once with vectors of one register of the set (16 floats on AVX-512,
 * 8 on AVX2, 4 on SSE2). Lane by lane it is NBK_ADAM_STEP, every operation rounded as
 * written (no contraction), so every set gives the same bits. Wider vectors pay here because
 * each element takes a square root and a division, whose throughput on 4-wide SSE2 vectors was
 * the step's cost rather than its memory traffic. One 64-byte vector on AVX2 (two registers)
 * went through the stack: its constants, its square roots and its loads. */
#include "kernels.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

/* The set's register, its lanes, and its correctly rounded square root. */
#if defined(__AVX512F__)
#define ADAM_BYTES 64
#define VSQRT_F32(x) ((adam_vf)_mm512_sqrt_ps((__m512)(x)))
#define VSQRT_F64(x) ((adam_vd)_mm512_sqrt_pd((__m512d)(x)))
#elif defined(__AVX2__)
#define ADAM_BYTES 32
#define VSQRT_F32(x) ((adam_vf)_mm256_sqrt_ps((__m256)(x)))
#define VSQRT_F64(x) ((adam_vd)_mm256_sqrt_pd((__m256d)(x)))
#else
#define ADAM_BYTES 16
#define VSQRT_F32(x) ((adam_vf)_mm_sqrt_ps((__m128)(x)))
#define VSQRT_F64(x) ((adam_vd)_mm_sqrt_pd((__m128d)(x)))
#endif
typedef float adam_vf __attribute__((vector_size(ADAM_BYTES)));
typedef double adam_vd __attribute__((vector_size(ADAM_BYTES)));
#define WF (ADAM_BYTES / 4)
#define WD (ADAM_BYTES / 8)

/* Unaligned, aliasing views for loads and stores, as the intrinsics headers define them. */
typedef float adam_vf_u __attribute__((vector_size(ADAM_BYTES), aligned(4), may_alias));
typedef double adam_vd_u __attribute__((vector_size(ADAM_BYTES), aligned(8), may_alias));
#define LOAD_F32(p) (*(const adam_vf_u *)(p))
#define STORE_F32(p, v) (*(adam_vf_u *)(p) = (v))
#define LOAD_F64(p) (*(const adam_vd_u *)(p))
#define STORE_F64(p, v) (*(adam_vd_u *)(p) = (v))
#define SPLAT_F32(x) ((adam_vf){0} + (float)(x))
#define SPLAT_F64(x) ((adam_vd){0} + (double)(x))

/* Whole vectors of W lanes, then the tail one element at a time. */
#define ADAM_ROWS(NAME, T, VT, W, SPLAT, LOAD, STORE, VSQRT, SQRT)                                 \
    void NBK_FN(NAME)(int64_t n, T * p, const T *g, T *m, T *v, const nbk_adam_consts *c) {        \
        const bool has_l2 = (T)c->l2 != 0;                                                         \
        int64_t i = 0;                                                                             \
        {                                                                                          \
            NBK_ADAM_LOCALS(VT, SPLAT, c);                                                         \
            for (; i + W <= n; i += W) {                                                           \
                VT vp = LOAD(p + i), vg = LOAD(g + i), vm = LOAD(m + i), vv = LOAD(v + i);         \
                NBK_ADAM_STEP(VSQRT, has_l2, vp, vg, vm, vv);                                      \
                STORE(p + i, vp), STORE(m + i, vm), STORE(v + i, vv);                              \
            }                                                                                      \
        }                                                                                          \
        NBK_ADAM_LOCALS(T, (T), c);                                                                \
        for (; i < n; i++) {                                                                       \
            T gi = g[i];                                                                           \
            NBK_ADAM_STEP(SQRT, has_l2, p[i], gi, m[i], v[i]);                                     \
        }                                                                                          \
    }

ADAM_ROWS(nbk_adam_f32, float, adam_vf, WF, SPLAT_F32, LOAD_F32, STORE_F32, VSQRT_F32, sqrtf)
ADAM_ROWS(nbk_adam_f64, double, adam_vd, WD, SPLAT_F64, LOAD_F64, STORE_F64, VSQRT_F64, sqrt)
