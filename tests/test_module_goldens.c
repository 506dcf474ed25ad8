/* The module goldens (tests/goldens/modules.json, written by tests/gen_module_goldens.py):
 * every case loads through golden_named_tensors under the parameter names nabla's modules
 * use, with shapes that follow from its config; and the same computations written with
 * nabla's functional ops (matmul, masked_softmax, layer_norm, ...) reproduce PyTorch's
 * outputs, attention weights and every parameter and input gradient. The second check pins
 * the goldens' conventions (weight [out, in], true = blocked, empty rows give zeros) to
 * nabla's ops before the modules that must match them exist. Both go through the built-in
 * module table (module_table.h): every row with goldens has cases here in f32 and f64, and
 * every case names a row. */
#include "harness.h"
#include "module_table.h"

#include <stdio.h>

#define MAX_NAMED 16

/* The row of case c, or NULL after printing why. */
static const nbtest_module *row_of(const json_t *c) {
    const char *module = json_string_value(json_object_get(c, "module"));
    const nbtest_module *row = nbtest_module_find(module);
    if (!row)
        printf("    module \"%s\": no row in tests/module_table.c\n", module ? module : "?");
    else if (!row->golden.files)
        printf("    module %s: its row has no golden spec\n", module);
    return row && row->golden.files ? row : NULL;
}

static bool has_shape(const nb_tensor *t, int ndim, const int64_t *shape) {
    if (!t || t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) return false;
    return true;
}

/* Checks one case's names, order, shapes and grad flags; prints what is wrong. */
static bool check_names(const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    const nbtest_module *row = row_of(c);
    nbtest_param want[MAX_NAMED];
    int nwant = row ? row->golden.params(json_object_get(c, "config"), want, MAX_NAMED) : -1;
    golden_named params[MAX_NAMED], inputs[MAX_NAMED];
    nb_scope_begin();
    int nparams = golden_named_tensors(c, "parameters", params, MAX_NAMED);
    int ninputs = golden_named_tensors(c, "inputs", inputs, MAX_NAMED);
    bool ok = nwant > 0 && ninputs >= 0 && nparams == nwant;
    for (int k = 0; ok && k < nwant; k++) {
        const nb_tensor *p = params[k].tensor;
        const json_t *g = golden_named_spec(c, "parameter_grads", want[k].name);
        ok = strcmp(params[k].name, want[k].name) == 0 && p->requires_grad &&
             has_shape(p, want[k].ndim, want[k].shape) && g &&
             json_array_size(json_object_get(g, "shape")) == (size_t)want[k].ndim;
        if (!ok) printf("    parameter %d: expected %s\n", k, want[k].name);
    }
    /* Every float input requires grad and has a gradient; index and mask inputs do not. */
    for (int k = 0; ok && k < ninputs; k++) {
        const nb_tensor *x = inputs[k].tensor;
        bool has_grad = golden_named_spec(c, "input_grads", inputs[k].name) != NULL;
        ok = nb_is_float(x) == x->requires_grad && x->requires_grad == has_grad;
        if (!ok) printf("    input %s: grad flags disagree\n", inputs[k].name);
    }
    nb_scope_end();
    printf("  %-4s %s: %d parameters\n", ok ? "ok" : "FAIL", name ? name : "(unnamed)", nwant);
    return ok;
}

static void worst(double *max_ratio, bool *ok, golden_cmp r, const char *what) {
    if (r.worst_ratio > *max_ratio) *max_ratio = r.worst_ratio;
    if (!r.ok) printf("    %s: %s\n", what, r.message), *ok = false;
}

static bool check_forward_backward(const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    const nbtest_module *row = row_of(c);
    golden_named params[MAX_NAMED], inputs[MAX_NAMED];
    int ninputs = 0;
    nbtest_call call;
    bool want_weights = false;
    double ratio = 0;
    nb_scope_begin();
    int nparams = golden_named_tensors(c, "parameters", params, MAX_NAMED);
    bool ok = row && nparams >= 0 &&
              nbtest_load_call(c, row, inputs, MAX_NAMED, &ninputs, &call, &want_weights);
    nb_tensor *weights = NULL, *out = NULL;
    if (ok) {
        call.weights = &weights;
        out = row->golden.reference(json_object_get(c, "config"), params, nparams, &call);
    }
    worst(&ratio, &ok, golden_compare(out, json_object_get(c, "output")), "output");
    const json_t *w = golden_named_spec(c, "extra_outputs", "attn_weights");
    if (w) worst(&ratio, &ok, golden_compare(weights, w), "attention weights");
    nb_tensor *g = golden_tensor(json_object_get(c, "grad_output"), GOLDEN_CONTIGUOUS);
    if (ok && !nb_backward(out, g)) printf("    backward: %s\n", nb_last_error()), ok = false;
    for (int k = 0; ok && k < nparams; k++)
        worst(&ratio, &ok,
              golden_compare(nb_grad(params[k].tensor),
                             golden_named_spec(c, "parameter_grads", params[k].name)),
              params[k].name);
    for (int k = 0; ok && k < ninputs; k++)
        if (inputs[k].tensor->requires_grad)
            worst(&ratio, &ok,
                  golden_compare(nb_grad(inputs[k].tensor),
                                 golden_named_spec(c, "input_grads", inputs[k].name)),
                  inputs[k].name);
    nb_scope_end();
    printf("  %-4s %-64s %.2g of tolerance\n", ok ? "ok" : "FAIL", name ? name : "(unnamed)",
           ratio);
    return ok;
}

/* True if root has a case of module type in dtype ("f32" or "f64"). */
static bool has_case(const json_t *root, const char *type, const char *dtype) {
    const json_t *cases = json_object_get(root, "cases");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *c = json_array_get(cases, k);
        if (json_is_string(json_object_get(c, "module")) &&
            strcmp(json_string_value(json_object_get(c, "module")), type) == 0 &&
            json_is_string(json_object_get(c, "dtype")) &&
            strcmp(json_string_value(json_object_get(c, "dtype")), dtype) == 0)
            return true;
    }
    return false;
}

static void for_every_case(bool (*check)(const json_t *)) {
    json_t *root = golden_load("modules.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const json_t *cases = json_object_get(root, "cases");
    int failures = 0;
    for (size_t k = 0; k < json_array_size(cases); k++)
        failures += !check(json_array_get(cases, k));
    /* Every module with goldens has its basic cases here, in both dtypes. */
    for (int r = 0; r < nbtest_module_count; r++) {
        const nbtest_module *row = &nbtest_modules[r];
        for (int d = 0; row->golden.files && d < 2; d++)
            if (!has_case(root, row->type, d ? "f64" : "f32"))
                printf("  no %s case of %s in modules.json\n", d ? "f64" : "f32", row->type),
                    failures++;
    }
    CU_ASSERT_TRUE(json_array_size(cases) > 0);
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
