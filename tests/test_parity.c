/* Parity with PyTorch: runs every op case of tests/goldens/ops_*.json (written by
 * tests/gen_goldens.py) through nabla, compares the outputs, backpropagates the stored output
 * gradients and compares the input gradients. Each case runs twice: on contiguous inputs and
 * on the same values seen through stride-2 views. The calls come from the op registry: each
 * registered op's golden runners (autograd/op_def.h). A golden case no runner takes fails,
 * and so does a registered op, or one of its runners, that no golden case reaches. */
#include "harness.h"
#include "golden.h"
#include "autograd/op_def.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_INPUTS 8
#define MAX_OUTPUTS NBA_MAX_GOLDEN_OUTPUTS

/* One case as the registry's golden runners see it (nba_golden_call, autograd/op_def.h). */
typedef struct {
    nba_golden_call call; /* first: runners get &call */
    const json_t *params;
    const char *names[MAX_INPUTS];
    nb_tensor *in[MAX_INPUTS];
    bool bad; /* a parameter or input was missing: the golden file and the op disagree */
} op_args;

static op_args *args_of(nba_golden_call *c) {
    return (op_args *)c;
}
static nb_tensor *input(nba_golden_call *c, const char *name, bool required) {
    op_args *a = args_of(c);
    for (int k = 0; k < c->ninputs; k++)
        if (strcmp(a->names[k], name) == 0) return a->in[k];
    if (required) fprintf(stderr, "    no input named \"%s\"\n", name), a->bad = true;
    return NULL;
}
static const json_t *param(nba_golden_call *c, const char *key) {
    const json_t *v = json_object_get(args_of(c)->params, key);
    if (!v) fprintf(stderr, "    no parameter \"%s\"\n", key), args_of(c)->bad = true;
    return v;
}
static bool wrong_type(nba_golden_call *c, const char *key, const char *what) {
    fprintf(stderr, "    \"%s\" is not %s\n", key, what);
    return args_of(c)->bad = true;
}
static int64_t integer(nba_golden_call *c, const char *key) {
    const json_t *v = param(c, key);
    if (v && !json_is_integer(v)) wrong_type(c, key, "an integer");
    return json_integer_value(v);
}
static bool flag(nba_golden_call *c, const char *key) {
    const json_t *v = param(c, key);
    if (v && !json_is_boolean(v)) wrong_type(c, key, "a boolean");
    return json_is_true(v);
}
static double number(nba_golden_call *c, const char *key) {
    double x = 0;
    const json_t *v = param(c, key);
    if (v && !golden_number(v, &x)) wrong_type(c, key, "a number");
    return x;
}
static const char *string(nba_golden_call *c, const char *key) {
    const json_t *v = param(c, key);
    if (v && !json_is_string(v)) wrong_type(c, key, "a string");
    return json_string_value(v);
}
static int integers(nba_golden_call *c, const char *key, int64_t *out, int max) {
    const json_t *v = param(c, key);
    if (v && (!json_is_array(v) || (int)json_array_size(v) > max)) {
        wrong_type(c, key, "a short list of integers");
        return 0;
    }
    for (size_t k = 0; k < json_array_size(v); k++)
        out[k] = json_integer_value(json_array_get(v, k));
    return (int)json_array_size(v);
}

/* ---- the runners, from the op registry ---------------------------------------------------- */
#define MAX_RUNNERS 128
static const nba_golden *runners[MAX_RUNNERS];
static const char *runner_op[MAX_RUNNERS]; /* the registered op that owns each runner */
static int cases_per_runner[MAX_RUNNERS];
static int num_runners;

static void collect_runners(void) {
    num_runners = 0;
    for (int o = 0; o < nba_op_registry_count; o++)
        for (int g = 0; g < nba_op_registry[o]->ngoldens && num_runners < MAX_RUNNERS; g++) {
            runner_op[num_runners] = nba_op_registry[o]->name;
            runners[num_runners++] = &nba_op_registry[o]->goldens[g];
        }
}

