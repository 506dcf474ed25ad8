/* The softmax rows of softmax_rows.h as every caller runs them, and log_softmax's rows: built once
 * per instruction set in softmax_isa.c and chosen by the set in use (tensor/isa.h). The softmax ops
 * (softmax.c) and the fused attention (attention.c, attention_blocks.c) call these, never the
 * inline kernels, so a model's softmax gets the same AVX2/AVX-512 loops as attention's; inlined
 * into a file built for the base x86-64 the loops ran on SSE2. The loops are fixed-order lane-wise
 * arithmetic (tensor/rows.h) without FP contraction, so every set computes the same bits.
 * Internal to autograd/. */
#ifndef NABLA_SOFTMAX_ISA_H
#define NABLA_SOFTMAX_ISA_H

#include "softmax_rows.h"

#include <stdbool.h>
#include <stdint.h>

/* plan's rows of x (dtype dt, rows plan->n apart) as probabilities into y, which may be x:
 * rows of at most NBA_SHORT_ROW through softmax_short_rows, longer ones softmax_rows (the
 * same bits either way). */
void nba_softmax_rows(const softmax_plan *plan, nb_dtype dt, const char *x, char *y);

/* plan's rows of scores y as probabilities in place, saving each row's max and 1/sum in stats
 * (two per row), or with replay, from the stats saved then: the same operations, so the same
 * bits (memory-efficient attention's blocks). */
void nba_softmax_rows_saved(const softmax_plan *plan, nb_dtype dt, char *y, char *stats,
                            bool replay);

/* dx = scale * y * (g - sum(g * y)) over rows of n (dx may be g); with causal, row r (query
 * row0 + r) reads only its first row0 + r + 1 entries and the rest of its dx is 0. */
void nba_softmax_backward_rows(nb_dtype dt, int64_t rows, int64_t n, double scale, bool causal,
                               int64_t row0, const char *y, const char *g, char *dx);

/* log_softmax of rows of n: y = x - max - log(sum(exp(x - max))), e scratch for one row (all of
 * dtype dt). */
void nba_log_softmax_rows(nb_dtype dt, int64_t rows, int64_t n, const char *x, char *y, char *e);

/* log_softmax's gradient over rows of n: dx = g - exp(y) * sum(g), e scratch for one row. */
void nba_log_softmax_backward_rows(nb_dtype dt, int64_t rows, int64_t n, const char *y,
                                   const char *g, char *dx, char *e);

#endif
