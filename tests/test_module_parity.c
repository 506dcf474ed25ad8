/* nabla's nn modules against PyTorch. Every case of tests/goldens/modules.json, modules_masks.json
 * and modules_mha.json (written by tests/gen_module_goldens.py) is rebuilt with the real modules of
 * nn.h under a model of the case's dtype, the golden parameters are copied in by name, and the
 * module's forward runs with the case's inputs and flags; the output, the attention weights and,
 * after nb_backward(out, grad_out), every parameter and input gradient must match PyTorch's within
 * golden_compare's tolerances, and nothing may be NaN or infinite (fully padded sequences
 * included). MultiHeadAttention runs twice, with and without returning its weights, so both
 * the op-by-op and the fused path must give the golden output. Anything in a case this test does
 * not understand fails it: no case is skipped.
 *
 * Also TransformerBlock checkpoints: a bitwise round trip through nb_module_save/load, loads
 * that must fail and leave the model untouched (other dim, other dtype, other names, one
 * tensor missing), and tests/goldens/torch_block.safetensors, a block's state_dict written
 * from PyTorch, which must load and reproduce its golden case. */
#include "harness.h"
#include "golden.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_NAMED 32

/* ---- reading a case's config strictly --------------------------------------------------- */

/* False (printing why) if obj has a key outside keys (NULL-terminated): a constructor
 * argument or forward flag added to the generator must be handled here, not ignored. */
