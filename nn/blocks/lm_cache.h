/* The check every language model of this folder makes of a cache before a cached forward
 * (internal to nn/blocks: llama.c, deepseek.c). */
#ifndef NABLA_BLOCKS_LM_CACHE_H
#define NABLA_BLOCKS_LM_CACHE_H

#include <nabla/nabla.h>

/* Does c fit the model lm (n_layers layers, one per block, in lm's dtype) for tokens [B, T],
 * with room for the T new positions? Each attention then checks its own layer's shape and
 * names itself. False with an error naming lm's type and path, the tokens and the cache. */
bool blk_lm_cache_fits(const nb_module *lm, int n_layers, const nb_tensor *tokens,
                       const nb_kv_cache *c);

#endif
