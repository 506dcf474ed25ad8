/* Parity with PyTorch: runs every op case of tests/goldens/ops_*.json (written by
 * tests/gen_goldens.py) through nabla, compares the outputs, backpropagates the stored output
 * gradients and compares the input gradients. Each case runs twice: on contiguous inputs and
 * on the same values seen through stride-2 views. A golden case whose op has no entry in the
 * dispatch table fails, and so does a table entry that no golden case reaches. */
#include "harness.h"
#include "golden.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_INPUTS 8
#define MAX_OUTPUTS 8

/* One case's inputs as the dispatch functions see them. */
typedef struct {
    const json_t *params;
    int n;
    nb_tensor *in[MAX_INPUTS];
    const char *names[MAX_INPUTS];
    bool bad; /* a parameter or input was missing: the golden file and table disagree */
} op_args;

static nb_tensor *arg(op_args *a, const char *name) {
    for (int k = 0; k < a->n; k++)
        if (strcmp(a->names[k], name) == 0) return a->in[k];
    return NULL;
}
static nb_tensor *need(op_args *a, const char *name) {
    nb_tensor *t = arg(a, name);
    if (!t) fprintf(stderr, "    no input named \"%s\"\n", name), a->bad = true;
    return t;
}
static const json_t *param(op_args *a, const char *key) {
    const json_t *v = json_object_get(a->params, key);
    if (!v) fprintf(stderr, "    no parameter \"%s\"\n", key), a->bad = true;
    return v;
}
static int64_t p_int(op_args *a, const char *key) {
    const json_t *v = param(a, key);
    if (v && !json_is_integer(v))
        fprintf(stderr, "    \"%s\" is not an integer\n", key), a->bad = true;
    return json_integer_value(v);
}
static bool p_bool(op_args *a, const char *key) {
    const json_t *v = param(a, key);
    if (v && !json_is_boolean(v))
        fprintf(stderr, "    \"%s\" is not a boolean\n", key), a->bad = true;
    return json_is_true(v);
}
static double p_num(op_args *a, const char *key) {
    double x = 0;
    const json_t *v = param(a, key);
    if (v && !golden_number(v, &x))
        fprintf(stderr, "    \"%s\" is not a number\n", key), a->bad = true;
    return x;
}
/* An integer list parameter (dims, shape) into out; returns its length. */
static int p_ints(op_args *a, const char *key, int64_t *out, int max) {
    const json_t *v = param(a, key);
    if (v && (!json_is_array(v) || (int)json_array_size(v) > max)) {
        fprintf(stderr, "    \"%s\" is not a list of at most %d integers\n", key, max);
        a->bad = true;
        return 0;
    }
    for (size_t k = 0; k < json_array_size(v); k++)
        out[k] = json_integer_value(json_array_get(v, k));
    return (int)json_array_size(v);
}
static int p_dims(op_args *a, const char *key, int *out) {
    int64_t wide[NB_MAX_DIMS];
    int n = p_ints(a, key, wide, NB_MAX_DIMS);
    for (int k = 0; k < n; k++) out[k] = (int)wide[k];
    return n;
}
static nb_reduction p_reduction(op_args *a) {
    const char *s = json_string_value(param(a, "reduction"));
    if (s && strcmp(s, "mean") == 0) return NB_REDUCE_MEAN;
    if (s && strcmp(s, "sum") == 0) return NB_REDUCE_SUM;
    if (s && strcmp(s, "none") == 0) return NB_REDUCE_NONE;
    fprintf(stderr, "    unknown reduction\n");
    a->bad = true;
    return NB_REDUCE_MEAN;
}

/* ---- dispatch: op name -> a call of the nabla op; returns the number of outputs ---------- */
typedef int (*op_run)(op_args *a, nb_tensor **out);

#define UNARY(op)                                                                                  \
    static int run_##op(op_args *a, nb_tensor **out) {                                             \
        out[0] = nb_##op(need(a, "a"));                                                            \
        return 1;                                                                                  \
    }
