/* nabla's GEMM kernels against a naive triple loop written here, for every kernel this CPU
 * can run (AVX-512, AVX2, plain C), float32 and float64, over shapes that straddle the tile
 * and block edges, all four transpose combinations, alpha/beta variations and padded
 * leading dimensions. Padding is filled with NaN, so a kernel that reads past a row shows
 * up as NaN in C; C's own padding must come back untouched; and beta == 0 runs on a C full
 * of NaN, which must not leak into the result. */
#include "harness.h"
#include "tensor/gemm.h"
#include "tensor/isa.h"

#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg = 88172645463325252ull;
static double rnd(void) { /* uniform in [-1, 1) */
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) / 4503599627370496.0 - 1.0;
}

#define C_PAD_SENTINEL 777.0

typedef struct {
    bool ta, tb;
    int64_t M, N, K;
    double alpha, beta;
    int64_t pad_a, pad_b, pad_c; /* extra leading-dimension elements */
} gemm_case;

static int failures; /* cases that failed in the current test */

/* One instantiation per element type: fills operands, runs the kernel, compares. */
#define DEFINE_CHECKS(T, SUF, GEMM, BATCHED, EPS)                                                  \
    /* op(X)[r][c] of a stored matrix with leading dimension ld */                                 \
    static double at_##SUF(const T *X, bool trans, int64_t ld, int64_t r, int64_t c) {             \
        return trans ? (double)X[c * ld + r] : (double)X[r * ld + c];                              \
    }                                                                                              \
    /* A stored rows x cols with leading dimension ld >= cols: NaN in the padding. */              \
    static T *matrix_##SUF(int64_t rows, int64_t cols, int64_t ld) {                               \
        size_t n = (size_t)(rows * ld > 0 ? rows * ld : 1);                                        \
        T *X = malloc(n * sizeof(T));                                                              \
        for (int64_t r = 0; r < rows; r++)                                                         \
            for (int64_t c = 0; c < ld; c++) X[r * ld + c] = c < cols ? (T)rnd() : (T)NAN;         \
        return X;                                                                                  \
    }                                                                                              \
    /* Checks C (M x N, ldc) against alpha * sum of op(A_b) op(B_b) + beta * C0 over the nb        \
     * products given; error bound grows with the length of each dot product. The reference        \
     * first copies op(A_b)'s rows and op(B_b)'s columns into contiguous doubles (the products     \
     * of row i concatenated over b), so its triple loop reads memory in order: read in place,     \
     * this check, not the kernels, took 80% of this file's time (perf, one plain run). */         \
    static bool compare_##SUF(const gemm_case *gc, int nb, const T *const *As, int64_t lda,        \
                              const T *const *Bs, int64_t ldb, const T *C0, const T *C,            \
                              int64_t ldc, const char *what) {                                     \
        int64_t M = gc->M, N = gc->N, K = gc->K, L = nb * K;                                       \
        double *rows = malloc((size_t)(M * L > 0 ? M * L : 1) * sizeof(double));                   \
        double *cols = malloc((size_t)(N * L > 0 ? N * L : 1) * sizeof(double));                   \
        for (int b = 0; b < nb; b++)                                                               \
            for (int64_t k = 0; k < K; k++) {                                                      \
                for (int64_t i = 0; i < M; i++)                                                    \
                    rows[i * L + b * K + k] = at_##SUF(As[b], gc->ta, lda, i, k);                  \
                for (int64_t j = 0; j < N; j++)                                                    \
                    cols[j * L + b * K + k] = at_##SUF(Bs[b], gc->tb, ldb, k, j);                  \
            }                                                                                      \
        bool ok = true;                                                                            \
        for (int64_t i = 0; ok && i < M; i++)                                                      \
            for (int64_t j = 0; ok && j < ldc; j++) {                                              \
                double got = (double)C[i * ldc + j];                                               \
                if (j >= N) {                                                                      \
                    if (got != C_PAD_SENTINEL) {                                                   \
                        printf("  %s: C padding [%lld][%lld] overwritten with %g\n", what,         \
                               (long long)i, (long long)j, got);                                   \
                        ok = false;                                                                \
                    }                                                                              \
                    continue;                                                                      \
                }                                                                                  \
                const double *a = rows + i * L, *bcol = cols + j * L;                              \
                double sum = 0, mag = 0;                                                           \
                for (int64_t k = 0; k < L; k++) {                                                  \
                    double p = a[k] * bcol[k];                                                     \
                    sum += p, mag += fabs(p);                                                      \
                }                                                                                  \
                double c0 = gc->beta == 0 ? 0 : (double)C0[i * ldc + j];                           \
                double want = gc->alpha * sum + gc->beta * c0;                                     \
                double bound = fabs(gc->alpha) * mag + fabs(gc->beta * c0);                        \
                double tol = 2.0 * (double)(L + 2) * EPS * bound + 1e-300;                         \
                if (!(fabs(got - want) <= tol)) {                                                  \
                    printf("  %s: C[%lld][%lld] = %.9g, expected %.9g (tol %.3g)\n", what,         \
                           (long long)i, (long long)j, got, want, tol);                            \
                    ok = false;                                                                    \
                }                                                                                  \
            }                                                                                      \
        free(rows), free(cols);                                                                    \
        return ok;                                                                                 \
    }                                                                                              \
    static T *c_matrix_##SUF(const gemm_case *gc, int64_t rows, int64_t ldc) {                     \
        T *C = matrix_##SUF(rows, gc->N, ldc);                                                     \
        for (int64_t i = 0; i < rows; i++)                                                         \
            for (int64_t j = 0; j < ldc; j++)                                                      \
                if (j >= gc->N)                                                                    \
                    C[i * ldc + j] = (T)C_PAD_SENTINEL;                                            \
                else if (gc->beta == 0)                                                            \
                    C[i * ldc + j] = (T)NAN;                                                       \
        return C;                                                                                  \
    }                                                                                              \
    static T *copy_##SUF(const T *X, int64_t n) {                                                  \
        T *Y = malloc((size_t)(n > 0 ? n : 1) * sizeof(T));                                        \
        for (int64_t i = 0; i < n; i++) Y[i] = X[i];                                               \
        return Y;                                                                                  \
    }                                                                                              \
    static bool run_##SUF(const gemm_case *gc) {                                                   \
        int64_t ar = gc->ta ? gc->K : gc->M, ac = gc->ta ? gc->M : gc->K;                          \
        int64_t br = gc->tb ? gc->N : gc->K, bc = gc->tb ? gc->K : gc->N;                          \
        int64_t lda = ac + gc->pad_a, ldb = bc + gc->pad_b, ldc = gc->N + gc->pad_c;               \
        T *A = matrix_##SUF(ar, ac, lda), *B = matrix_##SUF(br, bc, ldb);                          \
        T *C = c_matrix_##SUF(gc, gc->M, ldc), *C0 = copy_##SUF(C, gc->M * ldc);                   \
        bool ok = GEMM(gc->ta, gc->tb, gc->M, gc->N, gc->K, (T)gc->alpha, A, lda, B, ldb,          \
                       (T)gc->beta, C, ldc);                                                       \
        char what[160];                                                                            \
        snprintf(what, sizeof what,                                                                \
                 #SUF " %s%s M=%lld N=%lld K=%lld alpha=%g beta=%g pads=%lld,"                     \
                      "%lld,%lld",                                                                 \
                 gc->ta ? "T" : "N", gc->tb ? "T" : "N", (long long)gc->M, (long long)gc->N,       \
                 (long long)gc->K, gc->alpha, gc->beta, (long long)gc->pad_a,                      \
                 (long long)gc->pad_b, (long long)gc->pad_c);                                      \
        ok = ok && compare_##SUF(gc, 1, (const T *const[]){A}, lda, (const T *const[]){B}, ldb,    \
                                 C0, C, ldc, what);                                                \
        if (!ok) printf("  FAILED %s\n", what);                                                    \
        free(A), free(B), free(C), free(C0);                                                       \
        return ok;                                                                                 \
    }                                                                                              \
    /* batch products with strides; sa/sb/sc given as "0 = broadcast/sum" or "gap" (elements       \
     * between the end of one matrix and the start of the next, -1 meaning back to back). */       \
    static bool run_batched_##SUF(const gemm_case *gc, int nb, bool share_a, bool share_b,         \
                                  bool sum_c, int64_t gap) {                                       \
        int64_t ar = gc->ta ? gc->K : gc->M, ac = gc->ta ? gc->M : gc->K;                          \
        int64_t br = gc->tb ? gc->N : gc->K, bc = gc->tb ? gc->K : gc->N;                          \
        int64_t lda = ac + gc->pad_a, ldb = bc + gc->pad_b, ldc = gc->N + gc->pad_c;               \
        int64_t sa = share_a ? 0 : ar * lda + gap, sb = share_b ? 0 : br * ldb + gap;              \
        int64_t sc = sum_c ? 0 : gc->M * ldc + gap;                                                \
        int64_t na = share_a ? 1 : nb, nbm = share_b ? 1 : nb, nc = sum_c ? 1 : nb;                \
        /* every operand's matrices in one allocation, NaN between them */                         \
        T *A = matrix_##SUF(1, (na - 1) * sa + ar * lda, (na - 1) * sa + ar * lda);                \
        T *B = matrix_##SUF(1, (nbm - 1) * sb + br * ldb, (nbm - 1) * sb + br * ldb);              \
        int64_t clen = (nc - 1) * sc + gc->M * ldc;                                                \
        T *C = malloc((size_t)(clen > 0 ? clen : 1) * sizeof(T));                                  \
        for (int64_t i = 0; i < clen; i++) C[i] = (T)C_PAD_SENTINEL;                               \
        for (int64_t b = 0; b < nc; b++) {                                                         \
            T *Cb = c_matrix_##SUF(gc, gc->M, ldc);                                                \
            for (int64_t i = 0; i < gc->M * ldc; i++) C[b * sc + i] = Cb[i];                       \
            free(Cb);                                                                              \
        }                                                                                          \
        for (int64_t b = 0; b < na; b++)                                                           \
            for (int64_t r = 0; r < ar; r++)                                                       \
                for (int64_t c = ac; c < lda; c++) A[b * sa + r * lda + c] = (T)NAN;               \
        for (int64_t b = 0; b < nbm; b++)                                                          \
            for (int64_t r = 0; r < br; r++)                                                       \
                for (int64_t c = bc; c < ldb; c++) B[b * sb + r * ldb + c] = (T)NAN;               \
        T *C0 = copy_##SUF(C, clen);                                                               \
        bool ok = BATCHED(gc->ta, gc->tb, gc->M, gc->N, gc->K, (T)gc->alpha, A, lda, sa, B, ldb,   \
                          sb, (T)gc->beta, C, ldc, sc, nb);                                        \
        char what[200];                                                                            \
        snprintf(what, sizeof what,                                                                \
                 #SUF " batched x%d %s%s M=%lld N=%lld K=%lld alpha=%g "                           \
                      "beta=%g share_a=%d share_b=%d sum_c=%d gap=%lld",                           \
                 nb, gc->ta ? "T" : "N", gc->tb ? "T" : "N", (long long)gc->M, (long long)gc->N,   \
                 (long long)gc->K, gc->alpha, gc->beta, share_a, share_b, sum_c, (long long)gap);  \
        const T *As[64], *Bs[64];                                                                  \
        for (int b = 0; b < nb; b++) As[b] = A + b * sa, Bs[b] = B + b * sb;                       \
        if (sum_c) {                                                                               \
            ok = ok && compare_##SUF(gc, nb, As, lda, Bs, ldb, C0, C, ldc, what);                  \
        } else {                                                                                   \
            for (int b = 0; ok && b < nb; b++)                                                     \
                ok = compare_##SUF(gc, 1, As + b, lda, Bs + b, ldb, C0 + b * sc, C + b * sc, ldc,  \
                                   what);                                                          \
            /* the gaps between C matrices are untouched */                                        \
            for (int64_t b = 0; ok && b + 1 < nc; b++)                                             \
                for (int64_t i = gc->M * ldc; ok && i < sc; i++)                                   \
                    if ((double)C[b * sc + i] != C_PAD_SENTINEL) {                                 \
                        printf("  %s: gap after C %lld overwritten\n", what, (long long)b);        \
                        ok = false;                                                                \
                    }                                                                              \
        }                                                                                          \
        if (!ok) printf("  FAILED %s\n", what);                                                    \
        free(A), free(B), free(C), free(C0);                                                       \
        return ok;                                                                                 \
    }                                                                                              \
    /* nb products (summed into one C if sum_c) on 1 and then 2 threads from the same C: the       \
     * two results must agree bit for bit and with the reference, and the second call must         \
     * have split its work across `split` threads. */                                              \
    static bool threads_agree_##SUF(const gemm_case *gc, int nb, bool share_b, bool sum_c,         \
                                    int split) {                                                   \
        int64_t ar = gc->ta ? gc->K : gc->M, ac = gc->ta ? gc->M : gc->K;                          \
        int64_t br = gc->tb ? gc->N : gc->K, bc = gc->tb ? gc->K : gc->N;                          \
        int64_t lda = ac + gc->pad_a, ldb = bc + gc->pad_b, ldc = gc->N + gc->pad_c;               \
        int64_t sa = ar * lda, sb = share_b ? 0 : br * ldb, sc = sum_c ? 0 : gc->M * ldc;          \
        int64_t clen = (sum_c ? 1 : nb) * gc->M * ldc;                                             \
        T *A = matrix_##SUF(nb, sa, sa), *B = matrix_##SUF(share_b ? 1 : nb, br * ldb, br * ldb);  \
        for (int64_t i = 0; i < nb * sa; i++)                                                      \
            if (i % lda >= ac) A[i] = (T)NAN;                                                      \
        for (int64_t i = 0; i < (share_b ? 1 : nb) * br * ldb; i++)                                \
            if (i % ldb >= bc) B[i] = (T)NAN;                                                      \
        T *C0 = malloc((size_t)clen * sizeof(T));                                                  \
        for (int64_t i = 0; i < clen; i++)                                                         \
            C0[i] = i % ldc >= gc->N ? (T)C_PAD_SENTINEL : (T)rnd();                               \
        T *C1 = copy_##SUF(C0, clen), *C2 = copy_##SUF(C0, clen);                                  \
        int saved = nb_get_num_threads();                                                          \
        nb_set_num_threads(1);                                                                     \
        bool ok = BATCHED(gc->ta, gc->tb, gc->M, gc->N, gc->K, (T)gc->alpha, A, lda, sa, B, ldb,   \
                          sb, (T)gc->beta, C1, ldc, sc, nb);                                       \
        int used1 = nbt_gemm_last_threads();                                                       \
        nb_set_num_threads(2);                                                                     \
        ok = ok && BATCHED(gc->ta, gc->tb, gc->M, gc->N, gc->K, (T)gc->alpha, A, lda, sa, B, ldb,  \
                           sb, (T)gc->beta, C2, ldc, sc, nb);                                      \
        int used2 = nbt_gemm_last_threads();                                                       \
        nb_set_num_threads(saved);                                                                 \
        char what[160];                                                                            \
        snprintf(what, sizeof what, #SUF " x%d %s%s M=%lld N=%lld K=%lld share_b=%d sum_c=%d", nb, \
                 gc->ta ? "T" : "N", gc->tb ? "T" : "N", (long long)gc->M, (long long)gc->N,       \
                 (long long)gc->K, share_b, sum_c);                                                \
        /* a system BLAS (meson -Dblas) splits only batches of independent products */             \
        int want2 = nbt_gemm_blas() && (nb == 1 || sum_c) ? 1 : split;                             \
        if (ok && (used1 != 1 || used2 != want2)) {                                                \
            printf("  %s: ran on %d and %d threads, expected 1 and %d\n", what, used1, used2,      \
                   want2);                                                                         \
            ok = false;                                                                            \
        }                                                                                          \
        if (ok && memcmp(C1, C2, (size_t)clen * sizeof(T)) != 0) {                                 \
            printf("  %s: 1 and 2 threads differ\n", what);                                        \
            ok = false;                                                                            \
        }                                                                                          \
        const T *As[64], *Bs[64];                                                                  \
        for (int b = 0; b < nb; b++) As[b] = A + b * sa, Bs[b] = B + b * sb;                       \
        int checks = sum_c ? 1 : nb;                                                               \
        for (int b = 0; ok && b < checks; b++)                                                     \
            ok = compare_##SUF(gc, sum_c ? nb : 1, As + b, lda, Bs + b, ldb, C0 + b * sc,          \
                               C2 + b * sc, ldc, what);                                            \
        if (!ok) printf("  FAILED %s\n", what);                                                    \
        free(A), free(B), free(C0), free(C1), free(C2);                                            \
        return ok;                                                                                 \
    }

