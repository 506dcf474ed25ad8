/* The module goldens (tests/goldens/modules.json, written by tests/gen_module_goldens.py):
 * every case loads through golden_named_tensors under the parameter names nabla's modules
 * use, with shapes that follow from its config; and the same computations written with
 * nabla's functional ops (matmul, masked_softmax, layer_norm, ...) reproduce PyTorch's
 * outputs, attention weights and every parameter and input gradient. The second check pins
 * the goldens' conventions (weight [out, in], true = blocked, empty rows give zeros) to
 * nabla's ops before the modules that must match them exist. */
#include "harness.h"
#include "golden.h"

#include <stdio.h>

#define MAX_NAMED 16
#define NAME_LEN 128 /* room for a prefix of under 64 and a leaf name */

/* One module case, loaded. */
typedef struct {
    const json_t *c;
    golden_named params[MAX_NAMED], inputs[MAX_NAMED];
    int nparams, ninputs;
} module_case;

static nb_tensor *named(const golden_named *list, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(list[k].name, name) == 0) return list[k].tensor;
    return NULL;
}
static nb_tensor *param(const module_case *m, const char *name) {
    return named(m->params, m->nparams, name);
}
static nb_tensor *input(const module_case *m, const char *name) {
    return named(m->inputs, m->ninputs, name);
}
static int64_t config_int(const json_t *c, const char *key) {
    return json_integer_value(json_object_get(json_object_get(c, "config"), key));
}
static bool config_bool(const json_t *c, const char *key) {
    return json_is_true(json_object_get(json_object_get(c, "config"), key));
}
static bool forward_bool(const json_t *c, const char *key) {
    return json_is_true(json_object_get(json_object_get(c, "forward"), key));
}

/* ---- the names and shapes nabla's modules use, from the config alone ------------------- */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} expected_param;

static int linear_params(expected_param *out, const char *prefix, int64_t in, int64_t outf,
                         bool bias, char names[][NAME_LEN]) {
    int n = 0;
    snprintf(names[0], NAME_LEN, "%s%sweight", prefix, *prefix ? "." : "");
    out[n++] = (expected_param){names[0], 2, {outf, in}};
    if (bias) {
        snprintf(names[1], NAME_LEN, "%s%sbias", prefix, *prefix ? "." : "");
        out[n++] = (expected_param){names[1], 1, {outf, 0}};
    }
    return n;
}

static int mha_params(expected_param *out, const char *prefix, int64_t d_in, int64_t d_out,
                      bool qkv_bias, char names[][NAME_LEN]) {
    static const char *const proj[] = {"W_query", "W_key", "W_value"};
    int n = 0;
    char p[64];
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s%s", prefix, proj[k]);
        n += linear_params(out + n, p, d_in, d_out, qkv_bias, names + n);
    }
    snprintf(p, sizeof p, "%sout_proj", prefix);
    return n + linear_params(out + n, p, d_out, d_out, true, names + n);
}

/* Fills out with the expected parameter list of c's module; -1 for an unknown module. */
static int expected_params(const json_t *c, expected_param *out, char names[][NAME_LEN]) {
    const char *module = json_string_value(json_object_get(c, "module"));
    if (!module) return -1;
    if (strcmp(module, "Linear") == 0)
        return linear_params(out, "", config_int(c, "in_features"), config_int(c, "out_features"),
                             config_bool(c, "bias"), names);
    if (strcmp(module, "LayerNorm") == 0) {
        int64_t d = config_int(c, "normalized_shape");
        out[0] = (expected_param){"weight", 1, {d, 0}};
        out[1] = (expected_param){"bias", 1, {d, 0}};
        return 2;
    }
    if (strcmp(module, "Embedding") == 0) {
        out[0] = (expected_param){
            "weight", 2, {config_int(c, "num_embeddings"), config_int(c, "embedding_dim")}};
        return 1;
    }
    if (strcmp(module, "MultiHeadAttention") == 0)
        return mha_params(out, "", config_int(c, "d_in"), config_int(c, "d_out"),
                          config_bool(c, "qkv_bias"), names);
    if (strcmp(module, "TransformerBlock") == 0) {
        int64_t d = config_int(c, "d_model"), h = config_int(c, "ff_hidden");
        int n = 0;
        out[n++] = (expected_param){"norm1.weight", 1, {d, 0}};
        out[n++] = (expected_param){"norm1.bias", 1, {d, 0}};
        n += mha_params(out + n, "attn.", d, d, config_bool(c, "qkv_bias"), names + n);
        out[n++] = (expected_param){"norm2.weight", 1, {d, 0}};
        out[n++] = (expected_param){"norm2.bias", 1, {d, 0}};
        n += linear_params(out + n, "ff.fc1", d, h, true, names + n);
        n += linear_params(out + n, "ff.fc2", h, d, true, names + n);
        return n;
    }
    return -1;
}

static bool has_shape(const nb_tensor *t, int ndim, const int64_t *shape) {
    if (!t || t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) return false;
    return true;
}

