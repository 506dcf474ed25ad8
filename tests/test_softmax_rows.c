/* The softmax row kernels (autograd/softmax_rows.h) on long rows (as memory-efficient attention
 * at T 2048 has) with a tail shorter than any vector: probabilities against exp(x - max) / sum
 * in double, bitwise the composition of the row primitives (shift, exp, sum, scale) that any
 * fused rewrite of the kernels must keep, the replay from the saved max and 1/sum bitwise the
 * same as the first pass, and fully blocked and NaN rows. Run by scripts/test once per
 * instruction set (NABLA_ISA).
 * And the public ops on those rows as built per instruction set (autograd/softmax_isa.c):
 * nb_softmax's, nb_masked_softmax's and nb_log_softmax's output and gradient bit for bit the same
 * on every set this CPU runs, and within rounding of a softmax and its gradient computed here in
 * double. */
#include "harness.h"
#include "autograd/softmax_rows.h"
#include "tensor/isa.h"

#include <stdio.h>
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

/* One call of a public softmax op: a [outer, n] input (softmax over dim 1) or, with dim 0, an
 * [n, outer] one (softmax over dim 0); with queries, nb_masked_softmax(causal, scale) of a
 * [outer / queries, queries, n] input instead. */
typedef struct {
    nb_dtype dt;
    int64_t outer, n;
    int dim;
    int64_t queries; /* 0: nb_softmax */
    double scale;
    bool log; /* nb_log_softmax instead of nb_softmax */
} op_case;

enum { MAX_ELEMS = 4 * 1101 };

/* Element (row r, entry j) of the case's rows: where it sits in the input in row-major order. */
static int64_t at(const op_case *c, int64_t r, int64_t j) {
    return c->dim == 0 ? j * c->outer + r : r * c->n + j;
}

/* The case's softmax y and its gradient dx for output gradient g, in double from the input's
 * values x (row-major, as the op's tensors read): p_j = exp(s x_j - max) / sum over the
 * unblocked entries (causal: j <= the row's query), dx_j = s p_j (g_j - sum_k g_k p_k). */
static void reference_softmax(const op_case *c, const double *x, const double *g, double *y,
                              double *dx) {
    const double s = c->queries ? c->scale : 1.0;
    for (int64_t r = 0; r < c->outer; r++) {
        const int64_t limit = c->queries && r % c->queries + 1 < c->n ? r % c->queries + 1 : c->n;
        double max = -INFINITY, sum = 0, dot = 0;
        for (int64_t j = 0; j < limit; j++) max = fmax(max, s * x[at(c, r, j)]);
        for (int64_t j = 0; j < limit; j++) sum += exp(s * x[at(c, r, j)] - max);
        for (int64_t j = 0; j < c->n; j++)
            y[at(c, r, j)] = j < limit ? exp(s * x[at(c, r, j)] - max) / sum : 0;
        for (int64_t j = 0; j < c->n; j++) dot += g[at(c, r, j)] * y[at(c, r, j)];
        for (int64_t j = 0; j < c->n; j++)
            dx[at(c, r, j)] = s * y[at(c, r, j)] * (g[at(c, r, j)] - dot);
    }
}

/* The same for log_softmax: y_j = x_j - max - log(sum_k exp(x_k - max)),
 * dx_j = g_j - exp(y_j) sum_k g_k. */
static void reference_log_softmax(const op_case *c, const double *x, const double *g, double *y,
                                  double *dx) {
    for (int64_t r = 0; r < c->outer; r++) {
        double max = -INFINITY, sum = 0, gsum = 0;
        for (int64_t j = 0; j < c->n; j++) max = fmax(max, x[at(c, r, j)]);
        for (int64_t j = 0; j < c->n; j++) sum += exp(x[at(c, r, j)] - max), gsum += g[at(c, r, j)];
        const double lse = log(sum);
        for (int64_t j = 0; j < c->n; j++) {
            y[at(c, r, j)] = x[at(c, r, j)] - max - lse;
            dx[at(c, r, j)] = g[at(c, r, j)] - exp(y[at(c, r, j)]) * gsum;
        }
    }
}

/* Values of row r off the reference beyond the rounding of the op's float type (rel): each y
 * relative to itself, each dx relative to the terms it sums. */
static int softmax_row_off(const op_case *c, int64_t r, double rel, const double *g,
                           const double *want_y, const double *want_dx, const double *y,
                           const double *dx) {
    const double s = c->queries ? c->scale : 1.0;
    double dot = 0;
    for (int64_t j = 0; j < c->n; j++) dot += fabs(g[at(c, r, j)] * want_y[at(c, r, j)]);
    int off = 0;
    for (int64_t j = 0; j < c->n; j++) {
        const int64_t k = at(c, r, j);
        off += !(fabs(y[k] - want_y[k]) <= rel * want_y[k]); /* blocked: 0 */
        off += !(fabs(dx[k] - want_dx[k]) <= rel * fabs(s) * want_y[k] * (fabs(g[k]) + dot));
    }
    return off;
}

