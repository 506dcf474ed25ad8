/* Internal knobs of the fused attention (attention.c), for tests and benchmarks. */
#ifndef NABLA_ATTENTION_H
#define NABLA_ATTENTION_H

#include "nabla/tensor.h"

#include <stdbool.h>
#include <stddef.h>

/* Attention keeps the probabilities [B, H, T_q, T_k] for backward while they take at most
 * this many bytes (NBA_ATTENTION_KEEP_LIMIT); above it, the memory-efficient path saves two
 * numbers per query row and recomputes the probabilities block by block in the backward. */
#define NBA_ATTENTION_KEEP_LIMIT ((size_t)16 << 20)
#ifdef NABLA_TESTS /* test hooks: in the test build only (tests/meson.build) */
/* Sets that limit: 0 forces the memory-efficient path, SIZE_MAX the kept probabilities.
 * Returns the previous limit. */
size_t nba_attention_keep_limit(size_t bytes);
/* True when the calling thread's last attention forward took the memory-efficient path. */
bool nba_attention_last_memory_efficient(void);
#endif

/* True when attention of B x H_q heads of T_q queries over T_k keys keeps its probabilities
 * for backward (under the keep limit); false when it takes the memory-efficient path. */
bool nba_attention_keeps(nb_dtype dt, int64_t B, int64_t Hq, int64_t Tq, int64_t Tk);

/* One attention call as its forward and its gradients see it, for the ops built on it
 * (attention.c's two entries, qkv_attention.c). */
typedef struct {
    const nb_tensor *q, *k, *v; /* as read: unit stride along head_dim */
    const nb_tensor *mask;      /* bool, broadcast to the scores [B, H_q, T_q, T_k], or NULL */
    bool packed;                /* heads [B, T, H * hd] side by side; else [B, H, T, hd] */
    bool causal;
    bool memory_efficient; /* set by the forward: which path it took */
    int64_t Hq, Hkv;
    double scale;
    nb_tensor *saved; /* set by the forward: kept probabilities or each row's max and 1/sum */
} nba_attention_call;

/* The context of c (packed: [B, T_q, H_q * hd]; else the [B, H_q, T_q, hd] transposed view of
 * a [B, T_q, H_q, hd] buffer), with no node recorded; sets c->saved and c->memory_efficient.
 * Results and c->saved are new tensors in the current scope. NULL with an error naming op. */
nb_tensor *nba_attention_forward(const char *op, nba_attention_call *c);
/* The gradients of q, k and v of a call the forward ran, from the context's gradient gout,
 * written into d[0], d[1], d[2] (caller's tensors shaped like q, k, v; NULL for one not
 * wanted). False on failure (out of memory), with an error. */
bool nba_attention_grads(const nba_attention_call *c, const nb_tensor *gout, nb_tensor *const d[3]);

#endif