DEFINE_CHECKS(float, f32, nbt_sgemm, nbt_sgemm_batched, FLT_EPSILON)
DEFINE_CHECKS(double, f64, nbt_dgemm, nbt_dgemm_batched, DBL_EPSILON)

/* Which kernels a test runs under valgrind: every set (EVERY_SET) or, for the tests of large
 * products, one. Valgrind runs the AVX2 kernels' FMAs in software, and this file took 7 of the
 * valgrind pass's 17 CPU minutes, the largest part, when it ran them all. WIDEST_ONLY keeps the
 * vector kernels' reads and writes at the edges of large products under valgrind (the pass runs
 * with NABLA_ISA=generic, so nothing else there does); GENERIC_ONLY is for tests whose memory is
 * the driver's (parts, partial sums, shared packs, the same code for every set), where the plain
 * C kernels run at valgrind's native speed: 1 and 2 threads and the bias (on the widest set
 * they took 115 of the file's 213 s under valgrind; with them on the generic set it took 119 s).
 * The plain pass checks every set's values, and AddressSanitizer every set's memory. */
typedef enum { EVERY_SET, WIDEST_ONLY, GENERIC_ONLY } valgrind_sets;

/* Runs fn once per kernel this CPU can run (under valgrind, as `sets` says), then goes back
 * to the default choice. */
