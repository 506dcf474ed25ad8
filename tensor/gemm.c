/* GEMM entry points: picks the instruction set's kernels, owns the pack buffers, splits work
 * across threads, and instantiates the driver (gemm_driver.h) for float and double. */
#include "gemm.h"
#include "isa.h"
#include "nbt.h"
#include "pool.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

/* ---- kernels for the instruction set in use (isa.h) ---- */
#define GEMM_KERNELS(SUF) (&nbt_kernels()->gemm_##SUF)

/* ---- pack buffers ---- */
/* Block sizes (elements). MR x KC of A stays in L1 (24 KB: half of a Xeon's 48 KB, most of
 * Zen 4's 32 KB) and KC x NB of B in L2 (1 MB: half of the Xeon's 2 MB, all of Zen 4's 1 MB);
 * MB x KC of A is the L3 block. MB and NB are multiples of every MR and NR. KC = 512
 * measured faster than 384 at n = 1024 on the Xeon; on Zen 4, KC 256-512 and NB 256-1024
 * measured the same within this shared machine's noise (the kernel runs at ~98% of peak on
 * packed panels at any of them), so they stayed. */
#define KC_F32 512
#define MB_F32 1536
#define NB_F32 512
#define KC_F64 256
#define MB_F64 768
#define NB_F64 256

/* Pack workspaces, one per thread at work: a fixed set of slots, each taken with an atomic
 * flag and holding one buffer big enough for either type's largest blocks, made the first
 * time its slot is taken and kept for the life of the process. So a call allocates only
 * the first time it runs with more threads than before, and calls from several threads at
 * once each get their own. Pages are only touched (and only count in RSS) as far as a
 * product needs them. */
#define GEMM_MAX_THREADS 64
static atomic_bool slot_taken[GEMM_MAX_THREADS];
static char *slot_buffer[GEMM_MAX_THREADS]; /* read and written only by the slot's holder */

/* Room for the blocked path's panel padding (gemm_driver.h, PANEL_PAD: at most 16 elements
 * a panel) in a block of n rows or columns, panels being at least 4 wide. */
#define PAD_SLACK(n) (((size_t)(n) / 4 + 1) * 16)

static size_t workspace_bytes(void) {
    size_t f32 = ((size_t)MB_F32 * KC_F32 + PAD_SLACK(MB_F32) + (size_t)KC_F32 * NB_F32 +
                  PAD_SLACK(NB_F32) + (size_t)NBT_GEMM_MAX_MR * KC_F32) *
                 sizeof(float);
    size_t f64 = ((size_t)MB_F64 * KC_F64 + PAD_SLACK(MB_F64) + (size_t)KC_F64 * NB_F64 +
                  PAD_SLACK(NB_F64) + (size_t)NBT_GEMM_MAX_MR * KC_F64) *
                 sizeof(double);
    return (f32 > f64 ? f32 : f64) + 64;
}

static void gemm_workspaces_release(int n, const int *slots) {
    for (int i = 0; i < n; i++)
        atomic_store_explicit(&slot_taken[slots[i]], false, memory_order_release);
}

/* n 64-byte aligned workspaces in ws[] and their slots in slots[]; false (none taken) when
 * every slot is busy or memory runs out. */
static bool gemm_workspaces_acquire(int n, void **ws, int *slots) {
    int got = 0;
    bool ok = true;
    for (int s = 0; s < GEMM_MAX_THREADS && got < n && ok; s++) {
        if (atomic_exchange_explicit(&slot_taken[s], true, memory_order_acquire)) continue;
        slots[got++] = s;
        if (!slot_buffer[s]) slot_buffer[s] = nbt_malloc(workspace_bytes());
        char *raw = slot_buffer[s];
        ok = raw != NULL;
        if (ok) ws[got - 1] = raw + (64 - (uintptr_t)raw % 64) % 64;
    }
    if (ok && got == n) return true;
    gemm_workspaces_release(got, slots);
    return false;
}

/* ---- how work is split ---- */
/* Kept in every build (one thread-local store per call); read by a test hook only. */
static _Thread_local int last_threads;

#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
int nbt_gemm_last_threads(void) {
    return last_threads;
}
#endif

typedef enum { PATH_TINY, PATH_ROW, PATH_COL, PATH_THIN, PATH_SMALL, PATH_BLOCKED } path_t;
typedef enum { SPLIT_NONE, SPLIT_BATCH, SPLIT_ROWS, SPLIT_COLS } split_t;

/* Products [b0, b1), rows [m0, m1) and columns [n0, n1) of C. */
typedef struct {
    int64_t b0, b1, m0, m1, n0, n1;
} part_t;

