/* RoPE's cos and sin tables made once and applied to several tensors: the attention module
 * rotates q and k at the same positions, so it builds the tables once a call (internal to
 * this folder; blk_rope in blocks.h is the one-tensor form). */
#ifndef NABLA_BLOCKS_ROPE_TABLES_H
#define NABLA_BLOCKS_ROPE_TABLES_H

#include <nabla/nabla.h>

/* cos and sin of each position's angles, [T, hd / 2] each, in the current scope. */
typedef struct {
    nb_tensor *cos, *sin;
} blk_rope_tables;

/* Tables of dtype dt for positions offset .. offset + T - 1 and an even head dim hd; false
 * with an error when out of memory. */
bool blk_rope_tables_make(nb_dtype dt, int64_t T, int64_t hd, int64_t offset, double base,
                          blk_rope_tables *out);

/* blk_rope with tables made for x's dtype, head dim and length along seq_dim (checked as
 * blk_rope checks its arguments). A new tensor in the current scope, or NULL with an error. */
nb_tensor *blk_rope_apply(const nb_tensor *x, int seq_dim, const blk_rope_tables *tables);

#endif