#define BINARY(op)                                                                                 \
    static int run_##op(op_args *a, nb_tensor **out) {                                             \
        out[0] = nb_##op(need(a, "a"), need(a, "b"));                                              \
        return 1;                                                                                  \
    }
BINARY(add)
BINARY(sub)
BINARY(mul)
BINARY(div)
BINARY(matmul)
UNARY(neg)
static int run_f_linear(op_args *a, nb_tensor **out) {
    out[0] = nb_f_linear(need(a, "x"), need(a, "weight"), arg(a, "bias"));
    return 1;
}
UNARY(exp)
UNARY(log)
UNARY(sqrt)
UNARY(tanh)
UNARY(sigmoid)
UNARY(relu)
UNARY(gelu)
UNARY(gelu_tanh)
UNARY(sum)
UNARY(mean)
UNARY(contiguous)
UNARY(squeeze_all)

static int run_add_scalar(op_args *a, nb_tensor **out) {
    out[0] = nb_add_scalar(need(a, "a"), p_num(a, "scalar"));
    return 1;
}
static int run_mul_scalar(op_args *a, nb_tensor **out) {
    out[0] = nb_mul_scalar(need(a, "a"), p_num(a, "scalar"));
    return 1;
}
static int run_pow_scalar(op_args *a, nb_tensor **out) {
    out[0] = nb_pow_scalar(need(a, "a"), p_num(a, "exponent"));
    return 1;
}
/* Only eval mode and p = 0 have goldens: nabla's generator is not PyTorch's. */
static int run_dropout(op_args *a, nb_tensor **out) {
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    out[0] = nb_dropout(need(a, "a"), p_num(a, "p"), p_bool(a, "train"), &rng);
    return 1;
}

static int run_sum_dims(op_args *a, nb_tensor **out) {
    int dims[NB_MAX_DIMS];
    int n = p_dims(a, "dims", dims);
    out[0] = nb_sum_dims(need(a, "a"), n, dims, p_bool(a, "keepdim"));
    return 1;
}
static int run_mean_dims(op_args *a, nb_tensor **out) {
    int dims[NB_MAX_DIMS];
    int n = p_dims(a, "dims", dims);
    out[0] = nb_mean_dims(need(a, "a"), n, dims, p_bool(a, "keepdim"));
    return 1;
}
static int run_max_dim(op_args *a, nb_tensor **out) {
    out[1] = NULL;
    out[0] = nb_max_dim(need(a, "a"), (int)p_int(a, "dim"), p_bool(a, "keepdim"), &out[1]);
    return 2;
}

static int run_softmax(op_args *a, nb_tensor **out) {
    out[0] = nb_softmax(need(a, "a"), (int)p_int(a, "dim"));
    return 1;
}
static int run_log_softmax(op_args *a, nb_tensor **out) {
    out[0] = nb_log_softmax(need(a, "a"), (int)p_int(a, "dim"));
    return 1;
}
static int run_masked_fill(op_args *a, nb_tensor **out) {
    out[0] = nb_masked_fill(need(a, "a"), need(a, "mask"), p_num(a, "value"));
    return 1;
}
static int run_masked_softmax(op_args *a, nb_tensor **out) {
    out[0] =
        nb_masked_softmax(need(a, "a"), arg(a, "mask"), p_bool(a, "causal"), p_num(a, "scale"));
    return 1;
}
static int run_cross_entropy(op_args *a, nb_tensor **out) {
    out[0] = nb_cross_entropy(need(a, "logits"), need(a, "target"), p_int(a, "ignore_index"),
                              p_reduction(a));
    return 1;
}
static int run_mse_loss(op_args *a, nb_tensor **out) {
    out[0] = nb_mse_loss(need(a, "a"), need(a, "b"), p_reduction(a));
    return 1;
}
static int run_layer_norm(op_args *a, nb_tensor **out) {
    out[0] = nb_layer_norm(need(a, "x"), arg(a, "weight"), arg(a, "bias"), p_num(a, "eps"));
    return 1;
}
static int run_embedding(op_args *a, nb_tensor **out) {
    out[0] = nb_embedding(need(a, "weight"), need(a, "indices"));
    return 1;
}

