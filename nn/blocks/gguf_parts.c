/* What the blocks' GGUF exports share: RoPE's row order and llama.cpp's tensor names. */
#include "gguf_parts.h"

#include <stdio.h>

nb_tensor *blk_gguf_pair_rope_rows(const nb_tensor *w, int64_t groups, int64_t offset,
                                   int64_t rope_dim) {
    if (!w) return NULL;
    const int64_t cols = w->shape[1], group_rows = w->shape[0] / groups;
    const int64_t rest = group_rows - offset - rope_dim;
    nb_tensor *g = nb_view(w, NB_SHAPE(groups, group_rows, cols));
    nb_tensor *halves =
        nb_reshape(nb_narrow(g, 1, offset, rope_dim), NB_SHAPE(groups, 2, rope_dim / 2, cols));
    nb_tensor *parts[3];
    int n = 0;
    if (offset > 0) parts[n++] = nb_narrow(g, 1, 0, offset);
    parts[n++] = nb_reshape(nb_transpose(halves, 1, 2), NB_SHAPE(groups, rope_dim, cols));
    if (rest > 0) parts[n++] = nb_narrow(g, 1, offset + rope_dim, rest);
    return nb_reshape(n == 1 ? parts[0] : nb_concat(n, parts, 1),
                      NB_SHAPE(groups * group_rows, cols));
}

const char *blk_gguf_name(char buf[64], int layer, const char *what) {
    snprintf(buf, 64, "blk.%d.%s.weight", layer, what);
    return buf;
}

bool blk_gguf_add_lm(nb_gguf *g, nb_gguf_type type, const nb_tensor *embed, const nb_tensor *norm,
                     const nb_tensor *head, int n_layers,
                     bool (*add_layer)(nb_gguf *g, const void *model, int i, nb_gguf_type type),
                     const void *model) {
    bool ok = nb_gguf_add_weight(g, "token_embd.weight", embed, type);
    for (int i = 0; ok && i < n_layers; i++) ok = add_layer(g, model, i, type);
    return ok && nb_gguf_add_weight(g, "output_norm.weight", norm, type) &&
           nb_gguf_add_weight(g, "output.weight", head, type);
}

bool blk_gguf_save_lm(const char *op, const char *arch, const nb_module *base, int64_t n_vocab,
                      const char *path, int64_t max_len, const nb_gguf_vocab *vocab,
                      nb_gguf_type type,
                      bool (*fill)(nb_gguf *g, const void *model, nb_gguf_type type),
                      const void *model) {
    const nb_gguf_model_info info = {.arch = arch,
                                     .name = nb_module_path(base),
                                     .max_len = max_len,
                                     .n_vocab = n_vocab,
                                     .vocab = vocab,
                                     .type = type};
    return nb_gguf_save_model(op, path, &info, fill, model);
}
