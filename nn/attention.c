/* MultiHeadAttention, written the way the PyTorch tutorials write it. */
#include "nabla/generate.h"
#include "nabla/nn.h"
#include "module_error.h"
#include "transformer_block.h"
#include "nn/attention_mask.h"
#include "tensor/nbt.h" /* nbt_error, nbt_shape */

#include <math.h>

nb_mha_config nb_mha_defaults(int64_t d_in, int64_t d_out, int64_t num_heads) {
    return (nb_mha_config){
        .d_in = d_in, .d_out = d_out, .num_heads = num_heads, .qkv_bias = false, .out_bias = true};
}

nb_mha *nb_mha_new_config(nb_module *parent, const char *name, const nb_mha_config *cfg) {
    if (!cfg) return nbt_error("MultiHeadAttention", "NULL config");
    const int64_t d_in = cfg->d_in, d_out = cfg->d_out, num_heads = cfg->num_heads;
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
    if (!(m->W_query = nb_linear_new(&m->base, "W_query", d_in, d_out, cfg->qkv_bias)) ||
        !(m->W_key = nb_linear_new(&m->base, "W_key", d_in, d_out, cfg->qkv_bias)) ||
        !(m->W_value = nb_linear_new(&m->base, "W_value", d_in, d_out, cfg->qkv_bias)) ||
        !(m->out_proj = nb_linear_new(&m->base, "out_proj", d_out, d_out, cfg->out_bias)) ||
        !(m->dropout = nb_dropout_new(&m->base, "dropout", cfg->dropout)))
        return nbn_discard(&m->base);
    return m;
}

nb_mha *nb_mha_new(nb_module *parent, const char *name, int64_t d_in, int64_t d_out,
                   int64_t num_heads, bool qkv_bias, double dropout) {
    nb_mha_config cfg = nb_mha_defaults(d_in, d_out, num_heads);
    cfg.qkv_bias = qkv_bias;
    cfg.dropout = dropout;
    return nb_mha_new_config(parent, name, &cfg);
}

/* [B, T, d_out] -> [B, H, T, head_dim]: view splits d_out into heads, transpose moves the
 * head dim in front of the tokens (a strided view, no copy). */
static nb_tensor *split_heads(const nb_mha *m, const nb_tensor *x) {
    if (!x) return NULL;
    return nb_transpose(nb_view(x, NB_SHAPE(x->shape[0], x->shape[1], m->num_heads, m->head_dim)),
                        1, 2);
}

/* The head mask must be [H] in the inputs' dtype. */
static bool check_head_mask(const nb_mha *m, const nb_tensor *hm, nb_dtype dt) {
    if (!hm || (hm->dtype == dt && hm->ndim == 1 && hm->shape[0] == m->num_heads)) return true;
    nbn_error(&m->base, "head_mask must be %s [%lld], got %s %s", nb_dtype_name(dt),
              (long long)m->num_heads, nb_dtype_name(hm->dtype), nbt_shape(hm));
    return false;
}

/* ctx [B, T_q, d_out] with head h's columns multiplied by head_mask[h]. */
static nb_tensor *apply_head_mask(const nb_mha *m, nb_tensor *ctx, const nb_tensor *head_mask) {
    if (!head_mask || !ctx) return ctx;
    const int64_t B = ctx->shape[0], Tq = ctx->shape[1];
    nb_tensor *heads = nb_view(ctx, NB_SHAPE(B, Tq, m->num_heads, m->head_dim));
    nb_tensor *scaled = nb_mul(heads, nb_view(head_mask, NB_SHAPE(m->num_heads, 1)));
    return nb_view(scaled, NB_SHAPE(B, Tq, m->d_out));
}

/* Op by op, as the tutorials write it: the attention weights exist as a tensor (to return,
 * to drop out, or to add a float mask's finite values to the scores). */
