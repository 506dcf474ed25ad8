/* The projections of multi-head latent attention that training and the cached (absorbed)
 * forward share (internal to this folder: nn/blocks/mla.c and mla_cache.c). */
#ifndef NABLA_BLOCKS_MLA_PARTS_H
#define NABLA_BLOCKS_MLA_PARTS_H

#include <nabla/blocks.h>

/* Each head's query parts for x [B, T, dim]: *nope a [B, T, H, nope_dim] view of the
 * projection and *pe its [B, T, H, rope_dim] rotary part rotated with rope (tables of
 * rope_dim at the tokens' positions). False with an error. */
bool blk_mla_query(const blk_mla *m, const nb_tensor *x, const blk_rope_tables *rope,
                   nb_tensor **nope, nb_tensor **pe);

/* What the cache keeps of x [B, T, dim]: *latent = kv_norm(c_kv) [B, T, kv_rank] and *k_pe
 * the shared rotary key [B, T, rope_dim], rotated with rope. False with an error. */
bool blk_mla_latent(const blk_mla *m, const nb_tensor *x, const blk_rope_tables *rope,
                    nb_tensor **latent, nb_tensor **k_pe);

/* The forward against opts->cache (mla_cache.c); x is checked. */
nb_tensor *blk_mla_forward_cached(blk_mla *m, const nb_tensor *x, const blk_attn_opts *opts);

#endif
