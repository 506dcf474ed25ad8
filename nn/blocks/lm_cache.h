/* What the language models of this folder share about caches (internal to nn/blocks:
 * llama.c, deepseek.c): the check of a cache before a cached forward, and the nb_causal_lm
 * that generates through one. */
#ifndef NABLA_BLOCKS_LM_CACHE_H
#define NABLA_BLOCKS_LM_CACHE_H

#include <nabla/nabla.h>

/* Does c fit the model lm (n_layers layers, one per block, in lm's dtype) for tokens [B, T],
 * with room for the T new positions? Each attention then checks its own layer's shape and
 * names itself. False with an error naming lm's type and path, the tokens and the cache. */
bool blk_lm_cache_fits(const nb_module *lm, int n_layers, const nb_tensor *tokens,
                       const nb_kv_cache *c);

/* The nb_causal_lm of a model (NULL: module NULL and vocab 0, which nb_generate refuses) whose
 * cached forward and cache maker are forward and new_cache. Borrows model. */
nb_causal_lm blk_lm_causal(void *model, nb_module *module, int64_t vocab, int64_t max_len,
                           nb_tensor *(*forward)(void *, const nb_tensor *, nb_kv_cache *),
                           nb_kv_cache *(*new_cache)(void *, int64_t, int64_t));

#endif
