/* char_lm's model (model.h). */
#include "model.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const block_names[] = {"gpt", "llama", "deepseek"};

bool lm_block_parse(const char *name, lm_block *out) {
    for (int b = 0; b < 3; b++)
        if (strcmp(name, block_names[b]) == 0) return *out = (lm_block)b, true;
    return false;
}

const char *lm_block_name(lm_block block) {
    return block_names[block];
}

static blk_llama_config llama_config(const lm_shape *s, int64_t hidden) {
    return (blk_llama_config){.dim = s->dim,
                              .n_heads = s->heads,
                              .n_kv_heads = s->heads > 2 ? s->heads / 2 : s->heads,
                              .hidden = hidden,
                              .norm_eps = 1e-5,
                              .rope_base = 10000};
}

static blk_deepseek_config deepseek_config(const lm_shape *s, int64_t hidden) {
    const int64_t hd = s->dim / s->heads;
    return (blk_deepseek_config){.attn = {.dim = s->dim,
                                          .n_heads = s->heads,
                                          .kv_rank = s->dim,
                                          .nope_dim = hd - hd / 2,
                                          .rope_dim = hd / 2,
                                          .v_dim = hd,
                                          .norm_eps = 1e-5,
                                          .rope_base = 10000},
                                 .moe = {.dim = s->dim,
                                         .hidden = hidden,
                                         .n_experts = 4,
                                         .top_k = 2,
                                         .n_shared = 1,
                                         .aux_alpha = 0.01},
                                 .norm_eps = 1e-5};
}

/* Builds s's model with feed-forward hidden size `hidden` under root. */
static bool build(lm_model *m, nb_module *root, const lm_shape *s, int64_t hidden) {
    *m = (lm_model){.shape = *s};
    if (s->block == LM_BLOCK_GPT) {
        m->gpt = nb_transformer_lm_new(root, "", s->vocab, s->context, s->dim, s->heads,
                                       (int)s->layers, 0.0);
        m->module = m->gpt ? &m->gpt->base : NULL;
    } else if (s->block == LM_BLOCK_LLAMA) {
        blk_llama_config cfg = llama_config(s, hidden);
        m->llama = blk_llama_lm_new(root, "", s->vocab, (int)s->layers, &cfg);
        m->module = m->llama ? &m->llama->base : NULL;
    } else {
        blk_deepseek_config cfg = deepseek_config(s, hidden);
        m->deepseek = blk_deepseek_lm_new(root, "", s->vocab, (int)s->layers, &cfg);
        m->module = m->deepseek ? &m->deepseek->base : NULL;
    }
    return m->module != NULL;
}

/* The parameters of s's model with hidden size `hidden`, or -1 with an error. */
static int64_t params_of(const lm_shape *s, int64_t hidden) {
    nb_module *root = nb_model_new(NB_F32, 0);
    lm_model m;
    int64_t n = root && build(&m, root, s, hidden) ? nb_module_param_numel(root) : -1;
    nb_module_free(root);
    return n;
}

/* The hidden size, a multiple of 8, at which s's llama or deepseek model has the parameter
 * count closest to the gpt model of the same shape. A model's parameters are an affine function
 * of the hidden size (its feed-forward matrices are linear in it), so two sizes give the line. */
static int64_t matching_hidden(const lm_shape *s) {
    lm_shape gpt = *s;
    gpt.block = LM_BLOCK_GPT;
    const int64_t target = params_of(&gpt, 0), at8 = params_of(s, 8), at16 = params_of(s, 16);
    if (target < 0 || at8 < 0 || at16 <= at8) return -1;
    const double per_unit = (double)(at16 - at8) / 8, h = 8 + (double)(target - at8) / per_unit;
    const int64_t rounded = (int64_t)(h / 8 + 0.5) * 8;
    return rounded < 8 ? 8 : rounded;
}

bool lm_model_init(lm_model *m, nb_module *root, const lm_shape *s) {
    int64_t hidden = s->block == LM_BLOCK_GPT ? 0 : matching_hidden(s);
    return hidden >= 0 && build(m, root, s, hidden);
}

nb_tensor *lm_model_forward(const lm_model *m, const nb_tensor *tokens, nb_tensor **aux_loss) {
    if (aux_loss) *aux_loss = NULL;
    const blk_attn_opts causal = {.causal = true};
    if (m->gpt) return nb_transformer_lm_forward(m->gpt, tokens, true, NULL, NULL);
    if (m->llama) return blk_llama_lm_forward(m->llama, tokens, &causal);
    return blk_deepseek_lm_forward(m->deepseek, tokens, &causal, aux_loss);
}