static void for_each_isa_of(void (*fn)(void), valgrind_sets sets) {
    for (int isa = NBT_ISA_COUNT - 1; isa >= 0; isa--)
        if (!nbt_isa_supported((nbt_isa)isa))
            printf("  (%s kernels: this CPU cannot run them)\n", nbt_isa_name((nbt_isa)isa));
    const bool valgrind = nbtest_under_valgrind();
    int ran = 0;
    for (nbtest_isa_loop s = nbtest_isa_begin(); nbtest_isa_next(&s);) {
        if (valgrind && ((sets == WIDEST_ONLY && s.ran > 0) ||
                         (sets == GENERIC_ONLY && s.isa != NBT_ISA_GENERIC))) {
            printf("  (%s kernels: not under valgrind)\n", nbt_isa_name(s.isa));
            continue;
        }
        CU_ASSERT_EQUAL(nbt_isa_current(), s.isa);
        failures = 0;
        fn();
        printf("  %s kernels: %d failures\n", nbt_isa_name(s.isa), failures);
        CU_ASSERT_EQUAL(failures, 0);
        ran++;
    }
    CU_ASSERT(ran >= 1);
}
static void for_each_isa(void (*fn)(void)) {
    for_each_isa_of(fn, EVERY_SET);
}

static void check_both(const gemm_case *gc) {
    failures += !run_f32(gc);
    failures += !run_f64(gc);
}

