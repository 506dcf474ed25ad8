/* The gradcheck catalogue, derived from the op registry (autograd/op_def.h): every entry of
 * every registered op is
 *   - gradchecked in float64 against central finite differences (nb_gradcheck defaults);
 *   - run again in float32 on the same values (rounded to float32 once, for both runs), its
 *     output and input gradients (for one random output gradient) compared with the float64
 *     result: max|f32 - f64| <= rtol * max(max|f64|, 1e-3) per tensor, rtol the op's
 *     f32_rtol (default NBA_F32_RTOL). The scale is the tensor's own magnitude, so the bound
 *     is relative to the result as in PyTorch's OpInfo tolerances; a NaN anywhere fails.
 * An entry must record the op that declares it (helpers called on the way do not count), and
 * every op needs an entry of every kind (random, broadcast, strided) unless it says why the
 * kind does not apply. The last case shows that this coverage check fails when any op's
 * entries of one kind are deleted from a copy of the registry. */
#include "harness.h"
#include "autograd/node.h"
#include "autograd/op_def.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const kind_names[NBA_NUM_KINDS] = {"random", "broadcast", "strided"};

/* ---- inputs ---- */
static double sample(nb_rng *rng, nba_domain d) {
    switch (d) {
    case NBA_POSITIVE:
        return 0.5 + 1.5 * nb_rng_uniform(rng);
    case NBA_AWAY_FROM_0: {
        double v;
        do v = nb_rng_normal(rng);
        while (fabs(v) < 0.2);
        return v;
    }
    default:
        return nb_rng_normal(rng);
    }
}

/* n values for spec, rounded to float32 so both dtypes see the same numbers. */
static double *input_values(nb_rng *rng, const nba_input_spec *spec, int64_t n) {
    double *vals = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++) vals[k] = sample(rng, spec->domain);
    if (spec->domain == NBA_DISTINCT) {
        for (int64_t k = 0; k < n; k++) vals[k] = 0.1 * (double)k - 0.05 * (double)n;
        for (int64_t k = n - 1; k > 0; k--) { /* Fisher-Yates */
            int64_t j = (int64_t)(nb_rng_next(rng) % (uint64_t)(k + 1));
            double t = vals[k];
            vals[k] = vals[j], vals[j] = t;
        }
    }
    for (int64_t k = 0; k < n; k++) vals[k] = (double)(float)vals[k];
    return vals;
}

static int64_t spec_numel(const nba_input_spec *spec) {
    int64_t n = 1;
    for (int i = 0; i < spec->ndim; i++) n *= spec->shape[i];
    return n;
}

/* A leaf of dtype dt with the requested layout holding vals (row-major). */
static nb_tensor *make_input(const nba_input_spec *spec, nb_dtype dt, const double *vals) {
    int nd = spec->ndim;
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, spec->shape, sizeof shape);
    nb_tensor *base;
    if (spec->layout == NBA_TRANSPOSED && nd >= 2) {
        int64_t tmp = shape[nd - 1];
        shape[nd - 1] = shape[nd - 2], shape[nd - 2] = tmp;
        base = nb_transpose(nb_empty(dt, nd, shape), -1, -2);
    } else if (spec->layout == NBA_SLICED && nd >= 1) {
        /* every other element: a [.., n, 2] view of a twice-as-wide tensor, index 1 */
        int64_t split[NB_MAX_DIMS + 1];
        memcpy(split, spec->shape, sizeof(int64_t) * (size_t)nd);
        split[nd] = 2;
        base = nb_select(nb_empty(dt, nd + 1, split), -1, 1);
    } else {
        base = nb_empty(dt, nd, shape);
    }
    nb_tensor *x = nb_detach(base);
    nb_tensor *src = nb_to_dtype(nb_from_array(NB_F64, nd, spec->shape, vals), dt);
    if (!x || !src || !nb_copy_(x, src)) return NULL;
    return nb_requires_grad_(x, !spec->constant);
}

static bool is_strided(const nba_input_spec *spec) {
    return (spec->layout == NBA_TRANSPOSED && spec->ndim >= 2) ||
           (spec->layout == NBA_SLICED && spec->ndim >= 1);
}

