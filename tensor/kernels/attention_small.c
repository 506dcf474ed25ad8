/* The small-head attention kernels (attention_small.h), written once with GCC vector types of
 * 16 floats and built per instruction set (kernels.h): AVX-512 holds a vector in one register,
 * AVX2 in two, plain x86-64 in four.
 *
 * A row of scores or probabilities is one vector over the keys, padded with zeros (or -inf
 * before the exp) past T_k. Sums run in a fixed order, so a pair's result does not depend on
 * which thread computes it. Products skip the causally blocked terms, which are exact zeros.
 * The products' sums are fused multiply-adds on the sets that have them (mul_add), so AVX-512
 * and AVX2 agree bit for bit and the generic set within rounding; everything else rounds as
 * written (no -ffast-math). */
#include "kernels.h"
#include "vec64.h"

#include <math.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

#define W V16_W
typedef int32_t v16i __attribute__((vector_size(W * sizeof(float))));

/* The first n (1 to 16) floats at p, zeros after: a head narrower than a vector. One masked
 * load with AVX-512; an element loop otherwise (a memcpy of a variable size was a libc call,
 * 7% of the seed step). */
static inline v16 load_n(const float *p, int n) {
    if (n == W) return v16_load(p);
#ifdef __AVX512F__
    return (v16)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
#else
    v16 v = {0};
    for (int i = 0; i < n; i++) v[i] = p[i];
    return v;
#endif
}
static inline void store_n(float *p, v16 v, int n) {
    if (n == W) {
        v16_store(p, v);
        return;
    }
#ifdef __AVX512F__
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
#else
    for (int i = 0; i < n; i++) p[i] = v[i];
#endif
}
/* A row's sums of products (16 lanes) as the loops over keys or head dims carry them. Each step
 * is acc + a * b lane by lane with one rounding (a fused multiply-add) on the sets that have
 * FMA, as their GEMM kernels sum, so AVX-512 and AVX2 agree bit for bit; the generic set
 * rounds the product and the sum apart, as its GEMM does. On AVX-512 a step is then one
 * instruction where a multiply and an add were two (the loops were port-bound).
 * On AVX2 the sums are two 8-float halves: GCC has no register mode for a 16-float vector
 * there, so a v16 variable lives on the stack, and every step of these loops went through
 * memory and general registers (toy's attention was 62% of its samples with the AVX2
 * kernels, 31% with AVX-512's). */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
