/* MultiHeadAttention, written the way the PyTorch tutorials write it. */
#include "nabla/nn.h"
#include "module_error.h"
#include "tensor/nbt.h" /* nbt_error, nbt_shape */

#include <math.h>

nb_mha *nb_mha_new(nb_module *parent, const char *name, int64_t d_in, int64_t d_out,
                   int64_t num_heads, bool qkv_bias, double dropout) {
    if (d_in <= 0 || d_out <= 0 || num_heads <= 0)
        return nbt_error("MultiHeadAttention",
                         "d_in %lld, d_out %lld and num_heads %lld must "
                         "be positive",
                         (long long)d_in, (long long)d_out, (long long)num_heads);
    if (d_out % num_heads != 0)
        return nbt_error("MultiHeadAttention", "d_out %lld is not divisible by num_heads %lld",
                         (long long)d_out, (long long)num_heads);
    nb_mha *m = nb_module_new(parent, name, "MultiHeadAttention", sizeof *m);
    if (!m) return NULL;
    m->d_in = d_in;
    m->d_out = d_out;
    m->num_heads = num_heads;
    m->head_dim = d_out / num_heads;
    if (!(m->W_query = nb_linear_new(&m->base, "W_query", d_in, d_out, qkv_bias)) ||
        !(m->W_key = nb_linear_new(&m->base, "W_key", d_in, d_out, qkv_bias)) ||
        !(m->W_value = nb_linear_new(&m->base, "W_value", d_in, d_out, qkv_bias)) ||
        !(m->out_proj = nb_linear_new(&m->base, "out_proj", d_out, d_out, true)) ||
        !(m->dropout = nb_dropout_new(&m->base, "dropout", dropout)))
        return nbn_discard(&m->base);
    return m;
}

/* [B, T, d_out] -> [B, H, T, head_dim]: view splits d_out into heads, transpose moves the
 * head dim in front of the tokens (a strided view, no copy). */
static nb_tensor *split_heads(const nb_mha *m, const nb_tensor *x) {
    if (!x) return NULL;
    return nb_transpose(nb_view(x, NB_SHAPE(x->shape[0], x->shape[1], m->num_heads, m->head_dim)),
                        1, 2);
}

/* Combines the key padding mask [B, T_k] and the attention mask [T_q, T_k] into one boolean
 * mask broadcastable to the scores [B, H, T_q, T_k]; NULL (no error) when there are none. */
static bool combined_mask(const nb_mha *m, const nb_mha_opts *o, int64_t B, int64_t Tq, int64_t Tk,
                          nb_tensor **out) {
    *out = NULL;
    const nb_tensor *pad = o ? o->key_padding_mask : NULL, *am = o ? o->attn_mask : NULL;
    if (pad &&
        (pad->dtype != NB_BOOL || pad->ndim != 2 || pad->shape[0] != B || pad->shape[1] != Tk)) {
        nbn_error(&m->base, "key_padding_mask must be bool [%lld, %lld], got %s %s", (long long)B,
                  (long long)Tk, nb_dtype_name(pad->dtype), nbt_shape(pad));
        return false;
    }
    if (am && (am->dtype != NB_BOOL || am->ndim != 2 || am->shape[0] != Tq || am->shape[1] != Tk)) {
        nbn_error(&m->base, "attn_mask must be bool [%lld, %lld], got %s %s", (long long)Tq,
                  (long long)Tk, nb_dtype_name(am->dtype), nbt_shape(am));
        return false;
    }
    nb_tensor *pad4 = pad ? nb_view(pad, NB_SHAPE(B, 1, 1, Tk)) : NULL;
    if (pad4 && am)
        *out = nb_logical_or(pad4, am);
    else if (pad4)
        *out = pad4;
    else if (am)
        *out = (nb_tensor *)am;
    return !(pad || am) || *out;
}

