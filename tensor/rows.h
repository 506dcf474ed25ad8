/* Loops over one contiguous row, for the row-wise ops (softmax, losses, layer_norm) and the
 * attention row of cached decoding (tensor/kernels/attend_row.c).
 *
 * Without -ffast-math a compiler may not reorder a floating-point sum, so a plain loop
 * `s += x[j]` runs at one add per add-latency. The reductions here keep NBT_ROW_LANES
 * independent partial results; the order of the additions is still fixed, so results are the
 * same on every run. Sums accumulate in double. The elementwise loops work in blocks of
 * NBT_ROW_LANES that load before they store: GCC's -O2 vectoriser takes such blocks even
 * where it would leave a plain loop scalar (it will not add a remainder loop itself), and
 * y may be the same array as x. */
#ifndef NABLA_TENSOR_ROWS_H
#define NABLA_TENSOR_ROWS_H

#include <math.h>
#include <stdint.h>

#define NBT_ROW_LANES 8

#define NBT_DEFINE_ROW_REDUCTIONS(T, SUF)                                                          \
    /* sum(x[0..n)) */                                                                             \
    static inline double nbt_row_sum_##SUF(const T *x, int64_t n) {                                \
        double acc[NBT_ROW_LANES] = {0};                                                           \
        int64_t j = 0;                                                                             \
        for (; j + NBT_ROW_LANES <= n; j += NBT_ROW_LANES)                                         \
            for (int l = 0; l < NBT_ROW_LANES; l++) acc[l] += (double)x[j + l];                    \
        for (int l = 0; j < n; j++, l++) acc[l] += (double)x[j];                                   \
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));  \
    }                                                                                              \
    /* sum(x[j] * y[j]) */                                                                         \
    static inline double nbt_row_dot_##SUF(const T *x, const T *y, int64_t n) {                    \
        double acc[NBT_ROW_LANES] = {0};                                                           \
        int64_t j = 0;                                                                             \
        for (; j + NBT_ROW_LANES <= n; j += NBT_ROW_LANES)                                         \
            for (int l = 0; l < NBT_ROW_LANES; l++) acc[l] += (double)x[j + l] * (double)y[j + l]; \
        for (int l = 0; j < n; j++, l++) acc[l] += (double)x[j] * (double)y[j];                    \
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));  \
    }                                                                                              \
    /* max(x[0..n)), -inf for an empty row; NaN entries are skipped (they reach the result         \
     * through the caller's arithmetic instead). */                                                \
    static inline T nbt_row_max_##SUF(const T *x, int64_t n) {                                     \
        T acc[NBT_ROW_LANES];                                                                      \
        for (int l = 0; l < NBT_ROW_LANES; l++) acc[l] = (T)-INFINITY;                             \
        int64_t j = 0;                                                                             \
        for (; j + NBT_ROW_LANES <= n; j += NBT_ROW_LANES)                                         \
            for (int l = 0; l < NBT_ROW_LANES; l++)                                                \
                acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];                                    \
        for (int l = 0; j < n; j++, l++) acc[l] = x[j] > acc[l] ? x[j] : acc[l];                   \
        T m = acc[0];                                                                              \
        for (int l = 1; l < NBT_ROW_LANES; l++) m = acc[l] > m ? acc[l] : m;                       \
        return m;                                                                                  \
    }                                                                                              \
    /* y[j] = a * x[j] */                                                                          \
    static inline void nbt_row_scale_##SUF(T *y, const T *x, T a, int64_t n) {                     \
        int64_t j = 0;                                                                             \
        for (; j + NBT_ROW_LANES <= n; j += NBT_ROW_LANES) {                                       \
            T v[NBT_ROW_LANES];                                                                    \
            for (int l = 0; l < NBT_ROW_LANES; l++) v[l] = x[j + l];                               \
            for (int l = 0; l < NBT_ROW_LANES; l++) y[j + l] = a * v[l];                           \
        }                                                                                          \
        for (; j < n; j++) y[j] = a * x[j];                                                        \
    }                                                                                              \
    /* y[j] = x[j] + b */                                                                          \
    static inline void nbt_row_shift_##SUF(T *y, const T *x, T b, int64_t n) {                     \
        int64_t j = 0;                                                                             \
        for (; j + NBT_ROW_LANES <= n; j += NBT_ROW_LANES) {                                       \
            T v[NBT_ROW_LANES];                                                                    \
            for (int l = 0; l < NBT_ROW_LANES; l++) v[l] = x[j + l];                               \
            for (int l = 0; l < NBT_ROW_LANES; l++) y[j + l] = v[l] + b;                           \
        }                                                                                          \
        for (; j < n; j++) y[j] = x[j] + b;                                                        \
    }

NBT_DEFINE_ROW_REDUCTIONS(float, f32)
NBT_DEFINE_ROW_REDUCTIONS(double, f64)

#endif