/* ---- the coverage check (pure metadata) ---- */
/* An entry counts for its kind only if it is what the kind says (strided: a strided input). */
static bool entry_is_its_kind(const nba_entry *e) {
    if (e->kind != NBA_STRIDED) return true;
    for (int i = 0; i < e->ninputs; i++)
        if (is_strided(&e->inputs[i])) return true;
    return false;
}

/* Counts the (op, kind) pairs with no entry and no reason, and contradictions (entries of a
 * kind declared not to apply, strided entries without a strided input); prints each when
 * verbose. 0 means the registry passes. */
static int coverage_problems(const nba_op_def *const *ops, int nops, bool verbose) {
    int problems = 0;
    for (int o = 0; o < nops; o++) {
        const nba_op_def *op = ops[o];
        int count[NBA_NUM_KINDS] = {0};
        for (int e = 0; e < op->nentries; e++) {
            const nba_entry *entry = &op->entries[e];
            if (entry_is_its_kind(entry)) {
                count[entry->kind]++;
            } else {
                if (verbose)
                    printf("  op '%s': entry \"%s\" is tagged strided but has no "
                           "transposed or sliced input\n",
                           op->name, entry->name);
                problems++;
            }
        }
        for (int k = 0; k < NBA_NUM_KINDS; k++) {
            const char *why = op->not_applicable[k];
            if (count[k] == 0 && !why) {
                if (verbose)
                    printf("  op '%s' has no %s entry and does not say why the kind "
                           "does not apply\n",
                           op->name, kind_names[k]);
                problems++;
            } else if (count[k] > 0 && why) {
                if (verbose)
                    printf("  op '%s' has %s entries but declares the kind does not "
                           "apply (\"%s\")\n",
                           op->name, kind_names[k], why);
                problems++;
            }
        }
    }
    return problems;
}

/* ---- running entries ---- */
static const char *declared_op;   /* the op of the entry being run */
static bool declared_op_recorded; /* whether a node of that op was recorded */
static int unregistered_records;  /* nodes whose op name no registered op has */

static void note_op(const char *op) {
    if (declared_op && strcmp(op, declared_op) == 0) declared_op_recorded = true;
    for (int o = 0; o < nba_op_registry_count; o++)
        if (strcmp(nba_op_registry[o]->name, op) == 0) return;
    printf("  a node recorded op '%s', which is not in autograd/op_list.h\n", op);
    unregistered_records++;
}

/* max|a - ref| against rtol * max(max|ref|, 1e-3); *ratio gets the error over that bound.
 * Shapes must match; NaN on either side fails. */
static bool f32_close(const nb_tensor *a, const nb_tensor *ref, double rtol, double *ratio) {
    if (!a || !ref || !nb_same_shape(a, ref)) return *ratio = INFINITY, false;
    int64_t n = nb_numel(ref);
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *y = malloc(sizeof(double) * (size_t)(n ? n : 1));
    bool ok = nb_to_doubles(a, x) && nb_to_doubles(ref, y);
    double err = 0, scale = 1e-3;
    for (int64_t k = 0; ok && k < n; k++) {
        if (isnan(x[k]) || isnan(y[k])) ok = false;
        if (fabs(x[k] - y[k]) > err) err = fabs(x[k] - y[k]);
        if (fabs(y[k]) > scale) scale = fabs(y[k]);
    }
    if (ok && err == INFINITY) ok = false; /* inf - inf above is NaN, caught; inf - x is not */
    free(x), free(y);
    *ratio = ok ? err / (rtol * scale) : INFINITY;
    return ok && *ratio <= 1;
}

/* Runs the entry in float64 and float32 on the same values with the same output gradient;
 * compares the float32 output and input gradients with the float64 ones. Returns the worst
 * ratio of error to tolerance (> 1 fails, INFINITY when a run failed). */
