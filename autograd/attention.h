/* Internal knobs of the fused attention (attention.c), for tests and benchmarks. */
#ifndef NABLA_ATTENTION_H
#define NABLA_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>

/* Attention keeps the probabilities [B, H, T_q, T_k] for backward while they take at most
 * this many bytes (default NBA_ATTENTION_KEEP_LIMIT); above it, the memory-efficient path
 * saves two numbers per query row and recomputes the probabilities block by block in the
 * backward. 0 forces the memory-efficient path, SIZE_MAX the kept probabilities. Returns the
 * previous limit. */
#define NBA_ATTENTION_KEEP_LIMIT ((size_t)16 << 20)
size_t nba_attention_keep_limit(size_t bytes);
/* True when the calling thread's last attention forward took the memory-efficient path. */
bool nba_attention_last_memory_efficient(void);

#endif