static int lookup(const char *op) {
    for (int k = 0; op && k < num_runners; k++)
        if (strcmp(runners[k]->op, op) == 0) return k;
    return -1;
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
static bool run_layout(const json_t *c, const nba_golden *e, golden_layout layout,
                       case_result *res) {
    const char *lname = layout == GOLDEN_STRIDED ? "strided" : "contiguous";
    const json_t *inputs = json_object_get(c, "inputs");
    const json_t *outputs = json_object_get(c, "outputs");
    const json_t *grad_outputs = json_object_get(c, "grad_outputs");
    const json_t *input_grads = json_object_get(c, "input_grads");
    op_args a = {.call = {input, number, integer, flag, integers, string,
                          (int)json_array_size(inputs), NULL},
                 .params = json_object_get(c, "params")};
    a.call.inputs = a.in;
    const int nin = a.call.ninputs;
    if (nin > MAX_INPUTS || json_array_size(outputs) > MAX_OUTPUTS ||
        json_array_size(grad_outputs) != json_array_size(outputs) ||
        json_array_size(input_grads) != (size_t)nin)
        return fail(res, lname, "malformed case");
    for (int k = 0; k < nin; k++) {
        const json_t *spec = json_array_get(inputs, (size_t)k);
        a.names[k] = json_string_value(json_object_get(spec, "name"));
        a.in[k] = golden_tensor(spec, layout);
        if (!a.names[k] || !a.in[k]) return fail(res, lname, "malformed input");
    }
    nb_tensor *out[NBA_MAX_GOLDEN_OUTPUTS] = {0};
    nb_clear_error();
    int nout = e->run(&a.call, out);
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
    /* sum_k sum(out_k * grad_out_k): one backward per output; leaf grads accumulate. Outputs
     * of one node (add_layer_norm's sum and norm) share its saved tensors: every backward but
     * the last keeps them. */
    int last = -1;
    for (int k = 0; k < nout; k++)
        if (!json_is_null(json_array_get(grad_outputs, (size_t)k))) last = k;
    for (int k = 0; k < nout; k++) {
        const json_t *gspec = json_array_get(grad_outputs, (size_t)k);
        if (json_is_null(gspec)) continue;
        nb_tensor *g = golden_tensor(gspec, GOLDEN_CONTIGUOUS);
        const nb_backward_opts opts = {.retain_graph = k < last};
        if (!g || !nb_backward_with(out[k], g, &opts)) {
            char why[320];
            snprintf(why, sizeof why, "backward of output %d failed: %s", k, nb_last_error());
            return fail(res, lname, why);
        }
    }
    for (int k = 0; k < nin; k++) {
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
    int r = lookup(op);
    if (r < 0) {
        printf("  FAIL %s: no registered op has a golden runner for \"%s\" (autograd/op_def.h)\n",
               name ? name : "(unnamed case)", op ? op : "(none)");
        return false;
    }
    const nba_golden *e = runners[r];
    cases_per_runner[r]++;
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

/* Python-free: every registered op has golden runners, and each runner golden cases. */
static void test_every_registered_op_has_goldens(void) {
    int missing = 0;
    for (int o = 0; o < nba_op_registry_count; o++)
        if (nba_op_registry[o]->ngoldens == 0) {
            printf("  op '%s' is registered without a golden runner\n", nba_op_registry[o]->name);
            missing++;
        }
    for (int k = 0; k < num_runners; k++)
        if (cases_per_runner[k] == 0) {
            printf("  op '%s' has no golden case for \"%s\" in tests/goldens/ops_*.json "
                   "(rerun tests/gen_goldens.py)\n",
                   runner_op[k], runners[k]->op);
            missing++;
        }
    CU_ASSERT_EQUAL(missing, 0);
    CU_ASSERT_TRUE(num_runners < MAX_RUNNERS);
}

int main(void) {
    collect_runners();
    const nbtest_case cases[] = {
        {"every golden case matches PyTorch", test_every_golden_case},
        {"every registered op has golden cases", test_every_registered_op_has_goldens},
    };
    return nbtest_run("parity", cases, sizeof cases / sizeof cases[0]);
}