/* Every shape in all four transpose combinations, with a few alpha/beta pairs and pads. */
static void shapes_all_transposes(const int64_t (*shapes)[3], int n) {
    static const double ab[][2] = {{1, 0}, {1, 1}, {-0.5, 2}, {2, 0}, {0.75, -1}};
    for (int s = 0; s < n; s++)
        for (int t = 0; t < 4; t++) {
            const double *p = ab[(s + t) % 5];
            gemm_case gc = {t & 1, t >> 1, shapes[s][0], shapes[s][1],    shapes[s][2],
                            p[0],  p[1],   (s + t) % 3,  (s + 2 * t) % 4, s % 2};
            check_both(&gc);
        }
}

static void small_shapes(void) {
    /* 1x1x1, primes, sizes around every tile height (4, 6, 12, 16) and width (4, 8, 16, 32)
     * the kernels use, and around the tiny-product limit (128 multiply-adds) */
    static const int64_t shapes[][3] = {
        {1, 1, 1},
        {7, 13, 5},
        {2, 3, 1},
        {1, 17, 3},
        {19, 1, 4},
        {3, 3, 3},
        {4, 8, 2},
        {5, 9, 7},
        {6, 16, 16},
        {11, 15, 9},
        {12, 16, 16},
        {13, 17, 10},
        {16, 16, 16},
        {17, 31, 8},
        {23, 32, 12},
        {24, 33, 5},
        {25, 48, 33},
        {15, 64, 1},
        {40, 7, 29},
        {29, 100, 3},
        {64, 64, 64},
        {33, 65, 31},
        {97, 41, 61},
        {12, 8, 5},
        {24, 8, 6},
        {32, 16, 3},
        {48, 32, 9},
        {36, 64, 2},
        {12, 4, 7},
        {3, 5, 11},
        {2, 70, 1},
        {1, 1, 200},
        {3, 3, 64},
        {16, 1, 64},
        {2, 2, 33},
        /* a last column panel for the narrow kernel (gemm_small's tail): 16 and 12 columns
         * past the wide tiles, rows sliding up at the end */
        {40, 80, 20},
        {17, 44, 9},
        {29, 72, 40},
    };
    shapes_all_transposes(shapes, sizeof shapes / sizeof shapes[0]);
}

