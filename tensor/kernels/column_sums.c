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
 * four doubles. */
#if defined(__AVX512F__)
#define ROWS_W 8
#else
#define ROWS_W 4
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

/* acc[0 .. ROWS_W) += x[0 .. ROWS_W), widened. */
static inline void add_widened(double *acc, const float *x) {
    rows_vd sum;
    memcpy(&sum, acc, sizeof sum);
    sum += widened(x);
    memcpy(acc, &sum, sizeof sum);
}

void NBK_FN(nbk_add_row_f32)(double *acc, const float *x, int64_t n) {
    int64_t k = 0;
    for (; k + ROWS_W <= n; k += ROWS_W) add_widened(acc + k, x + k);
    for (; k < n; k++) acc[k] += (double)x[k];
}

/* Eight rows a pass, row r + j into lane j's accumulators in memory (acc + j * ldacc): each row
 * is read once, start to end, as the lanes are. Until 2026-11-29 a block of columns' eight
 * lanes stayed in registers over all the rows, which read the rows ROWS_W floats at a time,
 * ldx apart: past L1 every row's lines came in again for each block, from L3 once the rows
 * outgrew L2. On Zen 3 (best of 30, warm): [1024, 128] 49 -> 22 us, [1024, 512] 325 -> 199 us,
 * [2048, 1536] 6.4 -> 1.6 ms, [512, 64] 7.0 us either way. Each lane adds its rows in the same
 * order as before, so the bits are the same. */
#define LANES_X(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
void NBK_FN(nbk_add_rows_f32)(double *acc, int64_t ldacc, const float *x, int64_t ldx, int64_t R,
                              int64_t n) {
    int64_t r = 0;
    for (; r + 8 <= R; r += 8) {
        const float *p = x + r * ldx;
        int64_t k = 0;
        for (; k + ROWS_W <= n; k += ROWS_W) {
#define LANE_ADD(j) add_widened(acc + (j)*ldacc + k, p + (j)*ldx + k);
            LANES_X(LANE_ADD)
#undef LANE_ADD
        }
        for (; k < n; k++)
            for (int j = 0; j < 8; j++) acc[j * ldacc + k] += (double)p[j * ldx + k];
    }
    for (; r < R; r++) /* the last rows, lanes 0 .. R - r - 1 */
        for (int64_t k = 0; k < n; k++) acc[(r % 8) * ldacc + k] += (double)x[r * ldx + k];
}