static bool only_keys(const json_t *obj, const char *what, const char *const *keys) {
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

/* ---- building the module of a case ------------------------------------------------------ */
typedef enum { M_LINEAR, M_LAYERNORM, M_EMBEDDING, M_MHA, M_BLOCK } module_kind;

typedef struct {
    module_kind kind;
    nb_module *model;  /* the root, freed by the caller with nb_module_free */
    nb_module *module; /* the module under test, named "" so its parameters have no prefix */
    nb_linear *linear;
    nb_layernorm *layernorm;
    nb_embedding_layer *embedding;
    nb_mha *mha;
    nb_transformer_block *block;
} built_module;

/* Builds c's module from its config in a fresh model of dtype dt; false after printing why
 * (b->model is then still the caller's to free). */
static bool build(const json_t *c, nb_dtype dt, built_module *b) {
    const char *module = json_string_value(json_object_get(c, "module"));
    const json_t *cfg = json_object_get(c, "config");
    *b = (built_module){.model = nb_model_new(dt, 2024)};
    if (!b->model || !module) return printf("    no model or no module name\n"), false;
    if (strcmp(module, "Linear") == 0) {
        static const char *const keys[] = {"in_features", "out_features", "bias", NULL};
        int64_t in, out;
        bool bias;
        if (!only_keys(cfg, "config", keys) || !get_int(cfg, "in_features", &in) ||
            !get_int(cfg, "out_features", &out) || !get_bool(cfg, "bias", &bias))
            return false;
        b->kind = M_LINEAR;
        b->linear = nb_linear_new(b->model, "", in, out, bias);
        b->module = b->linear ? &b->linear->base : NULL;
    } else if (strcmp(module, "LayerNorm") == 0) {
        static const char *const keys[] = {"normalized_shape", "eps", NULL};
        int64_t dim;
        double eps;
        if (!only_keys(cfg, "config", keys) || !get_int(cfg, "normalized_shape", &dim) ||
            !get_double(cfg, "eps", &eps))
            return false;
        b->kind = M_LAYERNORM;
        b->layernorm = nb_layernorm_new(b->model, "", dim);
        if (b->layernorm) b->layernorm->eps = eps, b->module = &b->layernorm->base;
    } else if (strcmp(module, "Embedding") == 0) {
        static const char *const keys[] = {"num_embeddings", "embedding_dim", NULL};
        int64_t num, dim;
        if (!only_keys(cfg, "config", keys) || !get_int(cfg, "num_embeddings", &num) ||
            !get_int(cfg, "embedding_dim", &dim))
            return false;
        b->kind = M_EMBEDDING;
        b->embedding = nb_embedding_new(b->model, "", num, dim);
        b->module = b->embedding ? &b->embedding->base : NULL;
    } else if (strcmp(module, "MultiHeadAttention") == 0) {
        static const char *const keys[] = {"d_in",    "d_out",    "num_heads", "qkv_bias",
                                           "dropout", "out_bias", NULL};
        int64_t d_in, d_out, heads;
        nb_mha_config mc;
        if (!only_keys(cfg, "config", keys) || !get_int(cfg, "d_in", &d_in) ||
            !get_int(cfg, "d_out", &d_out) || !get_int(cfg, "num_heads", &heads))
            return false;
        mc = nb_mha_defaults(d_in, d_out, heads); /* out_bias true unless the case says */
        if (!get_bool(cfg, "qkv_bias", &mc.qkv_bias) || !get_double(cfg, "dropout", &mc.dropout) ||
            (json_object_get(cfg, "out_bias") && !get_bool(cfg, "out_bias", &mc.out_bias)))
            return false;
        b->kind = M_MHA;
        b->mha = nb_mha_new_config(b->model, "", &mc);
        b->module = b->mha ? &b->mha->base : NULL;
    } else if (strcmp(module, "TransformerBlock") == 0) {
        static const char *const keys[] = {"d_model", "num_heads", "qkv_bias", "ff_hidden",
                                           "eps",     "dropout",   NULL};
        int64_t dim, heads, hidden;
        bool qkv_bias;
        double eps, dropout;
        if (!only_keys(cfg, "config", keys) || !get_int(cfg, "d_model", &dim) ||
            !get_int(cfg, "num_heads", &heads) || !get_bool(cfg, "qkv_bias", &qkv_bias) ||
            !get_int(cfg, "ff_hidden", &hidden) || !get_double(cfg, "eps", &eps) ||
            !get_double(cfg, "dropout", &dropout))
            return false;
        /* nabla's block fixes these two; a case asking for others cannot be built. */
        if (qkv_bias || hidden != 4 * dim) {
            printf("    nabla's TransformerBlock has no qkv bias and ff hidden 4 * d_model; the "
                   "case asks for qkv_bias %d, ff_hidden %lld\n",
                   qkv_bias, (long long)hidden);
            return false;
        }
        b->kind = M_BLOCK;
        b->block = nb_transformer_block_new(b->model, "", dim, heads, dropout);
        if (b->block) {
            b->block->norm1->eps = b->block->norm2->eps = eps;
            b->module = &b->block->base;
        }
    } else {
        printf("    unknown module \"%s\"\n", module);
        return false;
    }
    if (!b->module) printf("    cannot build the module: %s\n", nb_last_error());
    return b->module != NULL;
}

/* ---- copying the golden parameters in -------------------------------------------------- */
static bool same_shape(const nb_tensor *a, const nb_tensor *b) {
    return a->ndim == b->ndim &&
           (a->ndim == 0 || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0);
}

/* Copies every golden parameter into the module parameter of the same name; the two name
 * sets must be equal. False after printing why. */
static bool copy_parameters(const json_t *c, const built_module *b) {
    golden_named golden[MAX_NAMED];
    nb_param params[MAX_NAMED];
    int ngolden = golden_named_tensors(c, "parameters", golden, MAX_NAMED);
    int nparams = nb_module_params(b->module, params, MAX_NAMED);
    if (ngolden < 0 || nparams < 0) return printf("    cannot list the parameters\n"), false;
    bool ok = true;
    for (int k = 0; k < ngolden; k++) {
        nb_tensor *dst = nb_module_param(b->module, golden[k].name), *src = golden[k].tensor;
        if (!dst) {
            printf("    golden parameter %s: not in the module (%s)\n", golden[k].name,
                   nb_last_error());
            ok = false;
        } else if (dst->dtype != src->dtype || !same_shape(dst, src)) {
            char have[64], want[64];
            nb_shape_str(dst, have, sizeof have);
            nb_shape_str(src, want, sizeof want);
            printf("    parameter %s: the module has %s %s, the golden %s %s\n", golden[k].name,
                   nb_dtype_name(dst->dtype), have, nb_dtype_name(src->dtype), want);
            ok = false;
        } else if (!nb_copy_(dst, src)) {
            printf("    parameter %s: copy failed: %s\n", golden[k].name, nb_last_error());
            ok = false;
        }
    }
    for (int k = 0; k < nparams; k++)
        if (!golden_named_spec(c, "parameters", params[k].name)) {
            printf("    module parameter %s: not in the golden\n", params[k].name);
            ok = false;
        }
    return ok;
}

/* ---- inputs and forward flags ----------------------------------------------------------- */
enum { IN_X, IN_X_Q, IN_X_KV, IN_INDICES, IN_KEY_PADDING, IN_ATTN_MASK, IN_HEAD_MASK, N_INPUTS };
static const char *const input_names[N_INPUTS] = {
    "x", "x_q", "x_kv", "indices", "key_padding_mask", "attn_mask", "head_mask"};
#define BIT(i) (1u << (i))

typedef struct {
    golden_named list[MAX_NAMED];
    int n;
    nb_tensor *slot[N_INPUTS]; /* by role; NULL when the case has no such input */
    bool causal, want_weights;
} case_inputs;

/* Loads c's inputs into their roles and reads its forward flags and extra outputs; each must
 * be one the module of kind takes. False after printing why. */
static bool load_inputs(const json_t *c, module_kind kind, case_inputs *in) {
    static const unsigned allowed[] = {
        [M_LINEAR] = BIT(IN_X),
        [M_LAYERNORM] = BIT(IN_X),
        [M_EMBEDDING] = BIT(IN_INDICES),
        [M_MHA] = BIT(IN_X) | BIT(IN_X_Q) | BIT(IN_X_KV) | BIT(IN_KEY_PADDING) | BIT(IN_ATTN_MASK) |
                  BIT(IN_HEAD_MASK),
        [M_BLOCK] = BIT(IN_X) | BIT(IN_KEY_PADDING) | BIT(IN_ATTN_MASK),
    };
    memset(in, 0, sizeof *in);
    in->n = golden_named_tensors(c, "inputs", in->list, MAX_NAMED);
    if (in->n < 0) return false;
    unsigned present = 0;
    for (int k = 0; k < in->n; k++) {
        int role = 0;
        while (role < N_INPUTS && strcmp(in->list[k].name, input_names[role]) != 0) role++;
        if (role == N_INPUTS || (allowed[kind] & BIT(role)) == 0 || (present & BIT(role))) {
            printf("    input \"%s\": unknown, repeated or not taken by this module\n",
                   in->list[k].name);
            return false;
        }
        present |= BIT(role);
        in->slot[role] = in->list[k].tensor;
    }
    unsigned main_inputs = present & (BIT(IN_X) | BIT(IN_X_Q) | BIT(IN_X_KV) | BIT(IN_INDICES));
    bool complete = kind == M_EMBEDDING ? main_inputs == BIT(IN_INDICES)
                    : kind == M_MHA
                        ? main_inputs == BIT(IN_X) || main_inputs == (BIT(IN_X_Q) | BIT(IN_X_KV))
                        : main_inputs == BIT(IN_X);
    if (!complete) return printf("    the inputs do not make one forward call\n"), false;

    static const char *const attention_flags[] = {"causal", NULL}, *const no_flags[] = {NULL};
    bool attends = kind == M_MHA || kind == M_BLOCK;
    const json_t *fwd = json_object_get(c, "forward");
    if (!only_keys(fwd, "forward flag", attends ? attention_flags : no_flags)) return false;
    const json_t *causal = json_object_get(fwd, "causal");
    if (causal && !json_is_boolean(causal)) return printf("    causal: not a boolean\n"), false;
    in->causal = json_is_true(causal);

    const json_t *extra = json_object_get(c, "extra_outputs");
    if (!json_is_array(extra)) return printf("    no extra_outputs list\n"), false;
    for (size_t k = 0; k < json_array_size(extra); k++) {
        const char *name = json_string_value(json_object_get(json_array_get(extra, k), "name"));
        if (kind != M_MHA || !name || strcmp(name, "attn_weights") != 0 || in->want_weights) {
            printf("    extra output \"%s\": not one this module gives\n", name ? name : "?");
            return false;
        }
        in->want_weights = true;
    }
    return true;
}

static nb_tensor *forward(const built_module *b, const case_inputs *in, nb_tensor **weights) {
    nb_tensor *const *x = in->slot;
    nb_mha_opts opts = {.causal = in->causal,
                        .key_padding_mask = x[IN_KEY_PADDING],
                        .attn_mask = x[IN_ATTN_MASK],
                        .attn_weights = weights,
                        .head_mask = x[IN_HEAD_MASK]};
    switch (b->kind) {
    case M_LINEAR:
        return nb_linear_forward(b->linear, x[IN_X]);
    case M_LAYERNORM:
        return nb_layernorm_forward(b->layernorm, x[IN_X]);
    case M_EMBEDDING:
        return nb_embedding_forward(b->embedding, x[IN_INDICES]);
    case M_MHA:
        return x[IN_X] ? nb_mha_forward(b->mha, x[IN_X], &opts)
                       : nb_mha_forward_cross(b->mha, x[IN_X_Q], x[IN_X_KV], &opts);
    case M_BLOCK:
        return nb_transformer_block_forward(b->block, x[IN_X], &opts);
    }
    return NULL;
}

/* ---- comparing ------------------------------------------------------------------------ */
static bool all_finite(const nb_tensor *t) {
    int64_t n = nb_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    bool ok = v && nb_to_doubles(t, v);
    for (int64_t k = 0; ok && k < n; k++) ok = isfinite(v[k]);
    free(v);
    return ok;
}

typedef struct {
    bool ok;
    double worst_ratio; /* largest error / tolerance seen */
} tally;

/* Compares got with the golden spec want (golden_compare's tolerances) and requires every
 * element to be finite; prints what fails under the label what. */
static void compare(tally *t, const nb_tensor *got, const json_t *want, const char *what) {
    if (!got || !want) {
        printf("    %s: %s\n", what, got ? "not in the golden" : "no result");
        t->ok = false;
        return;
    }
    golden_cmp r = golden_compare(got, want);
    if (r.worst_ratio > t->worst_ratio) t->worst_ratio = r.worst_ratio;
    if (!r.ok) printf("    %s: %s\n", what, r.message), t->ok = false;
    if (nb_is_float(got) && !all_finite(got)) printf("    %s: NaN or inf\n", what), t->ok = false;
}

/* ---- one case -------------------------------------------------------------------------- */
/* What the cases cover, per dtype: the list, each required in f32 and in f64. */
enum {
    F_LINEAR = 1 << 0,
    F_LAYERNORM = 1 << 1,
    F_EMBEDDING = 1 << 2,
    F_MHA_CAUSAL = 1 << 3,
    F_MHA_PADDING = 1 << 4,
    F_MHA_FULLY_PADDED = 1 << 5,
    F_MHA_ATTN_MASK = 1 << 6,
    F_MHA_CROSS = 1 << 7,
    F_MHA_WEIGHTS = 1 << 8,
    F_MHA_BOTH_MASKS = 1 << 9,    /* key padding and attention mask together */
    F_MHA_CROSS_MASKED = 1 << 10, /* cross-attention with a key padding mask */
    F_BLOCK = 1 << 11,
    F_BLOCK_FULLY_PADDED = 1 << 12,
    F_MHA_NO_BIAS = 1 << 13,     /* no projection has a bias (PyTorch's bias=False) */
    F_MHA_FLOAT_MASK = 1 << 14,  /* a float attn_mask with finite non-zero values */
    F_MHA_MASK_B = 1 << 15,      /* attn_mask [B, T_q, T_k] */
    F_MHA_MASK_BH = 1 << 16,     /* attn_mask [B * H, T_q, T_k] */
    F_MHA_MASK_4D = 1 << 17,     /* attn_mask [B, H, T_q, T_k] */
    F_MHA_HEAD_MASK = 1 << 18,   /* head_mask, with its gradient */
    F_MHA_CAUSAL_RECT = 1 << 19, /* causal with T_q != T_k */
    F_ALL = (1 << 20) - 1
};

/* True if some sequence of the [B, T_k] key padding mask is padding throughout. */
static bool has_fully_padded(const nb_tensor *mask) {
    for (int64_t i = 0; i < mask->shape[0]; i++) {
        bool all = true;
        for (int64_t k = 0; k < mask->shape[1]; k++) all = all && nb_get(mask, NB_IDX(i, k)) != 0;
        if (all) return true;
    }
    return false;
}

/* The features of modules_mha.json. */
static unsigned mha_features(const nb_mha *m, const case_inputs *in) {
    const nb_tensor *am = in->slot[IN_ATTN_MASK];
    const nb_tensor *q = in->slot[IN_X] ? in->slot[IN_X] : in->slot[IN_X_Q];
    const nb_tensor *kv = in->slot[IN_X] ? in->slot[IN_X] : in->slot[IN_X_KV];
    unsigned f = 0;
    if (!m->W_query->bias && !m->out_proj->bias) f |= F_MHA_NO_BIAS;
    if (am && nb_is_float(am)) f |= F_MHA_FLOAT_MASK;
    if (am && am->ndim == 3 && am->shape[0] == q->shape[0]) f |= F_MHA_MASK_B;
    if (am && am->ndim == 3 && m->num_heads > 1 && am->shape[0] == q->shape[0] * m->num_heads)
        f |= F_MHA_MASK_BH;
    if (am && am->ndim == 4) f |= F_MHA_MASK_4D;
    if (in->slot[IN_HEAD_MASK] && in->slot[IN_HEAD_MASK]->requires_grad) f |= F_MHA_HEAD_MASK;
    if (in->causal && q->shape[1] != kv->shape[1]) f |= F_MHA_CAUSAL_RECT;
    return f;
}

static unsigned features_of(const built_module *b, const case_inputs *in) {
    const nb_tensor *pad = in->slot[IN_KEY_PADDING], *am = in->slot[IN_ATTN_MASK];
    bool fully_padded = pad && has_fully_padded(pad);
    switch (b->kind) {
    case M_LINEAR:
        return F_LINEAR;
    case M_LAYERNORM:
        return F_LAYERNORM;
    case M_EMBEDDING:
        return F_EMBEDDING;
    case M_BLOCK:
        return F_BLOCK | (fully_padded ? F_BLOCK_FULLY_PADDED : 0u);
    case M_MHA:
        return mha_features(b->mha, in) | (in->causal ? F_MHA_CAUSAL : 0u) |
               (pad ? F_MHA_PADDING : 0u) | (fully_padded ? F_MHA_FULLY_PADDED : 0u) |
               (am ? F_MHA_ATTN_MASK : 0u) | (pad && am ? F_MHA_BOTH_MASKS : 0u) |
               (in->slot[IN_X_Q] ? F_MHA_CROSS : 0u) |
               (in->slot[IN_X_Q] && pad ? F_MHA_CROSS_MASKED : 0u) |
               (in->want_weights ? F_MHA_WEIGHTS : 0u);
    }
    return 0;
}

static bool parse_case_dtype(const json_t *c, nb_dtype *dt, int *which) {
    const char *s = json_string_value(json_object_get(c, "dtype"));
    if (s && strcmp(s, "f32") == 0) return *dt = NB_F32, *which = 0, true;
    if (s && strcmp(s, "f64") == 0) return *dt = NB_F64, *which = 1, true;
    printf("    dtype \"%s\": not f32 or f64\n", s ? s : "?");
    return false;
}

/* Gradients: every module parameter's and every input's that requires grad, and nothing
 * else in the golden. */
static void compare_gradients(tally *t, const json_t *c, const built_module *b,
                              const case_inputs *in) {
    nb_param params[MAX_NAMED];
    int nparams = nb_module_params(b->module, params, MAX_NAMED);
    for (int k = 0; k < nparams; k++)
        compare(t, nb_grad(params[k].tensor),
                golden_named_spec(c, "parameter_grads", params[k].name), params[k].name);
    size_t ngolden = json_array_size(json_object_get(c, "parameter_grads"));
    if (nparams < 0 || ngolden != (size_t)nparams) {
        printf("    %zu parameter gradients in the golden, %d parameters\n", ngolden, nparams);
        t->ok = false;
    }
    size_t ninputs = 0;
    for (int k = 0; k < in->n; k++) {
        const nb_tensor *x = in->list[k].tensor;
        if (!x->requires_grad) continue;
        ninputs++;
        compare(t, nb_grad(x), golden_named_spec(c, "input_grads", in->list[k].name),
                in->list[k].name);
    }
    ngolden = json_array_size(json_object_get(c, "input_grads"));
    if (ngolden != ninputs) {
        printf("    %zu input gradients in the golden, %zu inputs require grad\n", ngolden,
               ninputs);
        t->ok = false;
    }
}

/* Runs case c through nabla's module; adds what it covered to features[dtype]. Prints one
 * line, and the reasons when it fails. */
static bool run_case(const json_t *c, unsigned features[2]) {
    const char *name = json_string_value(json_object_get(c, "name"));
    tally t = {.ok = true};
    built_module b = {0};
    case_inputs in;
    nb_dtype dt;
    int which = 0;
    nb_scope_begin();
    t.ok = parse_case_dtype(c, &dt, &which) && build(c, dt, &b) && copy_parameters(c, &b) &&
           load_inputs(c, b.kind, &in);
    nb_tensor *weights = NULL, *out = NULL;
    if (t.ok && b.kind == M_MHA) /* without weights: the fused path where masks allow it */
        compare(&t, forward(&b, &in, NULL), json_object_get(c, "output"), "output (no weights)");
    if (t.ok) {
        out = forward(&b, &in, in.want_weights ? &weights : NULL);
        compare(&t, out, json_object_get(c, "output"), "output");
        if (in.want_weights)
            compare(&t, weights, golden_named_spec(c, "extra_outputs", "attn_weights"),
                    "attention weights");
    }
    if (t.ok) {
        nb_tensor *grad_out = golden_tensor(json_object_get(c, "grad_output"), GOLDEN_CONTIGUOUS);
        if (!grad_out || !nb_backward(out, grad_out))
            printf("    backward: %s\n", nb_last_error()), t.ok = false;
    }
    if (t.ok) compare_gradients(&t, c, &b, &in);
    if (t.ok) features[which] |= features_of(&b, &in);
    nb_scope_end();
    nb_module_free(b.model);
    printf("  %-4s %-78s %.2g of tolerance\n", t.ok ? "ok" : "FAIL", name ? name : "(unnamed)",
           t.worst_ratio);
    return t.ok;
}

/* Every case name "<module> <label> f32" has its "... f64" twin and the other way round. */
static bool has_twin(const json_t *root, const char *name) {
    size_t len = name ? strlen(name) : 0;
    if (len < 4) return false;
    const char *suffix = name + len - 4;
    const char *twin_suffix = strcmp(suffix, " f32") == 0   ? " f64"
                              : strcmp(suffix, " f64") == 0 ? " f32"
                                                            : NULL;
    if (!twin_suffix) return false;
    char twin[256];
    snprintf(twin, sizeof twin, "%.*s%s", (int)(len - 4), name, twin_suffix);
    return golden_find_case(root, twin) != NULL;
}

/* Runs every case of golden file `file`; returns the number that failed (or have no twin). */
static int run_file(const char *file, unsigned features[2]) {
    json_t *root = golden_load(file);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const json_t *cases = json_object_get(root, "cases");
    CU_ASSERT_TRUE(json_array_size(cases) > 0);
    int failures = 0;
    printf("%s\n", file);
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *c = json_array_get(cases, k);
        failures += !run_case(c, features);
        const char *name = json_string_value(json_object_get(c, "name"));
        if (!has_twin(root, name))
            printf("  no f32/f64 twin for %s\n", name ? name : "(unnamed)"), failures++;
    }
    json_decref(root);
    return failures;
}

