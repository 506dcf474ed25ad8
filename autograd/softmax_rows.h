/* Softmax row kernels shared by the masked softmax (softmax.c) and the fused attention
 * (attention.c): a plan says how rows are scaled and blocked, and the kernels run it over
 * contiguous rows. Every row is computed the same way whoever calls, so the two ops agree
 * bitwise on the probabilities. */
#ifndef NABLA_SOFTMAX_ROWS_H
#define NABLA_SOFTMAX_ROWS_H

#include "nabla/tensor.h"
#include "../tensor/nbt.h"
#include "../tensor/vecmath.h"
#include "../tensor/rows.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* Visits the rows of a shape (every dim but the last) in row-major order, tracking where
 * each row starts in a mask whose strides broadcast it to that shape. */
typedef struct {
    int nd;
    int64_t shape[NB_MAX_DIMS], stride[NB_MAX_DIMS], idx[NB_MAX_DIMS];
    int64_t offset;
} row_cursor;

static inline void cursor_next(row_cursor *c) {
    for (int d = c->nd - 1; d >= 0; d--) {
        c->offset += c->stride[d];
        if (++c->idx[d] < c->shape[d]) return;
        c->offset -= c->stride[d] * c->shape[d];
        c->idx[d] = 0;
    }
}

/* What the softmax row kernel needs besides the data. */
typedef struct {
    int64_t rows, n;     /* rows of n contiguous elements */
    double scale;        /* softmax(scale * x) */
    bool causal;         /* block j > i, i = row index within the second-to-last dim */
    int64_t queries;     /* size of the second-to-last dim (causal only) */
    const uint8_t *mask; /* NULL, or the mask's first element; true = blocked */
    int64_t mask_step;   /* mask stride along the row (0 when broadcast) */
    row_cursor mask_rows;
    bool zero_blocked_rows; /* a row with nothing unblocked gives zeros (else NaN, as PyTorch) */
    int64_t row0;           /* index of the first row (when a thread does a slice of rows) */
} softmax_plan;

/* Where a walk over a plan's rows is: the current row's query index and mask row. */
typedef struct {
    row_cursor mask_rows;
    int64_t query;
} softmax_walk;

static inline softmax_walk softmax_walk_start(const softmax_plan *p) {
    return (softmax_walk){p->mask_rows, p->causal ? p->row0 % p->queries : 0};
}

/* Row kernels for one float type. Blocked entries become -inf before the exp, so they come
 * out exactly 0; entries past the causal limit are never touched by the exp. */