nb_causal_lm lm_model_causal(const lm_model *m) {
    if (m->gpt) return nb_transformer_lm_causal(m->gpt);
    if (m->llama) return blk_llama_lm_causal(m->llama, m->shape.context);
    return blk_deepseek_lm_causal(m->deepseek, m->shape.context);
}

int64_t lm_model_active_params(const lm_model *m) {
    if (m->deepseek) return blk_deepseek_lm_active_params(m->deepseek, NULL);
    return nb_module_param_numel(m->module);
}

/* The shape's metadata keys, in lm_shape's order after the block. */
static const char *const shape_keys[] = {"char_lm.vocab", "char_lm.context", "char_lm.dim",
                                         "char_lm.heads", "char_lm.layers"};
#define N_SHAPE_KEYS 5
#define MAX_EXTRA 8

static int64_t *shape_field(lm_shape *s, int i) {
    int64_t *fields[N_SHAPE_KEYS] = {&s->vocab, &s->context, &s->dim, &s->heads, &s->layers};
    return fields[i];
}

bool lm_model_save(const lm_model *m, const char *path, int n_meta, const nb_metadata_entry *meta) {
    if (m->gpt) return nb_transformer_lm_save(m->gpt, NULL, path, n_meta, meta);
    const lm_shape *s = &m->shape;
    const int64_t values[N_SHAPE_KEYS] = {s->vocab, s->context, s->dim, s->heads, s->layers};
    char text[N_SHAPE_KEYS][24];
    nb_metadata_entry all[1 + N_SHAPE_KEYS + MAX_EXTRA];
    int n = 0;
    all[n++] = (nb_metadata_entry){"char_lm.block", lm_block_name(s->block)};
    for (int i = 0; i < N_SHAPE_KEYS; i++) {
        snprintf(text[i], sizeof text[i], "%" PRId64, values[i]);
        all[n++] = (nb_metadata_entry){shape_keys[i], text[i]};
    }
    for (int i = 0; i < n_meta && i < MAX_EXTRA; i++) all[n++] = meta[i];
    return nb_module_save_with_metadata(nb_module_root(m->module), NULL, path, n, all);
}

/* A positive decimal number of at most max, or false. */
static bool parse_count(const char *v, int64_t max, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 1 || x > max || v[0] < '0' || v[0] > '9') return false;
    *out = x;
    return true;
}

/* The shape in the char_lm.* entries of a llama or deepseek checkpoint. */
static bool read_block_shape(const char *path, const nb_metadata_entry *meta, int n, lm_shape *s) {
    bool have[N_SHAPE_KEYS] = {false};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < N_SHAPE_KEYS; k++) {
            if (strcmp(meta[i].key, shape_keys[k]) != 0) continue;
            if (!parse_count(meta[i].value, k == N_SHAPE_KEYS - 1 ? BLK_MAX_LAYERS : 1 << 20,
                             shape_field(s, k))) {
                nb_error(path, "%s is '%s', not a count in range", shape_keys[k], meta[i].value);
                return false;
            }
            have[k] = true;
        }
    for (int k = 0; k < N_SHAPE_KEYS; k++)
        if (!have[k]) {
            nb_error(path, "no %s in its metadata", shape_keys[k]);
            return false;
        }
    return true;
}

bool lm_shape_read(const char *path, lm_shape *s) {
    *s = (lm_shape){.block = LM_BLOCK_GPT};
    nb_scope_begin();
    int n = 0;
    const nb_metadata_entry *meta = nb_safetensors_read_metadata(path, &n);
    const char *block = NULL;
    for (int i = 0; meta && i < n; i++)
        if (strcmp(meta[i].key, "char_lm.block") == 0) block = meta[i].value;
    bool ok = meta != NULL;
    if (ok && block && !lm_block_parse(block, &s->block)) {
        nb_error(path, "char_lm.block is '%s', not gpt, llama or deepseek", block);
        ok = false;
    }
    if (ok && s->block != LM_BLOCK_GPT) ok = read_block_shape(path, meta, n, s);
    nb_scope_end();
    if (!ok || s->block != LM_BLOCK_GPT) return ok;
    nb_lm_config cfg; /* a TransformerLM: its own configuration */
    if (!nb_lm_config_read(path, &cfg)) return false;
    *s = (lm_shape){.block = LM_BLOCK_GPT,
                    .vocab = cfg.vocab,
                    .context = cfg.max_len,
                    .dim = cfg.dim,
                    .heads = cfg.num_heads,
                    .layers = cfg.layers};
    return true;
}

bool lm_model_load(lm_model *m, const char *path) {
    if (m->gpt) return nb_transformer_lm_load(m->gpt, NULL, path);
    return nb_module_load(nb_module_root(m->module), path);
}