typedef struct {
    __m256 lo, hi;
} row_acc;
static inline row_acc acc_zero(void) {
    return (row_acc){_mm256_setzero_ps(), _mm256_setzero_ps()};
}
static inline row_acc acc_load(const float *p) {
    return (row_acc){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
static inline row_acc acc_load_n(const float *p, int n) {
    if (n == W) return acc_load(p);
    float t[W] = {0};
    for (int i = 0; i < n; i++) t[i] = p[i];
    return acc_load(t);
}
static inline row_acc acc_mul_add(row_acc acc, float a, row_acc b) {
    const __m256 av = _mm256_set1_ps(a);
    return (row_acc){_mm256_fmadd_ps(av, b.lo, acc.lo), _mm256_fmadd_ps(av, b.hi, acc.hi)};
}
static inline void acc_store_n(float *p, row_acc acc, int n) {
    if (n == W) {
        _mm256_storeu_ps(p, acc.lo), _mm256_storeu_ps(p + 8, acc.hi);
        return;
    }
    float t[W];
    _mm256_storeu_ps(t, acc.lo), _mm256_storeu_ps(t + 8, acc.hi);
    for (int i = 0; i < n; i++) p[i] = t[i];
}
#else
typedef v16 row_acc;
static inline row_acc acc_zero(void) {
    return v16_splat(0);
}
static inline row_acc acc_load(const float *p) {
    return v16_load(p);
}
static inline row_acc acc_load_n(const float *p, int n) {
    return load_n(p, n);
}
static inline row_acc acc_mul_add(row_acc acc, float a, row_acc b) {
#ifdef __AVX512F__
    return (v16)_mm512_fmadd_ps(_mm512_set1_ps(a), (__m512)b, (__m512)acc);
#else
    return acc + a * b;
#endif
}
static inline void acc_store_n(float *p, row_acc acc, int n) {
    store_n(p, acc, n);
}
#endif
/* Lanes below limit keep v, the others become fill. */
static inline v16 keep_below(v16 v, int64_t limit, float fill) {
    const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    v16i keep = lane < (int32_t)limit;
    return (v16)(((v16i)v & keep) | ((v16i)v16_splat(fill) & ~keep));
}
/* Rows go in blocks of RB: the loads of k, v, q and the gradient are shared by the block and
 * its RB sums are independent chains, where one row alone would wait on each add. A block
 * past the last row repeats the last row and drops the result. */
#define RB 4

static inline int64_t clamp_row(int64_t t, int64_t n) {
    return t < n ? t : n - 1;
}

/* Fixed lane swaps for the reduction trees (gcc >= 12 and clang both know shufflevector). */
#define SWAP8(v) __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)
#define SWAP4(v) __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11)
#define SWAP2(v) __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13)
#define SWAP1(v) __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14)
/* The sum of the lanes, as a fixed tree. */
static inline float lane_sum(v16 v) {
    v = v + SWAP8(v);
    v = v + SWAP4(v);
    v = v + SWAP2(v);
    v = v + SWAP1(v);
    return v[0];
}
/* The larger of a and b lane by lane (b where either is NaN). */
static inline v16 lane_max2(v16 a, v16 b) {
    v16i gt = a > b;
    return (v16)(((v16i)a & gt) | ((v16i)b & ~gt));
}
/* The largest lane, NaN lanes skipped unless all are NaN or -inf. */
static inline float lane_max(v16 v) {
    v = lane_max2(v, SWAP8(v));
    v = lane_max2(v, SWAP4(v));
    v = lane_max2(v, SWAP2(v));
    v = lane_max2(v, SWAP1(v));
    return v[0];
}

/* A row's own work (scale, causal fill, max, sums, normalisation) on row_acc values: on AVX2
 * in 8-float halves, each lane computed as the 16-float code above computes it (the same
 * reduction trees, lane 0 ending with the same value), so the sets still agree bit for bit. */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
static inline row_acc row_scale(float a, row_acc x) {
    const __m256 av = _mm256_set1_ps(a);
    return (row_acc){_mm256_mul_ps(av, x.lo), _mm256_mul_ps(av, x.hi)};
}
static inline row_acc row_shift(row_acc x, float b) { /* x - b */
    const __m256 bv = _mm256_set1_ps(b);
    return (row_acc){_mm256_sub_ps(x.lo, bv), _mm256_sub_ps(x.hi, bv)};
}
static inline row_acc row_mul(row_acc a, row_acc b) {
    return (row_acc){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
}
static inline row_acc row_keep_below(row_acc v, int64_t limit, float fill) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i lim = _mm256_set1_epi32((int32_t)limit);
    const __m256 f = _mm256_set1_ps(fill);
    const __m256 klo = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, lane));
    const __m256 khi =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, _mm256_add_epi32(lane, _mm256_set1_epi32(8))));
    return (row_acc){_mm256_blendv_ps(f, v.lo, klo), _mm256_blendv_ps(f, v.hi, khi)};
}
static inline __m256 max2_8(__m256 a, __m256 b) { /* lane_max2 */
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(a, b, _CMP_GT_OQ));
}
static inline __m256 add8(__m256 a, __m256 b) {
    return _mm256_add_ps(a, b);
}
/* Lane 0 of the 16-float code's tree of op over SWAP8, SWAP4, SWAP2, SWAP1 (lane_max,
 * lane_sum): the same pairs in the same order. */
