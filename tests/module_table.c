/* The built-in module table (module_table.h): per module, its constructor from a config, its
 * forward over a call's inputs, and its golden spec. The functional references and expected
 * parameter lists are in module_reference.c. */
#include "module_table.h"

#include <stdio.h>
#include <string.h>

const char *const nbtest_input_names[NBTEST_NINPUTS] = {
    "x", "x_q", "x_kv", "indices", "key_padding_mask", "attn_mask", "head_mask"};

bool nbtest_only_keys(const json_t *obj, const char *what, const char *const *keys) {
    if (!json_is_object(obj)) {
        printf("    \"%s\" is missing or not an object\n", what);
        return false;
    }
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        bool known = false;
        for (int k = 0; keys[k] && !known; k++) known = strcmp(key, keys[k]) == 0;
        if (!known) {
            printf("    %s \"%s\" is not understood by this test\n", what, key);
            return false;
        }
    }
    return true;
}

nb_tensor *nbtest_named(const golden_named *list, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(list[k].name, name) == 0) return list[k].tensor;
    return NULL;
}

bool nbtest_load_call(const json_t *c, const nbtest_module *row, golden_named *list, int max,
                      int *n, nbtest_call *call, bool *want_weights) {
    memset(call, 0, sizeof *call);
    *want_weights = false;
    *n = golden_named_tensors(c, "inputs", list, max);
    if (*n < 0) return false;
    unsigned present = 0;
    for (int k = 0; k < *n; k++) {
        int role = 0;
        while (role < NBTEST_NINPUTS && strcmp(list[k].name, nbtest_input_names[role]) != 0) role++;
        if (role == NBTEST_NINPUTS || (row->inputs & NBTEST_BIT(role)) == 0 ||
            (present & NBTEST_BIT(role))) {
            printf("    input \"%s\": unknown, repeated or not taken by this module\n",
                   list[k].name);
            return false;
        }
        present |= NBTEST_BIT(role);
        call->in[role] = list[k].tensor;
    }
    /* The main inputs (x, or x_q and x_kv, or indices) must be exactly one call's. */
    unsigned mains = 0;
    bool complete = false;
    for (int k = 0; k < 3; k++) mains |= row->calls[k];
    for (int k = 0; k < 3 && row->calls[k]; k++) complete |= (present & mains) == row->calls[k];
    if (!complete) return printf("    the inputs do not make one forward call\n"), false;

    static const char *const attention_flags[] = {"causal", NULL}, *const no_flags[] = {NULL};
    const json_t *fwd = json_object_get(c, "forward");
    if (!nbtest_only_keys(fwd, "forward flag", row->attends ? attention_flags : no_flags))
        return false;
    const json_t *causal = json_object_get(fwd, "causal");
    if (causal && !json_is_boolean(causal)) return printf("    causal: not a boolean\n"), false;
    call->causal = json_is_true(causal);

    const json_t *extra = json_object_get(c, "extra_outputs");
    if (!json_is_array(extra)) return printf("    no extra_outputs list\n"), false;
    for (size_t k = 0; k < json_array_size(extra); k++) {
        const char *name = json_string_value(json_object_get(json_array_get(extra, k), "name"));
        if (!row->gives_weights || !name || strcmp(name, "attn_weights") != 0 || *want_weights) {
            printf("    extra output \"%s\": not one this module gives\n", name ? name : "?");
            return false;
        }
        *want_weights = true;
    }
    return true;
}

/* ---- reading a config strictly ---------------------------------------------------------- */
static bool get_int(const json_t *obj, const char *key, int64_t *out) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v)) return printf("    config \"%s\": not an integer\n", key), false;
    *out = json_integer_value(v);
    return true;
}

static bool get_bool(const json_t *obj, const char *key, bool *out) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_boolean(v)) return printf("    config \"%s\": not a boolean\n", key), false;
    *out = json_is_true(v);
    return true;
}