static void vector_and_thin_shapes(void) {
    /* one row or one column (K across the 512-element pieces a strided vector is copied in),
     * a few rows (the rows kernel, B packed when transposed), and the largest products
     * kept off the tiles (up to 2048 multiply-adds) */
    static const int64_t shapes[][3] = {
        {1, 300, 70}, {1, 1000, 9}, {1, 65, 600}, {300, 1, 70}, {700, 1, 600}, {1, 33, 1},
        {2, 64, 17},  {3, 100, 40}, {5, 530, 20}, {4, 33, 600}, {6, 700, 513}, {8, 17, 40},
        {12, 12, 12}, {8, 16, 16},  {10, 20, 10}, {2, 1024, 1}, {16, 16, 8},   {17, 15, 8},
    };
    shapes_all_transposes(shapes, sizeof shapes / sizeof shapes[0]);
}

static void block_edges(void) {
    /* K around the K blocks (256 for f64, 512 for f32), N around the N blocks (256, 512),
     * M above the M block (768 for f64, 1536 for f32), a big prime-ish product, and lm's head
     * weight gradient (C small enough that every tile set reads A and B in place); with A
     * transposed, 203 x 100 x 300 (C over 128 x 128) goes to the blocked path's one K block on
     * the AVX2 tile (small_reads_a), and 203 x 100 x 1100 does so in each K chunk */
    static const int64_t shapes[][3] = {
        {13, 17, 255},  {14, 18, 256},  {15, 33, 257},   {9, 20, 511},     {13, 35, 512},
        {26, 31, 513},  {5, 255, 20},   {7, 257, 9},     {11, 511, 6},     {13, 513, 7},
        {30, 530, 600}, {769, 5, 3},    {1537, 9, 4},    {257, 129, 300},  {65, 128, 1024},
        {64, 64, 700},  {40, 24, 1300}, {203, 100, 300}, {203, 100, 1100},
    };
    shapes_all_transposes(shapes, sizeof shapes / sizeof shapes[0]);
}

static void zero_sizes(void) {
    /* M or N of 0 leaves C alone; K of 0 (or alpha 0) leaves beta * C */
    static const int64_t shapes[][3] = {{0, 5, 3}, {4, 0, 3}, {4, 5, 0}, {0, 0, 0}, {33, 40, 0}};
    shapes_all_transposes(shapes, sizeof shapes / sizeof shapes[0]);
    for (int t = 0; t < 4; t++) {
        gemm_case gc = {t & 1, t >> 1, 9, 21, 14, 0, 0.5, 1, 2, 3}; /* alpha 0 */
        check_both(&gc);
    }
}

static void batched_cases(void) {
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t >> 1;
        gemm_case small = {ta, tb, 7, 13, 5, 1, 0, 1, 0, 2};
        gemm_case attention = {ta, tb, 16, 16, 16, 0.25, 0, 0, 0, 0};
        gemm_case edges = {ta, tb, 19, 35, 21, -1, 0.5, 0, 3, 0};
        gemm_case big = {ta, tb, 40, 530, 30, 1, 1, 2, 0, 1};  /* N over the f32 block: blocked */
        gemm_case longk = {ta, tb, 9, 14, 530, 1, 0, 0, 0, 0}; /* K over the f32 block */
        gemm_case row = {ta, tb, 1, 70, 33, 1, 0.5, 1, 2, 0};  /* one row */
        gemm_case col = {ta, tb, 45, 1, 29, 2, 0, 0, 1, 3};    /* one column */
        gemm_case thin = {ta, tb, 3, 50, 30, 1, -1, 2, 0, 1};  /* a few rows */
        const gemm_case *all[] = {&small, &attention, &edges, &big, &longk, &row, &col, &thin};
        for (int c = 0; c < 8; c++) {
            const gemm_case *gc = all[c];
            int nb = c == 1 ? 24 : 3;
            for (int mode = 0; mode < 4; mode++) {
                /* independent (back to back or with gaps), B shared, A shared */
                bool share_a = mode == 3, share_b = mode == 2;
                int64_t gap = mode == 1 ? 5 : 0;
                failures += !run_batched_f32(gc, nb, share_a, share_b, false, gap);
                failures += !run_batched_f64(gc, nb, share_a, share_b, false, gap);
            }
            /* summed into one C, back to back (stacks along K when ta && !tb) or with gaps */
            failures += !run_batched_f32(gc, nb, false, false, true, 0);
            failures += !run_batched_f64(gc, nb, false, false, true, 3);
            failures += !run_batched_f32(gc, nb, false, true, true, 0);
        }
        /* batch of zero leaves C alone, batch of one is a plain product */
        failures += !run_batched_f32(&small, 1, false, false, false, 2);
        failures += !run_batched_f64(&small, 1, true, false, false, 0);
    }
    /* no products: C must come back untouched */
    float c = 3.0f, a = 1.0f, b = 1.0f;
    CU_ASSERT_TRUE(
        nbt_sgemm_batched(false, false, 1, 1, 1, 1.0f, &a, 1, 1, &b, 1, 1, 0.0f, &c, 1, 1, 0));
    CU_ASSERT_EQUAL(c, 3.0f);
}

