/* The transformer decoder block (nn.h): self-attention, cross-attention to an encoder's
 * output, feed-forward, each pre-LayerNorm with a residual, as PyTorch's
 * nn.TransformerDecoderLayer(norm_first=True). */
#include "module_error.h"
#include "nabla/nn.h"
#include "tensor/nbt.h" /* nbt_error */

nb_transformer_decoder_block *nb_transformer_decoder_block_new(nb_module *parent, const char *name,
                                                               const nb_block_config *cfg) {
    if (!cfg) return nbt_error("TransformerDecoderBlock", "NULL config");
    const int64_t dim = cfg->dim;
    int64_t hidden; /* a dim <= 0 is refused by norm1 */
    if (__builtin_mul_overflow(dim, 4, &hidden))
        return nbt_error("TransformerDecoderBlock", "dim %lld is too large (4 * dim overflows)",
                         (long long)dim);
    nb_transformer_decoder_block *m =
        nb_module_new(parent, name, "TransformerDecoderBlock", sizeof *m);
    if (!m) return NULL;
    const nb_mha_config attn = {.d_in = dim,
                                .d_out = dim,
                                .num_heads = cfg->num_heads,
                                .qkv_bias = cfg->qkv_bias,
                                .out_bias = true,
                                .dropout = cfg->dropout};
    if (!(m->norm1 = nb_layer_norm_new(&m->base, "norm1", dim)) ||
        !(m->attn = nb_mha_new_config(&m->base, "attn", &attn)) ||
        !(m->norm2 = nb_layer_norm_new(&m->base, "norm2", dim)) ||
        !(m->cross_attn = nb_mha_new_config(&m->base, "cross_attn", &attn)) ||
        !(m->norm3 = nb_layer_norm_new(&m->base, "norm3", dim)) ||
        !(m->ff = nb_feedforward_new(&m->base, "ff", dim, hidden)))
        return nbn_discard(&m->base);
    m->ff->gelu_tanh = cfg->gelu_tanh;
    return m;
}

nb_tensor *nb_transformer_decoder_block_forward(nb_transformer_decoder_block *m, const nb_tensor *x,
                                                const nb_tensor *memory,
                                                const nb_mha_opts *self_opts,
                                                const nb_mha_opts *cross_opts) {
    if (!m || !x || !memory)
        return nbn_null_argument("TransformerDecoderBlock", m ? &m->base : NULL,
                                 x ? "memory" : "input");
    /* each residual add and the norm after it as one node (nb_f_add_layer_norm); a NULL from a
     * failed step passes through the next ones, which keep its error */
    nb_tensor *h, *h2;
    nb_tensor *self = nb_mha_forward(m->attn, nb_layer_norm_forward(m->norm1, x), self_opts);
    nb_tensor *cross = nb_mha_forward_cross(
        m->cross_attn, nb_layer_norm_forward_add(m->norm2, x, self, &h), memory, cross_opts);
    nb_tensor *ff =
        nb_feedforward_forward(m->ff, nb_layer_norm_forward_add(m->norm3, h, cross, &h2));
    return nbn_result(&m->base, nb_add(h2, ff));
}
