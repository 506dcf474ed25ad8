/* The float32 rows of one-token decoding (kernels.h), called by nn/lm_decode.c: a block of a
 * matrix-vector product and one query's attention over a key/value cache. Written once with
 * eight-float vector types: every set computes the same lanes in the same order with nothing
 * fused, so all three give the same bits (AVX-512 and AVX2 in one register, SSE2 in two). */
#include "kernels.h"

typedef float dr_v8f __attribute__((vector_size(32)));
typedef float dr_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
#define DR_LOAD(p) (*(const dr_v8f_u *)(p))
#define DR_STORE(p, v) (*(dr_v8f_u *)(p) = (v))
#define DR_SPLAT(x) ((dr_v8f){x, x, x, x, x, x, x, x})
#define DR_COMBINE(a) (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])))

/* sum_k w[k] * x[k] over the tail k in [Kv, K), added to a lane sum in a fixed order. */
static inline float dot_finish(dr_v8f acc, const float *w, const float *x, int64_t Kv, int64_t K) {
    float s = DR_COMBINE(acc);
    for (int64_t k = Kv; k < K; k++) s += w[k] * x[k];
    return s;
}

/* y[i] = W[i, :] . x + bias[i] for rows i < n of W (row-major, K columns); bias may be NULL.
 * Four rows at a time share each load of x; each row's sum is eight lanes over k, then the
 * tail, in the same order whichever row block it falls in. */
void NBK_FN(nbk_matvec_rows_f32)(int64_t n, int64_t K, const float *W, const float *x,
                                 const float *bias, float *y) {
    const int64_t Kv = K / 8 * 8;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float *w0 = W + i * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
        dr_v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        /* the block after next, one line per row and step of 16 */
        const float *ahead = W + (i + 8 < n ? i + 8 : i) * K;
        for (int64_t k = 0; k < 4 * K; k += 16) __builtin_prefetch(ahead + k);
        for (int64_t k = 0; k < Kv; k += 8) {
            const dr_v8f xv = DR_LOAD(x + k);
            a0 += DR_LOAD(w0 + k) * xv;
            a1 += DR_LOAD(w1 + k) * xv;
            a2 += DR_LOAD(w2 + k) * xv;
            a3 += DR_LOAD(w3 + k) * xv;
        }
        y[i] = dot_finish(a0, w0, x, Kv, K);
        y[i + 1] = dot_finish(a1, w1, x, Kv, K);
        y[i + 2] = dot_finish(a2, w2, x, Kv, K);
        y[i + 3] = dot_finish(a3, w3, x, Kv, K);
    }
    for (; i < n; i++) {
        const float *w0 = W + i * K;
        dr_v8f a0 = {0};
        for (int64_t k = 0; k < Kv; k += 8) a0 += DR_LOAD(w0 + k) * DR_LOAD(x + k);
        y[i] = dot_finish(a0, w0, x, Kv, K);
    }
    if (bias)
        for (int64_t r = 0; r < n; r++) y[r] += bias[r];
}

/* One query q [hd] against keys 0..n-1 of one head, keys stored transposed Kt [hd, ld_k] and
 * values V [n, hd]: s = scale * q Kt (along the keys, whole vectors), p = exp(s - max s),
 * ctx = (p V) / sum(p) (along the head dims). scores has room for n. */
void NBK_FN(nbk_attend_row_f32)(int64_t n, int64_t hd, int64_t ld_k, float scale, const float *q,
                                const float *Kt, const float *V, float *scores, float *ctx) {
    /* scores: 32 keys at a time, each key dim adding one contiguous piece of a Kt row */
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        dr_v8f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
        for (int64_t d = 0; d < hd; d++) {
            const dr_v8f qd = DR_SPLAT(q[d]);
            const float *k = Kt + d * ld_k + j;
            s0 += qd * DR_LOAD(k);
            s1 += qd * DR_LOAD(k + 8);
            s2 += qd * DR_LOAD(k + 16);
            s3 += qd * DR_LOAD(k + 24);
        }
        const dr_v8f sc = DR_SPLAT(scale);
        DR_STORE(scores + j, s0 * sc);
        DR_STORE(scores + j + 8, s1 * sc);
        DR_STORE(scores + j + 16, s2 * sc);
        DR_STORE(scores + j + 24, s3 * sc);
    }
    for (; j + 8 <= n; j += 8) {
        dr_v8f s = {0};
        for (int64_t d = 0; d < hd; d++) s += DR_SPLAT(q[d]) * DR_LOAD(Kt + d * ld_k + j);
        DR_STORE(scores + j, s * DR_SPLAT(scale));
    }
    for (; j < n; j++) {
        float s = 0;
        for (int64_t d = 0; d < hd; d++) s += q[d] * Kt[d * ld_k + j];
        scores[j] = s * scale;
    }
    float max = scores[0];
    for (j = 1; j < n; j++) max = scores[j] > max ? scores[j] : max;
    for (j = 0; j < n; j++) scores[j] -= max;
    NBK_FN(nbt_vexp_f32)(scores, scores, n);
    double sum = 0;
    for (j = 0; j < n; j++) sum += scores[j];
    const float inv = (float)(1.0 / sum);
    /* context: 32 head dims at a time, each key adding its value row's piece */
    int64_t d = 0;
    for (; d + 32 <= hd; d += 32) {
        dr_v8f c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
        for (j = 0; j < n; j++) {
            const dr_v8f p = DR_SPLAT(scores[j]);
            const float *v = V + j * hd + d;
            c0 += p * DR_LOAD(v);
            c1 += p * DR_LOAD(v + 8);
            c2 += p * DR_LOAD(v + 16);
            c3 += p * DR_LOAD(v + 24);
        }
        const dr_v8f vi = DR_SPLAT(inv);
        DR_STORE(ctx + d, c0 * vi);
        DR_STORE(ctx + d + 8, c1 * vi);
        DR_STORE(ctx + d + 16, c2 * vi);
        DR_STORE(ctx + d + 24, c3 * vi);
    }
    for (; d + 8 <= hd; d += 8) {
        dr_v8f c = {0};
        for (j = 0; j < n; j++) c += DR_SPLAT(scores[j]) * DR_LOAD(V + j * hd + d);
        DR_STORE(ctx + d, c * DR_SPLAT(inv));
    }
    for (; d < hd; d++) {
        float c = 0;
        for (j = 0; j < n; j++) c += scores[j] * V[j * hd + d];
        ctx[d] = c * inv;
    }
}
