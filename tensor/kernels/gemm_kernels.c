/* GEMM microkernels for one instruction set (kernels.h: built once per set, the compiler's
 * __AVX512F__ / __AVX2__ say which). Each build exports one nbt_gemm_kernels_<set> function
 * that describes its kernels. */
#include "kernels.h"

#include <stddef.h>

/* Rows as (row, group of three, offset in the group). */
#define ROWS_6(X) X(0, 0, 0) X(1, 0, 1) X(2, 0, 2) X(3, 1, 0) X(4, 1, 1) X(5, 1, 2)
#define ROWS_12(X) ROWS_6(X) X(6, 2, 0) X(7, 2, 1) X(8, 2, 2) X(9, 3, 0) X(10, 3, 1) X(11, 3, 2)
#define ROWS_8(X) ROWS_6(X) X(6, 2, 0) X(7, 2, 1)
#define ROWS_16(X) ROWS_12(X) X(12, 4, 0) X(13, 4, 1) X(14, 4, 2) X(15, 5, 0)
#define GROUPS_8(X) GROUPS_6(X) X(2)
#define GROUPS_6(X) X(0) X(1)
#define GROUPS_12(X) GROUPS_6(X) X(2) X(3)
#define GROUPS_16(X) GROUPS_12(X) X(4) X(5)