static void test_small_shapes(void) {
    for_each_isa(small_shapes);
}
static void test_vector_and_thin_shapes(void) {
    for_each_isa(vector_and_thin_shapes);
}
static void test_block_edges(void) {
    for_each_isa_of(block_edges, WIDEST_ONLY);
}
static void test_zero_sizes(void) {
    for_each_isa(zero_sizes);
}
static void test_batched(void) {
    for_each_isa_of(batched_cases, WIDEST_ONLY);
}

/* Large products split by rows or columns, batches split by product, summed batches split
 * by rows, and products too small to split; 1 and 2 threads must agree bit for bit. */
static void threads_bitwise_cases(void) {
    /* blocked (K over the f32 and f64 K blocks): rows split, and a wide one split by columns */
    gemm_case blocked = {false, false, 150, 200, 600, 1, 0.5, 1, 2, 3};
    gemm_case blocked_t = {true, true, 150, 200, 600, -0.5, 0, 0, 0, 0};
    gemm_case wide = {false, true, 20, 1200, 100, 1, 1, 0, 0, 0};
    gemm_case linear = {false, true, 256, 96, 64, 1, 0, 0, 0, 0}; /* small path, x W^T */
    gemm_case row = {false, true, 1, 4096, 128, 1, 0, 0, 0, 0};
    gemm_case col = {false, false, 4096, 1, 128, 1, 1, 0, 0, 0};
    gemm_case thin = {false, true, 4, 2048, 64, 1, 0, 0, 0, 0};
    /* a weight gradient's shape: columns split over one packed A shared by all parts, several K and
     * N blocks (A packed once per K block and reused across N blocks), rows not a multiple of a
     * tile */
    gemm_case weight_grad = {true, false, 130, 600, 1100, 1, 0.5, 1, 2, 3};
    /* rows split over one packed B shared by all parts, with K blocks of unequal length (367,
     * 367, 366 in float32; 220 x 5 in float64) */
    gemm_case shared_b = {false, false, 150, 100, 1100, 1, 0.5, 1, 2, 3};
    /* lm's weight gradient g^T x: A and B read in place by every tile set, rows split */
    gemm_case in_place = {true, false, 128, 128, 1024, 1, 0, 0, 0, 0};
    /* a weight gradient summed in chunks of K (gemm_driver.h, k_chunks): toy's shape with an
     * odd K, beta and padded rows (two chunks), and five chunks of a narrow one */
    gemm_case chunked = {true, false, 64, 64, 700, -0.5, 0.5, 1, 2, 3};
    gemm_case chunked5 = {true, false, 40, 24, 1300, 1, 1, 0, 1, 0};
    /* alpha 1: one thread adds the chunks to C in turn, two sum partials (run_split_k) */
    gemm_case chunked_beta0 = {true, false, 65, 48, 1100, 1, 0, 1, 2, 3};
    /* alpha 0.3 (alpha * sum rounded apart from the addition): partials on one thread too */
    gemm_case chunked_alpha = {true, false, 64, 64, 700, 0.3, 1, 0, 0, 0};
    /* lm's head x E^T (N = 65): the last column goes to the narrow kernel (gemm_small) */
    gemm_case head = {false, true, 1024, 65, 128, 1, 0, 0, 0, 0};
    /* chunks of a weight gradient that the AVX2 tile takes through the blocked path */
    gemm_case chunked_packed = {true, false, 256, 96, 1100, 1, 0, 1, 2, 3};
    const gemm_case *singles[] = {&blocked,       &blocked_t,     &wide,    &linear,
                                  &row,           &col,           &thin,    &weight_grad,
                                  &shared_b,      &in_place,      &chunked, &chunked5,
                                  &chunked_beta0, &chunked_alpha, &head,    &chunked_packed};
    for (int c = 0; c < 16; c++) {
        failures += !threads_agree_f32(singles[c], 1, false, false, 2);
        failures += !threads_agree_f64(singles[c], 1, false, false, 2);
    }
    /* attention: 64 heads of 128x128x32 in one call, split by head */
    gemm_case heads = {false, true, 128, 128, 32, 0.125, 0, 0, 0, 0};
    failures += !threads_agree_f32(&heads, 64, false, false, 2);
    gemm_case three = {true, false, 100, 90, 40, 1, 0, 1, 0, 0}; /* split 1 + 2, one B */
    failures += !threads_agree_f64(&three, 3, true, false, 2);
    /* summed into one C (not stackable: padded rows): split by rows, every product in order */
    gemm_case summed = {false, false, 64, 48, 40, 1, 1, 1, 0, 2};
    failures += !threads_agree_f32(&summed, 8, false, true, 2);
    failures += !threads_agree_f64(&summed, 8, true, true, 2);
    gemm_case summed_t = {true, true, 96, 40, 30, 2, 0, 3, 1, 0};
    failures += !threads_agree_f32(&summed_t, 12, false, true, 2);
    /* too little work for a second thread */
    gemm_case small = {false, false, 16, 16, 16, 1, 0, 0, 0, 0};
    gemm_case tiny_sum = {false, false, 4, 4, 4, 1, 0, 0, 0, 0};
    failures += !threads_agree_f32(&small, 1, false, false, 1);
    failures += !threads_agree_f32(&small, 4, false, false, 1);
    failures += !threads_agree_f64(&tiny_sum, 40, false, true, 1);
}

