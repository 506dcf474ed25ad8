/* The softmax row loops of softmax_rows.h, and log_softmax's, built once per instruction set
 * (generic, AVX2, AVX-512 by #pragma GCC target, flattened) and the run-time choice between
 * them: see softmax_isa.h. */
#include "softmax_isa.h"
#include "../tensor/isa.h"

/* Every call inlined, so that the row loops are built for the function's instruction set
 * (GCC otherwise shares one out-of-line copy built for the base set). */
#ifdef __GNUC__
#define FLATTEN __attribute__((flatten))
#else
#define FLATTEN
#endif

#define SOFTMAX_ROWS_BODIES(SUF)                                                                   \
    FLATTEN static void rows_##SUF(const softmax_plan *plan, nb_dtype dt, const char *x,           \
                                   char *y) {                                                      \
        const bool short_rows = plan->n <= NBA_SHORT_ROW;                                          \
        if (dt == NB_F32) {                                                                        \
            const float *xs = (const float *)x;                                                    \
            float *ys = (float *)y;                                                                \
            short_rows ? softmax_short_rows_f32(plan, xs, ys) : softmax_rows_f32(plan, xs, ys);    \
        } else {                                                                                   \
            const double *xs = (const double *)x;                                                  \
            double *ys = (double *)y;                                                              \
            short_rows ? softmax_short_rows_f64(plan, xs, ys) : softmax_rows_f64(plan, xs, ys);    \
        }                                                                                          \
    }                                                                                              \
    FLATTEN static void saved_##SUF(const softmax_plan *plan, nb_dtype dt, char *y, char *stats,   \
                                    bool replay) {                                                 \
        if (dt == NB_F32) {                                                                        \
            if (replay)                                                                            \
                softmax_rows_replay_f32(plan, (float *)y, (const float *)stats);                   \
            else                                                                                   \
                softmax_rows_stats_f32(plan, (float *)y, (float *)stats);                          \
        } else {                                                                                   \
            if (replay)                                                                            \
                softmax_rows_replay_f64(plan, (double *)y, (const double *)stats);                 \
            else                                                                                   \
                softmax_rows_stats_f64(plan, (double *)y, (double *)stats);                        \
        }                                                                                          \
    }                                                                                              \
    FLATTEN static void backward_##SUF(nb_dtype dt, int64_t rows, int64_t n, double scale,         \
                                       bool causal, int64_t row0, const char *y, const char *g,    \
                                       char *dx) {                                                 \
        if (dt == NB_F32)                                                                          \
            softmax_backward_rows_f32(rows, n, scale, causal, row0, (const float *)y,              \
                                      (const float *)g, (float *)dx);                              \
        else                                                                                       \
            softmax_backward_rows_f64(rows, n, scale, causal, row0, (const double *)y,             \
                                      (const double *)g, (double *)dx);                            \
    }

/* Log-softmax row kernels for one float type: row loops of tensor/rows.h (inlined here, so
 * built for the set) around exp and log. */
#define DEFINE_LOG_SOFTMAX_KERNELS(T, SUF)                                                         \
    static inline void log_softmax_rows_##SUF(int64_t rows, int64_t n, const T *x, T *y, T *e) {   \
        for (int64_t r = 0; r < rows; r++, x += n, y += n) {                                       \
            const T max = nbt_row_max_##SUF(x, n);                                                 \
            nbt_row_shift_##SUF(y, x, -max, n);                                                    \
            nbt_vexp_##SUF(e, y, n);                                                               \
            const T lse = (T)log(nbt_row_sum_##SUF(e, n));                                         \
            nbt_row_shift_##SUF(y, y, -lse, n);                                                    \
        }                                                                                          \
    }                                                                                              \
    static inline void log_softmax_backward_rows_##SUF(int64_t rows, int64_t n, const T *y,        \
                                                       const T *g, T *dx, T *e) {                  \
        for (int64_t r = 0; r < rows; r++, y += n, g += n, dx += n) {                              \
            const T s = (T)nbt_row_sum_##SUF(g, n);                                                \
            nbt_vexp_##SUF(e, y, n);                                                               \
            for (int64_t j = 0; j < n; j++) dx[j] = g[j] - e[j] * s;                               \
        }                                                                                          \
    }
DEFINE_LOG_SOFTMAX_KERNELS(float, f32)
DEFINE_LOG_SOFTMAX_KERNELS(double, f64)

#define LOG_SOFTMAX_BODIES(SUF)                                                                    \
    FLATTEN static void log_rows_##SUF(nb_dtype dt, int64_t rows, int64_t n, const char *x,        \
                                       char *y, char *e) {                                         \
        if (dt == NB_F32)                                                                          \
            log_softmax_rows_f32(rows, n, (const float *)x, (float *)y, (float *)e);               \
        else                                                                                       \
            log_softmax_rows_f64(rows, n, (const double *)x, (double *)y, (double *)e);            \
    }                                                                                              \
    FLATTEN static void log_backward_##SUF(nb_dtype dt, int64_t rows, int64_t n, const char *y,    \
                                           const char *g, char *dx, char *e) {                     \
        if (dt == NB_F32)                                                                          \
            log_softmax_backward_rows_f32(rows, n, (const float *)y, (const float *)g,             \
                                          (float *)dx, (float *)e);                                \
        else                                                                                       \
            log_softmax_backward_rows_f64(rows, n, (const double *)y, (const double *)g,           \
                                          (double *)dx, (double *)e);                              \
    }

SOFTMAX_ROWS_BODIES(generic)
LOG_SOFTMAX_BODIES(generic)
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
SOFTMAX_ROWS_BODIES(avx2)
LOG_SOFTMAX_BODIES(avx2)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")
SOFTMAX_ROWS_BODIES(avx512)
LOG_SOFTMAX_BODIES(avx512)
#pragma GCC pop_options
#define PICK(fn)                                                                                   \
    (nbt_isa_current() == NBT_ISA_AVX512 ? fn##_avx512                                             \
     : nbt_isa_current() == NBT_ISA_AVX2 ? fn##_avx2                                               \
                                         : fn##_generic)
#else
#define PICK(fn) fn##_generic
#endif

void nba_softmax_rows(const softmax_plan *plan, nb_dtype dt, const char *x, char *y) {
    PICK(rows)(plan, dt, x, y);
}

void nba_softmax_rows_saved(const softmax_plan *plan, nb_dtype dt, char *y, char *stats,
                            bool replay) {
    PICK(saved)(plan, dt, y, stats, replay);
}

void nba_softmax_backward_rows(nb_dtype dt, int64_t rows, int64_t n, double scale, bool causal,
                               int64_t row0, const char *y, const char *g, char *dx) {
    PICK(backward)(dt, rows, n, scale, causal, row0, y, g, dx);
}

void nba_log_softmax_rows(nb_dtype dt, int64_t rows, int64_t n, const char *x, char *y, char *e) {
    PICK(log_rows)(dt, rows, n, x, y, e);
}

void nba_log_softmax_backward_rows(nb_dtype dt, int64_t rows, int64_t n, const char *y,
                                   const char *g, char *dx, char *e) {
    PICK(log_backward)(dt, rows, n, y, g, dx, e);
}
