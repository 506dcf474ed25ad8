/* The inner loops of column sums (tensor/reduce_kernels.c) for one instruction set
 * (kernels.h): float32 rows added into rows of double accumulators, written once with vector
 * types of the set's width. Every build converts and adds each element as the plain loop
 * would, so all give the same bits. */
#include "kernels.h"

#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* The vector of doubles: one register where the set has them that wide (AVX-512: 8), else
 * four doubles (AVX2's 16 registers). nbk_add_rows_f32 holds a block of columns' eight lanes
 * in registers: two of these a lane where the set has 32 registers (16 columns, each row's 64
 * bytes read once, the 16 accumulators in 16 registers), one where it has 16 (4 columns). */
#if defined(__AVX512F__)
#define ROWS_W 8
#define ROWS_VECS 2
#else
#define ROWS_W 4
#define ROWS_VECS 1
#endif
typedef float rows_vf __attribute__((vector_size(ROWS_W * 4)));
typedef double rows_vd __attribute__((vector_size(ROWS_W * 8)));

/* ROWS_W floats at p as doubles. */
static inline rows_vd widened(const float *p) {
#if defined(__AVX512F__) /* one conversion (GCC 12 splits the generic one in two halves) */
    return (rows_vd)_mm512_cvtps_pd(_mm256_loadu_ps(p));
#else
    rows_vf v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, rows_vd);
#endif
}

void NBK_FN(nbk_add_row_f32)(double *acc, const float *x, int64_t n) {
    int64_t k = 0;
    for (; k + ROWS_W <= n; k += ROWS_W) {
        rows_vd sum;
        memcpy(&sum, acc + k, sizeof sum);
        sum += widened(x + k);
        memcpy(acc + k, &sum, sizeof sum);
    }
    for (; k < n; k++) acc[k] += (double)x[k];
}

/* Lane j's accumulators of the block at column k: a (columns k..) and, with two registers a
 * lane, b (the next ROWS_W). */
#define LANES_X(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#if ROWS_VECS == 2
#define LANE_LOAD(j)                                                                               \
    rows_vd a##j, b##j;                                                                            \
    memcpy(&a##j, acc + (j)*ldacc + k, sizeof a##j);                                               \
    memcpy(&b##j, acc + (j)*ldacc + k + ROWS_W, sizeof b##j);
#define LANE_STORE(j)                                                                              \
    memcpy(acc + (j)*ldacc + k, &a##j, sizeof a##j);                                               \
    memcpy(acc + (j)*ldacc + k + ROWS_W, &b##j, sizeof b##j);
#define LANE_ADD(j, row) (a##j += widened(row), b##j += widened((row) + ROWS_W))
#else
#define LANE_LOAD(j)                                                                               \
    rows_vd a##j;                                                                                  \
    memcpy(&a##j, acc + (j)*ldacc + k, sizeof a##j);
#define LANE_STORE(j) memcpy(acc + (j)*ldacc + k, &a##j, sizeof a##j);
#define LANE_ADD(j, row) (a##j += widened(row))
#endif
#define LANE_ROW(j) LANE_ADD(j, p + (j)*ldx);
#define LANE_LAST(j)                                                                               \
    if (r + (j) < R) LANE_ADD(j, p + (j)*ldx);

/* Block of columns by block, the eight lanes of the block held in registers over all the
 * rows (add_row_f32 row by row loads and stores them for every row: 15,500-16,300 TSC ticks
 * for a [512, 64] bias gradient, 10,000 this way with one register a lane). */
void NBK_FN(nbk_add_rows_f32)(double *acc, int64_t ldacc, const float *x, int64_t ldx, int64_t R,
                              int64_t n) {
    int64_t k = 0;
    for (; k + ROWS_W * ROWS_VECS <= n; k += ROWS_W * ROWS_VECS) {
        LANES_X(LANE_LOAD)
        const float *p = x + k;
        int64_t r = 0;
        for (; r + 8 <= R; r += 8, p += 8 * ldx) {
            LANES_X(LANE_ROW)
        }
        LANES_X(LANE_LAST) /* the last rows, lanes 0 .. R - r - 1 */
        LANES_X(LANE_STORE)
    }
    for (; k < n; k++)
        for (int64_t r = 0; r < R; r++) acc[(r % 8) * ldacc + k] += (double)x[r * ldx + k];
}
