/* nabla's own GEMM: C = alpha * op(A) * op(B) + beta * C on row-major matrices, in float32
 * and float64, with packed panels and microkernels for AVX-512, AVX2+FMA and plain C: those of
 * the instruction set in use (isa.h).
 *
 * Layout: C is M x N with C[i*ldc + j]. op(A) is M x K: A[i*lda + k], or with trans_a the
 * stored matrix is K x M and op(A)[i][k] = A[k*lda + i]. op(B) is K x N: B[k*ldb + j], or with
 * trans_b B[j*ldb + k]. A transposed view therefore goes in as a flag and a leading dimension,
 * never as a copy. lda and ldb may be anything (0 reads one row again and again); ldc must
 * be at least N when M > 1. beta == 0 never reads C, so C may hold garbage or NaN.
 *
 * Large products and batches are split across up to nb_get_num_threads() of nabla's threads
 * (one inside a pool task); small ones stay on the calling thread. A thread computes whole
 * elements of C, or whole chunks of K whose bounds depend on the shape alone (a weight
 * gradient, gemm_driver.h's k_chunks), and how an element is computed never depends on the
 * split, so the result is bitwise the same for any number of threads.
 *
 * Every function returns false only when its pack buffers could not be allocated, or when
 * more than 64 threads want them at once (C is then unchanged). Each thread's buffers are
 * allocated the first time a call needs them, at their largest size, and reused: calls after
 * the first with a given number of threads never allocate. Calls are safe from several
 * threads at once. */
#ifndef NABLA_GEMM_H
#define NABLA_GEMM_H

#include "nabla/tensor.h"

#include <stdbool.h>
#include <stdint.h>

bool nbt_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc);
bool nbt_dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const double *A, int64_t lda, const double *B, int64_t ldb, double beta, double *C,
               int64_t ldc);

/* C = op(A) op(B) + bias, bias (N contiguous elements) added to every row: the same bits as
 * setting every row of C to the bias and calling nbt_*gemm with alpha 1 and beta 1, but a
 * small or blocked product sets each strip of rows just before its first K block adds to it,
 * while it is in cache. */
bool nbt_sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                    int64_t lda, const float *B, int64_t ldb, const float *bias, float *C,
                    int64_t ldc);
bool nbt_dgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const double *A,
                    int64_t lda, const double *B, int64_t ldb, const double *bias, double *C,
                    int64_t ldc);

/* batch products in one call: matrix b of each operand starts stride_x elements after
 * matrix b-1. A stride of 0 for A or B broadcasts one matrix to every product. A stride of 0
 * for C sums the products into one C: beta applies to the first product and later products
 * add to it (fixed order, so the result does not depend on how the work is split). */
bool nbt_sgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, int64_t stride_a, const float *B, int64_t ldb,
                       int64_t stride_b, float beta, float *C, int64_t ldc, int64_t stride_c,
                       int64_t batch);
bool nbt_dgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                       const double *A, int64_t lda, int64_t stride_a, const double *B, int64_t ldb,
                       int64_t stride_b, double beta, double *C, int64_t ldc, int64_t stride_c,
                       int64_t batch);

/* Small products straight through the rows kernel, on the calling thread, with no path
 * choice or workspace (for callers that run many tiny products, such as attention heads):
 * C = alpha * A op(B) + beta * C, where A's element (i, k) is A[i*a_rs + k*a_cs] (so a
 * transposed A is a_rs = 1), and op(B)'s element (k, j) is B[k*ldb + j], or B[j*ldb + k] with
 * trans_b. Each element is summed as nbt_sgemm sums it, bit for bit (in a -Dblas build both go
 * to the BLAS), except in a weight gradient that nbt_sgemm sums in chunks of K (k_chunks in
 * gemm_driver.h: trans_a, K >= 512). beta == 0 never reads C. Cannot fail. */
void nbt_sgemm_rows(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t a_rs, int64_t a_cs, const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc);
void nbt_dgemm_rows(bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
                    int64_t a_rs, int64_t a_cs, const double *B, int64_t ldb, double beta,
                    double *C, int64_t ldc);

/* Whether nbt_*gemm packs an operand of the weight gradient A^T B of C [M, N] over K tokens
 * (trans_a, both operands contiguous) in dtype dt (NB_F32 or NB_F64), rather than reading both
 * where they lie: then several such gradients sharing B cost less as one product with their
 * A's side by side, which packs B once (qkv_attention.c). True in a -Dblas build. */
bool nbt_gemm_weight_grad_packs(nb_dtype dt, int64_t M, int64_t N, int64_t K);

/* How the GEMM splits a product across threads, for callers that split one-row products
 * the same way (row_products.c). */
/* Products of fewer multiply-adds than this per thread stay on fewer threads: starting and
 * joining a team costs one to a few microseconds on a quiet machine, far more on a busy one,
 * and this much arithmetic takes about two on one core. */
#define GEMM_MIN_WORK_PER_THREAD (256 * 1024)
/* The same for one-row and one-column products, which need no packing: the split that paid
 * for one-token decoding's matrix-vector products on Zen 4 (2026-11). */
#define GEMM_MIN_WORK_PER_THREAD_ROW (16 * 1024)
/* Row and column splits of one-row and one-column products fall on multiples of this. */
#define GEMM_VECTOR_UNIT 64
/* Threads for work multiply-adds at min_work a thread: 1 under twice min_work, else
 * nbt_threads_for's plan. */
int nbt_gemm_threads_for(double work, int64_t min_work);
/* Parts for threads to take turns on, splitting along elements in whole units: up to
 * NBT_PIECES_PER_THREAD a thread, none under GEMM_MIN_WORK_PER_THREAD multiply-adds or a unit,
 * and at least threads. */
int nbt_gemm_part_count(double work, int threads, int64_t along, int64_t unit);
/* Boundary i of n parts of total made of near-equal numbers of units (the last unit may be
 * short): total for i >= n. */
int64_t nbt_gemm_boundary(int i, int n, int64_t total, int64_t unit);

#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
/* How many threads the calling thread's last GEMM call split its work across (1 for work
 * kept on the calling thread, 0 before any call). */
int nbt_gemm_last_threads(void);
#endif
/* The system BLAS that nbt_*gemm* hand products to ("openblas", chosen with meson -Dblas),
 * or NULL when nabla's own kernels do all the work (the default). Products the BLAS
 * cannot take (leading dimensions below the matrix width, nothing to multiply) still go to
 * the own kernels. The BLAS runs each product on one thread (OpenBLAS's own threading makes
 * results depend on the thread count); threads split batches of independent products.
 * Static string. */
const char *nbt_gemm_blas(void);

#endif