nb_tensor *nb_mha_forward_cross(nb_mha *m, const nb_tensor *q_in, const nb_tensor *kv_in,
                                const nb_mha_opts *opts) {
    if (!m || !q_in || !kv_in)
        return nbn_null_argument("MultiHeadAttention", m ? &m->base : NULL, "input");
    if (q_in->ndim != 3 || kv_in->ndim != 3 || q_in->shape[2] != m->d_in ||
        kv_in->shape[2] != m->d_in || q_in->shape[0] != kv_in->shape[0])
        return nbt_error("MultiHeadAttention",
                         "'%s' expects queries [B, T_q, %lld] and keys "
                         "[B, T_k, %lld], got %s and %s",
                         m->base.path, (long long)m->d_in, (long long)m->d_in, nbt_shape(q_in),
                         nbt_shape(kv_in));
    int64_t B = q_in->shape[0], Tq = q_in->shape[1], Tk = kv_in->shape[1];
    nb_tensor *mask;
    if (!combined_mask(m, opts, B, Tq, Tk, &mask)) return NULL;

    /* Each projection only after the one before worked: the first failure is the message. */
    nb_tensor *q = nb_linear_forward(m->W_query, q_in);             /* [B, T_q, d_out] */
    nb_tensor *k = q ? nb_linear_forward(m->W_key, kv_in) : NULL;   /* [B, T_k, d_out] */
    nb_tensor *v = k ? nb_linear_forward(m->W_value, kv_in) : NULL; /* [B, T_k, d_out] */
    if (!v) return nbn_result(&m->base, NULL);
    const bool causal = opts && opts->causal;
    const double scale = 1.0 / sqrt((double)m->head_dim);
    nb_tensor *ctx;
    if (!(opts && opts->attn_weights) && !(m->dropout->base.training && m->dropout->p > 0)) {
        /* Nobody needs the weights as a tensor: the fused op computes the same heads with one
         * node and no transposed copies. nb_f_attention is nb_sdpa's node reading heads packed
         * in [B, T, d_out]: nb_sdpa on split_heads views would add eight view nodes (a third
         * of the seed workload's step). */
        ctx = nb_f_attention(q, k, v, m->num_heads, mask, causal, scale);
    } else {
        q = split_heads(m, q);                                     /* [B, H, T_q, hd] */
        k = split_heads(m, k);                                     /* [B, H, T_k, hd] */
        v = split_heads(m, v);                                     /* [B, H, T_k, hd] */
        nb_tensor *scores = nb_matmul(q, nb_transpose(k, -2, -1)); /* [B, H, T_q, T_k] */
        /* Scale, mask and softmax in one fused op: softmax(scores / sqrt(hd)) over the keys. */
        nb_tensor *attn = nb_masked_softmax(scores, mask, causal, scale);
        if (opts && opts->attn_weights) *opts->attn_weights = attn;
        attn = nb_dropout_forward(m->dropout, attn);
        ctx = nb_transpose(nb_matmul(attn, v), 1, 2); /* [B, T_q, H, hd] */
        ctx = nb_view(nb_contiguous(ctx), NB_SHAPE(B, Tq, m->d_out));
    }
    return nbn_result(&m->base, nb_linear_forward(m->out_proj, ctx));
}

nb_tensor *nb_mha_forward(nb_mha *m, const nb_tensor *x, const nb_mha_opts *opts) {
    return nb_mha_forward_cross(m, x, x, opts);
}

nb_transformer_block *nb_transformer_block_new(nb_module *parent, const char *name, int64_t dim,
                                               int64_t num_heads, double dropout) {
    nb_transformer_block *m = nb_module_new(parent, name, "TransformerBlock", sizeof *m);
    if (!m) return NULL;
    if (!(m->norm1 = nb_layernorm_new(&m->base, "norm1", dim)) ||
        !(m->attn = nb_mha_new(&m->base, "attn", dim, dim, num_heads, false, dropout)) ||
        !(m->norm2 = nb_layernorm_new(&m->base, "norm2", dim)) ||
        !(m->ff = nb_feedforward_new(&m->base, "ff", dim, 4 * dim)))
        return nbn_discard(&m->base);
    return m;
}

nb_tensor *nb_transformer_block_forward(nb_transformer_block *m, const nb_tensor *x,
                                        const nb_mha_opts *opts) {
    if (!m || !x) return nbn_null_argument("TransformerBlock", m ? &m->base : NULL, "input");
    nb_tensor *h = nb_add(x, nb_mha_forward(m->attn, nb_layernorm_forward(m->norm1, x), opts));
    return nbn_result(&m->base,
                      nb_add(h, nb_feedforward_forward(m->ff, nb_layernorm_forward(m->norm2, h))));
}
