/* Grouped-query attention (GQA; multi-query when one kv head): query heads in groups share a
 * key/value head. The query heads are viewed as [B, KV, G, T_q, hd] and the kv heads as
 * [B, KV, 1, T_k, hd], so the batched products broadcast each kv head over its group in
 * place (a stride-0 batch dim) instead of copying it G times as repeat_interleave would. */
#include <nabla/blocks.h>
#include "errors.h"

/* The mask (broadcast to [B, H, T_q, T_k]) as a tensor broadcasting to [B, KV, G, T_q, T_k];
 * *out is NULL when mask is. */
static bool group_mask(const nb_tensor *mask, int64_t H, int64_t KV, nb_tensor **out) {
    *out = NULL;
    if (!mask) return true;
    if (mask->dtype != NB_BOOL || mask->ndim < 1 || mask->ndim > 4) {
        nb_error("gqa_attention",
                 "mask must be bool broadcasting to [B, %lld, T_q, T_k], got %s %s", (long long)H,
                 nb_dtype_name(mask->dtype), nb_shape_text(mask));
        return false;
    }
    int64_t m4[4] = {1, 1, 1, 1};
    for (int i = 0; i < mask->ndim; i++) m4[4 - mask->ndim + i] = mask->shape[i];
    nb_tensor *mask4 = nb_reshape(mask, 4, m4);
    if (m4[1] == 1)
        *out = nb_unsqueeze(mask4, 1); /* [b, 1, 1, T_q, T_k] */
    else if (m4[1] == H)
        *out = nb_reshape(mask4, NB_SHAPE(m4[0], KV, H / KV, m4[2], m4[3]));
    else {
        nb_error("gqa_attention", "mask %s does not broadcast to %lld heads", nb_shape_text(mask),
                 (long long)H);
        return false;
    }
    return *out != NULL;
}

nb_tensor *blk_gqa_attention(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                             const nb_tensor *mask, bool causal, double scale,
                             nb_tensor **weights) {
    if (!q || !k || !v) return blk_null_argument("gqa_attention");
    if (!nb_is_float(q) || q->dtype != k->dtype || q->dtype != v->dtype || q->ndim != 4 ||
        k->ndim != 4 || v->ndim != 4 || k->shape[0] != q->shape[0] || v->shape[0] != k->shape[0] ||
        v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2] || k->shape[3] != q->shape[3] ||
        k->shape[1] < 1 || q->shape[1] % k->shape[1] != 0)
        return nb_error("gqa_attention",
                        "expects float q [B, H, T_q, hd], k [B, KV, T_k, hd] and v [B, KV, T_k, "
                        "vd] of one dtype with KV dividing H, got q %s %s, k %s %s, v %s %s",
                        nb_dtype_name(q->dtype), nb_shape_text(q), nb_dtype_name(k->dtype),
                        nb_shape_text(k), nb_dtype_name(v->dtype), nb_shape_text(v));
    int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], hd = q->shape[3];
    int64_t KV = k->shape[1], G = H / KV;
    nb_tensor *mask5;
    if (!group_mask(mask, H, KV, &mask5)) return NULL;
    nb_tensor *q5 = nb_reshape(q, NB_SHAPE(B, KV, G, Tq, hd)); /* a view for any head layout */
    nb_tensor *k5 = nb_unsqueeze(k, 2), *v5 = nb_unsqueeze(v, 2);
    nb_tensor *scores = nb_matmul(q5, nb_transpose(k5, -2, -1)); /* [B, KV, G, T_q, T_k] */
    nb_tensor *probs = nb_masked_softmax(scores, mask5, causal, scale);
    if (weights) *weights = nb_view(probs, NB_SHAPE(B, H, Tq, k->shape[2]));
    return nb_view(nb_matmul(probs, v5), NB_SHAPE(B, H, Tq, v->shape[3]));
}