static bool get_double(const json_t *obj, const char *key, double *out) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_number(v)) return printf("    config \"%s\": not a number\n", key), false;
    *out = json_number_value(v);
    return true;
}

/* ---- the constructors for tests ---------------------------------------------------------- */
static const char *const linear_keys[] = {"in_features", "out_features", "bias", NULL};
static nb_module *build_linear(nb_module *parent, const char *name, const json_t *cfg) {
    int64_t in, out;
    bool bias;
    if (!get_int(cfg, "in_features", &in) || !get_int(cfg, "out_features", &out) ||
        !get_bool(cfg, "bias", &bias))
        return NULL;
    nb_linear *m = nb_linear_new(parent, name, in, out, bias);
    return m ? &m->base : NULL;
}

static const char *const layernorm_keys[] = {"normalized_shape", "eps", NULL};
static nb_module *build_layernorm(nb_module *parent, const char *name, const json_t *cfg) {
    int64_t dim;
    double eps;
    if (!get_int(cfg, "normalized_shape", &dim) || !get_double(cfg, "eps", &eps)) return NULL;
    nb_layer_norm *m = nb_layer_norm_new(parent, name, dim);
    if (m) m->eps = eps;
    return m ? &m->base : NULL;
}

static const char *const embedding_keys[] = {"num_embeddings", "embedding_dim", NULL};
static nb_module *build_embedding(nb_module *parent, const char *name, const json_t *cfg) {
    int64_t num, dim;
    if (!get_int(cfg, "num_embeddings", &num) || !get_int(cfg, "embedding_dim", &dim)) return NULL;
    nb_embedding *m = nb_embedding_new(parent, name, num, dim);
    return m ? &m->base : NULL;
}

static const char *const dropout_keys[] = {"p", NULL};
static nb_module *build_dropout(nb_module *parent, const char *name, const json_t *cfg) {
    double p;
    if (!get_double(cfg, "p", &p)) return NULL;
    nb_dropout *m = nb_dropout_new(parent, name, p);
    return m ? &m->base : NULL;
}

static const char *const feedforward_keys[] = {"dim", "hidden", NULL};
static nb_module *build_feedforward(nb_module *parent, const char *name, const json_t *cfg) {
    int64_t dim, hidden;
    if (!get_int(cfg, "dim", &dim) || !get_int(cfg, "hidden", &hidden)) return NULL;
    nb_feedforward *m = nb_feedforward_new(parent, name, dim, hidden);
    return m ? &m->base : NULL;
}

static const char *const mha_keys[] = {"d_in",    "d_out",    "num_heads", "qkv_bias",
                                       "dropout", "out_bias", NULL};
static nb_module *build_mha(nb_module *parent, const char *name, const json_t *cfg) {
    int64_t d_in, d_out, heads;
    if (!get_int(cfg, "d_in", &d_in) || !get_int(cfg, "d_out", &d_out) ||
        !get_int(cfg, "num_heads", &heads))
        return NULL;
    nb_mha_config mc = nb_mha_defaults(d_in, d_out, heads); /* out_bias true unless given */
    if (!get_bool(cfg, "qkv_bias", &mc.qkv_bias) || !get_double(cfg, "dropout", &mc.dropout) ||
        (json_object_get(cfg, "out_bias") && !get_bool(cfg, "out_bias", &mc.out_bias)))
        return NULL;
    nb_mha *m = nb_mha_new_config(parent, name, &mc);
    return m ? &m->base : NULL;
}

static const char *const block_keys[] = {"d_model", "num_heads", "qkv_bias", "ff_hidden",
                                         "eps",     "dropout",   NULL};
