/* The key/value cache's layout, shared by nn/kv_cache.c (the cache and the general cached
 * forwards) and nn/lm_decode.c (the fused one-token path). Internal to nn/. */
#ifndef NABLA_KV_CACHE_IMPL_H
#define NABLA_KV_CACHE_IMPL_H

#include "nabla/generate.h"

/* One attention layer's keys, transposed, [batch, kv_heads, head_dim, max_len], and values,
 * [batch, kv_heads, max_len, head_dim]: a query's scores q K^T and its context p V are then
 * both one row times a row-major matrix, which the GEMM's row kernel computes along the keys
 * (scores) or the head dims (context) in whole vectors, with no per-key horizontal sums. A
 * slot stores kv_heads heads, which grouped-query attention makes fewer than the queries'. */
typedef struct {
    int64_t len, kv_heads, head_dim;
    nb_tensor *k, *v;
} kv_slot;

struct nbn_lm_decoder;

struct nb_kv_cache {
    nb_scope *scope; /* holds every slot's tensors */
    nb_dtype dtype;
    int64_t batch, max_len;
    struct nbn_lm_decoder *decoder; /* the fused one-token path's buffers, made on first use */
    int decode_threads;             /* 0: the fused path chooses; tests force 1 or 2 */
    /* Set by nb_generate for its loop (nbn_lm_decode_trust_model): this model's parameters
     * passed the fused path's checks and cannot change until it returns, so tokens skip them. */
    const nb_transformer_lm *decode_trusted;
    int nslots;
    kv_slot slots[];
};

#endif