static inline float lane0_tree(row_acc v, __m256 (*op)(__m256, __m256)) {
    __m256 m = op(v.lo, v.hi);
    m = op(m, _mm256_permute2f128_ps(m, m, 1));
    m = op(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = op(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm256_cvtss_f32(m);
}
static inline float row_max(row_acc v) {
    return lane0_tree(v, max2_8);
}
static inline float row_sum(row_acc v) {
    return lane0_tree(v, add8);
}
#else
static inline row_acc row_scale(float a, row_acc x) {
    return a * x;
}
static inline row_acc row_shift(row_acc x, float b) {
    return x - b;
}
static inline row_acc row_mul(row_acc a, row_acc b) {
    return a * b;
}
static inline row_acc row_keep_below(row_acc v, int64_t limit, float fill) {
    return keep_below(v, limit, fill);
}
static inline float row_max(row_acc v) {
    return lane_max(v);
}
static inline float row_sum(row_acc v) {
    return lane_sum(v);
}
#endif
/* True when one of the first n lanes is NaN (rare: asked only of a row whose max is -inf). */
static inline bool row_any_nan(row_acc v, int64_t n) {
    float t[W];
    acc_store_n(t, v, W);
    for (int64_t i = 0; i < n; i++)
        if (isnan(t[i])) return true;
    return false;
}

/* Keys query t may see. */
static inline int64_t key_limit(const nba_small_head *h, int64_t t) {
    return h->causal && t + 1 < h->Tk ? t + 1 : h->Tk;
}

/* One butterfly stage of a 16 x 16 transpose: for each pair of rows i, i + b (bit b of i
 * clear) it swaps bit b of the row index with bit b of the lane index. The four stages swap
 * all four bits: row i lane l ends up in row l lane i. (The lane lists are that rule written
 * out: shufflevector wants constants.) */
#define PAIR_LO8(a, c)                                                                             \
    __builtin_shufflevector(a, c, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
#define PAIR_HI8(a, c)                                                                             \
    __builtin_shufflevector(a, c, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31)
#define PAIR_LO4(a, c)                                                                             \
    __builtin_shufflevector(a, c, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27)
#define PAIR_HI4(a, c)                                                                             \
    __builtin_shufflevector(a, c, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31)
#define PAIR_LO2(a, c)                                                                             \
    __builtin_shufflevector(a, c, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29)
#define PAIR_HI2(a, c)                                                                             \
    __builtin_shufflevector(a, c, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31)
#define PAIR_LO1(a, c)                                                                             \
    __builtin_shufflevector(a, c, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30)
#define PAIR_HI1(a, c)                                                                             \
    __builtin_shufflevector(a, c, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31)
#define DEFINE_STAGE(b)                                                                            \
    static inline void stage##b(v16 r[W]) {                                                        \
        for (int i = 0; i < W; i++)                                                                \
            if (!(i & b)) {                                                                        \
                v16 lo = PAIR_LO##b(r[i], r[i + b]), hi = PAIR_HI##b(r[i], r[i + b]);              \
                r[i] = lo, r[i + b] = hi;                                                          \
            }                                                                                      \
    }
DEFINE_STAGE(8)
DEFINE_STAGE(4)
DEFINE_STAGE(2)
DEFINE_STAGE(1)

#if defined(__AVX2__) && !defined(__AVX512F__)
/* r[i][j] becomes r[j][i]: the usual unpack, shuffle and lane-swap network. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2)
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}
#endif

/* xt[d][s] = x[s][d] for the Tk rows of x (x_row apart), zeros for s >= Tk: in registers, a
 * block of 16 columns at a time (a scalar transpose was 6% of the toy step). */
static void transpose_keys(const float *x, int64_t x_row, int64_t Tk, int64_t hd, float *xt) {
#ifdef __AVX512F__
    /* At most 4 keys of at most 4 dims (the seed workload's 3 x 3): a 4 x 4 transpose in
     * 128-bit registers, where the 16 x 16 one would mostly move zeros. */
    if (Tk <= 4 && hd <= 4) {
        const __mmask16 dims = (__mmask16)((1u << hd) - 1);
        __m128 r[4];
        for (int s = 0; s < 4; s++)
            r[s] = s < Tk ? _mm512_castps512_ps128(_mm512_maskz_loadu_ps(dims, x + s * x_row))
                          : _mm_setzero_ps();
        _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
        for (int64_t d = 0; d < hd; d++) _mm512_storeu_ps(xt + d * W, _mm512_zextps128_ps512(r[d]));
        return;
    }
#elif defined(__AVX2__)
    /* Four 8 x 8 blocks in 256-bit registers: the 16 x 16 network on 16-float vectors went
     * through the stack here (no register mode for them), 11% of toy's samples. */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c = 0; c < hd; c += W) {
        const int n = hd - c < W ? (int)(hd - c) : W;
        for (int dh = 0; 8 * dh < n; dh++) { /* dims c + 8 dh + [0, m) */
            const int m = n - 8 * dh < 8 ? n - 8 * dh : 8;
            const __m256i dims = _mm256_cmpgt_epi32(_mm256_set1_epi32(m), lane);
            for (int sh = 0; sh < 2; sh++) { /* keys 8 sh + [0, 8) */
                __m256 r[8];
                for (int i = 0; i < 8; i++) {
                    const float *row = x + (8 * sh + i) * x_row + c + 8 * dh;
                    /* plain loads where all 8 dims are there: masked ones cost Zen 3 more */
                    r[i] = 8 * sh + i >= Tk ? _mm256_setzero_ps()
                           : m == 8 ? _mm256_loadu_ps(row)
                                    : _mm256_maskload_ps(row, dims);
                }
                transpose8(r);
                for (int d = 0; d < m; d++)
                    _mm256_storeu_ps(xt + (c + 8 * dh + d) * W + 8 * sh, r[d]);
            }
        }
    }
    return;
#endif
    for (int64_t c = 0; c < hd; c += W) {
        int n = hd - c < W ? (int)(hd - c) : W;
        v16 r[W];
#pragma GCC unroll 16
        for (int64_t s = 0; s < W; s++) r[s] = s < Tk ? load_n(x + s * x_row + c, n) : v16_splat(0);
        stage8(r), stage4(r), stage2(r), stage1(r);
        for (int d = 0; d < n; d++) v16_store(xt + (c + d) * W, r[d]);
    }
}

/* rows[t] = the scores of query t, shifted by their max, -inf where blocked. */
static void shifted_scores(const nba_small_head *h, const float *kt, float *rows) {
    const int64_t Tq = h->Tq, hd = h->hd;
    for (int64_t t0 = 0; t0 < Tq; t0 += RB) {
        const float *qr[RB];
        row_acc acc[RB];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
            qr[r] = h->q + clamp_row(t0 + r, Tq) * h->q_row, acc[r] = acc_zero();
        for (int64_t d = 0; d < hd; d++) {
            row_acc kv = acc_load(kt + d * W);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) acc[r] = acc_mul_add(acc[r], qr[r][d], kv);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            if (!(t0 + r < Tq)) break;
            int64_t limit = key_limit(h, t0 + r);
            row_acc x = row_keep_below(row_scale(h->scale, acc[r]), limit, -INFINITY);
            float max = row_max(x);
            /* all -inf (or NaN: then the sums make NaN) */
            bool blocked = max == -INFINITY && !row_any_nan(x, limit);
            /* a blocked row stays -inf: exp makes zeros and normalising leaves them */
            acc_store_n(rows + (t0 + r) * W, blocked ? x : row_shift(x, max), W);
        }
    }
}