static bool load(const json_t *c, module_case *m) {
    m->c = c;
    m->nparams = golden_named_tensors(c, "parameters", m->params, MAX_NAMED);
    m->ninputs = golden_named_tensors(c, "inputs", m->inputs, MAX_NAMED);
    return m->nparams >= 0 && m->ninputs >= 0;
}

/* Checks one case's names, order, shapes and grad flags; prints what is wrong. */
static bool check_names(const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    expected_param want[MAX_NAMED];
    char names[MAX_NAMED][NAME_LEN];
    int nwant = expected_params(c, want, names);
    module_case m;
    nb_scope_begin();
    bool ok = nwant > 0 && load(c, &m) && m.nparams == nwant;
    for (int k = 0; ok && k < nwant; k++) {
        const nb_tensor *p = m.params[k].tensor;
        const json_t *g = golden_named_spec(c, "parameter_grads", want[k].name);
        ok = strcmp(m.params[k].name, want[k].name) == 0 && p->requires_grad &&
             has_shape(p, want[k].ndim, want[k].shape) && g &&
             json_array_size(json_object_get(g, "shape")) == (size_t)want[k].ndim;
        if (!ok) printf("    parameter %d: expected %s\n", k, want[k].name);
    }
    /* Every float input requires grad and has a gradient; index and mask inputs do not. */
    for (int k = 0; ok && k < m.ninputs; k++) {
        const nb_tensor *x = m.inputs[k].tensor;
        bool has_grad = golden_named_spec(c, "input_grads", m.inputs[k].name) != NULL;
        ok = nb_is_float(x) == x->requires_grad && x->requires_grad == has_grad;
        if (!ok) printf("    input %s: grad flags disagree\n", m.inputs[k].name);
    }
    nb_scope_end();
    printf("  %-4s %s: %d parameters\n", ok ? "ok" : "FAIL", name ? name : "(unnamed)", nwant);
    return ok;
}

/* ---- the modules' computations from nabla's functional ops ------------------------------ */
static nb_tensor *linear(const module_case *m, const char *prefix, nb_tensor *x) {
    char w[96], b[96];
    snprintf(w, sizeof w, "%s%sweight", prefix, *prefix ? "." : "");
    snprintf(b, sizeof b, "%s%sbias", prefix, *prefix ? "." : "");
    nb_tensor *y = nb_matmul(x, nb_transpose(param(m, w), 0, 1));
    return param(m, b) ? nb_add(y, param(m, b)) : y;
}

/* [B, T, H*hd] -> [B, H, T, hd] */
static nb_tensor *split_heads(nb_tensor *y, int64_t heads) {
    if (!y) return NULL;
    int64_t b = y->shape[0], t = y->shape[1], hd = y->shape[2] / heads;
    return nb_transpose(nb_view(y, NB_SHAPE(b, t, heads, hd)), 1, 2);
}

/* key padding [B, T_k] and attention mask [T_q, T_k] as one [B, 1, T_q, T_k] mask (or NULL). */
static nb_tensor *combined_mask(const nb_tensor *kpm, const nb_tensor *am, int64_t b, int64_t tq,
                                int64_t tk) {
    if (!kpm && !am) return NULL;
    nb_tensor *mask = nb_zeros(NB_BOOL, NB_SHAPE(b, 1, tq, tk));
    for (int64_t i = 0; i < b; i++)
        for (int64_t q = 0; q < tq; q++)
            for (int64_t k = 0; k < tk; k++) {
                bool blocked = (kpm && nb_get(kpm, NB_IDX(i, k)) != 0) ||
                               (am && nb_get(am, NB_IDX(q, k)) != 0);
                nb_set(mask, NB_IDX(i, 0, q, k), blocked);
            }
    return mask;
}

static nb_tensor *attention(const module_case *m, const char *prefix, nb_tensor *xq, nb_tensor *xkv,
                            int64_t heads, nb_tensor **weights) {
    char name[96];
    nb_tensor *qkv[3];
    static const char *const proj[] = {"W_query", "W_key", "W_value"};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s%s", prefix, proj[k]);
        qkv[k] = split_heads(linear(m, name, k == 0 ? xq : xkv), heads);
    }
    if (!qkv[0] || !qkv[1] || !qkv[2]) return NULL;
    int64_t b = xq->shape[0], tq = xq->shape[1], tk = xkv->shape[1], hd = qkv[0]->shape[3];
    nb_tensor *mask = combined_mask(input(m, "key_padding_mask"), input(m, "attn_mask"), b, tq, tk);
    nb_tensor *scores = nb_matmul(qkv[0], nb_transpose(qkv[1], -2, -1));
    nb_tensor *attn =
        nb_masked_softmax(scores, mask, forward_bool(m->c, "causal"), 1.0 / sqrt((double)hd));
    *weights = attn;
    nb_tensor *context = nb_transpose(nb_matmul(attn, qkv[2]), 1, 2);
    snprintf(name, sizeof name, "%sout_proj", prefix);
    return linear(m, name, nb_view(nb_contiguous(context), NB_SHAPE(b, tq, hd * heads)));
}