static nb_tensor *attention_op_by_op(nb_mha *m, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                                     const mha_mask *mask, const nb_mha_opts *opts, double scale) {
    const int64_t B = q->shape[0], Tq = q->shape[1];
    const bool causal = opts && opts->causal;
    q = split_heads(m, q);                                     /* [B, H, T_q, hd] */
    k = split_heads(m, k);                                     /* [B, H, T_k, hd] */
    v = split_heads(m, v);                                     /* [B, H, T_k, hd] */
    nb_tensor *scores = nb_matmul(q, nb_transpose(k, -2, -1)); /* [B, H, T_q, T_k] */
    nb_tensor *attn;
    if (mask->additive) /* PyTorch adds the float mask to the scaled scores */
        attn = nb_masked_softmax(nb_add(nb_mul_scalar(scores, scale), mask->additive),
                                 mask->blocked, causal, 1.0);
    else /* scale, mask and softmax in one fused op: softmax(scores / sqrt(hd)) */
        attn = nb_masked_softmax(scores, mask->blocked, causal, scale);
    if (opts && opts->attn_weights) *opts->attn_weights = attn;
    attn = nb_dropout_forward(m->dropout, attn);
    nb_tensor *ctx = nb_transpose(nb_matmul(attn, v), 1, 2); /* [B, T_q, H, hd] */
    return nb_view(nb_contiguous(ctx), NB_SHAPE(B, Tq, m->d_out));
}

/* Self-attention of x's tokens against what opts->cache keeps in layer opts->cache_layer
 * (inference: grad mode off). The projections are the same linear ops as training's; the
 * attention is the cache's, which writes the new keys and values and attends causally. */
static nb_tensor *attention_cached(nb_mha *m, const nb_tensor *q_in, const nb_tensor *kv_in,
                                   const nb_mha_opts *opts) {
    if (q_in != kv_in)
        return nbn_error(&m->base, "a cache serves self-attention only, not cross-attention");
    if (opts->key_padding_mask || opts->attn_mask || opts->attn_weights)
        return nbn_error(&m->base, "a cache takes no key_padding_mask, attn_mask or "
                                   "attn_weights (its attention is causal over the cache)");
    if (!check_head_mask(m, opts->head_mask, q_in->dtype)) return NULL;
    int64_t kvh, kd, vd;
    if (!nb_kv_cache_heads(opts->cache, opts->cache_layer, &kvh, &kd, &vd))
        return nbn_result(&m->base, NULL);
    if (kvh != m->num_heads || kd != m->head_dim || vd != m->head_dim)
        return nbn_error(&m->base,
                         "%lld heads of %lld do not match cache layer %d (%lld key/value heads, "
                         "keys of %lld, values of %lld)",
                         (long long)m->num_heads, (long long)m->head_dim, opts->cache_layer,
                         (long long)kvh, (long long)kd, (long long)vd);
    const bool grad = nb_set_grad_enabled(false);
    nb_tensor *qkv[3]; /* one job for the three products of a decoded token */
    const bool projected =
        nb_linears_forward(3, (nb_linear *[]){m->W_query, m->W_key, m->W_value}, q_in, qkv);
    nb_tensor *ctx = projected ? nb_kv_cache_attend(opts->cache, opts->cache_layer, qkv[0], qkv[1],
                                                    qkv[2], m->num_heads)
                               : NULL;
    nb_tensor *y =
        ctx ? nb_linear_forward(m->out_proj, apply_head_mask(m, ctx, opts->head_mask)) : NULL;
    nb_set_grad_enabled(grad);
    return nbn_result(&m->base, y);
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
    if (opts && opts->cache) return attention_cached(m, q_in, kv_in, opts);
    int64_t B = q_in->shape[0], Tq = q_in->shape[1], Tk = kv_in->shape[1];
    const nb_tensor *head_mask = opts ? opts->head_mask : NULL;
    mha_mask mask;
    if (!mha_mask_build(m, opts, q_in->dtype, B, Tq, Tk, &mask) ||
        !check_head_mask(m, head_mask, q_in->dtype))
        return NULL;

    const double scale = 1.0 / sqrt((double)m->head_dim);
    const bool causal = opts && opts->causal;
    /* Nobody needs the weights as a tensor: the fused op computes the same heads with one node
     * and no transposed copies. nb_f_attention is nb_sdpa's node reading heads packed in
     * [B, T, d_out]: nb_sdpa on split_heads views would add eight view nodes (a third of the
     * seed workload's step). */
    const bool fused = !(opts && opts->attn_weights) &&
                       !(m->dropout->base.training && m->dropout->p > 0) && !mask.additive;
    nb_tensor *ctx;
    if (fused && q_in == kv_in && !mask.blocked && !m->W_query->bias && !m->W_key->bias &&
        !m->W_value->bias && q_in->dtype == m->W_query->weight->dtype) {
        /* Self-attention without a mask or biases: the projections join the attention's node
         * (one node and one q/k/v buffer instead of four nodes and three tensors). Another
         * dtype goes the long way, whose error names the projection it reached. */
        ctx = nb_f_qkv_attention(q_in, m->W_query->weight, m->W_key->weight, m->W_value->weight,
                                 m->num_heads, causal, scale);
        if (!ctx) return nbn_result(&m->base, NULL);
    } else {
        /* Each projection only after the one before worked: the first failure is the message. */
        nb_tensor *q = nb_linear_forward(m->W_query, q_in);             /* [B, T_q, d_out] */
        nb_tensor *k = q ? nb_linear_forward(m->W_key, kv_in) : NULL;   /* [B, T_k, d_out] */
        nb_tensor *v = k ? nb_linear_forward(m->W_value, kv_in) : NULL; /* [B, T_k, d_out] */
        if (!v) return nbn_result(&m->base, NULL);
        ctx = fused ? nb_f_attention(q, k, v, m->num_heads, mask.blocked, causal, scale)
                    : attention_op_by_op(m, q, k, v, &mask, opts, scale);
    }
    return nbn_result(&m->base, nb_linear_forward(m->out_proj, apply_head_mask(m, ctx, head_mask)));
}