/* out[t] = sum over s of x[t][s] y[s] for the Tq rows t, x's rows padded vectors of the
 * keys, y's rows y_row apart, out's rows out_row apart. Causally x[t][s] is 0 for s > t, so a
 * block of rows stops at the keys its last row sees. */
static void padded_rows_times(const nba_small_head *h, const float *x, const float *y,
                              int64_t y_row, float *out, int64_t out_row) {
    const int64_t Tq = h->Tq, hd = h->hd;
    for (int64_t t0 = 0; t0 < Tq; t0 += RB) {
        int64_t limit = key_limit(h, clamp_row(t0 + RB - 1, Tq));
        const float *xr[RB];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) xr[r] = x + clamp_row(t0 + r, Tq) * W;
        for (int64_t c = 0; c < hd; c += W) {
            int n = hd - c < W ? (int)(hd - c) : W;
            row_acc acc[RB];
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) acc[r] = acc_zero();
            for (int64_t s = 0; s < limit; s++) {
                row_acc yv = acc_load_n(y + s * y_row + c, n);
#pragma GCC unroll 4
                for (int r = 0; r < RB; r++) acc[r] = acc_mul_add(acc[r], xr[r][s], yv);
            }
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++)
                if (t0 + r < Tq) acc_store_n(out + (t0 + r) * out_row + c, acc[r], n);
        }
    }
}