#define NBA_DEFINE_SOFTMAX_ROWS(T, SUF)                                                            \
    /* An all-NaN row has max -inf too, but it must stay NaN rather than pass as blocked. */       \
    static inline bool any_nan_##SUF(const T *y, int64_t n) {                                      \
        for (int64_t j = 0; j < n; j++)                                                            \
            if (isnan(y[j])) return true;                                                          \
        return false;                                                                              \
    }                                                                                              \
    /* The walk's row of scores x scaled into y, -inf where masked, up to the row's causal limit,  \
     * which it returns; the walk moves on to the next row. */                                     \
    static inline int64_t scaled_row_##SUF(const softmax_plan *p, softmax_walk *w, const T *x,     \
                                           T *y) {                                                 \
        int64_t limit = p->n;                                                                      \
        if (p->causal && w->query + 1 < limit) limit = w->query + 1;                               \
        if (++w->query == p->queries) w->query = 0;                                                \
        const T scale = (T)p->scale;                                                               \
        if (p->mask) {                                                                             \
            const uint8_t *m = p->mask + w->mask_rows.offset;                                      \
            const int64_t step = p->mask_step;                                                     \
            cursor_next(&w->mask_rows);                                                            \
            for (int64_t j = 0; j < limit; j++) y[j] = m[j * step] ? (T)-INFINITY : scale * x[j];  \
        } else if (scale != 1 || x != y) { /* x * 1 is x: attention scales in its product */       \
            nbt_row_scale_##SUF(y, x, scale, limit);                                               \
        }                                                                                          \
        return limit;                                                                              \
    }                                                                                              \
    /* The walk's next row of scores x as probabilities y, up to the causal limit, which it        \
     * returns (entries from there on are left to the caller). *max and *inv get the row's max     \
     * and 1/sum of exps (what memory-efficient attention saves to replay the row); a fully        \
     * blocked row returns 0 with max -inf and inv 0. */                                           \
    static inline int64_t softmax_row_##SUF(const softmax_plan *p, softmax_walk *w, const T *x,    \
                                            T *y, T *max_out, T *inv_out) {                        \
        const int64_t limit = scaled_row_##SUF(p, w, x, y);                                        \
        const T max = nbt_row_max_##SUF(y, limit);                                                 \
        if (max == -INFINITY && p->zero_blocked_rows && !any_nan_##SUF(y, limit)) {                \
            *max_out = (T)-INFINITY, *inv_out = 0;                                                 \
            return 0;                                                                              \
        }                                                                                          \
        /* shift, exp and sum in one pass (the bits of the three loops) */                         \
        const T inv = (T)(1.0 / nbt_vexp_sum_##SUF(y, y, -max, limit));                            \
        nbt_row_scale_##SUF(y, y, inv, limit);                                                     \
        *max_out = max, *inv_out = inv;                                                            \
        return limit;                                                                              \
    }                                                                                              \
    /* softmax_row again from its saved max and inv: the same operations, so the same bits. */     \
    static inline int64_t softmax_row_replay_##SUF(const softmax_plan *p, softmax_walk *w,         \
                                                   const T *x, T *y, T max, T inv) {               \
        const int64_t limit = scaled_row_##SUF(p, w, x, y);                                        \
        if (inv == 0) return 0; /* fully blocked */                                                \
        nbt_vexp_scale_##SUF(y, y, -max, inv, limit);                                              \
        return limit;                                                                              \
    }                                                                                              \
    static inline void softmax_rows_##SUF(const softmax_plan *p, const T *x, T *y) {               \
        softmax_walk w = softmax_walk_start(p);                                                    \
        for (int64_t r = 0; r < p->rows; r++, x += p->n, y += p->n) {                              \
            T max, inv;                                                                            \
            const int64_t limit = softmax_row_##SUF(p, &w, x, y, &max, &inv);                      \
            for (int64_t j = limit; j < p->n; j++) y[j] = 0;                                       \
        }                                                                                          \
    }                                                                                              \
    /* softmax_rows saving each row's max and inv in stats (two per row), and its replay. */       \
    static inline void softmax_rows_stats_##SUF(const softmax_plan *p, T *y, T *stats) {           \
        softmax_walk w = softmax_walk_start(p);                                                    \
        for (int64_t r = 0; r < p->rows; r++, y += p->n, stats += 2) {                             \
            const int64_t limit = softmax_row_##SUF(p, &w, y, y, &stats[0], &stats[1]);            \
            for (int64_t j = limit; j < p->n; j++) y[j] = 0;                                       \
        }                                                                                          \
    }                                                                                              \
    static inline void softmax_rows_replay_##SUF(const softmax_plan *p, T *y, const T *stats) {    \
        softmax_walk w = softmax_walk_start(p);                                                    \
        for (int64_t r = 0; r < p->rows; r++, y += p->n, stats += 2) {                             \
            const int64_t limit = softmax_row_replay_##SUF(p, &w, y, y, stats[0], stats[1]);       \
            for (int64_t j = limit; j < p->n; j++) y[j] = 0;                                       \
        }                                                                                          \
    }                                                                                              \
    /* Short rows (attention over a few keys): the per-row cost of calling exp dominates, so       \
     * all rows are prepared first, exp runs once over the whole block, and rows are               \
     * normalised last. Entries past the causal limit or blocked become -inf, so exp makes         \
     * them 0, and every element sees the same arithmetic as in softmax_rows. */                   \
    static inline void softmax_short_rows_##SUF(const softmax_plan *p, const T *x, T *y) {         \
        softmax_walk w = softmax_walk_start(p);                                                    \
        T *row = y;                                                                                \
        for (int64_t r = 0; r < p->rows; r++, x += p->n, row += p->n) {                            \
            int64_t limit = scaled_row_##SUF(p, &w, x, row);                                       \
            const T max = nbt_row_max_##SUF(row, limit);                                           \
            if (max == -INFINITY && p->zero_blocked_rows && !any_nan_##SUF(row, limit))            \
                limit = 0; /* all -inf: exp gives zeros, normalising leaves them */                \
            else                                                                                   \
                nbt_row_shift_##SUF(row, row, -max, limit);                                        \
            for (int64_t j = limit; j < p->n; j++) row[j] = (T)-INFINITY;                          \
        }                                                                                          \
        nbt_vexp_##SUF(y, y, p->rows * p->n);                                                      \
        for (int64_t r = 0; r < p->rows; r++, y += p->n) {                                         \
            const double sum = nbt_row_sum_##SUF(y, p->n);                                         \
            if (sum == 0) continue; /* a fully blocked row: already zeros */                       \
            nbt_row_scale_##SUF(y, y, (T)(1.0 / sum), p->n);                                       \
        }                                                                                          \
    }                                                                                              \
    /* dx = scale * y * (g - sum(g * y)); blocked entries have y = 0, so their dx is 0. With       \
     * causal, row r (query row0 + r) reads only its first row0 + r + 1 entries (g past them may   \
     * be unset) and the rest of its dx is 0. */                                                   \
    static inline void softmax_backward_rows_##SUF(int64_t rows, int64_t n, double scale,          \
                                                   bool causal, int64_t row0, const T *y,          \
                                                   const T *g, T *dx) {                            \
        const T s = (T)scale;                                                                      \
        for (int64_t r = 0; r < rows; r++, y += n, g += n, dx += n) {                              \
            const int64_t limit = causal && row0 + r + 1 < n ? row0 + r + 1 : n;                   \
            const T d = (T)nbt_row_dot_##SUF(g, y, limit);                                         \
            int64_t j = 0;                                                                         \
            for (; j + NBT_ROW_LANES <= limit; j += NBT_ROW_LANES) {                               \
                T yv[NBT_ROW_LANES], gv[NBT_ROW_LANES];                                            \
                for (int l = 0; l < NBT_ROW_LANES; l++) yv[l] = y[j + l], gv[l] = g[j + l];        \
                for (int l = 0; l < NBT_ROW_LANES; l++) dx[j + l] = s * yv[l] * (gv[l] - d);       \
            }                                                                                      \
            for (; j < limit; j++) dx[j] = s * y[j] * (g[j] - d);                                  \
            for (; j < n; j++) dx[j] = 0;                                                          \
        }                                                                                          \
    }

