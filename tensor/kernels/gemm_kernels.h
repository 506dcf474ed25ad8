/* The microkernel contract shared by gemm.c (the blocked driver) and gemm_kernels.c (one
 * build per instruction set). Internal to tensor/. */
#ifndef NABLA_GEMM_KERNELS_H
#define NABLA_GEMM_KERNELS_H

#include <stdint.h>

/* The part of a tile to store: rows [r0, r1) and columns [c0, c1). */
typedef struct {
    int r0, r1, c0, c1;
} nbt_gemm_rect;

/* Computes one mr x nr tile of alpha * A * B and stores it into C (row i at c + i*ldc):
 *   C[i][j] = alpha * sum_k a[i*a_rs + k*a_cs] * b[k*b_rs + j] + beta * C[i][j]
 * for k < kc. rect NULL stores the whole tile; otherwise only rect's part of C is read or
 * written (the kernel still reads all mr rows of a and nr columns of b, so they must be
 * readable). A packed A panel has a_rs = 1, a_cs = mr; a packed B panel has b_rs = nr.
 * beta == 0 never reads C. */
typedef void (*nbt_gemm_ukr_f32)(int64_t kc, const float *a, int64_t a_rs, int64_t a_cs,
                                 const float *b, int64_t b_rs, float *c, int64_t ldc, float alpha,
                                 float beta, const nbt_gemm_rect *rect);
typedef void (*nbt_gemm_ukr_f64)(int64_t kc, const double *a, int64_t a_rs, int64_t a_cs,
                                 const double *b, int64_t b_rs, double *c, int64_t ldc,
                                 double alpha, double beta, const nbt_gemm_rect *rect);

/* Packs one panel from a matrix read across its rows: dst[k*width + j] = X[j*ldx + k] for
 * k < kc and j < n, and 0 for n <= j < width. This is a transposed B's panel (width nr) and
 * an untransposed A's panel (width mr). */
typedef void (*nbt_gemm_pack_t_f32)(const float *X, int64_t ldx, int64_t kc, int n, int width,
                                    float *dst);
typedef void (*nbt_gemm_pack_t_f64)(const double *X, int64_t ldx, int64_t kc, int n, int width,
                                    double *dst);

/* Packs the panels of width columns that cover n columns of a matrix read along its rows:
 * panel p starts at dst + p*pstride (pstride >= kc*width), and
 * dst[p*pstride + k*width + j] = X[k*ldx + p*width + j] for k < kc and p*width + j < n, 0 past
 * n (an untransposed B's panels, a transposed A's). */
typedef void (*nbt_gemm_pack_n_f32)(const float *X, int64_t ldx, int64_t kc, int n, int width,
                                    int64_t pstride, float *dst);
typedef void (*nbt_gemm_pack_n_f64)(const double *X, int64_t ldx, int64_t kc, int n, int width,
                                    int64_t pstride, double *dst);

/* Whole rows of C in axpy form, for products too small to tile and for one-row products:
 *   C[i*ldc + j*c_cs] = alpha * sum_k a[i*a_rs + k*a_cs] * b[k*ldb + j] + beta * C[...]
 * for i < m, j < n, k < kc; b's rows are read where they lie (contiguous along j) and only
 * their first n elements are touched. Each element's sum runs over k in order from zero with
 * the same multiply-adds and the same store as the tile kernels above, so it equals their
 * result bit for bit. beta == 0 never reads C. */
typedef void (*nbt_gemm_rows_f32)(int64_t m, int64_t n, int64_t kc, const float *a, int64_t a_rs,
                                  int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                                  int64_t c_cs, float alpha, float beta);
typedef void (*nbt_gemm_rows_f64)(int64_t m, int64_t n, int64_t kc, const double *a, int64_t a_rs,
                                  int64_t a_cs, const double *b, int64_t ldb, double *c,
                                  int64_t ldc, int64_t c_cs, double alpha, double beta);

/* Dot products of one vector with n rows, for one-row products whose other operand is read
 * across its rows:
 *   y[j*incy] = alpha * sum_k x[k*incx] * mat[j*ldm + k] + beta * y[j*incy]   (j < n, k < kc)
 * Each sum is taken in a fixed order (lane-wise partial sums, then a fixed reduction), the
 * same for any n and any position of the row. beta == 0 never reads y. */
typedef void (*nbt_gemm_dots_f32)(int64_t n, int64_t kc, const float *x, int64_t incx,
                                  const float *mat, int64_t ldm, float *y, int64_t incy,
                                  float alpha, float beta);
typedef void (*nbt_gemm_dots_f64)(int64_t n, int64_t kc, const double *x, int64_t incx,
                                  const double *mat, int64_t ldm, double *y, int64_t incy,
                                  double alpha, double beta);

/* One instruction set's kernels: a wide one (mr x nr tiles), a narrow one for matrices
 * with few columns (narrow_mr x narrow_nr; NULL when there is none), and a flat one
 * (flat_mr x nr) for products of a few rows that the wide tile does not divide. pack_t and pack_n
 * NULL mean the driver's plain C loops. rows and dots are always set. */
typedef struct {
    int mr, nr;
    nbt_gemm_ukr_f32 wide;
    int narrow_mr, narrow_nr;
    nbt_gemm_ukr_f32 narrow;
    int flat_mr; /* the wide tile's columns, fewer rows (NULL when there is none) */
    nbt_gemm_ukr_f32 flat;
    nbt_gemm_pack_t_f32 pack_t;
    nbt_gemm_pack_n_f32 pack_n;
    nbt_gemm_rows_f32 rows;
    nbt_gemm_dots_f32 dots;
} nbt_gemm_kernels_f32;
typedef struct {
    int mr, nr;
    nbt_gemm_ukr_f64 wide;
    int narrow_mr, narrow_nr;
    nbt_gemm_ukr_f64 narrow;
    int flat_mr; /* the wide tile's columns, fewer rows (NULL when there is none) */
    nbt_gemm_ukr_f64 flat;
    nbt_gemm_pack_t_f64 pack_t;
    nbt_gemm_pack_n_f64 pack_n;
    nbt_gemm_rows_f64 rows;
    nbt_gemm_dots_f64 dots;
} nbt_gemm_kernels_f64;

/* Tile sizes never exceed these. */
#define NBT_GEMM_MAX_MR 16
#define NBT_GEMM_MAX_NR 32

#endif
