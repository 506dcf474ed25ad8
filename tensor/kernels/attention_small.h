/* Attention for one (batch, head) pair with few keys, in float32 vector registers: a row of
 * scores is one 16-lane vector, so scores, softmax and both products run without calls
 * between them. attention_small.c is built once per instruction set (AVX-512, AVX2, plain
 * x86-64) and attention.c picks the build matching the GEMM kernels in use.
 *
 * Limits (nba_small_head_fits): T_k <= 16 keys, head_dim up to 64,
 * T_q <= 64 queries, no boolean mask (the causal rule is fine). */
#ifndef NABLA_ATTENTION_SMALL_H
#define NABLA_ATTENTION_SMALL_H

#include <stdbool.h>
#include <stdint.h>

#define NBA_SMALL_KEYS 16
#define NBA_SMALL_QUERIES 64
#define NBA_SMALL_HEAD_DIM 64

/* One pair's operands. Rows are *_row floats apart, with unit stride inside a row. */
typedef struct {
    int64_t Tq, Tk, hd;
    float scale; /* softmax(scale * q k^T) */
    bool causal; /* key s > query t blocked */
    const float *q, *k, *v;
    int64_t q_row, k_row, v_row;
    float *probs; /* [Tq, Tk], contiguous: written by forward, read by backward */
    float *ctx;   /* forward: [Tq, hd] rows ctx_row apart */
    int64_t ctx_row;
    const float *grad; /* backward: the context's gradient, rows grad_row apart */
    int64_t grad_row;
    float *dq, *dk, *dv; /* backward: NULL when not needed; rows d_row apart */
    int64_t d_row;
} nba_small_head;

static inline bool nba_small_head_fits(int64_t Tq, int64_t Tk, int64_t hd) {
    return Tq >= 1 && Tq <= NBA_SMALL_QUERIES && Tk >= 1 && Tk <= NBA_SMALL_KEYS && hd >= 1 &&
           hd <= NBA_SMALL_HEAD_DIM;
}

/* The kernels, one build per instruction set (kernels.h: nba_small_head_forward_<set>, reached
 * through nbt_kernels()->small_head_forward and small_head_backward):
 * Forward: probs = softmax rows of scale * q k^T over the unblocked keys, ctx = probs v. A row
 * whose unblocked scores are all -inf gives zeros, as nb_masked_softmax does.
 * Backward: dv = probs^T grad, dS = scale * P * (dP - rowsum(P * dP)) with dP = grad v^T,
 * dq = dS k, dk = dS^T q (each only when its pointer is set). */

#endif
