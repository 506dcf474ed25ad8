/* Adam's and AdamW's update over one contiguous run (nn/optim_adam.c) for one instruction set
 * (kernels.h), written once with 64-byte vectors (16 floats, 8 doubles). Lane by lane it is
 * NBK_ADAM_STEP, every operation rounded as written (no contraction), so every set gives the
 * same bits. Wider vectors pay here because each element takes a square root and a division,
 * whose throughput on 4-wide SSE2 vectors was the step's cost rather than its memory
 * traffic. */
#include "kernels.h"
#include "vec64.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* The widest square-root instructions of the set, and the vectors they take. */
#if defined(__AVX512F__)
typedef __m512 sqrt_part_f32;
typedef __m512d sqrt_part_f64;
#define PART_SQRT_F32 _mm512_sqrt_ps
#define PART_SQRT_F64 _mm512_sqrt_pd
#elif defined(__AVX2__)
typedef __m256 sqrt_part_f32;
typedef __m256d sqrt_part_f64;
#define PART_SQRT_F32 _mm256_sqrt_ps
#define PART_SQRT_F64 _mm256_sqrt_pd
#else
typedef __m128 sqrt_part_f32;
typedef __m128d sqrt_part_f64;
#define PART_SQRT_F32 _mm_sqrt_ps
#define PART_SQRT_F64 _mm_sqrt_pd
#endif

/* The correctly rounded square root of every lane of a 64-byte vector, a part at a time. */
#define DEFINE_VSQRT(NAME, VT, PART, PART_SQRT)                                                    \
    static inline VT NAME(VT x) {                                                                  \
        VT r;                                                                                      \
        for (size_t h = 0; h < sizeof x; h += sizeof(PART)) {                                      \
            PART q;                                                                                \
            memcpy(&q, (char *)&x + h, sizeof q);                                                  \
            q = PART_SQRT(q);                                                                      \
            memcpy((char *)&r + h, &q, sizeof q);                                                  \
        }                                                                                          \
        return r;                                                                                  \
    }
DEFINE_VSQRT(vsqrt_f32, v16, sqrt_part_f32, PART_SQRT_F32)
DEFINE_VSQRT(vsqrt_f64, v8d, sqrt_part_f64, PART_SQRT_F64)

#define SPLAT_V16(x) v16_splat((float)(x))
#define SPLAT_V8D(x) v8d_splat((double)(x))

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

ADAM_ROWS(nbk_adam_f32, float, v16, V16_W, SPLAT_V16, v16_load, v16_store, vsqrt_f32, sqrtf)
ADAM_ROWS(nbk_adam_f64, double, v8d, V8D_W, SPLAT_V8D, v8d_load, v8d_store, vsqrt_f64, sqrt)
