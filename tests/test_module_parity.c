/* nabla's nn modules against PyTorch. Every case of the golden files the module table lists
 * (module_table.h; tests/gen_module_goldens.py writes them) is rebuilt with the real modules of
 * nn.h, through the case's row of the table, under a model of the case's dtype, the golden
 * parameters are copied in by name, and the module's forward runs with the case's inputs and flags;
 * the output, the attention weights and, after nb_backward(out, grad_out), every parameter and
 * input gradient must match PyTorch's within golden_compare's tolerances, and nothing may be NaN or
 * infinite (fully padded sequences included). MultiHeadAttention runs twice, with and without
 * returning its weights, so both the op-by-op and the fused path must give the golden output.
 * Anything in a case this test does not understand fails it: no case is skipped.
 *
 * Also TransformerBlock checkpoints: a bitwise round trip through nb_module_save/load, loads
 * that must fail and leave the model untouched (other dim, other dtype, other names, one
 * tensor missing), and tests/goldens/torch_block.safetensors, a block's state_dict written
 * from PyTorch, which must load and reproduce its golden case. */
#include "harness.h"
#include "module_table.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_NAMED 32

/* ---- building the module of a case ------------------------------------------------------ */
typedef struct {
    const nbtest_module *row; /* the case's row of the module table */
    nb_module *model;         /* the root, freed by the caller with nb_module_free */
    nb_module *module;        /* the module under test, named "" so its parameters have no prefix */
} built_module;

/* Builds c's module from its config in a fresh model of dtype dt; false after printing why
 * (b->model is then still the caller's to free). */
static bool build(const json_t *c, nb_dtype dt, built_module *b) {
    const char *module = json_string_value(json_object_get(c, "module"));
    const json_t *cfg = json_object_get(c, "config");
    *b = (built_module){.model = nb_model_new(dt, 2024), .row = nbtest_module_find(module)};
    if (!b->model || !module) return printf("    no model or no module name\n"), false;
    if (!b->row || !b->row->golden.files)
        return printf("    module \"%s\": no row with goldens in tests/module_table.c\n", module),
               false;
    if (!nbtest_only_keys(cfg, "config", b->row->config_keys)) return false;
    b->module = b->row->build(b->model, "", cfg);
    if (!b->module)
        printf("    cannot build the module: %s\n", nb_last_error());
    else if (strcmp(b->module->type, b->row->type) != 0)
        printf("    the row of %s builds a %s\n", b->row->type, b->module->type), b->module = NULL;
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
    int nparams = nb_module_named_params(b->module, params, MAX_NAMED);
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
typedef struct {
    golden_named list[MAX_NAMED];
    int n;
    nbtest_call call; /* weights unset */
    bool want_weights;
} case_inputs;

static bool load_inputs(const json_t *c, const built_module *b, case_inputs *in) {
    return nbtest_load_call(c, b->row, in->list, MAX_NAMED, &in->n, &in->call, &in->want_weights);
}

static nb_tensor *forward(const built_module *b, const case_inputs *in, nb_tensor **weights) {
    nbtest_call call = in->call;
    call.weights = weights;
    return b->row->forward(b->module, &call);
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
/* The features of a passing case, from its row (module_table.h). */
static unsigned features_of(const built_module *b, const case_inputs *in, nb_tensor **weights) {
    nbtest_call call = in->call;
    call.weights = weights;
    return b->row->golden.features(b->module, &call);
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
    int nparams = nb_module_named_params(b->module, params, MAX_NAMED);
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
           load_inputs(c, &b, &in);
    nb_tensor *weights = NULL, *out = NULL;
    if (t.ok && b.row->gives_weights) /* without weights: the fused path where masks allow */
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
    if (t.ok) features[which] |= features_of(&b, &in, in.want_weights ? &weights : NULL);
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

/* The golden files of every row of the module table, each once; the count, or -1. */
static int golden_files(const char **out, int max) {
    int n = 0;
    for (int r = 0; r < nbtest_module_count; r++)
        for (const char *const *f = nbtest_modules[r].golden.files; f && *f; f++) {
            bool seen = false;
            for (int k = 0; k < n && !seen; k++) seen = strcmp(out[k], *f) == 0;
            if (seen) continue;
            if (n == max) return -1;
            out[n++] = *f;
        }
    return n;
}

static void test_every_golden_case(void) {
    unsigned features[2] = {0, 0}, required = 0;
    const char *files[16];
    int nfiles = golden_files(files, 16), failures = 0;
    printf("\n");
    CU_ASSERT_TRUE_FATAL(nfiles > 0);
    for (int k = 0; k < nfiles; k++) failures += run_file(files[k], features);
    CU_ASSERT_EQUAL(failures, 0);
    for (int r = 0; r < nbtest_module_count; r++) required |= nbtest_modules[r].golden.required;
    for (int w = 0; w < 2; w++)
        if (features[w] != required)
            printf("  %s: features 0x%x are not covered by a passing case\n", w ? "f64" : "f32",
                   required & ~features[w]);
    CU_ASSERT_EQUAL(features[0], required);
    CU_ASSERT_EQUAL(features[1], required);
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
    int na = nb_module_named_params(a, pa, MAX_NAMED),
        nb = nb_module_named_params(b, pb, MAX_NAMED);
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
    s->n = nb_module_named_params(m, s->params, MAX_NAMED);
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
    bool built = build(c, NB_F32, &b) && load_inputs(c, &b, &in);
    CU_ASSERT_TRUE(built);
    if (built) {
        bool loaded = nb_module_load(b.module, path);
        if (!loaded) printf("\n    %s\n", nb_last_error());
        CU_ASSERT_TRUE(loaded);
        /* Exactly the case's parameters... */
        nb_param params[MAX_NAMED];
        int n = nb_module_named_params(b.module, params, MAX_NAMED);
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
