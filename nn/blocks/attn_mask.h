/* The options of blk_attn_opts the attention modules (Attention, MLA) read alike (internal to
 * this folder): the masks as one tensor, and what a cache refuses. */
#ifndef NABLA_BLOCKS_ATTN_MASK_H
#define NABLA_BLOCKS_ATTN_MASK_H

#include <nabla/blocks.h>

/* The masks of o (may be NULL) for a self-attention module m over x [B, T, ...] as one bool
 * tensor broadcasting to [B, H, T, T] (key_padding_mask [B, T] or'ed with attn_mask [T, T]),
 * in the current scope; *out is NULL (and the result true) when there are none. False with
 * an error naming m's type and path and the shapes for masks of another dtype or shape. */
bool blk_attn_mask(const nb_module *m, const blk_attn_opts *o, int64_t B, int64_t T,
                   nb_tensor **out);

/* A cached forward's options: true if o asks for nothing a cache cannot give (masks, weights,
 * an offset), else false with an error naming m. */
bool blk_attn_cached_opts_ok(const nb_module *m, const blk_attn_opts *o);

#endif