static double f32_against_f64(const nba_entry *e, double rtol, double *const *vals, nb_rng *rng) {
    nb_tensor *in64[NBA_MAX_INPUTS], *in32[NBA_MAX_INPUTS];
    for (int i = 0; i < e->ninputs; i++) {
        in64[i] = make_input(&e->inputs[i], NB_F64, vals[i]);
        in32[i] = make_input(&e->inputs[i], NB_F32, vals[i]);
        if (!in64[i] || !in32[i]) return INFINITY;
    }
    nb_tensor *out64 = e->fn(in64, e->ninputs, (void *)e->ctx);
    nb_tensor *out32 = e->fn(in32, e->ninputs, (void *)e->ctx);
    if (!out64 || !out32) return INFINITY;
    nb_tensor *g64 = nb_randn(rng, NB_F64, out64->ndim, out64->shape);
    if (!g64 || !nb_backward(out64, g64) || !nb_backward(out32, nb_to_dtype(g64, NB_F32)))
        return INFINITY;
    double worst = 0, r;
    f32_close(out32, out64, rtol, &r);
    worst = r > worst ? r : worst;
    for (int i = 0; i < e->ninputs; i++) {
        if (e->inputs[i].constant) continue;
        f32_close(nb_grad(in32[i]), nb_grad(in64[i]), rtol, &r);
        worst = r > worst ? r : worst;
    }
    return worst;
}

static int entries_not_reaching_their_op;

static void test_every_entry(void) {
    nba_set_record_hook(note_op);
    nb_rng rng;
    nb_rng_seed(&rng, 2024);
    int failures = 0, total = 0;
    double worst_f32 = 0;
    const char *worst_f32_entry = "";
    for (int o = 0; o < nba_op_registry_count; o++) {
        const nba_op_def *op = nba_op_registry[o];
        double rtol = op->f32_rtol > 0 ? op->f32_rtol : NBA_F32_RTOL;
        for (int e = 0; e < op->nentries; e++) {
            const nba_entry *entry = &op->entries[e];
            nb_scope_begin();
            double *vals[NBA_MAX_INPUTS] = {0};
            nb_tensor *inputs[NBA_MAX_INPUTS];
            for (int i = 0; i < entry->ninputs; i++) {
                vals[i] = input_values(&rng, &entry->inputs[i], spec_numel(&entry->inputs[i]));
                inputs[i] = make_input(&entry->inputs[i], NB_F64, vals[i]);
            }
            declared_op = op->name, declared_op_recorded = false;
            nb_gradcheck_result res;
            bool ok =
                nb_gradcheck(entry->fn, entry->ninputs, inputs, (void *)entry->ctx, NULL, &res);
            bool reached = declared_op_recorded;
            declared_op = NULL;
            double ratio = f32_against_f64(entry, rtol, vals, &rng);
            for (int i = 0; i < entry->ninputs; i++) free(vals[i]);
            bool f32_ok = ratio <= 1;
            if (ratio > worst_f32) worst_f32 = ratio, worst_f32_entry = entry->name;
            printf("  %-4s %s [%s, %s]: %s; f32 at %.2g of tolerance%s\n",
                   ok && f32_ok && reached ? "ok" : "FAIL", op->name, kind_names[entry->kind],
                   entry->name, res.message, ratio,
                   reached ? "" : "; the entry never records its own op");
            failures += !(ok && f32_ok && reached);
            entries_not_reaching_their_op += !reached;
            total++;
            nb_scope_end();
        }
    }
    nba_set_record_hook(NULL);
    printf("  %d of %d catalogue entries passed; worst f32 error %.2g of tolerance (%s)\n",
           total - failures, total, worst_f32, worst_f32_entry);
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT_EQUAL(unregistered_records, 0);
}

static void test_every_entry_reaches_its_op(void) {
    CU_ASSERT_EQUAL(entries_not_reaching_their_op, 0);
}

static void test_every_kind_covered(void) {
    CU_ASSERT_EQUAL(coverage_problems(nba_op_registry, nba_op_registry_count, true), 0);
    for (int o = 0; o < nba_op_registry_count; o++)
        for (int p = 0; p < o; p++)
            if (strcmp(nba_op_registry[o]->name, nba_op_registry[p]->name) == 0) {
                printf("  op '%s' is registered twice\n", nba_op_registry[o]->name);
                CU_FAIL("an op is registered twice");
            }
}

/* The checker itself: for every op and every kind it has entries of, a copy of the registry
 * without that op's entries of that kind (its only one, where there is one) must fail. */