static nb_module *build_block(nb_module *parent, const char *name, const json_t *cfg) {
    int64_t dim, heads, hidden;
    bool qkv_bias;
    double eps, dropout;
    if (!get_int(cfg, "d_model", &dim) || !get_int(cfg, "num_heads", &heads) ||
        !get_bool(cfg, "qkv_bias", &qkv_bias) || !get_int(cfg, "ff_hidden", &hidden) ||
        !get_double(cfg, "eps", &eps) || !get_double(cfg, "dropout", &dropout))
        return NULL;
    /* nabla's block fixes these two; a case asking for others cannot be built. */
    if (qkv_bias || hidden != 4 * dim) {
        printf("    nabla's TransformerBlock has no qkv bias and ff hidden 4 * d_model; the "
               "case asks for qkv_bias %d, ff_hidden %lld\n",
               qkv_bias, (long long)hidden);
        return NULL;
    }
    nb_transformer_block *m = nb_transformer_block_new(parent, name, dim, heads, dropout);
    if (m) m->norm1->eps = m->norm2->eps = eps;
    return m ? &m->base : NULL;
}

static const char *const decoder_keys[] = {"d_model", "num_heads", "qkv_bias", "dropout", NULL};
static nb_module *build_decoder(nb_module *parent, const char *name, const json_t *cfg) {
    nb_block_config c = {0};
    if (!get_int(cfg, "d_model", &c.dim) || !get_int(cfg, "num_heads", &c.num_heads) ||
        !get_bool(cfg, "qkv_bias", &c.qkv_bias) || !get_double(cfg, "dropout", &c.dropout))
        return NULL;
    nb_transformer_decoder_block *m = nb_transformer_decoder_block_new(parent, name, &c);
    return m ? &m->base : NULL;
}

static const char *const lm_keys[] = {"vocab",  "max_len", "d_model", "num_heads",
                                      "layers", "dropout", NULL};
static nb_module *build_lm(nb_module *parent, const char *name, const json_t *cfg) {
    int64_t vocab, max_len, dim, heads, layers;
    double dropout;
    if (!get_int(cfg, "vocab", &vocab) || !get_int(cfg, "max_len", &max_len) ||
        !get_int(cfg, "d_model", &dim) || !get_int(cfg, "num_heads", &heads) ||
        !get_int(cfg, "layers", &layers) || !get_double(cfg, "dropout", &dropout))
        return NULL;
    nb_transformer_lm *m =
        nb_transformer_lm_new(parent, name, vocab, max_len, dim, heads, (int)layers, dropout);
    return m ? &m->base : NULL;
}

/* ---- the forwards ------------------------------------------------------------------------ */
static nb_mha_opts attention_opts(const nbtest_call *call) {
    return (nb_mha_opts){.causal = call->causal,
                         .key_padding_mask = call->in[NBTEST_KEY_PADDING],
                         .attn_mask = call->in[NBTEST_ATTN_MASK],
                         .attn_weights = call->weights,
                         .head_mask = call->in[NBTEST_HEAD_MASK]};
}

static nb_tensor *linear_forward(nb_module *m, const nbtest_call *call) {
    return nb_linear_forward((nb_linear *)m, call->in[NBTEST_X]);
}
static nb_tensor *layernorm_forward(nb_module *m, const nbtest_call *call) {
    return nb_layer_norm_forward((nb_layer_norm *)m, call->in[NBTEST_X]);
}
static nb_tensor *embedding_forward(nb_module *m, const nbtest_call *call) {
    return nb_embedding_forward((nb_embedding *)m, call->in[NBTEST_INDICES]);
}
static nb_tensor *dropout_forward(nb_module *m, const nbtest_call *call) {
    return nb_dropout_forward((nb_dropout *)m, call->in[NBTEST_X]);
}
static nb_tensor *feedforward_forward(nb_module *m, const nbtest_call *call) {
    return nb_feedforward_forward((nb_feedforward *)m, call->in[NBTEST_X]);
}
static nb_tensor *mha_forward(nb_module *m, const nbtest_call *call) {
    nb_mha_opts opts = attention_opts(call);
    nb_tensor *const *x = call->in;
    return x[NBTEST_X] || !x[NBTEST_X_Q]
               ? nb_mha_forward((nb_mha *)m, x[NBTEST_X], &opts)
               : nb_mha_forward_cross((nb_mha *)m, x[NBTEST_X_Q], x[NBTEST_X_KV], &opts);
}
static nb_tensor *block_forward(nb_module *m, const nbtest_call *call) {
    nb_mha_opts opts = attention_opts(call);
    return nb_transformer_block_forward((nb_transformer_block *)m, call->in[NBTEST_X], &opts);
}
/* x_q is the decoder's input, x_kv the encoder's output (memory); masks apply to the
 * self-attention. */
