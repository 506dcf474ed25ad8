/* A small GPT-style transformer: embeddings, pre-LN blocks, final norm, vocabulary head. */
#include "nabla/nn.h"
#include "tensor/nbt.h" /* nbt_error, nbt_shape */

#include <stdio.h>

nb_transformer_lm *nb_transformer_lm_new(nb_module *parent, const char *name, int64_t vocab,
                                         int64_t max_len, int64_t dim, int64_t num_heads,
                                         int layers, double dropout) {
    if (layers < 1 || layers > 16)
        return nbt_error("TransformerLM", "layers must be 1 to 16, got %d", layers);
    nb_transformer_lm *m = nb_module_new(parent, name, "TransformerLM", sizeof *m);
    if (!m) return NULL;
    m->vocab = vocab;
    m->max_len = max_len;
    m->dim = dim;
    m->num_heads = num_heads;
    m->num_layers = layers;
    if (!(m->tok_emb = nb_embedding_new(&m->base, "tok_emb", vocab, dim)) ||
        !(m->pos_emb = nb_embedding_new(&m->base, "pos_emb", max_len, dim)) ||
        !(m->blocks_container = nb_module_container(&m->base, "blocks")))
        return nb_module_discard(&m->base);
    for (int i = 0; i < layers; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        if (!(m->blocks[i] =
                  nb_transformer_block_new(m->blocks_container, idx, dim, num_heads, dropout)))
            return nb_module_discard(&m->base);
    }
    if (!(m->norm_f = nb_layernorm_new(&m->base, "norm_f", dim)) ||
        !(m->head = nb_linear_new(&m->base, "head", dim, vocab, true)))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *nb_transformer_lm_forward(nb_transformer_lm *m, const nb_tensor *tokens, bool causal,
                                     const nb_tensor *key_padding_mask,
                                     nb_tensor **attn_weights) {
    if (!m || !tokens) return nbt_error("TransformerLM", "NULL argument");
    if (tokens->ndim != 2 || tokens->dtype != NB_I64 || tokens->shape[1] > m->max_len)
        return nbt_error("TransformerLM", "expects int64 tokens [B, T] with T <= %lld, got %s %s",
                         (long long)m->max_len, nb_dtype_name(tokens->dtype), nbt_shape(tokens));
    int64_t T = tokens->shape[1];
    nb_tensor *positions = nb_arange(NB_I64, 0, (double)T, 1);
    nb_tensor *x = nb_add(nb_embedding_forward(m->tok_emb, tokens),
                          nb_embedding_forward(m->pos_emb, positions));
    for (int i = 0; i < m->num_layers; i++) {
        nb_mha_opts opts = {.causal = causal,
                            .key_padding_mask = key_padding_mask,
                            .attn_weights = attn_weights ? &attn_weights[i] : NULL};
        x = nb_transformer_block_forward(m->blocks[i], x, &opts);
    }
    return nb_linear_forward(m->head, nb_layernorm_forward(m->norm_f, x));
}