static void test_checker_catches_a_deleted_entry(void) {
    const int n = nba_op_registry_count;
    const nba_op_def **copy = malloc(sizeof *copy * (size_t)n);
    int deletions = 0, caught = 0;
    for (int o = 0; o < n; o++) {
        const nba_op_def *op = nba_op_registry[o];
        for (int k = 0; k < NBA_NUM_KINDS; k++) {
            nba_entry *kept = malloc(sizeof *kept * (size_t)(op->nentries + 1));
            int nkept = 0;
            for (int e = 0; e < op->nentries; e++)
                if (op->entries[e].kind != (nba_entry_kind)k) kept[nkept++] = op->entries[e];
            if (nkept < op->nentries) {
                nba_op_def cut = *op;
                cut.entries = kept, cut.nentries = nkept;
                memcpy(copy, nba_op_registry, sizeof *copy * (size_t)n);
                copy[o] = &cut;
                deletions++;
                if (coverage_problems(copy, n, false) > 0)
                    caught++;
                else
                    printf("  deleting op '%s''s %s entries went unnoticed\n", op->name,
                           kind_names[k]);
            }
            free(kept);
        }
    }
    free(copy);
    printf("  %d of %d deletions of an op's entries of one kind caught\n", caught, deletions);
    CU_ASSERT_TRUE(deletions >= nba_op_registry_count);
    CU_ASSERT_EQUAL(caught, deletions);
}

/* Bad input gives an error naming the op: every op's first entry, with its inputs NULL, must
 * fail with "<op>: " in nb_last_error() (or a golden name's, as nb_sum_dims says
 * "sum_dims: "); with int64 or bool tensors of the same shapes it must fail the same way,
 * naming the dtype and the first input's shape, unless the op takes any dtype (views). */
static bool error_names_op(const nba_op_def *op) {
    const char *err = nb_last_error();
    char want[80];
    snprintf(want, sizeof want, "%s: ", op->name);
    if (strstr(err, want)) return true;
    for (int g = 0; g < op->ngoldens; g++) {
        snprintf(want, sizeof want, "%s: ", op->goldens[g].op);
        if (strstr(err, want)) return true;
    }
    return false;
}

static void test_bad_inputs_name_the_op(void) {
    static const nb_dtype bad_dtypes[] = {NB_I64, NB_BOOL};
    int failures = 0;
    for (int o = 0; o < nba_op_registry_count; o++) {
        const nba_op_def *op = nba_op_registry[o];
        const nba_entry *e = &op->entries[0];
        for (int pass = 0; pass < 3; pass++) {
            nb_tensor *bad[NBA_MAX_INPUTS] = {0};
            for (int i = 0; pass > 0 && i < e->ninputs; i++)
                bad[i] = nb_zeros(bad_dtypes[pass - 1], e->inputs[i].ndim, e->inputs[i].shape);
            nb_clear_error();
            nb_tensor *out = e->fn(bad, e->ninputs, (void *)e->ctx);
            if (out && pass > 0) continue; /* the op takes any dtype */
            char shape[128] = "";
            if (pass > 0) nb_shape_str(bad[0], shape, sizeof shape);
            bool ok = !out && error_names_op(op) &&
                      (pass == 0 || (strstr(nb_last_error(), nb_dtype_name(bad_dtypes[pass - 1])) &&
                                     strstr(nb_last_error(), shape)));
            if (!ok) {
                printf("  op '%s' (%s) on %s inputs: %s, error \"%s\"\n", op->name, e->name,
                       pass ? nb_dtype_name(bad_dtypes[pass - 1]) : "NULL",
                       out ? "no failure" : "failed", nb_last_error());
                failures++;
            }
        }
    }
    CU_ASSERT_EQUAL(failures, 0);
}

int main(void) {
    const nbtest_case cases[] = {
        {"bad inputs give an error naming the op", test_bad_inputs_name_the_op},
        {"gradcheck f64 and f32 against f64, every entry", test_every_entry},
        {"every entry records its declared op", test_every_entry_reaches_its_op},
        {"every op has every kind of entry or says why not", test_every_kind_covered},
        {"the coverage check fails when an op's entries of a kind are deleted",
         test_checker_catches_a_deleted_entry},
    };
    return nbtest_run("catalogue", cases, sizeof cases / sizeof cases[0]);
}
