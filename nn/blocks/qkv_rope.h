/* The attention's q, k and v from one product and one rotation node (internal to this
 * folder; qkv_rope.c). */
#ifndef NABLA_BLOCKS_QKV_ROPE_H
#define NABLA_BLOCKS_QKV_ROPE_H

#include <nabla/blocks.h>

/* x [B, T, D] times the bias-free weights wq [H hd, D], wk and wv [KV hd, D], as one product
 * of their concatenation, into *q [B, T, H, hd] and *k [B, T, KV, hd] rotated with rope's
 * tables ([T, hd / 2]) and *v [B, T, KV, hd]: what nb_f_linear with each weight, viewed by
 * heads and rotated by blk_rope_apply, computes. New tensors in the current scope (one
 * autograd node for the three); false with an error (shapes unchecked: the caller's). */
bool blk_qkv_rope(const nb_tensor *x, nb_tensor *wq, nb_tensor *wk, nb_tensor *wv, int64_t n_heads,
                  int64_t n_kv_heads, const blk_rope_tables *rope, nb_tensor **q, nb_tensor **k,
                  nb_tensor **v);

#endif