static nb_tensor *decoder_forward(nb_module *m, const nbtest_call *call) {
    nb_mha_opts opts = attention_opts(call);
    return nb_transformer_decoder_block_forward((nb_transformer_decoder_block *)m,
                                                call->in[NBTEST_X_Q], call->in[NBTEST_X_KV], &opts,
                                                NULL);
}
static nb_tensor *lm_forward(nb_module *m, const nbtest_call *call) {
    return nb_transformer_lm_forward((nb_transformer_lm *)m, call->in[NBTEST_INDICES], call->causal,
                                     call->in[NBTEST_KEY_PADDING], NULL);
}

/* ---- what a golden case covers ----------------------------------------------------------- */
/* True if some sequence of the [B, T_k] key padding mask is padding throughout. */
static bool has_fully_padded(const nb_tensor *mask) {
    for (int64_t i = 0; mask && i < mask->shape[0]; i++) {
        bool all = true;
        for (int64_t k = 0; k < mask->shape[1]; k++) all = all && nb_get(mask, NB_IDX(i, k)) != 0;
        if (all) return true;
    }
    return false;
}

static unsigned linear_features(const nb_module *m, const nbtest_call *call) {
    (void)m, (void)call;
    return NBTEST_F_LINEAR;
}
static unsigned layernorm_features(const nb_module *m, const nbtest_call *call) {
    (void)m, (void)call;
    return NBTEST_F_LAYERNORM;
}
static unsigned embedding_features(const nb_module *m, const nbtest_call *call) {
    (void)m, (void)call;
    return NBTEST_F_EMBEDDING;
}
static unsigned block_features(const nb_module *m, const nbtest_call *call) {
    (void)m;
    return NBTEST_F_BLOCK |
           (has_fully_padded(call->in[NBTEST_KEY_PADDING]) ? NBTEST_F_BLOCK_FULLY_PADDED : 0u);
}

/* The attention mask's forms (modules_mha.json). */
static unsigned mask_features(const nb_mha *m, const nbtest_call *call) {
    const nb_tensor *am = call->in[NBTEST_ATTN_MASK];
    const nb_tensor *q = call->in[NBTEST_X] ? call->in[NBTEST_X] : call->in[NBTEST_X_Q];
    unsigned f = 0;
    if (!am) return 0;
    if (nb_is_float(am)) f |= NBTEST_F_MHA_FLOAT_MASK;
    if (am->ndim == 3 && am->shape[0] == q->shape[0]) f |= NBTEST_F_MHA_MASK_B;
    if (am->ndim == 3 && m->num_heads > 1 && am->shape[0] == q->shape[0] * m->num_heads)
        f |= NBTEST_F_MHA_MASK_BH;
    if (am->ndim == 4) f |= NBTEST_F_MHA_MASK_4D;
    return f;
}