static int run_view(op_args *a, nb_tensor **out) {
    int64_t shape[NB_MAX_DIMS];
    int n = p_ints(a, "shape", shape, NB_MAX_DIMS);
    out[0] = nb_view(need(a, "a"), n, shape);
    return 1;
}
static int run_reshape(op_args *a, nb_tensor **out) {
    int64_t shape[NB_MAX_DIMS];
    int n = p_ints(a, "shape", shape, NB_MAX_DIMS);
    out[0] = nb_reshape(need(a, "a"), n, shape);
    return 1;
}
static int run_expand(op_args *a, nb_tensor **out) {
    int64_t shape[NB_MAX_DIMS];
    int n = p_ints(a, "shape", shape, NB_MAX_DIMS);
    out[0] = nb_expand(need(a, "a"), n, shape);
    return 1;
}
static int run_transpose(op_args *a, nb_tensor **out) {
    out[0] = nb_transpose(need(a, "a"), (int)p_int(a, "dim0"), (int)p_int(a, "dim1"));
    return 1;
}
static int run_permute(op_args *a, nb_tensor **out) {
    int dims[NB_MAX_DIMS];
    p_dims(a, "dims", dims);
    out[0] = nb_permute(need(a, "a"), dims);
    return 1;
}
static int run_unsqueeze(op_args *a, nb_tensor **out) {
    out[0] = nb_unsqueeze(need(a, "a"), (int)p_int(a, "dim"));
    return 1;
}
static int run_squeeze(op_args *a, nb_tensor **out) {
    out[0] = nb_squeeze(need(a, "a"), (int)p_int(a, "dim"));
    return 1;
}
static int run_narrow(op_args *a, nb_tensor **out) {
    out[0] = nb_narrow(need(a, "a"), (int)p_int(a, "dim"), p_int(a, "start"), p_int(a, "length"));
    return 1;
}
static int run_select(op_args *a, nb_tensor **out) {
    out[0] = nb_select(need(a, "a"), (int)p_int(a, "dim"), p_int(a, "index"));
    return 1;
}
/* concat and stack take every input, in file order. */
static int run_concat(op_args *a, nb_tensor **out) {
    out[0] = nb_concat(a->n, a->in, (int)p_int(a, "dim"));
    return 1;
}
static int run_stack(op_args *a, nb_tensor **out) {
    out[0] = nb_stack(a->n, a->in, (int)p_int(a, "dim"));
    return 1;
}
static int run_split(op_args *a, nb_tensor **out) {
    int n = nb_split(need(a, "a"), p_int(a, "split_size"), (int)p_int(a, "dim"), out, MAX_OUTPUTS);
    return n < 0 ? 0 : n;
}

typedef struct {
    const char *op;
    op_run run;
    bool contiguous_only; /* like PyTorch's view, fails on layouts that cannot be viewed */
} op_entry;

