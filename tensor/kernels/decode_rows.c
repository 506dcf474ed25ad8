/* The float32 rows of decoding (kernels.h): a block of a matrix-vector product (linear layers
 * of a few rows) and one query's attention over a key/value cache (nn/kv_cache.c). The attention is
 * written once with eight-float vector types and nothing fused (the same bits in every set);
 * the matrix-vector rows use each set's widest vector and its FMA, so, like the GEMM, the sets
 * round differently (each set is deterministic, and independent of the thread count). */
#include "kernels.h"
#include "../rows.h"

typedef float dr_v8f __attribute__((vector_size(32)));
typedef float dr_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
#define DR_LOAD(p) (*(const dr_v8f_u *)(p))
#define DR_STORE(p, v) (*(dr_v8f_u *)(p) = (v))
#define DR_SPLAT(x) ((dr_v8f){x, x, x, x, x, x, x, x})

/* The widest vector of the set for the matrix-vector rows, and its multiply-add (fused where
 * the set has FMA: the rows are bound by reading W, and one instruction per vector keeps the
 * loads in flight). */
#if defined(__AVX512F__)
#include <immintrin.h>
#define MV_W 16
typedef float mv_vf __attribute__((vector_size(64)));
#define MV_FMA(a, b, c) ((mv_vf)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define MV_SPLAT(x) ((mv_vf)_mm512_set1_ps(x))
#elif defined(__AVX2__)
#include <immintrin.h>
#define MV_W 8
typedef float mv_vf __attribute__((vector_size(32)));
#define MV_FMA(a, b, c) ((mv_vf)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define MV_SPLAT(x) ((mv_vf)_mm256_set1_ps(x))
#else
#define MV_W 4
typedef float mv_vf __attribute__((vector_size(16)));
#define MV_FMA(a, b, c) ((a) * (b) + (c))
#define MV_SPLAT(x) ((mv_vf){(x), (x), (x), (x)})
#endif
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef float mv_vf_u __attribute__((vector_size(MV_W * 4), aligned(4), may_alias));
#define MV_LOAD(p) (*(const mv_vf_u *)(p))

/* The sum of a's lanes, halving the vector in a fixed order, then the tail k in [Kv, K). */
static inline float mv_finish(mv_vf a, const float *w, const float *x, int64_t Kv, int64_t K) {
#if MV_W == 16
    v8f h8 = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
             __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
#elif MV_W == 8
    v8f h8 = a;
#endif
#if MV_W >= 8
    v4f h4 =
        __builtin_shufflevector(h8, h8, 0, 1, 2, 3) + __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
#else
    v4f h4 = a;
#endif
    float s = (h4[0] + h4[2]) + (h4[1] + h4[3]);
    for (int64_t k = Kv; k < K; k++) s += w[k] * x[k];
    return s;
}

/* w[0:K] . x[0:K]: two accumulators (even and odd vectors of k) keep the multiply-adds off
 * each other's latency, then the lanes, then the tail. */
static inline float row_dot(const float *w, const float *x, int64_t K) {
    mv_vf a0 = {0}, a1 = {0};
    int64_t k = 0;
    for (; k + 2 * MV_W <= K; k += 2 * MV_W) {
        a0 = MV_FMA(MV_LOAD(w + k), MV_LOAD(x + k), a0);
        a1 = MV_FMA(MV_LOAD(w + k + MV_W), MV_LOAD(x + k + MV_W), a1);
    }
    for (; k + MV_W <= K; k += MV_W) a0 = MV_FMA(MV_LOAD(w + k), MV_LOAD(x + k), a0);
    return mv_finish(a0 + a1, w, x, k, K);
}

/* y[i] = W[i, 0:K] . x + bias[i] for rows i < n of W (row stride ldw); bias may be NULL.
 * Row after row, so W is read as one sequential stream (measured some 35% faster from L3 than
 * eight rows side by side, which the hardware prefetchers follow less well). */
void NBK_FN(nbk_matvec_rows_f32)(int64_t n, int64_t K, const float *W, int64_t ldw, const float *x,
                                 const float *bias, float *y) {
    for (int64_t i = 0; i < n; i++) {
        const float dot = row_dot(W + i * ldw, x, K);
        y[i] = bias ? dot + bias[i] : dot;
    }
}

/* The prompt's rows (nbk_matmul_rows_f32): up to 16 inputs at once, one lane each, so each
 * row of W is read once for all of them and no lanes are summed across. */
#define MM_T 16
#define MM_V (MM_T / MV_W) /* vectors of the set per 16 lanes */
#define MM_ROWS 4          /* rows of W at once, sharing each load of the inputs */

/* y[t * ldy + i] = sum over k of W[i, k] xt[k][t] (+ bias[i]) for rows i in [i0, i0 + rows) of
 * W (row stride ldw), lanes t < T of xt ([K][16]): each output one multiply-add chain in order
 * of k. */
static inline void matmul_block(int64_t i0, int rows, int64_t K, const float *W, int64_t ldw,
                                const float *xt, int64_t T, const float *bias, float *y,
                                int64_t ldy) {
    mv_vf acc[MM_ROWS][MM_V] = {{{0}}};
    for (int64_t k = 0; k < K; k++) {
        mv_vf x[MM_V];
        for (int v = 0; v < MM_V; v++) x[v] = MV_LOAD(xt + k * MM_T + v * MV_W);
        for (int r = 0; r < rows; r++) {
            const mv_vf w = MV_SPLAT(W[(i0 + r) * ldw + k]);
            for (int v = 0; v < MM_V; v++) acc[r][v] = MV_FMA(w, x[v], acc[r][v]);
        }
    }
    for (int r = 0; r < rows; r++) {
        const float b = bias ? bias[i0 + r] : 0.0f;
        for (int64_t t = 0; t < T; t++) {
            const float dot = acc[r][t / MV_W][t % MV_W];
            y[t * ldy + i0 + r] = bias ? dot + b : dot;
        }
    }
}

void NBK_FN(nbk_matmul_rows_f32)(int64_t n, int64_t K, const float *W, int64_t ldw, const float *xt,
                                 int64_t T, const float *bias, float *y, int64_t ldy) {
    int64_t i = 0;
    for (; i + MM_ROWS <= n; i += MM_ROWS) matmul_block(i, MM_ROWS, K, W, ldw, xt, T, bias, y, ldy);
    for (; i < n; i++) matmul_block(i, 1, K, W, ldw, xt, T, bias, y, ldy);
}

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