int nbt_gemm_threads_for(double work, int64_t min_work) {
    return work < 2.0 * (double)min_work
               ? 1
               : nbt_threads_for(work > 1e18 ? (int64_t)1e18 : (int64_t)work, min_work);
}

int nbt_gemm_part_count(double work, int threads, int64_t along, int64_t unit) {
    double by_work = work / GEMM_MIN_WORK_PER_THREAD,
           by_unit = (double)((along + unit - 1) / unit); /* a short last unit counts */
    double most = (double)threads * NBT_PIECES_PER_THREAD;
    most = by_work < most ? by_work : most;
    most = by_unit < most ? by_unit : most;
    return most > threads ? (int)most : threads;
}

/* Whole units, counted with the short one, rather than near-equal element counts rounded to
 * a unit: 64 rows in 12-row tiles as 5 pieces by rounding were 12, 12, 12, 12 and 16 (two
 * tiles), so 2 threads split the tiles 4 to 2; as 6 pieces of one tile each, 3 to 3. */
int64_t nbt_gemm_boundary(int i, int n, int64_t total, int64_t unit) {
    if (i >= n) return total;
    const int64_t units = (total + unit - 1) / unit, at = units * i / n * unit;
    return at < total ? at : total;
}

/* Part i of n under split. */
static part_t gemm_part(split_t split, int i, int n, int64_t unit, int64_t batch, int64_t M,
                        int64_t N) {
    part_t q = {0, batch, 0, M, 0, N};
    if (split == SPLIT_BATCH)
        q.b0 = nbt_gemm_boundary(i, n, batch, 1), q.b1 = nbt_gemm_boundary(i + 1, n, batch, 1);
    if (split == SPLIT_ROWS)
        q.m0 = nbt_gemm_boundary(i, n, M, unit), q.m1 = nbt_gemm_boundary(i + 1, n, M, unit);
    if (split == SPLIT_COLS)
        q.n0 = nbt_gemm_boundary(i, n, N, unit), q.n1 = nbt_gemm_boundary(i + 1, n, N, unit);
    return q;
}

/* ---- a system BLAS instead (meson -Dblas=openblas) ---- */
#ifdef NABLA_BLAS
#include <cblas.h>
#include <limits.h>

const char *nbt_gemm_blas(void) {
    return NABLA_BLAS;
}

/* OpenBLAS's own threads give results that change with their number (measured here: a
 * 150x200x600 product differs between 1 and 2 of them), so it runs on one thread per call,
 * and threads split batches of independent products here instead, each product whole. */
static void blas_one_thread(void) {
    static atomic_bool set;
    if (!atomic_exchange(&set, true)) openblas_set_num_threads(1);
}

static bool blas_int(int64_t x) {
    return x >= 0 && x <= INT_MAX;
}

/* One product through cblas, the element type behind char pointers. */
typedef void (*blas_gemm_fn)(bool ta, bool tb, int M, int N, int K, double alpha, const char *A,
                             int lda, const char *B, int ldb, double beta, char *C, int ldc);

static void blas_sgemm(bool ta, bool tb, int M, int N, int K, double alpha, const char *A, int lda,
                       const char *B, int ldb, double beta, char *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, (float)alpha, (const float *)A, lda, (const float *)B, ldb, (float)beta,
                (float *)C, ldc);
}

static void blas_dgemm(bool ta, bool tb, int M, int N, int K, double alpha, const char *A, int lda,
                       const char *B, int ldb, double beta, char *C, int ldc) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, (const double *)A, lda, (const double *)B, ldb, beta, (double *)C, ldc);
}

/* One product of a batch as a pool task. Strides in bytes. */
typedef struct {
    blas_gemm_fn gemm;
    bool ta, tb;
    int M, N, K;
    double alpha;
    const char *A;
    int lda;
    int64_t step_a;
    const char *B;
    int ldb;
    int64_t step_b;
    double beta;
    char *C;
    int ldc;
    int64_t step_c;
} blas_job;

static void blas_task(int64_t b, int worker, void *arg) {
    (void)worker;
    const blas_job *j = arg;
    j->gemm(j->ta, j->tb, j->M, j->N, j->K, j->alpha, j->A + b * j->step_a, j->lda,
            j->B + b * j->step_b, j->ldb, j->step_c == 0 && b > 0 ? 1 : j->beta,
            j->C + b * j->step_c, j->ldc);
}

/* The batch as one cblas call per product (stacked batches as one call, as the driver does),
 * or false, with nothing done, when there is nothing to multiply or cblas would reject the
 * leading dimensions (below the matrix width, which nbt_*gemm allows). Strides in elements
 * of es bytes. */
