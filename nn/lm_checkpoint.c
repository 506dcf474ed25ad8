/* TransformerLM checkpoints that carry the model's configuration in __metadata__, so a program
 * can rebuild the model from the file alone and a file saved from another configuration is
 * refused with a message that says what differs. */
#include "nabla/nn.h"
#include "tensor/nbt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The integer fields of nb_lm_config and their metadata keys. */
#define NUM_FIELDS 7
static const char *const field_keys[NUM_FIELDS] = {
    "nabla.vocab",   "nabla.d_model",      "nabla.heads",      "nabla.layers",
    "nabla.context", "nabla.out_features", "nabla.tie_weights"};
static const char *const field_names[NUM_FIELDS] = {
    "vocab", "d_model", "heads", "layers", "context", "out_features", "tie_weights"};

static void config_fields(const nb_lm_config *c, int64_t v[NUM_FIELDS]) {
    v[0] = c->vocab, v[1] = c->dim, v[2] = c->num_heads, v[3] = c->layers, v[4] = c->max_len;
    v[5] = c->out_features ? c->out_features : c->vocab, v[6] = c->tie_weights;
}

#define MODEL_KEY "nabla.model"
#define BLOCK_KEY "nabla.block"
#define BLOCK_KIND "pre_ln" /* LayerNorm before attention and feed-forward, learned positions */

bool nb_transformer_lm_save(const nb_transformer_lm *lm, nb_optimizer *opt, const char *path,
                            int n_extra, const nb_metadata_entry *extra) {
    if (!lm || !path || n_extra < 0 || (n_extra && !extra))
        return nbt_error("TransformerLM save", "NULL argument"), false;
    const nb_lm_config cfg = nb_transformer_lm_config(lm);
    int64_t v[NUM_FIELDS];
    config_fields(&cfg, v);
    char values[NUM_FIELDS][24];
    nb_metadata_entry *meta = malloc(sizeof *meta * (size_t)(NUM_FIELDS + 2 + n_extra));
    if (!meta) return nbt_error("TransformerLM save", "out of memory"), false;
    meta[0] = (nb_metadata_entry){MODEL_KEY, "TransformerLM"};
    meta[1] = (nb_metadata_entry){BLOCK_KEY, BLOCK_KIND};
    for (int i = 0; i < NUM_FIELDS; i++) {
        snprintf(values[i], sizeof values[i], "%lld", (long long)v[i]);
        meta[2 + i] = (nb_metadata_entry){field_keys[i], values[i]};
    }
    for (int i = 0; i < n_extra; i++) meta[NUM_FIELDS + 2 + i] = extra[i];
    bool ok = nb_module_save_with_metadata(&lm->base, opt, path, NUM_FIELDS + 2 + n_extra, meta);
    free(meta);
    return ok;
}

/* Value of key among n entries, or NULL. */
static const char *lookup(const nb_metadata_entry *m, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(m[i].key, key) == 0) return m[i].value;
    return NULL;
}

/* Reads the configuration of path into cfg; *found false (and true returned) when the file
 * has no configuration at all. */
static bool read_config(const char *path, nb_lm_config *cfg, bool *found) {
    nb_scope_begin();
    int n;
    nb_metadata_entry *meta = nb_safetensors_read_metadata(path, &n);
    bool ok = meta != NULL;
    *found = ok && lookup(meta, n, MODEL_KEY);
    if (ok && *found) {
        const char *model = lookup(meta, n, MODEL_KEY), *block = lookup(meta, n, BLOCK_KEY);
        if (strcmp(model, "TransformerLM") != 0 || !block || strcmp(block, BLOCK_KIND) != 0) {
            nbt_error("TransformerLM",
                      "%s holds a %s with blocks '%s', not a TransformerLM with '%s' blocks", path,
                      model, block ? block : "(none)", BLOCK_KIND);
            ok = false;
        }
        int64_t v[NUM_FIELDS];
        for (int i = 0; ok && i < NUM_FIELDS; i++) {
            const char *s = lookup(meta, n, field_keys[i]);
            char *end = NULL;
            errno = 0;
            long long x = s ? strtoll(s, &end, 10) : 0;
            if (!s || end == s || *end || errno || x < 0) {
                nbt_error("TransformerLM", "%s: metadata %s is %s%s%s", path, field_keys[i],
                          s ? "'" : "missing", s ? s : "", s ? "', not a count" : "");
                ok = false;
            }
            v[i] = x;
        }
        if (ok)
            *cfg = (nb_lm_config){.vocab = v[0],
                                  .dim = v[1],
                                  .num_heads = v[2],
                                  .layers = (int)v[3],
                                  .max_len = v[4],
                                  .out_features = v[5],
                                  .tie_weights = v[6] != 0};
    }
    nb_scope_end();
    return ok;
}

bool nb_lm_config_read(const char *path, nb_lm_config *cfg) {
    if (!path || !cfg) return nbt_error("TransformerLM", "NULL argument"), false;
    bool found;
    if (!read_config(path, cfg, &found)) return false;
    if (!found)
        return nbt_error("TransformerLM",
                         "%s carries no model configuration (metadata %s); it was not saved "
                         "by nb_transformer_lm_save",
                         path, MODEL_KEY),
               false;
    return true;
}

bool nb_transformer_lm_load(nb_transformer_lm *lm, nb_optimizer *opt, const char *path) {
    if (!lm || !path) return nbt_error("TransformerLM", "NULL argument"), false;
    nb_lm_config file;
    bool found;
    if (!read_config(path, &file, &found)) return false;
    if (found) {
        const nb_lm_config mine = nb_transformer_lm_config(lm);
        int64_t a[NUM_FIELDS], b[NUM_FIELDS];
        config_fields(&file, a);
        config_fields(&mine, b);
        char diff[512] = "";
        size_t used = 0;
        for (int i = 0; i < NUM_FIELDS && used < sizeof diff; i++)
            if (a[i] != b[i])
                used += (size_t)snprintf(diff + used, sizeof diff - used,
                                         "%s%s: checkpoint %lld, model %lld", used ? "; " : "",
                                         field_names[i], (long long)a[i], (long long)b[i]);
        if (used)
            return nbt_error("TransformerLM",
                             "%s was saved from another configuration than '%s': %s", path,
                             lm->base.path, diff),
                   false;
    }
    return nb_module_load_with(&lm->base, opt, path);
}
