/* nabla's parallel loop for user code: splits an index range over nabla's worker threads (the
 * ones its own kernels use, nb_set_num_threads), so a user function's loops (rows of a norm,
 * elements of a gate) run on every thread instead of one while the others wait.
 *
 *     typedef struct { const float *x; float *y; int64_t cols; } scale_job;
 *     static void scale_rows(void *ctx, int64_t begin, int64_t end) {
 *         const scale_job *j = ctx;
 *         for (int64_t i = begin * j->cols; i < end * j->cols; i++) // rows begin..end-1
 *             j->y[i] = 2 * j->x[i];
 *     }
 *     if (!nb_parallel_for(rows, 64, scale_rows, &(scale_job){x, y, cols}))
 *         fprintf(stderr, "%s\n", nb_last_error());
 *
 * Determinism: each index of [0, n) is handled by exactly one call, and which thread runs a
 * call never changes what it computes. So if every index writes only its own outputs (a
 * whole row, a whole column sum: never a share of a sum that other indices add to), results
 * are bitwise the same for any thread count. A sum across indices (a weight gradient summed
 * over rows) belongs to its own loop over the outputs (the columns), each summing in order.
 *
 * Threads: fn runs on the calling thread and on nabla's workers, several calls at once on
 * disjoint ranges; it must not fail and should do plain computation on memory it was given
 * (no tensor creation, no nabla ops, no nb_error: those belong to the calling thread, before
 * or after the loop; a nested nb_parallel_for is fine). The loop runs inline, as one call
 * fn(ctx, 0, n) on the calling thread, when n is under two grains, when one thread is allowed,
 * inside another parallel loop or kernel (nesting never oversubscribes), or while another
 * user thread's loop holds the workers. Any thread may call it, as any nabla function. */
#ifndef NABLA_PARALLEL_H
#define NABLA_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Handles indices [begin, end) of the loop; ctx is nb_parallel_for's. */
typedef void (*nb_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Calls fn on disjoint ranges that together cover [0, n), each index in exactly one call,
 * in parallel when n is at least two grains; returns when every call has returned. grain is
 * the least number of indices worth a thread (a few microseconds of work: e.g. 16K for a cheap
 * element-wise map, a few rows for rows of a few hundred elements); ranges are not cut finer
 * than about one grain. n = 0 calls nothing. Returns false, with an error naming
 * nb_parallel_for, for n < 0, grain < 1 or a NULL fn (nothing is called then). */
bool nb_parallel_for(int64_t n, int64_t grain, nb_range_fn fn, void *ctx);

/* The instruction set nabla's own kernels use: "avx512", "avx2" or "generic" (SSE2), as
 * NABLA_ISA names it, else the widest this CPU runs. Static, never NULL; the caller owns
 * nothing. A user's loops compiled once per set (GCC's `#pragma GCC target`, as
 * nn/blocks/simd_sets.h does) pick theirs by it, so NABLA_ISA chooses them too. */
const char *nb_simd_set(void);

#ifdef __cplusplus
}
#endif
#endif