static bool blas_batched(blas_gemm_fn gemm, size_t es, bool ta, bool tb, int64_t M, int64_t N,
                         int64_t K, double alpha, const void *A, int64_t lda, int64_t sa,
                         const void *B, int64_t ldb, int64_t sb, double beta, void *C, int64_t ldc,
                         int64_t sc, int64_t batch) {
    if (batch <= 0 || M <= 0 || N <= 0 || K <= 0 || alpha == 0) return false;
    if (batch > 1 && sb == 0 && !ta && sc != 0 && sa == M * lda && sc == M * ldc)
        M *= batch, batch = 1;
    else if (batch > 1 && sc == 0 && ta && !tb && sa == K * lda && sb == K * ldb)
        K *= batch, batch = 1;
    if (!blas_int(M) || !blas_int(N) || !blas_int(K) || !blas_int(lda) || !blas_int(ldb) ||
        !blas_int(ldc) || lda < (ta ? M : K) || ldb < (tb ? K : N) || ldc < N)
        return false;
    blas_one_thread();
    double work = (double)batch * (double)M * (double)N * (double)K;
    int threads = sc == 0 ? 1 : nbt_gemm_threads_for(work, GEMM_MIN_WORK_PER_THREAD);
    if (threads > batch) threads = (int)batch;
    last_threads = threads;
    blas_job job = {.gemm = gemm,
                    .ta = ta,
                    .tb = tb,
                    .M = (int)M,
                    .N = (int)N,
                    .K = (int)K,
                    .alpha = alpha,
                    .A = A,
                    .lda = (int)lda,
                    .step_a = sa * (int64_t)es,
                    .B = B,
                    .ldb = (int)ldb,
                    .step_b = sb * (int64_t)es,
                    .beta = beta,
                    .C = C,
                    .ldc = (int)ldc,
                    .step_c = sc * (int64_t)es};
    nbt_run_tasks(batch, threads, blas_task, &job); /* in order on this thread when threads is 1 */
    return true;
}
#else
const char *nbt_gemm_blas(void) {
    return NULL;
}
/* Without a BLAS no product goes to one: the call is the constant false. */
#define blas_batched(...) false
#endif

/* ---- the driver, once per element type ---- */
/* Products of at most this many multiply-adds skip the tiles and the workspace (measured
 * here: 12x12x12 takes half the time in rows as in tiles, 16x16x16 about the same). */
#define TINY 2048
#define T float
#define KSET nbt_gemm_kernels_f32
#define UKR nbt_gemm_ukr_f32
#define KC KC_F32
#define MB MB_F32
#define NB NB_F32
#define FN(name) name##_f32
#include "gemm_driver.h"
#undef T
#undef KSET
#undef UKR
#undef KC
#undef MB
#undef NB
#undef FN

#define T double
#define KSET nbt_gemm_kernels_f64
#define UKR nbt_gemm_ukr_f64
#define KC KC_F64
#define MB MB_F64
#define NB NB_F64
#define FN(name) name##_f64
#include "gemm_driver.h"

bool nbt_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc) {
    if (blas_batched(blas_sgemm, sizeof(float), trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb,
                     0, beta, C, ldc, 0, 1))
        return true;
    return gemm_f32(GEMM_KERNELS(f32), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
}

bool nbt_dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const double *A, int64_t lda, const double *B, int64_t ldb, double beta, double *C,
               int64_t ldc) {
    if (blas_batched(blas_dgemm, sizeof(double), trans_a, trans_b, M, N, K, alpha, A, lda, 0, B,
                     ldb, 0, beta, C, ldc, 0, 1))
        return true;
    return gemm_f64(GEMM_KERNELS(f64), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
}

bool nbt_gemm_weight_grad_packs(nb_dtype dt, int64_t M, int64_t N, int64_t K) {
    if (nbt_gemm_blas()) return true; /* a BLAS packs every operand */
    return dt == NB_F32 ? weight_grad_packs_f32(GEMM_KERNELS(f32), M, N, K)
                        : weight_grad_packs_f64(GEMM_KERNELS(f64), M, N, K);
}

bool nbt_sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                    int64_t lda, const float *B, int64_t ldb, const float *bias, float *C,
                    int64_t ldc) {
    if (nbt_gemm_blas()) { /* the BLAS takes the product, as in nbt_sgemm */
        for (int64_t i = 0; i < M; i++) memcpy(C + i * ldc, bias, sizeof(float) * (size_t)N);
        return nbt_sgemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
    }
    return gemm_bias_f32(GEMM_KERNELS(f32), trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C,
                         ldc);
}