static nb_tensor *layer_norm(const module_case *m, const char *prefix, nb_tensor *x, double eps) {
    char w[96], b[96];
    snprintf(w, sizeof w, "%s%sweight", prefix, *prefix ? "." : "");
    snprintf(b, sizeof b, "%s%sbias", prefix, *prefix ? "." : "");
    return nb_layer_norm(x, param(m, w), param(m, b), eps);
}

static double config_double(const json_t *c, const char *key) {
    return json_number_value(json_object_get(json_object_get(c, "config"), key));
}

/* The module's output for a loaded case; *weights gets attention weights when there are. */
static nb_tensor *forward(const module_case *m, nb_tensor **weights) {
    const char *module = json_string_value(json_object_get(m->c, "module"));
    *weights = NULL;
    if (strcmp(module, "Linear") == 0) return linear(m, "", input(m, "x"));
    if (strcmp(module, "LayerNorm") == 0)
        return layer_norm(m, "", input(m, "x"), config_double(m->c, "eps"));
    if (strcmp(module, "Embedding") == 0)
        return nb_embedding(param(m, "weight"), input(m, "indices"));
    if (strcmp(module, "MultiHeadAttention") == 0) {
        nb_tensor *xq = input(m, "x") ? input(m, "x") : input(m, "x_q");
        nb_tensor *xkv = input(m, "x") ? input(m, "x") : input(m, "x_kv");
        return attention(m, "", xq, xkv, config_int(m->c, "num_heads"), weights);
    }
    if (strcmp(module, "TransformerBlock") == 0) {
        double eps = config_double(m->c, "eps");
        nb_tensor *x = input(m, "x"), *n1 = layer_norm(m, "norm1", x, eps);
        x = nb_add(x, attention(m, "attn.", n1, n1, config_int(m->c, "num_heads"), weights));
        nb_tensor *hidden = nb_gelu(linear(m, "ff.fc1", layer_norm(m, "norm2", x, eps)));
        return nb_add(x, linear(m, "ff.fc2", hidden));
    }
    return NULL;
}

static void worst(double *max_ratio, bool *ok, golden_cmp r, const char *what) {
    if (r.worst_ratio > *max_ratio) *max_ratio = r.worst_ratio;
    if (!r.ok) printf("    %s: %s\n", what, r.message), *ok = false;
}

static bool check_forward_backward(const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    module_case m;
    double ratio = 0;
    nb_scope_begin();
    bool ok = load(c, &m);
    nb_tensor *weights = NULL, *out = ok ? forward(&m, &weights) : NULL;
    worst(&ratio, &ok, golden_compare(out, json_object_get(c, "output")), "output");
    const json_t *w = golden_named_spec(c, "extra_outputs", "attn_weights");
    if (w) worst(&ratio, &ok, golden_compare(weights, w), "attention weights");
    nb_tensor *g = golden_tensor(json_object_get(c, "grad_output"), GOLDEN_CONTIGUOUS);
    if (ok && !nb_backward(out, g)) printf("    backward: %s\n", nb_last_error()), ok = false;
    for (int k = 0; ok && k < m.nparams; k++)
        worst(&ratio, &ok,
              golden_compare(nb_grad(m.params[k].tensor),
                             golden_named_spec(c, "parameter_grads", m.params[k].name)),
              m.params[k].name);
    for (int k = 0; ok && k < m.ninputs; k++)
        if (m.inputs[k].tensor->requires_grad)
            worst(&ratio, &ok,
                  golden_compare(nb_grad(m.inputs[k].tensor),
                                 golden_named_spec(c, "input_grads", m.inputs[k].name)),
                  m.inputs[k].name);
    nb_scope_end();
    printf("  %-4s %-64s %.2g of tolerance\n", ok ? "ok" : "FAIL", name ? name : "(unnamed)",
           ratio);
    return ok;
}

static void for_every_case(bool (*check)(const json_t *)) {
    json_t *root = golden_load("modules.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const json_t *cases = json_object_get(root, "cases");
    int failures = 0;
    for (size_t k = 0; k < json_array_size(cases); k++)
        failures += !check(json_array_get(cases, k));
    /* Linear x2, LayerNorm x2, Embedding, MHA x6, TransformerBlock x2; in f32 and f64. */
    CU_ASSERT_EQUAL(json_array_size(cases), 26);
    CU_ASSERT_EQUAL(failures, 0);
    json_decref(root);
}

static void test_names_and_shapes(void) {
    for_every_case(check_names);
}
static void test_functional_reproduction(void) {
    for_every_case(check_forward_backward);
}

int main(void) {
    const nbtest_case cases[] = {
        {"module goldens load under nabla's parameter names", test_names_and_shapes},
        {"nabla's functional ops reproduce the module goldens", test_functional_reproduction},
    };
    return nbtest_run("module goldens", cases, sizeof cases / sizeof cases[0]);
}