static unsigned mha_features(const nb_module *base, const nbtest_call *call) {
    const nb_mha *m = (const nb_mha *)base;
    nb_tensor *const *x = call->in;
    const nb_tensor *q = x[NBTEST_X] ? x[NBTEST_X] : x[NBTEST_X_Q];
    const nb_tensor *kv = x[NBTEST_X] ? x[NBTEST_X] : x[NBTEST_X_KV];
    const nb_tensor *pad = x[NBTEST_KEY_PADDING], *am = x[NBTEST_ATTN_MASK];
    bool cross = x[NBTEST_X_Q] != NULL;
    unsigned f = mask_features(m, call);
    if (!m->W_query->bias && !m->out_proj->bias) f |= NBTEST_F_MHA_NO_BIAS;
    if (x[NBTEST_HEAD_MASK] && x[NBTEST_HEAD_MASK]->requires_grad) f |= NBTEST_F_MHA_HEAD_MASK;
    if (call->causal && q->shape[1] != kv->shape[1]) f |= NBTEST_F_MHA_CAUSAL_RECT;
    return f | (call->causal ? NBTEST_F_MHA_CAUSAL : 0u) | (pad ? NBTEST_F_MHA_PADDING : 0u) |
           (has_fully_padded(pad) ? NBTEST_F_MHA_FULLY_PADDED : 0u) |
           (am ? NBTEST_F_MHA_ATTN_MASK : 0u) | (pad && am ? NBTEST_F_MHA_BOTH_MASKS : 0u) |
           (cross ? NBTEST_F_MHA_CROSS : 0u) | (cross && pad ? NBTEST_F_MHA_CROSS_MASKED : 0u) |
           (call->weights ? NBTEST_F_MHA_WEIGHTS : 0u);
}

/* ---- the table --------------------------------------------------------------------------- */
#define B NBTEST_BIT
static const char *const basic_files[] = {"modules.json", NULL};
static const char *const mha_files[] = {"modules.json", "modules_masks.json", "modules_mha.json",
                                        NULL};
static const char *const block_files[] = {"modules.json", "modules_masks.json", NULL};