bool nbt_dgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const double *A,
                    int64_t lda, const double *B, int64_t ldb, const double *bias, double *C,
                    int64_t ldc) {
    if (nbt_gemm_blas()) { /* the BLAS takes the product, as in nbt_dgemm */
        for (int64_t i = 0; i < M; i++) memcpy(C + i * ldc, bias, sizeof(double) * (size_t)N);
        return nbt_dgemm(trans_a, trans_b, M, N, K, 1.0, A, lda, B, ldb, 1.0, C, ldc);
    }
    return gemm_bias_f64(GEMM_KERNELS(f64), trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C,
                         ldc);
}

bool nbt_sgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, int64_t stride_a, const float *B, int64_t ldb,
                       int64_t stride_b, float beta, float *C, int64_t ldc, int64_t stride_c,
                       int64_t batch) {
    if (blas_batched(blas_sgemm, sizeof(float), trans_a, trans_b, M, N, K, alpha, A, lda, stride_a,
                     B, ldb, stride_b, beta, C, ldc, stride_c, batch))
        return true;
    return gemm_batched_f32(GEMM_KERNELS(f32), trans_a, trans_b, M, N, K, alpha, A, lda, stride_a,
                            B, ldb, stride_b, beta, C, ldc, stride_c, batch);
}

bool nbt_dgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                       const double *A, int64_t lda, int64_t stride_a, const double *B, int64_t ldb,
                       int64_t stride_b, double beta, double *C, int64_t ldc, int64_t stride_c,
                       int64_t batch) {
    if (blas_batched(blas_dgemm, sizeof(double), trans_a, trans_b, M, N, K, alpha, A, lda, stride_a,
                     B, ldb, stride_b, beta, C, ldc, stride_c, batch))
        return true;
    return gemm_batched_f64(GEMM_KERNELS(f64), trans_a, trans_b, M, N, K, alpha, A, lda, stride_a,
                            B, ldb, stride_b, beta, C, ldc, stride_c, batch);
}

/* Straight to the rows kernel: no path choice, no workspace, no threads, no BLAS. A
 * transposed B is packed into rows on the stack, ROWS_BT elements (a K x N block) at a time;
 * a B too deep for that goes through the full GEMM, which sums every element the same way. */
#define ROWS_BT 4096

#define DEFINE_ROWS_ENTRY(T, SUF, NAME, FULL)                                                      \
    void NAME(bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t a_rs,    \
              int64_t a_cs, const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {                  \
        const nbt_gemm_kernels_##SUF *ks = GEMM_KERNELS(SUF);                                      \
        /* The full GEMM when a BLAS takes every product (so heads equal nbt_*gemm there too),     \
         * or for a transposed B too deep for the stack buffer. */                                 \
        bool blas = nbt_gemm_blas() && (a_rs == 1 || a_cs == 1);                                   \
        if (blas || (trans_b && M != 1 && (K > ROWS_BT || K <= 0))) {                              \
            bool ta = a_cs != 1;                                                                   \
            FULL(ta, trans_b, M, N, K, alpha, A, ta ? a_cs : a_rs, B, ldb, beta, C, ldc);          \
            return;                                                                                \
        }                                                                                          \
        if (!trans_b) {                                                                            \
            ks->rows(M, N, K, A, a_rs, a_cs, B, ldb, C, ldc, 1, alpha, beta);                      \
            return;                                                                                \
        }                                                                                          \
        if (M == 1) { /* as nbt_*gemm's one-row path: dot products with B's rows */                \
            ks->dots(N, K, A, a_cs, B, ldb, C, 1, alpha, beta);                                    \
            return;                                                                                \
        }                                                                                          \
        T bt[ROWS_BT];                                                                             \
        int64_t chunk = ROWS_BT / K;                                                               \
        for (int64_t j0 = 0; j0 < N; j0 += chunk) {                                                \
            int n = (int)(N - j0 < chunk ? N - j0 : chunk);                                        \
            if (ks->pack_t)                                                                        \
                ks->pack_t(B + j0 * ldb, ldb, K, n, n, bt);                                        \
            else                                                                                   \
                for (int64_t k = 0; k < K; k++)                                                    \
                    for (int j = 0; j < n; j++) bt[k * n + j] = B[(j0 + j) * ldb + k];             \
            ks->rows(M, n, K, A, a_rs, a_cs, bt, n, C + j0, ldc, 1, alpha, beta);                  \
        }                                                                                          \
    }
DEFINE_ROWS_ENTRY(float, f32, nbt_sgemm_rows, nbt_sgemm)
DEFINE_ROWS_ENTRY(double, f64, nbt_dgemm_rows, nbt_dgemm)