static void test_every_golden_case(void) {
    unsigned features[2] = {0, 0};
    printf("\n");
    int failures = run_file("modules.json", features) + run_file("modules_masks.json", features) +
                   run_file("modules_mha.json", features);
    CU_ASSERT_EQUAL(failures, 0);
    for (int w = 0; w < 2; w++)
        if (features[w] != F_ALL)
            printf("  %s: features 0x%x are not covered by a passing case\n", w ? "f64" : "f32",
                   (unsigned)F_ALL & ~features[w]);
    CU_ASSERT_EQUAL(features[0], F_ALL);
    CU_ASSERT_EQUAL(features[1], F_ALL);
}

/* ---- checkpoints ---------------------------------------------------------------------- */
static char tmp_dir[64];

static const char *tmp_path(const char *name) {
    static char bufs[4][sizeof tmp_dir + 1 + 256]; /* d_name is up to 255 */
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", tmp_dir, name);
    return b;
}

/* Same dtype, shape and bits (f32 widens to double exactly and one-to-one). */
static bool bitwise_equal(const nb_tensor *a, const nb_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || !same_shape(a, b)) return false;
    int64_t n = nb_numel(a);
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *y = malloc(sizeof(double) * (size_t)(n ? n : 1));
    bool ok = x && y && nb_to_doubles(a, x) && nb_to_doubles(b, y) &&
              memcmp(x, y, sizeof(double) * (size_t)n) == 0;
    free(x), free(y);
    return ok;
}