const nbtest_module nbtest_modules[] = {
    {.type = "Linear",
     .example = "{\"in_features\": 4, \"out_features\": 3, \"bias\": true}",
     .config_keys = linear_keys,
     .build = build_linear,
     .inputs = B(NBTEST_X),
     .calls = {B(NBTEST_X)},
     .forward = linear_forward,
     .golden = {basic_files, nbtest_linear_params, nbtest_linear_reference, linear_features,
                NBTEST_F_LINEAR}},
    {.type = "LayerNorm",
     .example = "{\"normalized_shape\": 4, \"eps\": 1e-5}",
     .config_keys = layernorm_keys,
     .build = build_layernorm,
     .inputs = B(NBTEST_X),
     .calls = {B(NBTEST_X)},
     .forward = layernorm_forward,
     .golden = {basic_files, nbtest_layernorm_params, nbtest_layernorm_reference,
                layernorm_features, NBTEST_F_LAYERNORM}},
    {.type = "Embedding",
     .example = "{\"num_embeddings\": 5, \"embedding_dim\": 4}",
     .config_keys = embedding_keys,
     .build = build_embedding,
     .inputs = B(NBTEST_INDICES),
     .calls = {B(NBTEST_INDICES)},
     .forward = embedding_forward,
     .golden = {basic_files, nbtest_embedding_params, nbtest_embedding_reference,
                embedding_features, NBTEST_F_EMBEDDING}},
    {.type = "Dropout",
     .example = "{\"p\": 0.5}",
     .config_keys = dropout_keys,
     .build = build_dropout,
     .inputs = B(NBTEST_X),
     .calls = {B(NBTEST_X)},
     .forward = dropout_forward,
     .no_golden =
         "random: tests/test_layers.c tests its op, nb_f_dropout, mask, scaling and generator"},
    {.type = "FeedForward",
     .example = "{\"dim\": 4, \"hidden\": 8}",
     .config_keys = feedforward_keys,
     .build = build_feedforward,
     .inputs = B(NBTEST_X),
     .calls = {B(NBTEST_X)},
     .forward = feedforward_forward,
     .no_golden = "two Linears around a GELU: covered by the TransformerBlock goldens"},
    {.type = "MultiHeadAttention",
     .example = "{\"d_in\": 4, \"d_out\": 4, \"num_heads\": 2, \"qkv_bias\": false, "
                "\"dropout\": 0.0}",
     .config_keys = mha_keys,
     .build = build_mha,
     .inputs = B(NBTEST_X) | B(NBTEST_X_Q) | B(NBTEST_X_KV) | B(NBTEST_KEY_PADDING) |
               B(NBTEST_ATTN_MASK) | B(NBTEST_HEAD_MASK),
     .calls = {B(NBTEST_X), B(NBTEST_X_Q) | B(NBTEST_X_KV)},
     .attends = true,
     .gives_weights = true,
     .forward = mha_forward,
     .golden = {mha_files, nbtest_mha_params, nbtest_mha_reference, mha_features,
                NBTEST_F_MHA_CAUSAL | NBTEST_F_MHA_PADDING | NBTEST_F_MHA_FULLY_PADDED |
                    NBTEST_F_MHA_ATTN_MASK | NBTEST_F_MHA_CROSS | NBTEST_F_MHA_WEIGHTS |
                    NBTEST_F_MHA_BOTH_MASKS | NBTEST_F_MHA_CROSS_MASKED | NBTEST_F_MHA_NO_BIAS |
                    NBTEST_F_MHA_FLOAT_MASK | NBTEST_F_MHA_MASK_B | NBTEST_F_MHA_MASK_BH |
                    NBTEST_F_MHA_MASK_4D | NBTEST_F_MHA_HEAD_MASK | NBTEST_F_MHA_CAUSAL_RECT}},
    {.type = "TransformerBlock",
     .example = "{\"d_model\": 4, \"num_heads\": 2, \"qkv_bias\": false, \"ff_hidden\": 16, "
                "\"eps\": 1e-5, \"dropout\": 0.0}",
     .config_keys = block_keys,
     .build = build_block,
     .inputs = B(NBTEST_X) | B(NBTEST_KEY_PADDING) | B(NBTEST_ATTN_MASK),
     .calls = {B(NBTEST_X)},
     .attends = true,
     .forward = block_forward,
     .golden = {block_files, nbtest_block_params, nbtest_block_reference, block_features,
                NBTEST_F_BLOCK | NBTEST_F_BLOCK_FULLY_PADDED}},
    {.type = "TransformerDecoderBlock",
     .example = "{\"d_model\": 4, \"num_heads\": 2, \"qkv_bias\": true, \"dropout\": 0.0}",
     .config_keys = decoder_keys,
     .build = build_decoder,
     .inputs = B(NBTEST_X_Q) | B(NBTEST_X_KV),
     .calls = {B(NBTEST_X_Q) | B(NBTEST_X_KV)},
     .forward = decoder_forward,
     .no_golden = "PyTorch's TransformerDecoderLayer goldens of its own: "
                  "tests/test_decoder_block.c"},
    {.type = "TransformerLM",
     .example = "{\"vocab\": 6, \"max_len\": 8, \"d_model\": 4, \"num_heads\": 2, "
                "\"layers\": 1, \"dropout\": 0.0}",
     .config_keys = lm_keys,
     .build = build_lm,
     .inputs = B(NBTEST_INDICES) | B(NBTEST_KEY_PADDING),
     .calls = {B(NBTEST_INDICES)},
     .attends = true,
     .forward = lm_forward,
     .no_golden = "blocks between an embedding and a head: tests/test_lm_config.c, "
                  "tests/test_generate.c and tests/test_interop.c (PyTorch checkpoints)"},
};
#undef B
const int nbtest_module_count = (int)(sizeof nbtest_modules / sizeof nbtest_modules[0]);

const nbtest_module *nbtest_module_find(const char *type) {
    for (int k = 0; type && k < nbtest_module_count; k++)
        if (strcmp(nbtest_modules[k].type, type) == 0) return &nbtest_modules[k];
    return NULL;
}
