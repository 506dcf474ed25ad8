/* MultiHeadAttention's masks: the shapes and dtypes nn.h accepts, reduced to a boolean
 * "blocked" mask the fused attention takes and, for float masks with finite non-zero values,
 * an additive part that only the op-by-op path can apply. */
#include "nn/attention_mask.h"
#include "module_error.h"
#include "tensor/nbt.h" /* nbt_shape */

#include <math.h>
#include <stdlib.h>

#define MASK_SHAPES                                                                                \
    "[T_q, T_k], [B or 1, T_q, T_k], [B * H, T_q, T_k] or [B or 1, H or 1, T_q, T_k]"

/* attn_mask as a 4-D tensor broadcastable to [B, H, T_q, T_k] (a view where it can be), or
 * NULL with an error listing the accepted shapes. */
static nb_tensor *mask_4d(const nb_mha *m, const nb_tensor *am, int64_t B, int64_t Tq, int64_t Tk) {
    const int64_t H = m->num_heads;
    const int n = am->ndim;
    bool ok = n >= 2 && n <= 4 && am->shape[n - 2] == Tq && am->shape[n - 1] == Tk;
    int64_t b = 1, h = 1;
    if (ok && n == 3) {
        b = am->shape[0];
        if (b != B && b != 1) {
            /* PyTorch's nn.MultiheadAttention form: entry b * H + h is batch b, head h. */
            ok = b == B * H;
            b = B, h = H;
        }
    } else if (ok && n == 4) {
        b = am->shape[0], h = am->shape[1];
        ok = (b == B || b == 1) && (h == H || h == 1);
    }
    if (!ok)
        return nbn_error(&m->base,
                         "attn_mask must be " MASK_SHAPES
                         " with B %lld, H %lld, T_q %lld, T_k %lld; got %s",
                         (long long)B, (long long)H, (long long)Tq, (long long)Tk, nbt_shape(am));
    return nb_reshape(am, NB_SHAPE(b, h, Tq, Tk));
}

/* What a float mask holds: -inf entries (blocked), finite non-zero ones (added). False with
 * an error if it holds NaN or +inf, which neither block nor add anything meaningful. */
static bool scan_float_mask(const nb_mha *m, const nb_tensor *am, bool *any_blocked,
                            bool *any_added) {
    int64_t n = nb_numel(am);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) return nbn_error(&m->base, "out of memory"), false;
    bool ok = nb_to_doubles(am, v);
    *any_blocked = *any_added = false;
    for (int64_t i = 0; ok && i < n; i++) {
        if (isnan(v[i]) || v[i] == INFINITY) {
            nbn_error(&m->base,
                      "a float attn_mask holds -inf (blocked) or finite values (added to "
                      "the scores); element %lld is %g",
                      (long long)i, v[i]);
            ok = false;
        }
        *any_blocked |= v[i] == -INFINITY;
        *any_added |= isfinite(v[i]) && v[i] != 0;
    }
    free(v);
    return ok;
}

/* Splits the (4-D) attention mask into out->blocked and out->additive. */
static bool split_attn_mask(const nb_mha *m, const nb_tensor *am4, nb_dtype dt, mha_mask *out) {
    if (am4->dtype == NB_BOOL) {
        out->blocked = (nb_tensor *)am4;
        return true;
    }
    if (am4->dtype != dt)
        return nbn_error(&m->base, "attn_mask must be bool or %s like the inputs, got %s",
                         nb_dtype_name(dt), nb_dtype_name(am4->dtype)),
               false;
    bool any_blocked, any_added;
    if (!scan_float_mask(m, am4, &any_blocked, &any_added)) return false;
    if (any_blocked && !(out->blocked = nb_eq(am4, nb_scalar(dt, -INFINITY)))) return false;
    if (!any_added) return true;
    /* -inf entries are the blocked mask's business; the softmax sees 0 added there. */
    out->additive = any_blocked ? nb_masked_fill(am4, out->blocked, 0.0) : (nb_tensor *)am4;
    return out->additive != NULL;
}

bool mha_mask_build(const nb_mha *m, const nb_mha_opts *opts, nb_dtype dt, int64_t B, int64_t Tq,
                    int64_t Tk, mha_mask *out) {
    *out = (mha_mask){0};
    const nb_tensor *pad = opts ? opts->key_padding_mask : NULL;
    const nb_tensor *am = opts ? opts->attn_mask : NULL;
    if (pad &&
        (pad->dtype != NB_BOOL || pad->ndim != 2 || pad->shape[0] != B || pad->shape[1] != Tk))
        return nbn_error(&m->base, "key_padding_mask must be bool [%lld, %lld], got %s %s",
                         (long long)B, (long long)Tk, nb_dtype_name(pad->dtype), nbt_shape(pad)),
               false;
    if (am) {
        if (am->dtype != NB_BOOL && !nb_is_float(am))
            return nbn_error(&m->base,
                             "attn_mask must be bool (true = blocked) or float (added to "
                             "the scores), got %s",
                             nb_dtype_name(am->dtype)),
                   false;
        nb_tensor *am4 = mask_4d(m, am, B, Tq, Tk);
        if (!am4 || !split_attn_mask(m, am4, dt, out)) return false;
    }
    if (pad) {
        nb_tensor *pad4 = nb_reshape(pad, NB_SHAPE(B, 1, 1, Tk));
        out->blocked = out->blocked ? nb_logical_or(pad4, out->blocked) : pad4;
        if (!out->blocked) return false;
    }
    return true;
}