/* The two subtrees have the same parameter names in the same order, bit for bit equal. */
/* The same parameter values in the same order, and the same names if `names`. */
static bool same_values(const nb_module *a, const nb_module *b, bool names) {
    nb_param pa[MAX_NAMED], pb[MAX_NAMED];
    int na = nb_module_params(a, pa, MAX_NAMED), nb = nb_module_params(b, pb, MAX_NAMED);
    bool ok = na > 0 && na == nb;
    for (int k = 0; ok && k < na; k++)
        ok = (!names || strcmp(pa[k].name, pb[k].name) == 0) &&
             bitwise_equal(pa[k].tensor, pb[k].tensor);
    return ok;
}

static bool same_parameters(const nb_module *a, const nb_module *b) {
    return same_values(a, b, true);
}

static bool same_file_bytes(const char *p, const char *q) {
    FILE *f = fopen(p, "rb"), *g = fopen(q, "rb");
    bool same = f && g;
    while (same) {
        int a = fgetc(f), b = fgetc(g);
        same = a == b;
        if (a == EOF) break;
    }
    if (f) fclose(f);
    if (g) fclose(g);
    return same;
}

/* Copies of every parameter of a subtree, to tell later whether any changed. */
typedef struct {
    nb_param params[MAX_NAMED];
    nb_tensor *copies[MAX_NAMED];
    int n;
} snapshot;

