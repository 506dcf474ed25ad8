/* TransformerLM checkpoints that carry the model's configuration in __metadata__, so a program
 * can rebuild the model from the file alone and a file saved from another configuration is
 * refused with a message that says what differs. */
#include "nabla/nn.h"
#include "safetensors_file.h"
#include "tensor/nbt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The integer fields of nb_lm_config and their metadata keys. */
#define NUM_FIELDS 10
static const char *const field_keys[] = {
    "nabla.vocab",     "nabla.d_model",      "nabla.heads",       "nabla.layers",
    "nabla.context",   "nabla.out_features", "nabla.tie_weights", "nabla.qkv_bias",
    "nabla.gelu_tanh", "nabla.no_head_bias"};
static const char *const field_names[] = {"vocab",     "d_model",      "heads",       "layers",
                                          "context",   "out_features", "tie_weights", "qkv_bias",
                                          "gelu_tanh", "no_head_bias"};
#define FIELD_TABLE(t) _Static_assert(sizeof t / sizeof t[0] == NUM_FIELDS, #t ": one per field")
FIELD_TABLE(field_keys);
FIELD_TABLE(field_names);
/* Fields files from before they existed lack: read as 0. */
static const bool field_optional[NUM_FIELDS] = {[7] = true, [8] = true, [9] = true};

static void config_fields(const nb_lm_config *c, int64_t v[NUM_FIELDS]) {
    v[0] = c->vocab, v[1] = c->dim, v[2] = c->num_heads, v[3] = c->layers, v[4] = c->max_len;
    v[5] = c->out_features ? c->out_features : c->vocab, v[6] = c->tie_weights;
    v[7] = c->qkv_bias, v[8] = c->gelu_tanh, v[9] = c->no_head_bias;
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

/* The range of each field (layers: the blocks nb_transformer_lm has room for). */
static const int64_t field_min[] = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
static const int64_t field_max[] = {INT64_MAX, INT64_MAX, INT64_MAX, 16, INT64_MAX,
                                    INT64_MAX, 1,         1,         1,  1};
FIELD_TABLE(field_min);
FIELD_TABLE(field_max);

/* A count as save writes it: decimal digits, no sign, space or leading zero, in [lo, hi].
 * (strtoll takes " +7", and a value past int's range used to be truncated, 2^32 + 1 to 1.) */
static bool parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s[0] || (s[0] == '0' && s[1])) return false;
    int64_t v = 0;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9' || __builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, *p - '0', &v))
            return false;
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* The metadata value of key, or NULL. */
static const char *meta_value(const nbst_file *f, const char *key) {
    return f->metadata ? json_string_value(json_object_get(f->metadata, key)) : NULL;
}

/* Reads and range-checks the configuration in f's metadata (f has MODEL_KEY). */
static bool parse_config(const nbst_file *f, nb_lm_config *cfg) {
    const char *path = f->path, *model = meta_value(f, MODEL_KEY),
               *block = meta_value(f, BLOCK_KEY);
    if (strcmp(model, "TransformerLM") != 0 || !block || strcmp(block, BLOCK_KIND) != 0)
        return nbt_error("TransformerLM",
                         "%s holds a %.64s with blocks '%.64s', not a TransformerLM with '%s' "
                         "blocks",
                         path, model, block ? block : "(none)", BLOCK_KIND),
               false;
    int64_t v[NUM_FIELDS];
    for (int i = 0; i < NUM_FIELDS; i++) {
        const char *s = meta_value(f, field_keys[i]);
        if (!s && field_optional[i]) {
            v[i] = 0;
            continue;
        }
        if (!s)
            return nbt_error("TransformerLM", "%s: metadata %s is missing", path, field_keys[i]),
                   false;
        if (!parse_count(s, field_min[i], field_max[i], &v[i])) {
            char range[64];
            if (field_max[i] == INT64_MAX)
                snprintf(range, sizeof range, "a whole number >= %lld", (long long)field_min[i]);
            else
                snprintf(range, sizeof range, "a whole number from %lld to %lld",
                         (long long)field_min[i], (long long)field_max[i]);
            return nbt_error("TransformerLM", "%s: metadata %s is '%.40s%s', not %s", path,
                             field_keys[i], s, strlen(s) > 40 ? "..." : "", range),
                   false;
        }
    }
    *cfg = (nb_lm_config){.vocab = v[0],
                          .dim = v[1],
                          .num_heads = v[2],
                          .layers = (int)v[3], /* 1..16 */
                          .max_len = v[4],
                          .out_features = v[5],
                          .tie_weights = v[6] != 0,
                          .qkv_bias = v[7] != 0,
                          .gelu_tanh = v[8] != 0,
                          .no_head_bias = v[9] != 0};
    if (cfg->dim % cfg->num_heads != 0)
        return nbt_error("TransformerLM", "%s: d_model %lld is not divisible by heads %lld", path,
                         (long long)cfg->dim, (long long)cfg->num_heads),
               false;
    if (cfg->tie_weights && cfg->out_features != cfg->vocab)
        return nbt_error("TransformerLM",
                         "%s: tied weights need out_features == vocab, got %lld and %lld", path,
                         (long long)cfg->out_features, (long long)cfg->vocab),
               false;
    return true;
}

