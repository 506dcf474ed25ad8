#include "lm_cache.h"

bool blk_lm_cache_fits(const nb_module *lm, int n_layers, const nb_tensor *tokens,
                       const nb_kv_cache *c) {
    const nb_dtype dt = nb_module_dtype(lm);
    const int64_t B = tokens->shape[0], T = tokens->shape[1], len = nb_kv_cache_len(c);
    if (nb_kv_cache_layer_count(c) != n_layers || nb_kv_cache_dtype(c) != dt ||
        nb_kv_cache_batch(c) != B) {
        nb_error(nb_module_type(lm),
                 "'%s': a model of %d blocks in %s, given tokens of batch %lld, cannot use a "
                 "cache of %d layers in %s for batch %lld",
                 nb_module_path(lm), n_layers, nb_dtype_name(dt), (long long)B,
                 nb_kv_cache_layer_count(c), nb_dtype_name(nb_kv_cache_dtype(c)),
                 (long long)nb_kv_cache_batch(c));
        return false;
    }
    if (T > nb_kv_cache_max_len(c) - len) {
        nb_error(nb_module_type(lm),
                 "'%s': %lld new tokens after %lld cached positions exceed the cache's %lld",
                 nb_module_path(lm), (long long)T, (long long)len,
                 (long long)nb_kv_cache_max_len(c));
        return false;
    }
    return true;
}

nb_causal_lm blk_lm_causal(void *model, nb_module *module, int64_t vocab, int64_t max_len,
                           nb_tensor *(*forward)(void *, const nb_tensor *, nb_kv_cache *),
                           nb_kv_cache *(*new_cache)(void *, int64_t, int64_t)) {
    return (nb_causal_lm){.model = model,
                          .module = model ? module : NULL,
                          .vocab = model ? vocab : 0,
                          .max_len = max_len,
                          .forward = forward,
                          .new_cache = new_cache};
}