static inline int clamp(int x, int lo, int hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>

#ifdef __AVX512F__
/* Wide: 12 rows x 2 vectors, 24 accumulators: enough independent FMAs to cover two FMA
 * ports' latency, with registers left for two B vectors. Narrow: 16 rows x 1 vector, so a
 * 16 x 16 attention product is one tile. */
#define MR_WIDE 12
#define ROWS_WIDE ROWS_12
#define GROUPS_WIDE GROUPS_12
#define MR_NARROW 16
#define ROWS_NARROW ROWS_16
#define GROUPS_NARROW GROUPS_16
/* Flat: 8 rows x 2 vectors, for products of 16, 32 or 40 rows (attention's blocks of 32
 * queries or keys), which 12-row strips cover only by computing up to 8 rows twice. */
#define MR_FLAT 8
#define VF32 __m512
#define VF64 __m512d
#define WF32 16
#define WF64 8
#define LDF32 _mm512_loadu_ps
#define STF32 _mm512_storeu_ps
#define SETF32 _mm512_set1_ps
#define FMAF32 _mm512_fmadd_ps
#define MULF32 _mm512_mul_ps
#define ZF32 _mm512_setzero_ps
#define LDF64 _mm512_loadu_pd
#define STF64 _mm512_storeu_pd
#define SETF64 _mm512_set1_pd
#define FMAF64 _mm512_fmadd_pd
#define MULF64 _mm512_mul_pd
#define ZF64 _mm512_setzero_pd
static inline __mmask16 mask16(int lo, int hi) {
    lo = clamp(lo, 0, 16), hi = clamp(hi, 0, 16);
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}
static inline __mmask8 mask8(int lo, int hi) {
    return (__mmask8)mask16(clamp(lo, 0, 8), clamp(hi, 0, 8));
}
#define HSUMF32 _mm512_reduce_add_ps
#define HSUMF64 _mm512_reduce_add_pd
#define MASKF32 __mmask16
#define MAKE_MASKF32 mask16
#define MLOADF32(p, m) _mm512_maskz_loadu_ps(m, p)
#define MSTOREF32(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define MASKF64 __mmask8
#define MAKE_MASKF64 mask8
#define MLOADF64(p, m) _mm512_maskz_loadu_pd(m, p)
#define MSTOREF64(p, m, v) _mm512_mask_storeu_pd(p, m, v)
#else
/* Wide: 6 rows x 2 vectors, 12 accumulators of the 16 ymm registers. Narrow: 12 rows x 1
 * vector, as many accumulators. */
#define MR_WIDE 6
#define ROWS_WIDE ROWS_6
#define GROUPS_WIDE GROUPS_6
#define MR_NARROW 12
#define ROWS_NARROW ROWS_12
#define GROUPS_NARROW GROUPS_12
#define VF32 __m256
#define VF64 __m256d
#define WF32 8
#define WF64 4
#define LDF32 _mm256_loadu_ps
#define STF32 _mm256_storeu_ps
#define SETF32 _mm256_set1_ps
#define FMAF32 _mm256_fmadd_ps
#define MULF32 _mm256_mul_ps
#define ZF32 _mm256_setzero_ps
#define LDF64 _mm256_loadu_pd
#define STF64 _mm256_storeu_pd
#define SETF64 _mm256_set1_pd
#define FMAF64 _mm256_fmadd_pd
#define MULF64 _mm256_mul_pd
#define ZF64 _mm256_setzero_pd
/* Lanes lo <= l < hi as an all-ones integer lane. */
static inline __m256i mask8x32(int lo, int hi) {
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), lane));
}
static inline __m256i mask4x64(int lo, int hi) {
    __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    return _mm256_and_si256(_mm256_cmpgt_epi64(lane, _mm256_set1_epi64x(lo - 1)),
                            _mm256_cmpgt_epi64(_mm256_set1_epi64x(hi), lane));
}
/* Lane sums in a fixed order: halves, then quarters, then pairs. */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
static inline double hsum4(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
#define HSUMF32 hsum8
#define HSUMF64 hsum4
#define MASKF32 __m256i
#define MAKE_MASKF32(lo, hi) mask8x32(clamp(lo, -1, 8), clamp(hi, 0, 8))
#define MLOADF32(p, m) _mm256_maskload_ps(p, m)
#define MSTOREF32(p, m, v) _mm256_maskstore_ps(p, m, v)
#define MASKF64 __m256i
#define MAKE_MASKF64(lo, hi) mask4x64(clamp(lo, -1, 4), clamp(hi, 0, 4))
#define MLOADF64(p, m) _mm256_maskload_pd(p, m)
#define MSTOREF64(p, m, v) _mm256_maskstore_pd(p, m, v)
#endif

#define T float
#define V VF32
#define W WF32
#define VLOAD LDF32
#define VSTORE STF32
#define VSET1 SETF32
#define VFMA FMAF32
#define VMUL MULF32
#define VZERO ZF32
#define MASK MASKF32
#define MAKE_MASK MAKE_MASKF32
#define MLOAD MLOADF32
#define MSTORE MSTOREF32
#define NV 2
#define MR MR_WIDE
#define ROWS ROWS_WIDE
#define GROUPS GROUPS_WIDE
#define KNAME ukr_f32_wide
#include "gemm_ukr.h"
#undef MR
#undef ROWS
#undef GROUPS
#undef KNAME
#ifdef MR_FLAT
#define MR MR_FLAT
#define ROWS ROWS_8
#define GROUPS GROUPS_8
#define KNAME ukr_f32_flat
#include "gemm_ukr.h"
#undef MR
#undef ROWS
#undef GROUPS
#undef KNAME
#endif
#undef NV
#define NV 1
#define MR MR_NARROW
#define ROWS ROWS_NARROW
#define GROUPS GROUPS_NARROW
#define KNAME ukr_f32_narrow
#include "gemm_ukr.h"
#undef NV
#undef MR
#undef ROWS
#undef GROUPS
#undef KNAME
#define VHSUM HSUMF32
#define RNAME rows_f32
#define DNAME dots_f32
#include "gemm_rows.h"
#undef VHSUM
#undef RNAME
#undef DNAME
#undef T
#undef V
#undef W
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VFMA
#undef VMUL
#undef VZERO
#undef MASK
#undef MAKE_MASK
#undef MLOAD
#undef MSTORE

#define T double
#define V VF64
#define W WF64
#define VLOAD LDF64
#define VSTORE STF64
#define VSET1 SETF64
#define VFMA FMAF64
#define VMUL MULF64
#define VZERO ZF64
#define MASK MASKF64
#define MAKE_MASK MAKE_MASKF64
#define MLOAD MLOADF64
#define MSTORE MSTOREF64
#define NV 2
#define MR MR_WIDE
#define ROWS ROWS_WIDE
#define GROUPS GROUPS_WIDE
#define KNAME ukr_f64_wide
#include "gemm_ukr.h"
#undef MR
#undef ROWS
#undef GROUPS
#undef KNAME
#ifdef MR_FLAT
#define MR MR_FLAT
#define ROWS ROWS_8
#define GROUPS GROUPS_8
#define KNAME ukr_f64_flat
#include "gemm_ukr.h"
#undef MR
#undef ROWS
#undef GROUPS
#undef KNAME
#endif
#undef NV
#define NV 1
#define MR MR_NARROW
#define ROWS ROWS_NARROW
#define GROUPS GROUPS_NARROW
#define KNAME ukr_f64_narrow
#include "gemm_ukr.h"
#define VHSUM HSUMF64
#define RNAME rows_f64
#define DNAME dots_f64
#include "gemm_rows.h"

/* ---- packing panels read across rows: square blocks transposed in registers ---- */
#ifdef __AVX512F__
/* r[j] holds row j of a 16 x 16 block; afterwards r[k] holds column k. */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* s[4g + q], 128-bit lane L: rows 4g..4g+3 of column 4L + q */
    __m512 s[16];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m512d lo = _mm512_castps_pd(t[4 * g]), lo2 = _mm512_castps_pd(t[4 * g + 2]);
        __m512d hi = _mm512_castps_pd(t[4 * g + 1]), hi2 = _mm512_castps_pd(t[4 * g + 3]);
        s[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
        s[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
        s[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
        s[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
    }
    /* column 4L + q gathers lane L of s[q], s[4 + q], s[8 + q], s[12 + q] */
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        __m512 u01_02 = _mm512_shuffle_f32x4(s[q], s[4 + q], 0x88);
        __m512 u01_13 = _mm512_shuffle_f32x4(s[q], s[4 + q], 0xdd);
        __m512 u23_02 = _mm512_shuffle_f32x4(s[8 + q], s[12 + q], 0x88);
        __m512 u23_13 = _mm512_shuffle_f32x4(s[8 + q], s[12 + q], 0xdd);
        r[q] = _mm512_shuffle_f32x4(u01_02, u23_02, 0x88);
        r[8 + q] = _mm512_shuffle_f32x4(u01_02, u23_02, 0xdd);
        r[4 + q] = _mm512_shuffle_f32x4(u01_13, u23_13, 0x88);
        r[12 + q] = _mm512_shuffle_f32x4(u01_13, u23_13, 0xdd);
    }
}

/* Square blocks of 16 x 16 transposed in registers; a panel narrower than a multiple of 16
 * (A's 12 rows) is stored with a lane mask. */
static void pack_t_f32(const float *X, int64_t ldx, int64_t kc, int n, int width, float *dst) {
    for (int j0 = 0; j0 < width; j0 += 16) {
        __mmask16 lanes = mask16(0, width - j0);
        for (int64_t k0 = 0; k0 < kc; k0 += 16) {
            int kk = kc - k0 < 16 ? (int)(kc - k0) : 16;
            __mmask16 km = mask16(0, kk);
            __m512 r[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                r[j] = j0 + j < n ? _mm512_maskz_loadu_ps(km, X + (j0 + j) * ldx + k0)
                                  : _mm512_setzero_ps();
            transpose16(r);
#pragma GCC unroll 16
            for (int q = 0; q < 16; q++)
                if (q < kk) _mm512_mask_storeu_ps(dst + (k0 + q) * width + j0, lanes, r[q]);
        }
    }
}
#else
/* r[j] holds row j of an 8 x 8 block; afterwards r[k] holds column k. */
static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* s[4h + q], 128-bit lane L: rows 4h..4h+3 of column 4L + q */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
        s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        r[q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x20);
        r[4 + q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x31);
    }
}

/* The first `lanes` (1 to 8) floats of v to p, in plain stores: AVX2's masked store
 * (vmaskmovps) is microcoded on Zen 3 and was most of packing a 6-row A panel. */
static inline __attribute__((always_inline)) void store_lanes(float *p, __m256 v, int lanes) {
    if (lanes == 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    __m128 lo = _mm256_castps256_ps128(v);
    if (lanes >= 4) {
        _mm_storeu_ps(p, lo);
        lo = _mm256_extractf128_ps(v, 1);
        p += 4, lanes -= 4;
    }
    if (lanes >= 2) {
        _mm_storel_pi((__m64 *)p, lo);
        lo = _mm_movehl_ps(lo, lo);
        p += 2, lanes -= 2;
    }
    if (lanes) _mm_store_ss(p, lo);
}

/* Square blocks of 8 x 8 transposed in registers; a panel narrower than a multiple of 8
 * (A's 6 rows) stores the lanes it has. Whole blocks load plainly (masked loads cost Zen 3
 * more too). */
static void pack_t_f32(const float *X, int64_t ldx, int64_t kc, int n, int width, float *dst) {
    for (int j0 = 0; j0 < width; j0 += 8) {
        int lanes = width - j0 < 8 ? width - j0 : 8;
        for (int64_t k0 = 0; k0 < kc; k0 += 8) {
            int kk = kc - k0 < 8 ? (int)(kc - k0) : 8;
            __m256i km = mask8x32(0, kk);
            __m256 r[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                r[j] = j0 + j >= n ? _mm256_setzero_ps()
                       : kk == 8   ? _mm256_loadu_ps(X + (j0 + j) * ldx + k0)
                                   : _mm256_maskload_ps(X + (j0 + j) * ldx + k0, km);
            transpose8(r);
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++)
                if (q < kk) store_lanes(dst + (k0 + q) * width + j0, r[q], lanes);
        }
    }
}
#endif

/* Rows copied with vector loads, masked at the end of the row's columns (which writes the zero
 * padding): no per-row library call, which costs more than the copy for the narrow panels of
 * small products. A width that is not a whole number of vectors (an A panel of 12 or 6 rows)
 * ends in a masked store, unless
 * the panels are padded by at least a vector (the blocked path's): then a whole vector is
 * stored, its spill into the panel's next row overwritten when that row is packed (rows go in
 * order) and the last row's spill landing in the padding. Masked stores made packing a
 * transposed A (a weight gradient's activations) about twice as slow. A group of PACK_GROUP rows
 * of X is read once, start to end, for all panels: a few forward streams that the hardware
 * prefetcher follows, where a panel at a time would stride down the matrix once per panel. */
/* Each panel's part of the row PACK_AHEAD rows on is fetched while this one is copied: a
 * row's part of a block (2 KB of a 4 KB row at n = 1024) ends at a page boundary, where the
 * hardware prefetcher stops, so each new row began with misses to L3. With the prefetch the
 * weight gradients of lmbig (1536 x 384 x 2048, 384 x 1536 x 2048) ran 70.8 -> 77.3% and
 * 76.2 -> 77.6% of peak (AVX-512), 63.0 -> 70.8% and 78.5 -> 82.7% (AVX2), best of three or
 * four alternating runs on the Xeon of 2026-11-28. */
/* Rows go PACK_GROUP at a time, panel by panel: each panel receives a run of
 * PACK_GROUP * width elements (768 bytes of a 6-row A panel) where one row at a time wrote 24
 * bytes to each of up to 86 panels, 12 KB apart, in turn. The fetch ahead looks to the same row
 * of the next group. Measured on the shared Xeon of 2026-11-28 (one thread, CPU time, four
 * alternating rounds of four runs): AVX2, the weight gradients 512x128x1024, 1024x256x1024,
 * 1536x384x2048 and 384x1536x2048 took 8-12% less (medians), lmbig's forward 2048x1536x384
 * 1-12% less; AVX-512 (which reads lm's in place) the lmbig and mid ones 2-8% less, none
 * slower beyond the noise. */
#define PACK_GROUP 8
#define PACK_AHEAD PACK_GROUP

/* The fetch ahead is in both builds. On Zen 3 (AVX2) packs alone, warm, ran 1.09-1.45 times
 * as long with it, so it was left out there for a while; but a pack in a training step reads
 * what an earlier op wrote, mostly out of cache, and there it pays. Timed in turns in one
 * process (2026-11-29, blocks of 50 ms, medians): mid 0.972-0.974 of the time at two threads,
 * 0.980 at one; lmbig 0.972-0.983; lm 0.986-1.001, long 0.993, llama 0.993, toy 0.998-1.002. */
#define PACK_PREFETCH(x, ldx, k, kc, here)                                                         \
    if (k + PACK_AHEAD < kc)                                                                       \
        for (int jj = 0; jj < here; jj += 64 / (int)sizeof(*x))                                    \
            _mm_prefetch((const char *)(x + (k + PACK_AHEAD) * ldx + jj), _MM_HINT_T0);
/* A panel of one or two vectors whose loads are all whole (every panel of a product but the
 * last, and it too when the columns fill it) is copied by a loop without the masks and the
 * tests of each vector: on Zen 3 (AVX2, one process timing both in turns, medians of thirty)
 * such packs from L2 took 0.61-0.73 of the time (mid's transposed A, 512 x 768 into 6-wide
 * panels: 194 -> 125 us; B, 512 x 256 into 16-wide ones: 38 -> 28 us) and from memory
 * 0.79-0.93. */
/* A vector's load is whole where all its lanes lie among the row's n columns: lanes past the
 * panel's width then hold the next panel's first columns, which only a spill stores, into the
 * next row (written after: rows go in order, each whole) or the padding. A panel is at most
 * 32 elements wide, PACK_VECS vectors of the narrowest set. */
#define PACK_VECS 8
_Static_assert(NBT_GEMM_MAX_NR <= PACK_VECS * 4 && NBT_GEMM_MAX_MR <= PACK_VECS * 4,
               "a panel fits PACK_VECS vectors of four doubles");
#define DEFINE_PACK_N(name, T, V, W, MASK, MAKE_MASK, VLOAD, MLOAD, VSTORE, MSTORE)                \
    static void name(const T *X, int64_t ldx, int64_t kc, int n, int width, int64_t pstride,       \
                     T *dst) {                                                                     \
        int panels = (n + width - 1) / width, nvec = (width + W - 1) / W;                          \
        bool spill = pstride - kc * width >= W; /* whole-vector stores fit */                      \
        for (int64_t k0 = 0; k0 < kc; k0 += PACK_GROUP) {                                          \
            int64_t k1 = kc - k0 < PACK_GROUP ? kc : k0 + PACK_GROUP;                              \
            for (int p = 0; p < panels; p++) {                                                     \
                int here = n - p * width < width ? n - p * width : width;                          \
                const T *x = X + p * width;                                                        \
                T *d = dst + (int64_t)p * pstride;                                                 \
                if (nvec <= 2 && p * width + nvec * W <= n && (nvec * W <= width || spill)) {      \
                    /* a whole panel: plain loads and stores, no masks or per-vector tests */      \
                    for (int64_t k = k0; k < k1; k++) {                                            \
                        PACK_PREFETCH(x, ldx, k, kc, here)                                         \
                        VSTORE(d + k * width, VLOAD(x + k * ldx));                                 \
                        if (nvec == 2) VSTORE(d + k * width + W, VLOAD(x + k * ldx + W));          \
                    }                                                                              \
                    continue;                                                                      \
                }                                                                                  \
                bool load_whole[PACK_VECS], store_whole[PACK_VECS];                                \
                MASK lanes[PACK_VECS], kept[PACK_VECS];                                            \
                for (int v = 0; v < nvec; v++) {                                                   \
                    load_whole[v] = p * width + v * W + W <= n;                                    \
                    store_whole[v] = v * W + W <= width || spill;                                  \
                    lanes[v] = MAKE_MASK(0, here - v * W), kept[v] = MAKE_MASK(0, width - v * W);  \
                }                                                                                  \
                for (int64_t k = k0; k < k1; k++) {                                                \
                    PACK_PREFETCH(x, ldx, k, kc, here)                                             \
                    for (int v = 0; v < nvec; v++) {                                               \
                        const T *src = x + k * ldx + v * W;                                        \
                        V x_v = load_whole[v] ? VLOAD(src) : MLOAD(src, lanes[v]);                 \
                        if (store_whole[v])                                                        \
                            VSTORE(d + k * width + v * W, x_v);                                    \
                        else                                                                       \
                            MSTORE(d + k * width + v * W, kept[v], x_v);                           \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
DEFINE_PACK_N(pack_n_f32, float, VF32, WF32, MASKF32, MAKE_MASKF32, LDF32, MLOADF32, STF32,
              MSTOREF32)
DEFINE_PACK_N(pack_n_f64, double, VF64, WF64, MASKF64, MAKE_MASKF64, LDF64, MLOADF64, STF64,
              MSTOREF64)

void NBK_FN(nbt_gemm_kernels)(nbt_gemm_kernels_f32 *f32, nbt_gemm_kernels_f64 *f64) {
#ifdef MR_FLAT
#define FLAT(T) MR_FLAT, ukr_##T##_flat
#else
#define FLAT(T) 0, NULL
#endif
    *f32 = (nbt_gemm_kernels_f32){MR_WIDE,    2 * WF32,       ukr_f32_wide, MR_NARROW,
                                  WF32,       ukr_f32_narrow, FLAT(f32),    pack_t_f32,
                                  pack_n_f32, rows_f32,       dots_f32};
    *f64 = (nbt_gemm_kernels_f64){MR_WIDE,    2 * WF64,       ukr_f64_wide, MR_NARROW,
                                  WF64,       ukr_f64_narrow, FLAT(f64),    NULL,
                                  pack_n_f64, rows_f64,       dots_f64};
#undef FLAT
}

#else
/* Plain C for CPUs without AVX2: small tiles the compiler can keep in SSE registers. */
#define GENERIC_KERNEL(name, T, MR_, NR_)                                                          \
    static void name(int64_t kc, const T *a, int64_t a_rs, int64_t a_cs, const T *b, int64_t b_rs, \
                     T *c, int64_t ldc, T alpha, T beta, const nbt_gemm_rect *rect) {              \
        T acc[MR_][NR_] = {{0}};                                                                   \
        for (int64_t k = 0; k < kc; k++, a += a_cs, b += b_rs)                                     \
            for (int i = 0; i < MR_; i++) {                                                        \
                T ai = a[i * a_rs];                                                                \
                for (int j = 0; j < NR_; j++) acc[i][j] += ai * b[j];                              \
            }                                                                                      \
        nbt_gemm_rect all = {0, MR_, 0, NR_};                                                      \
        if (!rect) rect = &all;                                                                    \
        for (int i = rect->r0; i < rect->r1; i++)                                                  \
            for (int j = clamp(rect->c0, 0, NR_); j < clamp(rect->c1, 0, NR_); j++)                \
                c[i * ldc + j] =                                                                   \
                    beta == 0 ? alpha * acc[i][j] : alpha * acc[i][j] + beta * c[i * ldc + j];     \
    }
GENERIC_KERNEL(ukr_f32, float, 4, 8)
GENERIC_KERNEL(ukr_f64, double, 4, 4)

/* Rows in pieces of 32 columns: the compiler vectorises the fixed-length j loops, and each
 * element gets the tile kernel's multiply, add and store. */
#define GENERIC_ROWS(name, T)                                                                      \
    static void name(int64_t m, int64_t n, int64_t kc, const T *a, int64_t a_rs, int64_t a_cs,     \
                     const T *b, int64_t ldb, T *c, int64_t ldc, int64_t c_cs, T alpha, T beta) {  \
        for (int64_t j0 = 0; j0 < n; j0 += 32) {                                                   \
            int width = n - j0 < 32 ? (int)(n - j0) : 32;                                          \
            for (int64_t i = 0; i < m; i++) {                                                      \
                T acc[32] = {0}, row[32] = {0};                                                    \
                const T *ai = a + i * a_rs, *bk = b + j0;                                          \
                for (int64_t k = 0; k < kc; k++, ai += a_cs, bk += ldb) {                          \
                    for (int j = 0; j < width; j++) row[j] = bk[j];                                \
                    T aik = *ai;                                                                   \
                    for (int j = 0; j < 32; j++) acc[j] += aik * row[j];                           \
                }                                                                                  \
                T *ci = c + i * ldc + j0 * c_cs;                                                   \
                for (int j = 0; j < width; j++)                                                    \
                    ci[j * c_cs] =                                                                 \
                        beta == 0 ? alpha * acc[j] : alpha * acc[j] + beta * ci[j * c_cs];         \
            }                                                                                      \
        }                                                                                          \
    }
GENERIC_ROWS(rows_f32, float)
GENERIC_ROWS(rows_f64, double)

/* Dot products in as many partial sums as the AVX-512 kernel keeps (16 floats, 8 doubles):
 * term k goes to lane k % L, and the lanes are added in a fixed tree. A single running sum
 * (what this kernel did) loses accuracy with the length: at K = 10^6 its float32 error was
 * 150x the AVX-512 kernel's, where partial sums keep it at the vector kernels' level. */
#define GENERIC_DOTS(name, T, L)                                                                   \
    static void name(int64_t n, int64_t kc, const T *x, int64_t incx, const T *mat, int64_t ldm,   \
                     T *y, int64_t incy, T alpha, T beta) {                                        \
        for (int64_t j = 0; j < n; j++) {                                                          \
            const T *row = mat + j * ldm;                                                          \
            T lane[L] = {0};                                                                       \
            int64_t k = 0;                                                                         \
            for (; k + L <= kc; k += L)                                                            \
                for (int l = 0; l < L; l++) lane[l] += x[(k + l) * incx] * row[k + l];             \
            for (int l = 0; k < kc; k++, l++) lane[l] += x[k * incx] * row[k];                     \
            for (int width = L / 2; width >= 1; width /= 2)                                        \
                for (int l = 0; l < width; l++) lane[l] += lane[l + width];                        \
            T *yj = y + j * incy;                                                                  \
            *yj = beta == 0 ? alpha * lane[0] : alpha * lane[0] + beta * *yj;                      \
        }                                                                                          \
    }
GENERIC_DOTS(dots_f32, float, 16)
GENERIC_DOTS(dots_f64, double, 8)

void NBK_FN(nbt_gemm_kernels)(nbt_gemm_kernels_f32 *f32, nbt_gemm_kernels_f64 *f64) {
    *f32 =
        (nbt_gemm_kernels_f32){4, 8, ukr_f32, 0, 0, NULL, 0, NULL, NULL, NULL, rows_f32, dots_f32};
    *f64 =
        (nbt_gemm_kernels_f64){4, 4, ukr_f64, 0, 0, NULL, 0, NULL, NULL, NULL, rows_f64, dots_f64};
}
#endif