static const op_entry table[] = {
    {"add", run_add, false},
    {"sub", run_sub, false},
    {"mul", run_mul, false},
    {"div", run_div, false},
    {"neg", run_neg, false},
    {"add_scalar", run_add_scalar, false},
    {"mul_scalar", run_mul_scalar, false},
    {"pow_scalar", run_pow_scalar, false},
    {"exp", run_exp, false},
    {"log", run_log, false},
    {"sqrt", run_sqrt, false},
    {"tanh", run_tanh, false},
    {"sigmoid", run_sigmoid, false},
    {"relu", run_relu, false},
    {"gelu", run_gelu, false},
    {"gelu_tanh", run_gelu_tanh, false},
    {"dropout", run_dropout, false},
    {"sum", run_sum, false},
    {"mean", run_mean, false},
    {"sum_dims", run_sum_dims, false},
    {"mean_dims", run_mean_dims, false},
    {"max_dim", run_max_dim, false},
    {"matmul", run_matmul, false},
    {"f_linear", run_f_linear, false},
    {"softmax", run_softmax, false},
    {"log_softmax", run_log_softmax, false},
    {"masked_fill", run_masked_fill, false},
    {"masked_softmax", run_masked_softmax, false},
    {"cross_entropy", run_cross_entropy, false},
    {"mse_loss", run_mse_loss, false},
    {"layer_norm", run_layer_norm, false},
    {"embedding", run_embedding, false},
    {"view", run_view, true},
    {"reshape", run_reshape, false},
    {"transpose", run_transpose, false},
    {"permute", run_permute, false},
    {"unsqueeze", run_unsqueeze, false},
    {"squeeze", run_squeeze, false},
    {"squeeze_all", run_squeeze_all, false},
    {"expand", run_expand, false},
    {"narrow", run_narrow, false},
    {"select", run_select, false},
    {"contiguous", run_contiguous, false},
    {"concat", run_concat, false},
    {"stack", run_stack, false},
    {"split", run_split, false},
};
#define NUM_ENTRIES (int)(sizeof table / sizeof table[0])
static int cases_per_entry[NUM_ENTRIES];

static const op_entry *lookup(const char *op) {
    for (int k = 0; op && k < NUM_ENTRIES; k++)
        if (strcmp(table[k].op, op) == 0) return &table[k];
    return NULL;
}

/* ---- running one case -------------------------------------------------------------------- */
typedef struct {
    bool ok;
    double max_abs_err, worst_ratio;
} case_result;

static void note(case_result *res, golden_cmp c, const char *what, const char *layout) {
    if (c.max_abs_err > res->max_abs_err) res->max_abs_err = c.max_abs_err;
    if (c.worst_ratio > res->worst_ratio) res->worst_ratio = c.worst_ratio;
    if (!c.ok) {
        printf("      %s (%s inputs): %s\n", what, layout, c.message);
        res->ok = false;
    }
}

static bool fail(case_result *res, const char *layout, const char *why) {
    printf("      %s inputs: %s\n", layout, why);
    return res->ok = false;
}

/* Runs c with inputs in the given layout; the scope of everything is the caller's. Returns
 * false if the case failed. */
static bool run_layout(const json_t *c, const op_entry *e, golden_layout layout, case_result *res) {
    const char *lname = layout == GOLDEN_STRIDED ? "strided" : "contiguous";
    const json_t *inputs = json_object_get(c, "inputs");
    const json_t *outputs = json_object_get(c, "outputs");
    const json_t *grad_outputs = json_object_get(c, "grad_outputs");
    const json_t *input_grads = json_object_get(c, "input_grads");
    op_args a = {.params = json_object_get(c, "params"), .n = (int)json_array_size(inputs)};
    if (a.n > MAX_INPUTS || json_array_size(outputs) > MAX_OUTPUTS ||
        json_array_size(grad_outputs) != json_array_size(outputs) ||
        json_array_size(input_grads) != (size_t)a.n)
        return fail(res, lname, "malformed case");
    for (int k = 0; k < a.n; k++) {
        const json_t *spec = json_array_get(inputs, (size_t)k);
        a.names[k] = json_string_value(json_object_get(spec, "name"));
        a.in[k] = golden_tensor(spec, layout);
        if (!a.names[k] || !a.in[k]) return fail(res, lname, "malformed input");
    }
    nb_tensor *out[MAX_OUTPUTS] = {0};
    nb_clear_error();
    int nout = e->run(&a, out);
    if (a.bad) return fail(res, lname, "the case does not give what the op needs");
    if (nout != (int)json_array_size(outputs)) {
        char why[320];
        snprintf(why, sizeof why, "%d outputs, expected %zu (%s)", nout, json_array_size(outputs),
                 nb_last_error());
        return fail(res, lname, why);
    }
    for (int k = 0; k < nout; k++) {
        char what[32];
        snprintf(what, sizeof what, "output %d", k);
        note(res, golden_compare(out[k], json_array_get(outputs, (size_t)k)), what, lname);
    }
    if (!res->ok) return false;
    /* sum_k sum(out_k * grad_out_k): one backward per output; leaf grads accumulate. */
    for (int k = 0; k < nout; k++) {
        const json_t *gspec = json_array_get(grad_outputs, (size_t)k);
        if (json_is_null(gspec)) continue;
        nb_tensor *g = golden_tensor(gspec, GOLDEN_CONTIGUOUS);
        if (!g || !nb_backward(out[k], g)) {
            char why[320];
            snprintf(why, sizeof why, "backward of output %d failed: %s", k, nb_last_error());
            return fail(res, lname, why);
        }
    }
    for (int k = 0; k < a.n; k++) {
        const json_t *want = json_array_get(input_grads, (size_t)k);
        if (json_is_null(want)) continue;
        char what[64];
        snprintf(what, sizeof what, "gradient of input %s", a.names[k]);
        note(res, golden_compare(nb_grad(a.in[k]), want), what, lname);
    }
    return res->ok;
}