static void test_threads_bitwise(void) {
    for_each_isa_of(threads_bitwise_cases, GENERIC_ONLY);
}

/* nbt_*gemm_bias against setting C's rows to the bias and calling nbt_*gemm with beta 1 (the
 * path checked above): the same bits, with 1 and 2 threads, on a small product (the strips
 * are set inside), a tiny one, one wider than the f32 block and one with K over it. */
#define BIAS_CASE(T, GEMM, GEMM_BIAS)                                                              \
    static bool bias_case_##T(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int threads) {    \
        int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N + 3;                                   \
        T *A = malloc(sizeof(T) * (size_t)(M * K)), *B = malloc(sizeof(T) * (size_t)(K * N));      \
        T *bias = malloc(sizeof(T) * (size_t)N), *C1 = malloc(sizeof(T) * (size_t)(M * ldc));      \
        T *C2 = malloc(sizeof(T) * (size_t)(M * ldc));                                             \
        for (int64_t i = 0; i < M * K; i++) A[i] = (T)rnd();                                       \
        for (int64_t i = 0; i < K * N; i++) B[i] = (T)rnd();                                       \
        for (int64_t j = 0; j < N; j++) bias[j] = (T)rnd();                                        \
        for (int64_t i = 0; i < M * ldc; i++) C1[i] = C2[i] = (T)C_PAD_SENTINEL;                   \
        for (int64_t i = 0; i < M; i++) memcpy(C2 + i * ldc, bias, sizeof(T) * (size_t)N);         \
        nb_set_num_threads(1);                                                                     \
        bool ok = GEMM(ta, tb, M, N, K, 1, A, lda, B, ldb, 1, C2, ldc);                            \
        nb_set_num_threads(threads);                                                               \
        ok = GEMM_BIAS(ta, tb, M, N, K, A, lda, B, ldb, bias, C1, ldc) && ok;                      \
        nb_set_num_threads(0);                                                                     \
        ok = ok && memcmp(C1, C2, sizeof(T) * (size_t)(M * ldc)) == 0;                             \
        if (!ok)                                                                                   \
            printf("  bias %s ta %d tb %d %lldx%lldx%lld threads %d differs\n", #T, ta, tb,        \
                   (long long)M, (long long)N, (long long)K, threads);                             \
        free(A), free(B), free(bias), free(C1), free(C2);                                          \
        return ok;                                                                                 \
    }
BIAS_CASE(float, nbt_sgemm, nbt_sgemm_bias)
BIAS_CASE(double, nbt_dgemm, nbt_dgemm_bias)

static void bias_cases(void) {
    /* the blocked path sets its strips as the small path does: over the N block (40 x 600),
     * over K blocks (130 x 70 x 1100); 64 x 48 x 512 is one f32 K block that nbt_sgemm sums
     * in two chunks when A is transposed */
    static const int64_t shapes[][3] = {{256, 96, 64}, {100, 33, 20},   {3, 4, 5},
                                        {40, 600, 30}, {50, 40, 600},   {7, 70, 70},
                                        {64, 48, 512}, {130, 70, 1100}, {1100, 20, 40}};
    for (int s = 0; s < 9; s++)
        for (int t = 0; t < 4; t++)
            for (int threads = 1; threads <= 2; threads++) {
                failures += !bias_case_float(t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2],
                                             threads);
                failures += !bias_case_double(t & 1, t & 2, shapes[s][0], shapes[s][1],
                                              shapes[s][2], threads);
            }
}

static void test_bias(void) {
    for_each_isa_of(bias_cases, GENERIC_ONLY);
}

/* The rows entry points (attention's small products) against nbt_*gemm, which the tests above
 * check against the naive sums: equal bit for bit, for A read along or across its rows. */