/* The same for log_softmax: x - max and the log of the sum rounded (terms up to 12 + log n <
 * 20), then exp of y to that error times sum |g|. */
static int log_softmax_row_off(const op_case *c, int64_t r, double rel, const double *g,
                               const double *want_y, const double *want_dx, const double *y,
                               const double *dx) {
    double gabs = 0;
    for (int64_t j = 0; j < c->n; j++) gabs += fabs(g[at(c, r, j)]);
    int off = 0;
    for (int64_t j = 0; j < c->n; j++) {
        const int64_t k = at(c, r, j);
        off += !(fabs(y[k] - want_y[k]) <= rel * 20);
        off += !(fabs(dx[k] - want_dx[k]) <= rel * (fabs(g[k]) + 21 * exp(want_y[k]) * gabs));
    }
    return off;
}

/* Runs the case's op forward and backward on the instruction set in use; y and dx as doubles
 * (exact for float32 too). */
static bool run_op(const op_case *c, const nb_tensor *x0, const nb_tensor *g, double *y,
                   double *dx) {
    nb_tensor *x = nb_requires_grad_(nb_clone(x0), true);
    nb_tensor *out = c->queries ? nb_masked_softmax(x, NULL, true, c->scale)
                     : c->log   ? nb_log_softmax(x, c->dim)
                                : nb_softmax(x, c->dim);
    return out && nb_backward(out, g) && nb_to_doubles(out, y) && nb_to_doubles(nb_grad(x), dx);
}

/* The case on every instruction set this CPU runs: the same bits on each, and within rounding
 * of the reference (relative to the terms each value is made of). Returns the sets run. */
static int check_op_case(const op_case *c, nb_rng *rng) {
    const int64_t numel = c->outer * c->n;
    int64_t shape[3] = {c->outer, c->n};
    int ndim = 2;
    if (c->dim == 0) shape[0] = c->n, shape[1] = c->outer;
    if (c->queries)
        shape[0] = c->outer / c->queries, shape[1] = c->queries, shape[2] = c->n, ndim = 3;
    nb_tensor *x = nb_uniform(rng, c->dt, ndim, shape, -6, 6);
    nb_tensor *g = nb_uniform(rng, c->dt, ndim, shape, -1, 1);
    static double xs[MAX_ELEMS], gs[MAX_ELEMS], want_y[MAX_ELEMS], want_dx[MAX_ELEMS];
    static double first_y[MAX_ELEMS], first_dx[MAX_ELEMS], y[MAX_ELEMS], dx[MAX_ELEMS];
    CU_ASSERT_FATAL(numel <= MAX_ELEMS && nb_to_doubles(x, xs) && nb_to_doubles(g, gs));
    (c->log ? reference_log_softmax : reference_softmax)(c, xs, gs, want_y, want_dx);
    /* s x - max rounded to half an ulp of up to 12 (7e-7 in float32, 1.3e-15 in double) is
     * that relative error in exp, plus exp's ulp and the normalising (seen: 6e-7 and 1.1e-15) */
    const double rel = c->dt == NB_F32 ? 1.5e-6 : 1e-14;
    nbtest_isa_loop s;
    for (s = nbtest_isa_begin(); nbtest_isa_next(&s);) {
        CU_ASSERT_FATAL(run_op(c, x, g, y, dx));
        if (s.ran == 0) {
            memcpy(first_y, y, sizeof(double) * (size_t)numel);
            memcpy(first_dx, dx, sizeof(double) * (size_t)numel);
        }
        CU_ASSERT_EQUAL(memcmp(y, first_y, sizeof(double) * (size_t)numel), 0);
        CU_ASSERT_EQUAL(memcmp(dx, first_dx, sizeof(double) * (size_t)numel), 0);
    }
    int bad = 0;
    for (int64_t r = 0; r < c->outer; r++)
        bad +=
            (c->log ? log_softmax_row_off : softmax_row_off)(c, r, rel, gs, want_y, want_dx, y, dx);
    if (bad)
        printf("  %s %lld x %lld dim %d: %d values off\n", nb_dtype_name(c->dt),
               (long long)c->outer, (long long)c->n, c->dim, bad);
    CU_ASSERT_EQUAL(bad, 0);
    return s.ran;
}

