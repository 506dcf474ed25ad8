/* One query's attention over a key/value cache, in float32 (kernels.h, nn/kv_cache.c): the
 * scores along the keys and the context along the value dims in whole vectors.
 * Written once with vector types and nothing fused, so every instruction set gives the same
 * bits. */
#include "kernels.h"
#include "../rows.h"

typedef float dr_v8f __attribute__((vector_size(32)));
typedef float dr_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
#define DR_LOAD(p) (*(const dr_v8f_u *)(p))
#define DR_STORE(p, v) (*(dr_v8f_u *)(p) = (v))
#define DR_SPLAT(x) ((dr_v8f){x, x, x, x, x, x, x, x})
/* The blocks' vectors: one register of the set (AVX-512: sixteen floats, else eight; gcc
 * spills a sixteen-float vector through memory where registers hold eight). Each lane's
 * arithmetic is the same at either width, so the width changes no bits. */
#ifdef __AVX512F__
#define DR_W 16
typedef float dr_vf __attribute__((vector_size(64)));
typedef float dr_vf_u __attribute__((vector_size(64), aligned(4), may_alias));
#define DR_SPLATW(x) ((dr_vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x})
#else
#define DR_W 8
typedef dr_v8f dr_vf;
typedef dr_v8f_u dr_vf_u;
#define DR_SPLATW(x) DR_SPLAT(x)
#endif
#define DR_LOADW(p) (*(const dr_vf_u *)(p))
#define DR_STOREW(p, v) (*(dr_vf_u *)(p) = (v))

/* out[0:32] = scale * sum_i a[i] * M[i * ld : i * ld + 32] over i < count: one block of a row
 * times a row-major matrix, in whole vectors. The scores (a = q, M = the keys' transposed
 * rows) and the context (a = the probabilities, M = the value rows) are both this. */
static inline void row_block32(const float *a, int64_t count, const float *M, int64_t ld,
                               float scale, float *out) {
    enum { NV = 32 / DR_W };
    dr_vf s[NV] = {{0}};
    for (int64_t i = 0; i < count; i++) {
        const dr_vf ai = DR_SPLATW(a[i]);
        const float *m = M + i * ld;
        for (int v = 0; v < NV; v++) s[v] += ai * DR_LOADW(m + DR_W * v);
    }
    const dr_vf sc = DR_SPLATW(scale);
    for (int v = 0; v < NV; v++) DR_STOREW(out + DR_W * v, s[v] * sc);
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
 * more independent sums hide the adds' latency (each output's sum in the same order). */
static inline void row_block64(const float *a, int64_t count, const float *M, int64_t ld,
                               float scale, float *out) {
    enum { NV = 64 / DR_W };
    dr_vf s[NV] = {{0}};
    for (int64_t i = 0; i < count; i++) {
        const dr_vf ai = DR_SPLATW(a[i]);
        const float *m = M + i * ld;
        for (int v = 0; v < NV; v++) s[v] += ai * DR_LOADW(m + DR_W * v);
    }
    const dr_vf sc = DR_SPLATW(scale);
    for (int v = 0; v < NV; v++) DR_STOREW(out + DR_W * v, s[v] * sc);
}

/* out[0:32] = scale * sum_i a[i] * M[i * ld : i * ld + 32] over a long count: four partial
 * sums over i mod 4 (added in a fixed order at the end), so a row of hundreds of keys waits on
 * a quarter of the adds' latency. */
static inline void row_block32_long(const float *a, int64_t count, const float *M, int64_t ld,
                                    float scale, float *out) {
    enum { NV = 32 / DR_W };
    dr_vf s[4][NV] = {{{0}}};
    int64_t i = 0;
    for (; i + 4 <= count; i += 4)
        for (int p = 0; p < 4; p++) {
            const dr_vf ai = DR_SPLATW(a[i + p]);
            const float *m = M + (i + p) * ld;
            for (int v = 0; v < NV; v++) s[p][v] += ai * DR_LOADW(m + DR_W * v);
        }
    for (; i < count; i++) {
        const dr_vf ai = DR_SPLATW(a[i]);
        for (int v = 0; v < NV; v++) s[0][v] += ai * DR_LOADW(M + i * ld + DR_W * v);
    }
    const dr_vf sc = DR_SPLATW(scale);
    for (int v = 0; v < NV; v++)
        DR_STOREW(out + DR_W * v, ((s[0][v] + s[1][v]) + (s[2][v] + s[3][v])) * sc);
}

/* One query q [kd] against keys 0..n-1 of one head, keys in blocks of NBK_KEY_BLOCK for a
 * capacity of L (Kb, see kernels.h) and values V [n, vd]: s = scale * q K^T (along the keys,
 * a block at a time), p = exp(s - max s), ctx [vd] = (p V) / sum(p) (along the value dims).
 * Each score is its own sum over the key's dims in order, in whichever part of a block it
 * falls. scores has room for L. */
void NBK_FN(nbk_attend_row_f32)(int64_t n, int64_t L, int64_t kd, int64_t vd, float scale,
                                const float *q, const float *Kb, const float *V, float *scores,
                                float *ctx) {
    enum { KB = NBK_KEY_BLOCK };
    _Static_assert(KB == 64, "row_block64 computes one whole block");
    int64_t j = 0;
    for (; j + KB <= n; j += KB) row_block64(q, kd, Kb + j * kd, KB, scale, scores + j);
    if (j < n) { /* a block not full yet, which may be the capacity's short one */
        const float *M = Kb + j * kd;
        const int64_t ld = L - j < KB ? L - j : KB, vectors = (n - j + 7) / 8 * 8;
        int64_t c = 0;
        if (n - j >= 32) row_block32(q, kd, M, ld, scale, scores + j), c = 32;
        /* whole vectors where the block has room: the keys past n are its later ones
         * (written by an earlier sequence, or zero), whose scores are computed and not used */
        row_tail(q, kd, M + c, ld, scale, scores + j + c, (vectors <= ld ? vectors : n - j) - c);
    }
    const float max = nbt_row_max_f32(scores, n);
    for (j = 0; j < n; j++) scores[j] -= max;
    NBK_FN(nbt_vexp_f32)(scores, scores, n);
    const float inv = (float)(1.0 / nbt_row_sum_f32(scores, n));
    int64_t d = 0;
    for (; d + 32 <= vd; d += 32) row_block32_long(scores, n, V + d, vd, inv, ctx + d);
    row_tail(scores, n, V + d, vd, inv, ctx + d, vd - d);
}
