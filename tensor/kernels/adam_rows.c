/* Adam's and AdamW's float32 update over one contiguous run (nn/optim_adam.c) for one
 * instruction set (kernels.h), written once with vectors of 16 floats. Lane by lane it is the
 * scalar sequence of nbk_adam_consts' comment, every operation rounded as written (no
 * contraction), so every set gives the same bits. Wider vectors pay here because each element
 * takes a square root and a division, whose throughput on 4-wide SSE2 vectors was the step's
 * cost rather than its memory traffic. */
#include "kernels.h"
#include "vec16.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define W V16_W
/* The widest square-root instruction of the set, and the vector it takes. */
#if defined(__AVX512F__)
typedef __m512 sqrt_part;
#define PART_SQRT _mm512_sqrt_ps
#elif defined(__AVX2__)
typedef __m256 sqrt_part;
#define PART_SQRT _mm256_sqrt_ps
#else
typedef __m128 sqrt_part;
#define PART_SQRT _mm_sqrt_ps
#endif

/* The correctly rounded square root of every lane. */
static inline v16 vsqrt(v16 x) {
    v16 r;
    for (size_t h = 0; h < sizeof x; h += sizeof(sqrt_part)) {
        sqrt_part q;
        memcpy(&q, (char *)&x + h, sizeof q);
        q = PART_SQRT(q);
        memcpy((char *)&r + h, &q, sizeof q);
    }
    return r;
}

#define ADAM_STEP(SQRT, p, g, m, v)                                                                \
    do {                                                                                           \
        if (c->l2 != 0) g = g + l2 * p;                                                            \
        p = p * decay;                                                                             \
        m = m * beta1 + one_minus_beta1 * g;                                                       \
        v = v * beta2 + one_minus_beta2 * g * g;                                                   \
        p = p + neg_step_size * m / (SQRT(v) / bc2_sqrt + eps);                                    \
    } while (0)

void NBK_FN(nbk_adam_f32)(int64_t n, float *p, const float *g, float *m, float *v,
                          const nbk_adam_consts *c) {
    int64_t i = 0;
    {
        const v16 beta1 = v16_splat(c->beta1), beta2 = v16_splat(c->beta2), eps = v16_splat(c->eps),
                  l2 = v16_splat(c->l2), decay = v16_splat(c->decay),
                  one_minus_beta1 = v16_splat(c->one_minus_beta1),
                  one_minus_beta2 = v16_splat(c->one_minus_beta2),
                  neg_step_size = v16_splat(c->neg_step_size), bc2_sqrt = v16_splat(c->bc2_sqrt);
        for (; i + W <= n; i += W) {
            v16 vp = v16_load(p + i), vg = v16_load(g + i), vm = v16_load(m + i),
                vv = v16_load(v + i);
            ADAM_STEP(vsqrt, vp, vg, vm, vv);
            v16_store(p + i, vp), v16_store(m + i, vm), v16_store(v + i, vv);
        }
    }
    const float beta1 = c->beta1, beta2 = c->beta2, eps = c->eps, l2 = c->l2, decay = c->decay,
                one_minus_beta1 = c->one_minus_beta1, one_minus_beta2 = c->one_minus_beta2,
                neg_step_size = c->neg_step_size, bc2_sqrt = c->bc2_sqrt;
    for (; i < n; i++) {
        float vg = g[i];
        ADAM_STEP(sqrtf, p[i], vg, m[i], v[i]);
    }
}