/* Checks mask is NB_BOOL and broadcasts to shape (not the other way round); the error names
 * op, the mask's shape and `what` (e.g. "the input's") with the target shape. */
static inline bool nba_check_mask(const char *op, const nb_tensor *mask, int ndim,
                                  const int64_t *shape, const char *what) {
    if (mask->dtype != NB_BOOL) {
        nbt_error(op, "mask must be bool, got %s of shape %s (%s shape %s)",
                  nb_dtype_name(mask->dtype), nbt_shape(mask), what, nbt_dims(ndim, shape));
        return false;
    }
    int64_t out[NB_MAX_DIMS];
    int nd;
    bool ok = mask->ndim <= ndim &&
              nbt_broadcast_shape(op, ndim, shape, mask->ndim, mask->shape, &nd, out) &&
              nd == ndim && memcmp(out, shape, sizeof(int64_t) * (size_t)nd) == 0;
    if (!ok)
        nbt_error(op, "mask of shape %s does not broadcast to %s shape %s", nbt_shape(mask), what,
                  nbt_dims(ndim, shape));
    return ok;
}

NBA_DEFINE_SOFTMAX_ROWS(float, f32)
NBA_DEFINE_SOFTMAX_ROWS(double, f64)

/* Rows this short take the whole-block exp path (softmax_short_rows). */
#define NBA_SHORT_ROW 32

#endif
