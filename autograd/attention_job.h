/* The fused attention's job (attention.c) as its block products see it (attention_blocks.c).
 * Internal to autograd/. */
#ifndef NABLA_ATTENTION_JOB_H
#define NABLA_ATTENTION_JOB_H

#include "softmax_isa.h"
#include "../tensor/isa.h"

#include <stdbool.h>
#include <stdint.h>

/* Where each (batch, head) matrix of a tensor starts and how its rows step, in elements; a
 * row's head_dim elements are adjacent. */
typedef struct {
    char *p;
    int64_t b, h, r;
} heads_t;

/* One call's layout. */
typedef struct {
    nb_dtype dtype;
    size_t es;
    int64_t B, Hq, Hkv, group, Tq, Tk, hd;
    heads_t q, k, v;
    heads_t out; /* forward: the context, [B, T_q, H_q, hd] contiguous */
    softmax_plan plan;
    int64_t mask_batch, mask_head, mask_row; /* the mask's strides (0 where broadcast) */
    bool memory_efficient;
    char *probs; /* kept: [B, H_q, T_q, T_k] contiguous */
    char *stats; /* memory-efficient: [B, H_q, T_q, 2], each row's max and 1/sum */
    char *scratch;
    int64_t scratch_per_worker; /* elements */
    bool small;                 /* products small enough for the rows kernel (set_path) */
    bool tiled; /* products on tiles (attention_blocks.c): memory-efficient or large heads */
    /* float32 heads with at most 16 keys and no mask: the vector kernels, else NULL */
    void (*small_forward)(const nba_small_head *h);
    void (*small_backward)(const nba_small_head *h);
    /* backward only: dq, dk, dv have p NULL when not needed */
    heads_t grad, dq, dk, dv;
} attention_job;

static inline char *head_ptr(const attention_job *j, heads_t l, int64_t b, int64_t h) {
    return l.p + j->es * (size_t)(b * l.b + h * l.h);
}

/* Query rows per block of the memory-efficient path: its scratch is two [ME_ROWS, T_k]
 * tiles per thread (1 MB each in float32 at T_k = 2048). On the Xeon (2 MB of L2 a core)
 * 128 rows ran the long workload 2-3% faster than 64 or 96 at one thread; 132 is a whole
 * number of both tiles' rows (12 on AVX-512, 6 on AVX2), where 128's last strip recomputed
 * 4 rows. */
#define ME_ROWS 132

/* Pair p's heads of q, k and v, its context (or the context's gradient) and dq, and its
 * key/value head's dk and dv. */
typedef struct {
    int64_t b, h;
    const char *q, *k, *v;
    char *ctx, *dq, *dk, *dv;
    const char *grad;
} pair_t;

static inline pair_t pair_at(const attention_job *j, int64_t p) {
    const int64_t b = p / j->Hq, h = p % j->Hq, kh = h / j->group;
    return (pair_t){.b = b,
                    .h = h,
                    .q = head_ptr(j, j->q, b, h),
                    .k = head_ptr(j, j->k, b, kh),
                    .v = head_ptr(j, j->v, b, kh),
                    .ctx = j->out.p ? head_ptr(j, j->out, b, h) : NULL,
                    .grad = j->grad.p ? head_ptr(j, j->grad, b, h) : NULL,
                    .dq = j->dq.p ? head_ptr(j, j->dq, b, h) : NULL,
                    .dk = j->dk.p ? head_ptr(j, j->dk, b, kh) : NULL,
                    .dv = j->dv.p ? head_ptr(j, j->dv, b, kh) : NULL};
}

/* The softmax plan for query rows [r0, r0 + rows) of pair (b, h), rows n wide. */
static inline softmax_plan rows_plan(const attention_job *j, int64_t b, int64_t h, int64_t r0,
                                     int64_t rows, int64_t n) {
    softmax_plan plan = j->plan;
    plan.rows = rows, plan.n = n, plan.row0 = r0;
    if (plan.mask) plan.mask += b * j->mask_batch + h * j->mask_head + r0 * j->mask_row;
    return plan;
}

/* Keys a causal block of query rows ending before r1 reads; all of them otherwise. */
static inline int64_t block_keys(const attention_job *j, int64_t r1) {
    return j->plan.causal && r1 < j->Tk ? r1 : j->Tk;
}

/* The tiled products of pair p (attention_blocks.c): the kept path's whole head or the
 * memory-efficient path's blocks of ME_ROWS queries, in the scratch of nba_blocks_scratch
 * elements a worker. The backward's first says the pair is the first of its group, whose dK
 * and dV overwrite rather than add (the memory-efficient path's are zeroed by the caller). */
int64_t nba_blocks_scratch(const attention_job *j, bool backward);
void nba_blocks_forward(const attention_job *j, int64_t p, char *scratch);
void nba_blocks_backward(const attention_job *j, int64_t p, bool first, char *scratch);

#endif
