/* The options of blk_attn_opts the attention modules read alike (attn_mask.h). */
#include "attn_mask.h"

bool blk_attn_mask(const nb_module *m, const blk_attn_opts *o, int64_t B, int64_t T,
                   nb_tensor **out) {
    *out = NULL;
    const nb_tensor *pad = o ? o->key_padding_mask : NULL, *am = o ? o->attn_mask : NULL;
    if ((pad &&
         (pad->dtype != NB_BOOL || pad->ndim != 2 || pad->shape[0] != B || pad->shape[1] != T)) ||
        (am && (am->dtype != NB_BOOL || am->ndim != 2 || am->shape[0] != T || am->shape[1] != T))) {
        nb_error(nb_module_type(m),
                 "'%s': key_padding_mask must be bool [%lld, %lld] and attn_mask bool "
                 "[%lld, %lld], got %s and %s",
                 nb_module_path(m), (long long)B, (long long)T, (long long)T, (long long)T,
                 nb_shape_text(pad), nb_shape_text(am));
        return false;
    }
    nb_tensor *pad4 = pad ? nb_view(pad, NB_SHAPE(B, 1, 1, T)) : NULL;
    *out = pad4 && am ? nb_logical_or(pad4, am) : pad4 ? pad4 : (nb_tensor *)am;
    return !(pad || am) || *out;
}

bool blk_attn_cached_opts_ok(const nb_module *m, const blk_attn_opts *o) {
    if (!o->key_padding_mask && !o->attn_mask && !o->attn_weights && !o->offset) return true;
    nb_error(nb_module_type(m),
             "'%s': a cache takes no key_padding_mask, attn_mask, attn_weights or offset (its "
             "attention is causal from position nb_kv_cache_len)",
             nb_module_path(m));
    return false;
}