static void take_snapshot(const nb_module *m, snapshot *s) {
    s->n = nb_module_params(m, s->params, MAX_NAMED);
    for (int k = 0; k < s->n; k++) s->copies[k] = nb_clone(s->params[k].tensor);
}

static bool unchanged(const snapshot *s) {
    bool ok = s->n > 0;
    for (int k = 0; ok && k < s->n; k++) ok = bitwise_equal(s->params[k].tensor, s->copies[k]);
    return ok;
}

static void test_block_round_trip_bitwise(void) {
    const nb_dtype dts[] = {NB_F32, NB_F64};
    for (int d = 0; d < 2; d++) {
        nb_module *model_a = nb_model_new(dts[d], 1), *model_b = nb_model_new(dts[d], 2);
        nb_transformer_block *a = nb_transformer_block_new(model_a, "", 8, 2, 0.0);
        nb_transformer_block *b = nb_transformer_block_new(model_b, "", 8, 2, 0.0);
        CU_ASSERT_TRUE_FATAL(a && b);
        const char *path = tmp_path(d ? "block_f64.safetensors" : "block_f32.safetensors");
        CU_ASSERT_TRUE(nb_module_save(&a->base, path));
        /* Different seeds: the load has every Linear weight to change. */
        CU_ASSERT_FALSE(same_parameters(&a->base, &b->base));
        CU_ASSERT_TRUE(nb_module_load(&b->base, path));
        CU_ASSERT_TRUE(same_parameters(&a->base, &b->base));

        /* The loaded block computes bit for bit what the saved one does... */
        nb_rng rng;
        nb_rng_seed(&rng, 7);
        nb_tensor *x = nb_randn(&rng, dts[d], NB_SHAPE(2, 5, 8));
        const nb_mha_opts causal = {.causal = true};
        CU_ASSERT_TRUE(bitwise_equal(nb_transformer_block_forward(a, x, &causal),
                                     nb_transformer_block_forward(b, x, &causal)));
        /* ...and saves to the same bytes. */
        const char *again = tmp_path(d ? "again_f64.safetensors" : "again_f32.safetensors");
        CU_ASSERT_TRUE(nb_module_save(&b->base, again));
        CU_ASSERT_TRUE(same_file_bytes(path, again));
        nb_module_free(model_a);
        nb_module_free(model_b);
    }
}

