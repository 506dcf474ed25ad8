/* Block products of the memory-efficient attention (attention.c) on the GEMM's microkernel of
 * the instruction set in use, with the keys and values packed once per head rather than once
 * per block of queries, and tiles above the causal diagonal skipped one tile at a time.
 * Internal to autograd/. */
#ifndef NABLA_ATTENTION_TILES_H
#define NABLA_ATTENTION_TILES_H

#include "nabla/tensor.h"
#include "../tensor/kernels/gemm_kernels.h"

#include <stdbool.h>
#include <stdint.h>

/* The microkernel of one float type: mr x nr tiles. */
typedef struct {
    nb_dtype dtype;
    size_t es;
    int mr, nr;
    nbt_gemm_ukr_f32 f32;
    nbt_gemm_ukr_f64 f64;
    /* the GEMM's packing kernels (pack_t NULL where there is none) */
    nbt_gemm_pack_t_f32 pack_t_f32;
    nbt_gemm_pack_n_f32 pack_n_f32;
    nbt_gemm_pack_n_f64 pack_n_f64;
} nba_tiles;

/* The kernel for dt of the instruction set in use. */
nba_tiles nba_tiles_for(nb_dtype dt);

/* n rounded up to a multiple of m. */
static inline int64_t nba_round_up(int64_t n, int64_t m) {
    return (n + m - 1) / m * m;
}

/* Elements nba_tiles_pack_rows and nba_tiles_pack_cols write for an n x hd matrix. */
int64_t nba_tiles_packed_size(const nba_tiles *t, int64_t n, int64_t hd);

/* X (n rows of hd, x_row apart) transposed into panels of `width` of its rows: with width nr
 * the B of a product that sums over hd (S = Q K^T, dP = G V^T), with width mr its A (Q, G).
 * Panel p is dst[p * hd * width + k * width + j] = X[(p * width + j) * x_row + k], zero past
 * row n. */
void nba_tiles_pack_rows(const nba_tiles *t, void *dst, const void *X, int64_t x_row, int64_t n,
                         int64_t hd, int width);
/* X (n rows of hd) as panels of nr of its columns, the B of a product that sums over its n
 * rows (ctx = P V, dQ = dS K, dV = P^T G): panel p is dst[p * n * nr + s * nr + j] =
 * X[s * x_row + p * nr + j], zero past column hd. */
void nba_tiles_pack_cols(const nba_tiles *t, void *dst, const void *X, int64_t x_row, int64_t n,
                         int64_t hd);

/* Which causal cut a product takes, with diag the query index of A's (or, for SUM_FROM,
 * B's) first row against the keys numbered from 0. A tile of queries [i, i + mr) sees keys
 * below diag + i + mr only. */
typedef enum {
    NBA_CUT_NONE,
    NBA_CUT_COLUMNS, /* C's columns are keys: tiles wholly above the diagonal are not computed */
    NBA_CUT_SUM_TO,  /* the sum runs over keys: a strip of queries sums the keys it sees */
    NBA_CUT_SUM_FROM /* C's rows are keys, the sum over queries: from the first that sees them */
} nba_cut;

/* C = alpha * A B + beta * C (M x N, rows ldc apart) for A's element (i, k) at
 * A[i * a_rs + k * a_cs], or A packed by nba_tiles_pack_rows (width mr, a_packed); B packed by
 * nba_tiles_pack_* (K rows of each panel, panels b_panel elements apart). A must be readable for
 * max(M, mr) rows (a last strip shorter than mr is computed as the strip of the mr rows ending at
 * M). Elements a cut skips are left as they were. beta == 0 never reads C. */
typedef struct {
    int64_t M, N, K;
    double alpha, beta;
    const void *A;
    int64_t a_rs, a_cs;
    bool a_packed;
    const void *B;
    int64_t b_panel;
    void *C;
    int64_t ldc;
    nba_cut cut;
    int64_t diag;
} nba_tile_product;

void nba_tiles_multiply(const nba_tiles *t, const nba_tile_product *p);

#endif