#define DEFINE_ROWS_CHECK(T, SUF, GEMM, ROWS)                                                      \
    static int rows_mismatches_##SUF(void) {                                                       \
        static const int64_t shapes[][3] = {{3, 3, 3},  {16, 16, 16},  {5, 17, 9},  {40, 33, 7},   \
                                            {1, 50, 4}, {64, 300, 32}, {2, 3, 5000}};              \
        static const double ab[][2] = {{1, 0}, {0.5, 1}, {-2, 0.25}};                              \
        int bad = 0;                                                                               \
        for (int s = 0; s < 7; s++)                                                                \
            for (int t = 0; t < 4; t++)                                                            \
                for (int c = 0; c < 3; c++) {                                                      \
                    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];                  \
                    bool ta = t & 1, tb = t & 2;                                                   \
                    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;           \
                    T *A = malloc(sizeof(T) * (size_t)((ta ? K : M) * lda));                       \
                    T *B = malloc(sizeof(T) * (size_t)((tb ? N : K) * ldb));                       \
                    T *C1 = malloc(sizeof(T) * (size_t)(M * ldc));                                 \
                    T *C2 = malloc(sizeof(T) * (size_t)(M * ldc));                                 \
                    for (int64_t i = 0; i < (ta ? K : M) * lda; i++) A[i] = (T)rnd();              \
                    for (int64_t i = 0; i < (tb ? N : K) * ldb; i++) B[i] = (T)rnd();              \
                    for (int64_t i = 0; i < M * ldc; i++) C1[i] = C2[i] = (T)rnd();                \
                    GEMM(ta, tb, M, N, K, (T)ab[c][0], A, lda, B, ldb, (T)ab[c][1], C1, ldc);      \
                    ROWS(tb, M, N, K, (T)ab[c][0], A, ta ? 1 : lda, ta ? lda : 1, B, ldb,          \
                         (T)ab[c][1], C2, ldc);                                                    \
                    if (memcmp(C1, C2, sizeof(T) * (size_t)(M * ldc)) != 0) {                      \
                        printf("  rows %s: %lldx%lldx%lld trans %d %d alpha %g beta %g differs\n", \
                               #SUF, (long long)M, (long long)N, (long long)K, ta, tb, ab[c][0],   \
                               ab[c][1]);                                                          \
                        bad++;                                                                     \
                    }                                                                              \
                    free(A), free(B), free(C1), free(C2);                                          \
                }                                                                                  \
        return bad;                                                                                \
    }
DEFINE_ROWS_CHECK(float, f32, nbt_sgemm, nbt_sgemm_rows)
DEFINE_ROWS_CHECK(double, f64, nbt_dgemm, nbt_dgemm_rows)

static void rows_entry_points(void) {
    failures += rows_mismatches_f32() + rows_mismatches_f64();
}
static void test_rows_entry_points(void) {
    for_each_isa(rows_entry_points);
}

/* A hand-computed product, so the reference loop above is itself checked once. */
static void test_hand_computed(void) {
    const float A[] = {1, 2, 3, 4, 5, 6};    /* 2 x 3 */
    const float B[] = {7, 8, 9, 10, 11, 12}; /* 3 x 2 */
    float C[4] = {1, 1, 1, 1};
    CU_ASSERT_TRUE(nbt_sgemm(false, false, 2, 2, 3, 1.0f, A, 3, B, 2, 2.0f, C, 2));
    /* [1 2 3; 4 5 6] [7 8; 9 10; 11 12] = [58 64; 139 154], plus 2 */
    CU_ASSERT_EQUAL(C[0], 60.0f);
    CU_ASSERT_EQUAL(C[1], 66.0f);
    CU_ASSERT_EQUAL(C[2], 141.0f);
    CU_ASSERT_EQUAL(C[3], 156.0f);
    double D[4];
    /* A^T (3 x 2 stored as A) times A (2 x 3) restricted: A^T A is 3 x 3; take M=N=2 corner */
    CU_ASSERT_TRUE(nbt_dgemm(true, false, 2, 2, 2, 1.0, (const double[]){1, 2, 3, 4}, 2,
                             (const double[]){1, 2, 3, 4}, 2, 0.0, D, 2));
    /* [1 3; 2 4] [1 2; 3 4] = [10 14; 14 20] */
    CU_ASSERT_EQUAL(D[0], 10.0);
    CU_ASSERT_EQUAL(D[1], 14.0);
    CU_ASSERT_EQUAL(D[2], 14.0);
    CU_ASSERT_EQUAL(D[3], 20.0);
}

int main(void) {
    const nbtest_case cases[] = {
        {"hand-computed products", test_hand_computed},
        {"small shapes, all transposes, every kernel", test_small_shapes},
        {"one-row, one-column and few-row products, every kernel", test_vector_and_thin_shapes},
        {"block edges and large shapes, every kernel", test_block_edges},
        {"zero sizes and alpha 0, every kernel", test_zero_sizes},
        {"strided batches: broadcast, summed, gaps, every kernel", test_batched},
        {"1 and 2 threads give bitwise the same results", test_threads_bitwise},
        {"rows entry points equal nbt_*gemm bit for bit, every kernel", test_rows_entry_points},
        {"a bias added strip by strip equals a bias set first", test_bias},
    };
    return nbtest_run("gemm", cases, sizeof cases / sizeof cases[0]);
}