void NBK_FN(nba_small_head_forward)(const nba_small_head *h) {
    const int64_t Tq = h->Tq, Tk = h->Tk, hd = h->hd;
    float kt[NBA_SMALL_HEAD_DIM * W]; /* k^T: row d holds k[0..Tk)[d], zeros after */
    float rows[NBA_SMALL_QUERIES * W];
    if (Tq < 1 || Tq > NBA_SMALL_QUERIES) return; /* (nba_small_head_fits rules it out) */
    transpose_keys(h->k, h->k_row, Tk, hd, kt);
    shifted_scores(h, kt, rows);
    NBK_FN(nbt_vexp_f32)(rows, rows, Tq * W); /* this set's exp, as the table's */
    for (int64_t t = 0; t < Tq; t++) {
        row_acc p = acc_load(rows + t * W);
        float sum = row_sum(p);
        if (sum != 0) p = row_scale(1.0f / sum, p);
        acc_store_n(rows + t * W, p, W);
        acc_store_n(h->probs + t * Tk, p, (int)Tk);
    }
    padded_rows_times(h, rows, h->v, h->v_row, h->ctx, h->ctx_row); /* ctx = p v */
}

/* out[s] = sum over t of x[t][s] y[t] for s in [s0, s0 + RB), rows of y y_row apart; x rows
 * are padded vectors. Causally x[t][s] is 0 for t < s, so t starts at s0. */
static void transposed_block(const nba_small_head *h, const float *x, const float *y, int64_t y_row,
                             float *out, int64_t s0) {
    for (int64_t c = 0; c < h->hd; c += W) {
        int n = h->hd - c < W ? (int)(h->hd - c) : W;
        row_acc acc[RB];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) acc[r] = acc_zero();
        for (int64_t t = h->causal ? s0 : 0; t < h->Tq; t++) {
            row_acc yv = acc_load_n(y + t * y_row + c, n);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) acc[r] = acc_mul_add(acc[r], x[t * W + s0 + r], yv);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
            if (s0 + r < h->Tk) acc_store_n(out + (s0 + r) * h->d_row + c, acc[r], n);
    }
}

void NBK_FN(nba_small_head_backward)(const nba_small_head *h) {
    const int64_t Tq = h->Tq, Tk = h->Tk, hd = h->hd;
    float p[NBA_SMALL_QUERIES * W]; /* probabilities, rows padded with zeros */
    if (Tq < 1 || Tq > NBA_SMALL_QUERIES) return;
    for (int64_t t = 0; t < Tq; t++) {
        acc_store_n(p + t * W, acc_load_n(h->probs + t * Tk, (int)Tk), W);
    }
    if (h->dv) /* dv = p^T grad */
        for (int64_t s0 = 0; s0 < Tk; s0 += RB)
            transposed_block(h, p, h->grad, h->grad_row, h->dv, s0);
    if (!h->dq && !h->dk) return;
    float vt[NBA_SMALL_HEAD_DIM * W]; /* v^T, as k^T in the forward */
    float ds[NBA_SMALL_QUERIES * W];  /* gradient of the scores */
    transpose_keys(h->v, h->v_row, Tk, hd, vt);
    for (int64_t t0 = 0; t0 < Tq; t0 += RB) { /* dP = grad v^T, then the softmax backward */
        const float *gr[RB];
        row_acc dp[RB];
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++)
            gr[r] = h->grad + clamp_row(t0 + r, Tq) * h->grad_row, dp[r] = acc_zero();
        for (int64_t d = 0; d < hd; d++) {
            row_acc vv = acc_load(vt + d * W);
#pragma GCC unroll 4
            for (int r = 0; r < RB; r++) dp[r] = acc_mul_add(dp[r], gr[r][d], vv);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            if (!(t0 + r < Tq)) break;
            row_acc pt = acc_load(p + (t0 + r) * W);
            float dot = row_sum(row_mul(pt, dp[r]));
            acc_store_n(ds + (t0 + r) * W, row_mul(row_scale(h->scale, pt), row_shift(dp[r], dot)),
                        W);
        }
    }
    if (h->dq) padded_rows_times(h, ds, h->k, h->k_row, h->dq, h->d_row); /* dq = dS k */
    if (h->dk)                                                            /* dk = dS^T q */
        for (int64_t s0 = 0; s0 < Tk; s0 += RB) transposed_block(h, ds, h->q, h->q_row, h->dk, s0);
}