nb_kv_cache *nb_kv_cache_for_mha(const nb_mha *m, int64_t batch, int64_t max_len) {
    if (!m) return nbt_error("kv_cache", "NULL module");
    return nb_kv_cache_new(1, batch, max_len, m->num_heads, m->head_dim, m->base.root->dtype);
}

nb_tensor *nb_mha_forward(nb_mha *m, const nb_tensor *x, const nb_mha_opts *opts) {
    return nb_mha_forward_cross(m, x, x, opts);
}

nb_transformer_block *nb_transformer_block_new_config(nb_module *parent, const char *name,
                                                      const nb_block_config *cfg) {
    if (!cfg) return nbt_error("TransformerBlock", "NULL config");
    const int64_t dim = cfg->dim;
    int64_t hidden; /* a dim <= 0 is refused by norm1, as before */
    if (__builtin_mul_overflow(dim, 4, &hidden))
        return nbt_error("TransformerBlock", "dim %lld is too large (4 * dim overflows)",
                         (long long)dim);
    nb_transformer_block *m = nb_module_new(parent, name, "TransformerBlock", sizeof *m);
    if (!m) return NULL;
    if (!(m->norm1 = nb_layer_norm_new(&m->base, "norm1", dim)) ||
        !(m->attn = nb_mha_new(&m->base, "attn", dim, dim, cfg->num_heads, cfg->qkv_bias,
                               cfg->dropout)) ||
        !(m->norm2 = nb_layer_norm_new(&m->base, "norm2", dim)) ||
        !(m->ff = nb_feedforward_new(&m->base, "ff", dim, hidden)))
        return nbn_discard(&m->base);
    m->ff->gelu_tanh = cfg->gelu_tanh;
    return m;
}

nb_transformer_block *nb_transformer_block_new(nb_module *parent, const char *name, int64_t dim,
                                               int64_t num_heads, double dropout) {
    const nb_block_config cfg = {.dim = dim, .num_heads = num_heads, .dropout = dropout};
    return nb_transformer_block_new_config(parent, name, &cfg);
}

nb_tensor *nbn_transformer_block_body(nb_transformer_block *m, const nb_tensor *x,
                                      const nb_tensor *normed, const nb_mha_opts *opts,
                                      nb_layer_norm *next, nb_tensor **next_normed) {
    /* a NULL from a failed step passes through the next ones, which keep its error */
    nb_tensor *h, *out;
    nb_tensor *ff_in =
        nb_layer_norm_forward_add(m->norm2, x, nb_mha_forward(m->attn, normed, opts), &h);
    nb_tensor *ff = nb_feedforward_forward(m->ff, ff_in);
    if (!next) return nbn_result(&m->base, nb_add(h, ff));
    *next_normed = nb_layer_norm_forward_add(next, h, ff, &out);
    return nbn_result(&m->base, out);
}

nb_tensor *nb_transformer_block_forward(nb_transformer_block *m, const nb_tensor *x,
                                        const nb_mha_opts *opts) {
    if (!m || !x) return nbn_null_argument("TransformerBlock", m ? &m->base : NULL, "input");
    return nbn_transformer_block_body(m, x, nb_layer_norm_forward(m->norm1, x), opts, NULL, NULL);
}