/* ---- the tensors a configuration implies ---- */
enum { MAX_EXPECTED = 4 + 16 * 16 + 4, NAME_LEN = 48 };

typedef struct {
    char name[NAME_LEN]; /* after the model's prefix */
    int ndim;
    int64_t shape[2];
} expected_tensor;

static void expect(expected_tensor *e, int *n, const char *name, int ndim, int64_t d0, int64_t d1) {
    expected_tensor *t = &e[(*n)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
}

/* The parameters nb_transformer_lm_new_config makes for cfg (pre-LN blocks: norm1, attention
 * with q/k/v biases if cfg says so, norm2, a feed-forward of 4 x d_model), in its order;
 * test_lm_config.c checks the list against built models. False if 4 x d_model overflows. */
static bool expected_tensors(const nb_lm_config *cfg, expected_tensor *e, int *n) {
    static const char *const square[] = {"attn.W_query", "attn.W_key", "attn.W_value",
                                         "attn.out_proj"};
    const int64_t d = cfg->dim;
    int64_t hidden;
    if (__builtin_mul_overflow(d, 4, &hidden)) return false;
    *n = 0;
    expect(e, n, "tok_emb.weight", 2, cfg->vocab, d);
    expect(e, n, "pos_emb.weight", 2, cfg->max_len, d);
    for (int l = 0; l < cfg->layers; l++) {
        char name[NAME_LEN];
#define BLOCK_PARAM(suffix, ndim, d0, d1)                                                          \
    (snprintf(name, sizeof name, "blocks.%d.%s", l, suffix), expect(e, n, name, ndim, d0, d1))
        BLOCK_PARAM("norm1.weight", 1, d, 0);
        BLOCK_PARAM("norm1.bias", 1, d, 0);
        for (int k = 0; k < 4; k++) {
            char weight[24], bias[24]; /* "attn.out_proj.weight" and shorter */
            snprintf(weight, sizeof weight, "%s.weight", square[k]);
            snprintf(bias, sizeof bias, "%s.bias", square[k]);
            BLOCK_PARAM(weight, 2, d, d);
            if (k == 3 || cfg->qkv_bias) BLOCK_PARAM(bias, 1, d, 0);
        }
        BLOCK_PARAM("norm2.weight", 1, d, 0);
        BLOCK_PARAM("norm2.bias", 1, d, 0);
        BLOCK_PARAM("ff.fc1.weight", 2, hidden, d);
        BLOCK_PARAM("ff.fc1.bias", 1, hidden, 0);
        BLOCK_PARAM("ff.fc2.weight", 2, d, hidden);
        BLOCK_PARAM("ff.fc2.bias", 1, d, 0);
#undef BLOCK_PARAM
    }
    expect(e, n, "norm_f.weight", 1, d, 0);
    expect(e, n, "norm_f.bias", 1, d, 0);
    if (!cfg->tie_weights) expect(e, n, "head.weight", 2, cfg->out_features, d);
    if (!cfg->no_head_bias) expect(e, n, "head.bias", 1, cfg->out_features, 0);
    return true;
}

/* An optimizer's state, saved beside the parameters (nb_optimizer_state's names). */
static bool is_optimizer_state(const char *name) {
    return strncmp(name, "optim.", 6) == 0;
}

/* The one parameter named "tok_emb.weight" or "<prefix>.tok_emb.weight": the prefix of all
 * the model's names is what comes before tok_emb (*len bytes). NULL with an error. */
static const char *model_prefix(const nbst_file *f, size_t *len) {
    static const char key[] = "tok_emb.weight";
    const size_t key_len = sizeof key - 1;
    const char *found = NULL;
    for (int i = 0; i < f->count; i++) {
        const char *name = f->entries[i].name;
        size_t n = strlen(name);
        if (is_optimizer_state(name) || n < key_len || strcmp(name + n - key_len, key) != 0 ||
            (n > key_len && name[n - key_len - 1] != '.'))
            continue;
        if (found)
            return nbt_error("TransformerLM",
                             "%s: both '%.100s' and '%.100s' could be the model's tok_emb.weight",
                             f->path, found, name);
        found = name;
        *len = n - key_len;
    }
    if (!found)
        return nbt_error("TransformerLM",
                         "%s: its metadata describes a TransformerLM, but it holds no tensor "
                         "tok_emb.weight",
                         f->path);
    return found;
}

/* Checks the tensor of f named `name` (found in index) against e, in the dtype of the first
 * one checked (*first, NULL before it). */
static bool check_one(const nbst_file *f, const json_t *index, const char *name,
                      const expected_tensor *e, const nbst_entry **first) {
    const json_t *pos = json_object_get(index, name);
    if (!pos)
        return nbt_error("TransformerLM",
                         "%s: tensor '%.200s' is missing, which its configuration needs", f->path,
                         name),
               false;
    const nbst_entry *t = &f->entries[json_integer_value(pos)];
    if ((t->dtype != NB_F32 && t->dtype != NB_F64) || (*first && t->dtype != (*first)->dtype))
        return nbt_error("TransformerLM", "%s: tensor '%.200s' is %s, expected %s", f->path, name,
                         nbst_dtype_name(t->dtype),
                         *first ? nbst_dtype_name((*first)->dtype) : "F32 or F64"),
               false;
    if (t->ndim != e->ndim || t->shape[0] != e->shape[0] ||
        (e->ndim == 2 && t->shape[1] != e->shape[1]))
        return nbt_error("TransformerLM",
                         "%s: tensor '%.200s' has shape %s, but its configuration needs %s",
                         f->path, name, nbt_dims(t->ndim, t->shape), nbt_dims(e->ndim, e->shape)),
               false;
    if (!*first) *first = t;
    return true;
}

/* The tensors of f are exactly those of a TransformerLM of configuration cfg: every parameter
 * with its shape, all in one floating dtype, and nothing else but optimizer state. Then a model
 * built from cfg holds no more elements than the file's own data, whatever the metadata says. */
static bool check_tensors(const nbst_file *f, const nb_lm_config *cfg) {
    size_t prefix_len = 0;
    const char *prefix = model_prefix(f, &prefix_len);
    if (!prefix) return false;
    expected_tensor *e = malloc(sizeof *e * MAX_EXPECTED);
    char *name = malloc(prefix_len + NAME_LEN);
    json_t *index = json_object(), *expected = json_object(); /* name -> entry; names wanted */
    bool ok = e && name && index && expected;
    if (!ok) nbt_error("TransformerLM", "%s: out of memory", f->path);
    int n = 0;
    if (ok && !expected_tensors(cfg, e, &n))
        ok = false,
        nbt_error("TransformerLM", "%s: d_model %lld is too large", f->path, (long long)cfg->dim);
    for (int k = 0; ok && k < f->count; k++)
        if (json_object_set_new(index, f->entries[k].name, json_integer(k)) != 0)
            ok = false, nbt_error("TransformerLM", "%s: out of memory", f->path);
    const nbst_entry *first = NULL;
    for (int i = 0; ok && i < n; i++) {
        memcpy(name, prefix, prefix_len);
        strcpy(name + prefix_len, e[i].name);
        ok = check_one(f, index, name, &e[i], &first);
        if (ok && json_object_set_new(expected, name, json_true()) != 0)
            ok = false, nbt_error("TransformerLM", "%s: out of memory", f->path);
    }
    for (int k = 0; ok && k < f->count; k++) {
        const char *extra = f->entries[k].name;
        if (!is_optimizer_state(extra) && !json_object_get(expected, extra))
            ok = false, nbt_error("TransformerLM",
                                  "%s: tensor '%.200s' is not part of the TransformerLM its "
                                  "configuration describes",
                                  f->path, extra);
    }
    json_decref(index);
    json_decref(expected);
    free(name);
    free(e);
    return ok;
}

/* Reads the configuration of path into cfg and checks it against the file's tensors (header
 * only); *found false (and true returned) when the file has no configuration at all. */
static bool read_config(const char *path, nb_lm_config *cfg, bool *found) {
    nbst_file f;
    *found = false;
    if (!nbst_open(&f, "TransformerLM", path)) return false;
    *found = meta_value(&f, MODEL_KEY) != NULL;
    bool ok = !*found || (parse_config(&f, cfg) && check_tensors(&f, cfg));
    nbst_close(&f);
    return ok;
}

bool nb_lm_config_read(const char *path, nb_lm_config *cfg) {
    if (!path || !cfg) return nbt_error("TransformerLM", "NULL argument"), false;
    bool found;
    nb_lm_config read;
    if (!read_config(path, &read, &found)) return false;
    if (!found)
        return nbt_error("TransformerLM",
                         "%s carries no model configuration (metadata %s); it was not saved "
                         "by nb_transformer_lm_save",
                         path, MODEL_KEY),
               false;
    *cfg = read;
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