/* Runs one case in both layouts; prints one line (and the details of a failure). */
static bool run_case(const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    const char *op = json_string_value(json_object_get(c, "op"));
    const op_entry *e = lookup(op);
    if (!e) {
        printf("  FAIL %s: no dispatch entry for op \"%s\" in tests/test_parity.c\n",
               name ? name : "(unnamed case)", op ? op : "(none)");
        return false;
    }
    cases_per_entry[e - table]++;
    case_result res = {.ok = true};
    for (int l = 0; l < 2; l++) {
        if (l == 1 && e->contiguous_only) break;
        nb_scope_begin();
        run_layout(c, e, l ? GOLDEN_STRIDED : GOLDEN_CONTIGUOUS, &res);
        nb_scope_end();
    }
    printf("  %-4s %-64s max err %.2e (%.2g of tolerance)\n", res.ok ? "ok" : "FAIL",
           name ? name : "(unnamed)", res.max_abs_err, res.worst_ratio);
    return res.ok;
}

static void test_every_golden_case(void) {
    char pattern[1024];
    snprintf(pattern, sizeof pattern, "%s/ops_*.json", golden_dir());
    glob_t files;
    int found = glob(pattern, 0, NULL, &files);
    CU_ASSERT_EQUAL_FATAL(found, 0); /* no golden files at all would test nothing */
    int total = 0, failures = 0;
    for (size_t f = 0; f < files.gl_pathc; f++) {
        const char *base = strrchr(files.gl_pathv[f], '/') + 1;
        json_t *root = golden_load(base);
        CU_ASSERT_PTR_NOT_NULL(root);
        if (!root) continue;
        const json_t *cases = json_object_get(root, "cases");
        CU_ASSERT_TRUE(json_array_size(cases) > 0);
        printf("  -- %s: %zu cases\n", base, json_array_size(cases));
        for (size_t k = 0; k < json_array_size(cases); k++) {
            failures += !run_case(json_array_get(cases, k));
            total++;
        }
        json_decref(root);
    }
    globfree(&files);
    printf("  %d of %d golden cases match PyTorch\n", total - failures, total);
    CU_ASSERT_EQUAL(failures, 0);
}

static void test_every_entry_has_cases(void) {
    int missing = 0;
    for (int k = 0; k < NUM_ENTRIES; k++)
        if (cases_per_entry[k] == 0) {
            printf("  op \"%s\" has a dispatch entry but no golden case\n", table[k].op);
            missing++;
        }
    CU_ASSERT_EQUAL(missing, 0);
}

int main(void) {
    const nbtest_case cases[] = {
        {"every golden case matches PyTorch", test_every_golden_case},
        {"every dispatched op has golden cases", test_every_entry_has_cases},
    };
    return nbtest_run("parity", cases, sizeof cases / sizeof cases[0]);
}
