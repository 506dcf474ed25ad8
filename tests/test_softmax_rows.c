/* The softmax row kernels (autograd/softmax_rows.h) on long rows (as memory-efficient attention
 * at T 2048 has) with a tail shorter than any vector: probabilities against exp(x - max) / sum
 * in double, bitwise the composition of the row primitives (shift, exp, sum, scale) that any
 * fused rewrite of the kernels must keep, the replay from the saved max and 1/sum bitwise the
 * same as the first pass, and fully blocked and NaN rows. Run by scripts/test once per
 * instruction set (NABLA_ISA). */
#include "harness.h"
#include "autograd/softmax_rows.h"

#include <stdlib.h>

enum { ROWS = 4, N = 1101 };

static softmax_plan plan_for(const uint8_t *mask) {
    softmax_plan p = {.rows = ROWS,
                      .n = N,
                      .scale = 1.0,
                      .mask = mask,
                      .mask_step = 1,
                      .zero_blocked_rows = true};
    p.mask_rows.nd = 1, p.mask_rows.shape[0] = ROWS, p.mask_rows.stride[0] = N;
    return p;
}

/* Row 0 plain, row 1 with every third entry blocked, row 2 fully blocked, row 3 one NaN. */
static void fill(float *x, uint8_t *mask) {
    for (int64_t i = 0; i < ROWS * N; i++) {
        x[i] = (float)((i * 37 % 101) - 50) / 9.0f;
        const int64_t r = i / N, j = i % N;
        mask[i] = (uint8_t)((r == 1 && j % 3 == 0) || r == 2);
    }
    x[3 * N + 517] = NAN;
}

static void test_long_rows(void) {
    float *x = malloc(sizeof(float) * ROWS * N), *y = malloc(sizeof(float) * ROWS * N);
    float *again = malloc(sizeof(float) * ROWS * N), *whole = malloc(sizeof(float) * N);
    uint8_t *mask = malloc(ROWS * N);
    float stats[2 * ROWS];
    fill(x, mask);
    const softmax_plan p = plan_for(mask);
    softmax_rows_f32(&p, x, y);
    memcpy(again, x, sizeof(float) * ROWS * N);
    softmax_rows_stats_f32(&p, again, stats);
    CU_ASSERT_EQUAL(memcmp(again, y, sizeof(float) * ROWS * N), 0);
    memcpy(again, x, sizeof(float) * ROWS * N);
    softmax_rows_replay_f32(&p, again, stats);
    CU_ASSERT_EQUAL(memcmp(again, y, sizeof(float) * 3 * N), 0); /* NaN != NaN: rows 0-2 */
    for (int r = 0; r < 2; r++) {
        const float *xr = x + r * N, *yr = y + r * N;
        const uint8_t *m = mask + r * N;
        double max = -INFINITY, sum = 0;
        for (int j = 0; j < N; j++)
            if (!m[j] && xr[j] > max) max = xr[j];
        for (int j = 0; j < N; j++) sum += m[j] ? 0 : exp(xr[j] - max);
        int bad = 0;
        for (int j = 0; j < N; j++) {
            const double want = m[j] ? 0 : exp(xr[j] - max) / sum;
            bad += fabs(yr[j] - want) > 1e-6 * want + 1e-9 || (m[j] && yr[j] != 0);
        }
        CU_ASSERT_EQUAL(bad, 0);
        /* the row primitives over the whole row */
        for (int j = 0; j < N; j++) whole[j] = m[j] ? -INFINITY : xr[j];
        const float mx = nbt_row_max_f32(whole, N);
        nbt_row_shift_f32(whole, whole, -mx, N);
        nbt_vexp_f32(whole, whole, N);
        nbt_row_scale_f32(whole, whole, (float)(1.0 / nbt_row_sum_f32(whole, N)), N);
        CU_ASSERT_EQUAL(memcmp(whole, yr, sizeof(float) * N), 0);
        CU_ASSERT_EQUAL(stats[2 * r], mx);
    }
    int nonzero = 0, not_nan = 0;
    for (int j = 0; j < N; j++) nonzero += y[2 * N + j] != 0, not_nan += !isnan(y[3 * N + j]);
    CU_ASSERT_EQUAL(nonzero, 0);  /* fully blocked: zeros */
    CU_ASSERT_EQUAL(stats[5], 0); /* and 1/sum saved as 0 */
    CU_ASSERT_EQUAL(not_nan, 0);  /* a NaN spreads over its row */
    free(x), free(y), free(again), free(whole), free(mask);
}

int main(void) {
    const nbtest_case cases[] = {
        {"rows longer than a piece: values, bits, replay, blocked and NaN rows", test_long_rows},
    };
    return nbtest_run("softmax_rows", cases, sizeof cases / sizeof cases[0]);
}