/* Loads path into m and expects failure with an error naming the file and saying why, and
 * every parameter of m as it was. */
static void expect_load_refused(nb_module *m, const char *path, const char *why) {
    snapshot before;
    take_snapshot(m, &before);
    nb_clear_error();
    CU_ASSERT_FALSE(nb_module_load(m, path));
    const char *err = nb_last_error();
    bool explained = strstr(err, path) && strstr(err, why);
    CU_ASSERT_TRUE(explained);
    if (!explained) printf("\n    expected an error with \"%s\", got \"%s\"\n", why, err);
    CU_ASSERT_TRUE(unchanged(&before));
}

static void test_block_load_mismatch_leaves_model(void) {
    nb_module *saved = nb_model_new(NB_F32, 1);
    nb_transformer_block *block = nb_transformer_block_new(saved, "", 8, 2, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(block);
    const char *path = tmp_path("dim8.safetensors");
    CU_ASSERT_TRUE_FATAL(nb_module_save(&block->base, path));

    /* Another dim: same names, other shapes. */
    nb_module *wider = nb_model_new(NB_F32, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nb_transformer_block_new(wider, "", 12, 2, 0.0));
    expect_load_refused(wider, path, "shape");

    /* The same block in f64. */
    nb_module *doubles = nb_model_new(NB_F64, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nb_transformer_block_new(doubles, "", 8, 2, 0.0));
    expect_load_refused(doubles, path, "dtype");

    /* The same block under another name loads: names are relative to the module loaded, and
     * loading into the root matches "block.norm1.weight" to the file's "norm1.weight". */
    nb_module *named = nb_model_new(NB_F32, 3);
    nb_transformer_block *renamed = nb_transformer_block_new(named, "block", 8, 2, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(renamed);
    CU_ASSERT_TRUE(nb_module_load(&renamed->base, path));
    CU_ASSERT_TRUE(same_values(&block->base, &renamed->base, false));
    nb_module_free(named);
    named = nb_model_new(NB_F32, 3);
    renamed = nb_transformer_block_new(named, "block", 8, 2, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(renamed);
    CU_ASSERT_TRUE(nb_module_load(named, path));
    CU_ASSERT_TRUE(same_values(&block->base, &renamed->base, false));

    /* The same block beside one more Linear: every block tensor in the file matches and
     * differs from the model's, yet nothing is written because "extra.weight" is missing. */
    nb_module *bigger = nb_model_new(NB_F32, 3);
    nb_transformer_block *same = nb_transformer_block_new(bigger, "", 8, 2, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(same);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nb_linear_new(bigger, "extra", 8, 8, true));
    CU_ASSERT_FALSE(same_parameters(&block->base, &same->base));
    expect_load_refused(bigger, path, "missing");

    nb_module_free(saved);
    nb_module_free(wider);
    nb_module_free(doubles);
    nb_module_free(named);
    nb_module_free(bigger);
}

/* tests/goldens/torch_block.safetensors is the state_dict of this case's PyTorch block
 * (tests/gen_module_goldens.py writes both). */
#define TORCH_BLOCK_CASE "TransformerBlock causal, perturbed layer norms f32"

static void test_block_from_pytorch(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/torch_block.safetensors", golden_dir());
    json_t *root = golden_load("modules.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const json_t *c = golden_find_case(root, TORCH_BLOCK_CASE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    built_module b;
    case_inputs in;
    bool built = build(c, NB_F32, &b) && load_inputs(c, b.kind, &in);
    CU_ASSERT_TRUE(built);
    if (built) {
        bool loaded = nb_module_load(b.module, path);
        if (!loaded) printf("\n    %s\n", nb_last_error());
        CU_ASSERT_TRUE(loaded);
        /* Exactly the case's parameters... */
        nb_param params[MAX_NAMED];
        int n = nb_module_params(b.module, params, MAX_NAMED);
        CU_ASSERT_EQUAL(n, 13);
        for (int k = 0; k < n; k++) {
            golden_cmp r = golden_compare_tol(
                params[k].tensor, golden_named_spec(c, "parameters", params[k].name), 0, 0);
            if (!r.ok) printf("\n    %s: %s\n", params[k].name, r.message);
            CU_ASSERT_TRUE(r.ok);
        }
        /* ...so the block gives the case's output. */
        golden_cmp r = golden_compare(forward(&b, &in, NULL), json_object_get(c, "output"));
        if (!r.ok) printf("\n    output: %s\n", r.message);
        CU_ASSERT_TRUE(r.ok);
    }
    nb_module_free(b.model);
    json_decref(root);
}

static void remove_tmp_dir(void) {
    DIR *d = opendir(tmp_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(tmp_path(e->d_name));
    closedir(d);
    rmdir(tmp_dir);
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/nabla_module_parity_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    const nbtest_case cases[] = {
        {"nabla's modules reproduce every PyTorch module golden", test_every_golden_case},
        {"TransformerBlock checkpoint round trip is bitwise", test_block_round_trip_bitwise},
        {"mismatched checkpoint loads leave the model untouched",
         test_block_load_mismatch_leaves_model},
        {"TransformerBlock weights saved from PyTorch load and reproduce the golden",
         test_block_from_pytorch},
    };
    int status = nbtest_run("module parity", cases, sizeof cases / sizeof cases[0]);
    remove_tmp_dir();
    return status;
}
