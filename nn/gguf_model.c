/* The frame every model export shares (nabla/gguf.h): the general and context keys, the
 * vocabulary, a scope for the tensors an exporter reorders, the save, one error naming the
 * file. */
#include "nabla/gguf.h"

#include <stdio.h>

bool nb_gguf_add_weight(nb_gguf *g, const char *name, const nb_tensor *t, nb_gguf_type type) {
    return nb_gguf_add_tensor(g, name, t, t && t->ndim == 1 ? NB_GGUF_F32 : type);
}

/* "{arch}.{key}" = value, as uint32. */
static bool set_arch_u32(nb_gguf *g, const char *arch, const char *key, int64_t value) {
    char full[256];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return nb_gguf_set_u32(g, full, (uint32_t)value);
}

static bool check_info(const nb_gguf_model_info *info) {
    if (!info || !info->arch || !info->name || !info->vocab)
        return nb_error("nb_gguf_save_model", "NULL %s",
                        !info         ? "info"
                        : !info->arch ? "architecture"
                        : !info->name ? "name"
                                      : "vocabulary"),
               false;
    if (info->max_len < 1 || info->max_len > UINT32_MAX)
        return nb_error("nb_gguf_save_model", "max_len %lld must be in [1, 2^32)",
                        (long long)info->max_len),
               false;
    if (info->vocab->n_tokens != info->n_vocab)
        return nb_error("nb_gguf_save_model", "the vocabulary has %lld tokens, the model %lld",
                        (long long)info->vocab->n_tokens, (long long)info->n_vocab),
               false;
    return true;
}

bool nb_gguf_save_model(const char *op, const char *path, const nb_gguf_model_info *info,
                        bool (*fill)(nb_gguf *g, const void *model, nb_gguf_type type),
                        const void *model) {
    if (!op) op = "nb_gguf_save_model";
    if (!path || !fill || !model)
        return nb_error(op, "NULL %s", !path ? "path" : !fill ? "fill" : "model"), false;
    nb_gguf *g = check_info(info) ? nb_gguf_new() : NULL;
    nb_scope_begin(); /* what fill makes: reordered or stacked weights */
    bool ok = g && nb_gguf_set_string(g, "general.architecture", info->arch) &&
              nb_gguf_set_string(g, "general.name", info->name) &&
              nb_gguf_set_u32(g, "general.file_type", info->type == NB_GGUF_F16 ? 1 : 0) &&
              set_arch_u32(g, info->arch, "context_length", info->max_len) &&
              set_arch_u32(g, info->arch, "vocab_size", info->n_vocab) &&
              nb_gguf_set_vocab(g, info->vocab) && fill(g, model, info->type) &&
              nb_gguf_save(g, path);
    nb_scope_end();
    nb_gguf_free(g);
    if (!ok) {
        char cause[768]; /* nb_error rewrites the buffer nb_last_error points into */
        snprintf(cause, sizeof cause, "%s", nb_last_error());
        nb_error(op, "%s: %s", path, cause);
    }
    return ok;
}