/* Short rows (the whole-block exp, at most NBA_SHORT_ROW), long ones with and without a tail
 * shorter than a vector, softmax over the first dim, and the causal masked softmax whose rows
 * attention shares. */
static void test_public_ops_every_isa(void) {
    const op_case cases[] = {
        {NB_F32, 5, 7, 1, 0, 1, false},       {NB_F32, 3, 32, 1, 0, 1, false},
        {NB_F32, 3, 33, 1, 0, 1, false},      {NB_F32, 4, 1101, 1, 0, 1, false},
        {NB_F32, 4, 1024, 1, 0, 1, false},    {NB_F32, 6, 33, 0, 0, 1, false},
        {NB_F64, 5, 7, 1, 0, 1, false},       {NB_F64, 4, 1101, 1, 0, 1, false},
        {NB_F64, 6, 40, 0, 0, 1, false},      {NB_F32, 80, 40, 1, 40, 0.125, false},
        {NB_F32, 40, 20, 1, 20, -0.5, false}, {NB_F64, 90, 45, 1, 45, 0.125, false},
        {NB_F32, 5, 7, 1, 0, 1, true},        {NB_F32, 4, 1101, 1, 0, 1, true},
        {NB_F32, 6, 33, 0, 0, 1, true},       {NB_F64, 4, 1101, 1, 0, 1, true},
    };
    nb_rng rng;
    nb_rng_seed(&rng, 7);
    int sets = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        sets = check_op_case(&cases[i], &rng);
    printf("  compared on %d instruction set(s)\n", sets);
    CU_ASSERT(sets >= 1);
}

/* nbt_vexp_sum and nbt_vexp_scale against the loops they fuse (shift, exp, sum, scale), bit
 * for bit, at every length up to five vectors of the widest set and at a long row with a tail,
 * in place and not, on every set this CPU runs. */
#define FUSED_EXP_CHECK(T, SUF)                                                                    \
    static int fused_exp_mismatches_##SUF(int64_t n, bool in_place) {                              \
        T *x = malloc(sizeof(T) * (size_t)(n + 1)), *y = malloc(sizeof(T) * (size_t)(n + 1));      \
        T *want = calloc((size_t)(n + 1), sizeof(T));                                              \
        for (int64_t i = 0; i < n; i++) x[i] = (T)((i * 37 % 101) - 50) / 9;                       \
        const T shift = (T)-2.75, a = (T)0.3;                                                      \
        nbt_row_shift_##SUF(want, x, shift, n);                                                    \
        nbt_vexp_##SUF(want, want, n);                                                             \
        const double sum_want = nbt_row_sum_##SUF(want, n);                                        \
        memcpy(y, x, sizeof(T) * (size_t)n);                                                       \
        const double sum = nbt_vexp_sum_##SUF(y, in_place ? y : x, shift, n);                      \
        int bad = memcmp(y, want, sizeof(T) * (size_t)n) != 0 || sum != sum_want;                  \
        nbt_row_scale_##SUF(want, want, a, n);                                                     \
        memcpy(y, x, sizeof(T) * (size_t)n);                                                       \
        nbt_vexp_scale_##SUF(y, in_place ? y : x, shift, a, n);                                    \
        bad += memcmp(y, want, sizeof(T) * (size_t)n) != 0;                                        \
        free(x), free(y), free(want);                                                              \
        return bad;                                                                                \
    }
FUSED_EXP_CHECK(float, f32)
FUSED_EXP_CHECK(double, f64)

static void test_fused_exp(void) {
    nbtest_isa_loop s;
    for (s = nbtest_isa_begin(); nbtest_isa_next(&s);) {
        int bad = 0;
        for (int in_place = 0; in_place < 2; in_place++) {
            for (int64_t n = 0; n <= 80; n++)
                bad +=
                    fused_exp_mismatches_f32(n, in_place) + fused_exp_mismatches_f64(n, in_place);
            bad += fused_exp_mismatches_f32(N, in_place) + fused_exp_mismatches_f64(N, in_place);
        }
        printf("  %s: %d mismatches\n", nbt_isa_name(s.isa), bad);
        CU_ASSERT_EQUAL(bad, 0);
    }
    CU_ASSERT(s.ran >= 1);
}

int main(void) {
    const nbtest_case cases[] = {
        {"rows longer than a piece: values, bits, replay, blocked and NaN rows", test_long_rows},
        {"the fused exp and sum, exp and scale: the bits of the loops they replace",
         test_fused_exp},
        {"nb_softmax, nb_masked_softmax, nb_log_softmax: the same bits on every set, against "
         "double",
         test_public_ops_every_isa},
    };
    return nbtest_run("softmax_rows", cases, sizeof cases / sizeof cases[0]);
}
