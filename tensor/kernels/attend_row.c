/* One query's attention over a key/value cache, in float32 (kernels.h, nn/kv_cache.c): the
 * scores along the keys and the context along the value dims in whole eight-float vectors.
 * Written once with vector types and nothing fused, so every instruction set gives the same
 * bits. */
#include "kernels.h"
#include "../rows.h"

typedef float dr_v8f __attribute__((vector_size(32)));
typedef float dr_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
#define DR_LOAD(p) (*(const dr_v8f_u *)(p))
#define DR_STORE(p, v) (*(dr_v8f_u *)(p) = (v))
#define DR_SPLAT(x) ((dr_v8f){x, x, x, x, x, x, x, x})

/* out[0:32] = scale * sum_i a[i] * M[i * ld : i * ld + 32] over i < count: one block of a row
 * times a row-major matrix, in four vectors. The scores (a = q, M = the keys' transposed rows)
 * and the context (a = the probabilities, M = the value rows) are both this. */
static inline void row_block32(const float *a, int64_t count, const float *M, int64_t ld,
                               float scale, float *out) {
    dr_v8f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    for (int64_t i = 0; i < count; i++) {
        const dr_v8f ai = DR_SPLAT(a[i]);
        const float *m = M + i * ld;
        s0 += ai * DR_LOAD(m);
        s1 += ai * DR_LOAD(m + 8);
        s2 += ai * DR_LOAD(m + 16);
        s3 += ai * DR_LOAD(m + 24);
    }
    const dr_v8f sc = DR_SPLAT(scale);
    DR_STORE(out, s0 * sc);
    DR_STORE(out + 8, s1 * sc);
    DR_STORE(out + 16, s2 * sc);
    DR_STORE(out + 24, s3 * sc);
}

/* out[0:width] = scale * sum_i a[i] * M[i * ld : i * ld + width] for the remaining width < 32
 * columns: whole vectors of eight, then one at a time. */
static inline void row_tail(const float *a, int64_t count, const float *M, int64_t ld, float scale,
                            float *out, int64_t width) {
    int64_t c = 0;
    for (; c + 8 <= width; c += 8) {
        dr_v8f s = {0};
        for (int64_t i = 0; i < count; i++) s += DR_SPLAT(a[i]) * DR_LOAD(M + i * ld + c);
        DR_STORE(out + c, s * DR_SPLAT(scale));
    }
    for (; c < width; c++) {
        float s = 0;
        for (int64_t i = 0; i < count; i++) s += a[i] * M[i * ld + c];
        out[c] = s * scale;
    }
}

/* out[0:64] = scale * sum_i a[i] * M[i * ld : i * ld + 64]: row_block32 twice as wide, so
 * eight independent sums hide the adds' latency (each output's sum in the same order). */
static inline void row_block64(const float *a, int64_t count, const float *M, int64_t ld,
                               float scale, float *out) {
    dr_v8f s[8] = {{0}};
    for (int64_t i = 0; i < count; i++) {
        const dr_v8f ai = DR_SPLAT(a[i]);
        const float *m = M + i * ld;
        for (int v = 0; v < 8; v++) s[v] += ai * DR_LOAD(m + 8 * v);
    }
    const dr_v8f sc = DR_SPLAT(scale);
    for (int v = 0; v < 8; v++) DR_STORE(out + 8 * v, s[v] * sc);
}

/* out[0:32] = scale * sum_i a[i] * M[i * ld : i * ld + 32] over a long count: four partial
 * sums over i mod 4 (added in a fixed order at the end), so a row of hundreds of keys waits on
 * a quarter of the adds' latency. */
static inline void row_block32_long(const float *a, int64_t count, const float *M, int64_t ld,
                                    float scale, float *out) {
    dr_v8f s[4][4] = {{{0}}};
    int64_t i = 0;
    for (; i + 4 <= count; i += 4)
        for (int p = 0; p < 4; p++) {
            const dr_v8f ai = DR_SPLAT(a[i + p]);
            const float *m = M + (i + p) * ld;
            for (int v = 0; v < 4; v++) s[p][v] += ai * DR_LOAD(m + 8 * v);
        }
    for (; i < count; i++) {
        const dr_v8f ai = DR_SPLAT(a[i]);
        for (int v = 0; v < 4; v++) s[0][v] += ai * DR_LOAD(M + i * ld + 8 * v);
    }
    const dr_v8f sc = DR_SPLAT(scale);
    for (int v = 0; v < 4; v++)
        DR_STORE(out + 8 * v, ((s[0][v] + s[1][v]) + (s[2][v] + s[3][v])) * sc);
}

/* One query q [kd] against keys 0..n-1 of one head, keys stored transposed Kt [kd, ld_k] and
 * values V [n, vd]: s = scale * q Kt (along the keys, whole vectors), p = exp(s - max s),
 * ctx [vd] = (p V) / sum(p) (along the value dims). scores has room for n. */
void NBK_FN(nbk_attend_row_f32)(int64_t n, int64_t kd, int64_t vd, int64_t ld_k, float scale,
                                const float *q, const float *Kt, const float *V, float *scores,
                                float *ctx) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) row_block64(q, kd, Kt + j, ld_k, scale, scores + j);
    for (; j + 32 <= n; j += 32) row_block32(q, kd, Kt + j, ld_k, scale, scores + j);
    row_tail(q, kd, Kt + j, ld_k, scale, scores + j, n - j);
    const float max = nbt_row_max_f32(scores, n);
    for (j = 0; j < n; j++) scores[j] -= max;
    NBK_FN(nbt_vexp_f32)(scores, scores, n);
    const float inv = (float)(1.0 / nbt_row_sum_f32(scores, n));
    int64_t d = 0;
    for (; d + 32 <= vd; d += 32) row_block32_long(scores, n, V + d, vd, inv, ctx + d);
    row_tail(scores, n, V + d, vd, inv, ctx + d, vd - d);
}
