/* Optimizers against torch.optim trajectories (tests/goldens/optim_golden.h, made by
 * tests/gen_optim_golden.py), gradient clipping and the schedule against hand values, the
 * no-malloc step, optimizer state through a checkpoint, and bad input. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "goldens/optim_golden.h"

/* |got - want| <= rtol * |want| + rtol * 1e-3 (the absolute slack only matters near 0). */
static bool close_to(const nb_tensor *t, const double *want, int n, double rtol, const char *what) {
    double got[8];
    if (!t || nb_numel(t) != n || n > 8 || !nb_to_doubles(t, got)) {
        fprintf(stderr, "%s: bad tensor (%s)\n", what, nb_last_error());
        return false;
    }
    for (int k = 0; k < n; k++)
        if (!(fabs(got[k] - want[k]) <= rtol * fabs(want[k]) + rtol * 1e-3)) {
            fprintf(stderr, "%s: element %d is %.17g, torch has %.17g\n", what, k, got[k], want[k]);
            return false;
        }
    return true;
}

static nb_tensor *from_doubles(nb_dtype dt, int ndim, const int64_t *shape, const double *v) {
    return nb_to_dtype(nb_from_array(NB_F64, ndim, shape, v), dt);
}

/* p0 [2, 3] (optionally a transposed, non-contiguous leaf) and p1 [4], in scope s. */
static void make_params(nb_scope *s, nb_dtype dt, bool transposed, nb_tensor **p0, nb_tensor **p1) {
    nb_scope_push(s);
    if (transposed) {
        double t[6];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) t[j * 2 + i] = optg_p0_init[i * 3 + j];
        *p0 = nb_transpose(from_doubles(dt, NB_SHAPE(3, 2), t), 0, 1);
    } else {
        *p0 = from_doubles(dt, NB_SHAPE(2, 3), optg_p0_init);
    }
    *p1 = from_doubles(dt, NB_SHAPE(4), optg_p1_init);
    nb_requires_grad_(*p0, true);
    nb_requires_grad_(*p1, true);
    nb_scope_pop();
}

static nb_optimizer *make_optimizer(const optg_case *c, nb_tensor *const *params) {
    if (c->kind == OPTG_SGD)
        return nb_sgd_new(2, params,
                          (nb_sgd_opts){.lr = c->lr,
                                        .momentum = c->momentum,
                                        .dampening = c->dampening,
                                        .weight_decay = c->weight_decay,
                                        .nesterov = c->nesterov});
    nb_adam_opts a = {.lr = c->lr,
                      .beta1 = c->beta1,
                      .beta2 = c->beta2,
                      .eps = c->eps,
                      .weight_decay = c->weight_decay};
    return c->kind == OPTG_ADAM ? nb_adam_new(2, params, a) : nb_adamw_new(2, params, a);
}

static nb_tensor *state_named(nb_optimizer *opt, const char *name) {
    const nb_named_tensor *st;
    int n = nb_optimizer_state(opt, "", &st);
    for (int i = 0; i < n; i++)
        if (strcmp(st[i].name, name) == 0) return st[i].tensor;
    return NULL;
}

/* The 5 steps of the generator: lr scaled per step, p1 without a gradient at step 0. */
static void run_steps(nb_optimizer *opt, const optg_case *c, nb_tensor *p0, nb_tensor *p1) {
    for (int k = 0; k < OPTG_STEPS; k++) {
        CU_ASSERT_TRUE(nb_optimizer_set_lr(opt, c->lr * optg_lr_factors[k]));
        nb_optimizer_zero_grad(opt);
        CU_ASSERT_TRUE(nb_backward(p0, from_doubles(p0->dtype, NB_SHAPE(2, 3), optg_p0_grads[k])));
        if (k > 0)
            CU_ASSERT_TRUE(nb_backward(p1, from_doubles(p1->dtype, NB_SHAPE(4), optg_p1_grads[k])));
        CU_ASSERT_TRUE(nb_optimizer_step(opt));
    }
}

static void check_case(const optg_case *c, nb_dtype dt, bool transposed) {
    char what[128];
    nb_scope *model = nb_scope_new();
    nb_tensor *p[2];
    make_params(model, dt, transposed, &p[0], &p[1]);
    CU_ASSERT_EQUAL(nb_is_contiguous(p[0]), !transposed);
    nb_optimizer *opt = make_optimizer(c, p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    run_steps(opt, c, p[0], p[1]);
    double rtol = dt == NB_F64 ? 1e-12 : 1e-6;
    snprintf(what, sizeof what, "%s %s%s p0", c->name, nb_dtype_name(dt),
             transposed ? " transposed" : "");
    CU_ASSERT_TRUE(close_to(p[0], dt == NB_F64 ? c->p0_f64 : c->p0_f32, 6, rtol, what));
    what[strlen(what) - 1] = '1';
    CU_ASSERT_TRUE(close_to(p[1], dt == NB_F64 ? c->p1_f64 : c->p1_f32, 4, rtol, what));

    if (dt == NB_F64) { /* the state torch ends with */
        const char *kinds[2] = {c->kind == OPTG_SGD ? "momentum_buffer" : "exp_avg",
                                c->kind == OPTG_SGD ? NULL : "exp_avg_sq"};
        bool has_state = c->kind != OPTG_SGD || c->momentum != 0;
        for (int k = 0; k < 2 && has_state; k++) {
            if (!kinds[k]) continue;
            char name[64];
            snprintf(name, sizeof name, "%s.0", kinds[k]);
            snprintf(what, sizeof what, "%s state %s", c->name, name);
            CU_ASSERT_TRUE(close_to(state_named(opt, name), c->p0_state[k], 6, rtol, what));
            snprintf(name, sizeof name, "%s.1", kinds[k]);
            snprintf(what, sizeof what, "%s state %s", c->name, name);
            CU_ASSERT_TRUE(close_to(state_named(opt, name), c->p1_state[k], 4, rtol, what));
        }
        if (has_state) {
            /* torch's counts for Adam; for SGD by hand: p1 missed step 0. */
            long long want0 = c->p0_steps >= 0 ? c->p0_steps : OPTG_STEPS;
            long long want1 = c->p1_steps >= 0 ? c->p1_steps : OPTG_STEPS - 1;
            CU_ASSERT_EQUAL((long long)nb_item(state_named(opt, "step.0")), want0);
            CU_ASSERT_EQUAL((long long)nb_item(state_named(opt, "step.1")), want1);
        } else {
            const nb_named_tensor *st;
            CU_ASSERT_EQUAL(nb_optimizer_state(opt, "", &st), 0);
        }
    }
    nb_optimizer_free(opt);
    nb_scope_free(model);
}

static void test_matches_torch(void) {
    for (int i = 0; i < OPTG_NCASES; i++) {
        check_case(&optg_cases[i], NB_F64, false);
        check_case(&optg_cases[i], NB_F32, false);
        check_case(&optg_cases[i], NB_F64, true);
        check_case(&optg_cases[i], NB_F32, true);
    }
}

/* Hand check of one Adam step from zero state: m = 0.1 g, v = 0.001 g^2, the bias
 * corrections make m^ = g and v^ = g^2, so p -= lr * g / (|g| + eps). */
static void test_adam_first_step_by_hand(void) {
    nb_scope *model = nb_scope_new();
    nb_scope_push(model);
    nb_tensor *p = nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(2), (double[]){1, -2}), true);
    nb_scope_pop();
    nb_optimizer *opt = nb_adam_new(1, &p, nb_adam_defaults(0.1));
    nb_backward(p, nb_from_array(NB_F64, NB_SHAPE(2), (double[]){0.5, -4}));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    NBT_ASSERT_VALUES(p, 1e-12, 1 - 0.1 * 0.5 / (0.5 + 1e-8), -2 + 0.1 * 4 / (4 + 1e-8));
    nb_optimizer_free(opt);
    nb_scope_free(model);
}

/* A training-loop shaped run: after the first step, step() never allocates, in the same
 * scope (so temporaries would pile up and need fresh memory) or across step scopes. */
static void check_no_alloc(nb_dtype dt, int which) {
    nb_scope *model = nb_scope_new();
    nb_tensor *p[2];
    make_params(model, dt, which == 1, &p[0], &p[1]);
    nb_optimizer *opt =
        which == 0 ? nb_adam_new(2, p, nb_adam_defaults(0.01))
        : which == 1
            ? nb_adamw_new(2, p, nb_adamw_defaults(0.01))
            : nb_sgd_new(2, p, (nb_sgd_opts){.lr = 0.1, .momentum = 0.9, .nesterov = true});
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    nb_tensor *g0 = from_doubles(dt, NB_SHAPE(2, 3), optg_p0_grads[1]);
    nb_tensor *g1 = from_doubles(dt, NB_SHAPE(4), optg_p1_grads[1]);
    nb_backward(p[0], g0);
    nb_backward(p[1], g1);
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    /* Pools can hide an allocation from nb_alloc_count, so also check that no tensor (not even
     * a pooled one) appears in the current scope. */
    uint64_t before = nb_alloc_count();
    int64_t tensors = nb_scope_tensor_count();
    for (int k = 0; k < 10; k++) CU_ASSERT_TRUE(nb_optimizer_step(opt));
    CU_ASSERT_EQUAL(nb_alloc_count(), before);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), tensors);
    /* The loop's own first pass may allocate (a step scope); its later passes may not. */
    for (int k = 0; k < 10; k++) {
        if (k == 1) before = nb_alloc_count();
        nb_scope_begin();
        nb_optimizer_zero_grad(opt);
        nb_backward(p[0], g0);
        nb_backward(p[1], g1);
        uint64_t at_step = nb_alloc_count();
        CU_ASSERT_TRUE(nb_optimizer_step(opt));
        CU_ASSERT_EQUAL(nb_alloc_count(), at_step);
        nb_scope_end();
    }
    CU_ASSERT_EQUAL(nb_alloc_count(), before);
    nb_optimizer_free(opt);
    nb_scope_free(model);
}

/* ---- AdamW on parameters large enough for the wide kernels and for the step's one job to be
 * cut inside a parameter ---- */
enum { WIDE_PARAMS = 3, WIDE_STEPS = 3 };
static const int64_t wide_shape[WIDE_PARAMS][2] = {{200, 205}, {5, 8}, {2, 3}};

static double wide_value(int64_t k) {
    return sin(0.1 * (double)k);
}
static double wide_grad(int64_t k, int step) {
    return cos(0.37 * (double)k + step) * (double)(1 + k % 3);
}

/* Parameter i in scope s, [rows, cols] with element k = r * cols + c of wide_value; when
 * transposed, a leaf read through transposed strides (the element-by-element path). */
static nb_tensor *wide_param(nb_scope *s, nb_dtype dt, int i, bool transposed) {
    const int64_t rows = wide_shape[i][0], cols = wide_shape[i][1];
    double *v = malloc(sizeof(double) * (size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            v[transposed ? c * rows + r : r * cols + c] = wide_value(r * cols + c);
    nb_scope_push(s);
    nb_tensor *p = transposed ? nb_transpose(from_doubles(dt, NB_SHAPE(cols, rows), v), 0, 1)
                              : from_doubles(dt, NB_SHAPE(rows, cols), v);
    nb_requires_grad_(p, true);
    nb_scope_pop();
    free(v);
    return p;
}

/* The parameters after WIDE_STEPS AdamW steps at `threads` threads, as doubles (caller frees). */
static double *wide_run(nb_dtype dt, int threads, bool transposed) {
    nb_set_num_threads(threads);
    nb_scope *model = nb_scope_new();
    nb_tensor *p[WIDE_PARAMS];
    for (int i = 0; i < WIDE_PARAMS; i++) p[i] = wide_param(model, dt, i, transposed);
    CU_ASSERT_EQUAL(nb_is_contiguous(p[0]), !transposed);
    nb_optimizer *opt = nb_adamw_new(WIDE_PARAMS, p, nb_adamw_defaults(0.01));
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    int64_t total = 0;
    for (int i = 0; i < WIDE_PARAMS; i++) total += nb_numel(p[i]);
    double *out = malloc(sizeof(double) * (size_t)total),
           *g = malloc(sizeof(double) * (size_t)total);
    for (int step = 0; step < WIDE_STEPS; step++) {
        nb_scope_begin();
        nb_optimizer_zero_grad(opt);
        for (int i = 0; i < WIDE_PARAMS; i++) {
            for (int64_t k = 0; k < nb_numel(p[i]); k++) g[k] = wide_grad(k, step);
            CU_ASSERT_TRUE(nb_backward(p[i], from_doubles(dt, 2, wide_shape[i], g)));
        }
        CU_ASSERT_TRUE(nb_optimizer_step(opt));
        nb_scope_end();
    }
    int64_t at = 0;
    for (int i = 0; i < WIDE_PARAMS; i++) {
        CU_ASSERT_TRUE(nb_to_doubles(p[i], out + at));
        at += nb_numel(p[i]);
    }
    free(g);
    nb_optimizer_free(opt);
    nb_scope_free(model);
    nb_set_num_threads(0);
    return out;
}

/* torch.optim.AdamW's update written out in double precision: the reference for float32. */
static double wide_reference(int64_t k) {
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
    double p = wide_value(k), m = 0, v = 0;
    for (int step = 0; step < WIDE_STEPS; step++) {
        double g = wide_grad(k, step), t = step + 1;
        p *= 1 - lr * wd;
        m = b1 * m + (1 - b1) * g;
        v = b2 * v + (1 - b2) * g * g;
        p -= lr / (1 - pow(b1, t)) * m / (sqrt(v) / sqrt(1 - pow(b2, t)) + eps);
    }
    return p;
}

/* In float32 and float64 (each type's own kernel): 1 and 2 threads and strided leaves agree
 * bit for bit, and all meet the double-precision reference (float64 to 1e-12). */
static void check_wide(nb_dtype dt, double tol) {
    double *base = wide_run(dt, 1, false);
    const struct {
        int threads;
        bool transposed;
    } runs[] = {{2, false}, {1, true}, {2, true}};
    int64_t total = 0;
    for (int i = 0; i < WIDE_PARAMS; i++) total += wide_shape[i][0] * wide_shape[i][1];
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        double *other = wide_run(dt, runs[r].threads, runs[r].transposed);
        int64_t differ = 0;
        for (int64_t k = 0; k < total; k++)
            differ += memcmp(&base[k], &other[k], sizeof *base) != 0;
        if (differ)
            fprintf(stderr, "%s, %d thread(s)%s: %lld of %lld elements differ from 1 thread\n",
                    nb_dtype_name(dt), runs[r].threads, runs[r].transposed ? ", transposed" : "",
                    (long long)differ, (long long)total);
        CU_ASSERT_EQUAL(differ, 0);
        free(other);
    }
    int64_t at = 0, off = 0;
    for (int i = 0; i < WIDE_PARAMS; i++)
        for (int64_t k = 0; k < wide_shape[i][0] * wide_shape[i][1]; k++, at++) {
            double want = wide_reference(k);
            if (!(fabs(base[at] - want) <= tol * fabs(want) + tol / 10) && off++ < 5)
                fprintf(stderr, "%s parameter %d element %lld: %.17g, reference %.17g\n",
                        nb_dtype_name(dt), i, (long long)k, base[at], want);
        }
    CU_ASSERT_EQUAL(off, 0);
    free(base);
}

static void test_adamw_wide_split_and_strided(void) {
    check_wide(NB_F32, 1e-5);
    check_wide(NB_F64, 1e-12);
}

/* Parameters that are rows of one storage take the one-at-a-time path and give what separate
 * storages give. */
static void test_params_sharing_a_storage(void) {
    double *separate = wide_run(NB_F32, 2, false);
    nb_set_num_threads(2);
    nb_scope *model = nb_scope_new();
    nb_scope_push(model);
    double v[2 * 40];
    for (int64_t k = 0; k < 80; k++) v[k] = wide_value(k % 40);
    nb_tensor *rows = from_doubles(NB_F32, NB_SHAPE(2, 40), v);
    nb_tensor *p[2] = {nb_view(nb_select(rows, 0, 0), NB_SHAPE(5, 8)),
                       nb_view(nb_select(rows, 0, 1), NB_SHAPE(5, 8))};
    for (int i = 0; i < 2; i++) nb_requires_grad_(p[i], true);
    nb_scope_pop();
    nb_optimizer *opt = nb_adamw_new(2, p, nb_adamw_defaults(0.01));
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    double g[40];
    for (int step = 0; step < WIDE_STEPS; step++) {
        nb_scope_begin();
        nb_optimizer_zero_grad(opt);
        for (int64_t k = 0; k < 40; k++) g[k] = wide_grad(k, step);
        for (int i = 0; i < 2; i++)
            CU_ASSERT_TRUE(nb_backward(p[i], from_doubles(NB_F32, NB_SHAPE(5, 8), g)));
        CU_ASSERT_TRUE(nb_optimizer_step(opt));
        nb_scope_end();
    }
    double got[80];
    CU_ASSERT_TRUE(nb_to_doubles(rows, got));
    /* wide_run's second parameter is the same [5, 8] run from the same values */
    const double *want = separate + wide_shape[0][0] * wide_shape[0][1];
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof(double) * 40), 0);
    CU_ASSERT_EQUAL(memcmp(got + 40, want, sizeof(double) * 40), 0);
    nb_optimizer_free(opt);
    nb_scope_free(model);
    nb_set_num_threads(0);
    free(separate);
}

static void test_no_alloc_after_first_step(void) {
    for (int which = 0; which < 3; which++) {
        check_no_alloc(NB_F32, which);
        check_no_alloc(NB_F64, which);
    }
}

/* Params without a gradient are skipped: they do not move and get no state (torch's None
 * grad). */
static void test_skips_params_without_grad(void) {
    nb_scope *model = nb_scope_new();
    nb_scope_push(model);
    nb_tensor *p[2] = {nb_requires_grad_(nb_full(NB_F32, NB_SHAPE(3), 1.0), true),
                       nb_requires_grad_(nb_full(NB_F32, NB_SHAPE(2), 2.0), true)};
    nb_scope_pop();
    nb_optimizer *opt = nb_adamw_new(2, p, nb_adamw_defaults(0.5));
    nb_backward(p[0], nb_full(NB_F32, NB_SHAPE(3), 1.0));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    NBT_ASSERT_VALUES(p[1], 0, 2, 2); /* not even decayed */
    CU_ASSERT_EQUAL(nb_item(state_named(opt, "step.0")), 1);
    CU_ASSERT_PTR_NULL(state_named(opt, "step.1")); /* no state until its first step */
    nb_optimizer_free(opt);
    nb_scope_free(model);
}

static void test_state_names(void) {
    nb_scope *model = nb_scope_new();
    nb_scope_push(model);
    nb_tensor *p[2] = {nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2, 3)), true),
                       nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(5)), true)};
    nb_scope_pop();
    nb_optimizer *opt = nb_adam_new(2, p, nb_adam_defaults(1e-3));
    const nb_named_tensor *st;
    CU_ASSERT_EQUAL(nb_optimizer_state(opt, "optim.", &st), 0); /* made on the first step */
    nb_backward(p[1], nb_ones(NB_F32, NB_SHAPE(5)));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    CU_ASSERT_EQUAL_FATAL(nb_optimizer_state(opt, "optim.", &st), 3);
    CU_ASSERT_STRING_EQUAL(st[0].name, "optim.exp_avg.1");
    nb_backward(p[0], nb_ones(NB_F32, NB_SHAPE(2, 3)));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    CU_ASSERT_EQUAL_FATAL(nb_optimizer_state(opt, "optim.", &st), 6);
    const char *names[6] = {"optim.exp_avg.0", "optim.exp_avg_sq.0", "optim.step.0",
                            "optim.exp_avg.1", "optim.exp_avg_sq.1", "optim.step.1"};
    for (int i = 0; i < 6; i++) CU_ASSERT_STRING_EQUAL(st[i].name, names[i]);
    CU_ASSERT_TRUE(nb_same_shape(st[0].tensor, p[0]));
    CU_ASSERT_EQUAL(st[0].tensor->dtype, NB_F32);
    CU_ASSERT_TRUE(nb_same_shape(st[4].tensor, p[1]));
    CU_ASSERT_EQUAL(st[2].tensor->dtype, NB_I64);
    CU_ASSERT_EQUAL(st[2].tensor->ndim, 0);
    CU_ASSERT_EQUAL(nb_optimizer_state(opt, NULL, &st), 6);
    CU_ASSERT_STRING_EQUAL(st[1].name, "exp_avg_sq.0");
    nb_optimizer_free(opt);

    opt = nb_sgd_new(2, p, (nb_sgd_opts){.lr = 0.1, .momentum = 0.5});
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    CU_ASSERT_EQUAL_FATAL(nb_optimizer_state(opt, "o/", &st), 4);
    CU_ASSERT_STRING_EQUAL(st[0].name, "o/momentum_buffer.0");
    CU_ASSERT_STRING_EQUAL(st[3].name, "o/step.1");
    nb_optimizer_free(opt);
    opt = nb_sgd_new(2, p, nb_sgd_defaults(0.1));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    CU_ASSERT_EQUAL(nb_optimizer_state(opt, "o/", &st), 0);
    nb_optimizer_free(opt);
    nb_scope_free(model);
}

/* ---- frozen parameters and groups against torch (optf_cases) ---- */
static const int64_t optf_shapes[3][2] = {{2, 3}, {4, 0}, {3, 2}};
static int optf_ndim(int j) {
    return j == 1 ? 1 : 2;
}

/* q0, q1, q2 as parameters "m.q0", "m.q1", "m.q2" of a model (caller frees *model). */
static void optf_model(nb_dtype dt, nb_module **model, nb_tensor **q) {
    *model = nb_model_new(dt, 1);
    nb_module *m = nb_module_new(*model, "m", "M", sizeof(nb_module));
    for (int j = 0; j < 3; j++) {
        char name[8];
        snprintf(name, sizeof name, "q%d", j);
        q[j] = nb_module_add_param(m, name, optf_ndim(j), optf_shapes[j], nb_init_zeros());
        nb_scope_begin();
        CU_ASSERT_TRUE(
            nb_copy_(q[j], from_doubles(dt, optf_ndim(j), optf_shapes[j], optf_init[j])));
        nb_scope_end();
    }
}

/* The optimizer of case c over q: groups as torch's, or nb_adamw_new_decay_split's. */
static nb_optimizer *optf_optimizer(const optf_case *c, nb_module *model, nb_tensor **q) {
    if (strstr(c->name, "decay_split"))
        return nb_adamw_new_decay_split(model, (nb_adam_opts){.lr = c->group_lr[0],
                                                              .beta1 = c->beta1,
                                                              .beta2 = c->beta2,
                                                              .eps = c->eps,
                                                              .weight_decay = c->group_wd[0]});
    nb_tensor *groups[2][3];
    int n[2] = {0, 0};
    for (int j = 0; j < 3; j++) groups[c->group_of[j]][n[c->group_of[j]]++] = q[j];
    nb_optimizer *opt;
    if (c->kind == OPTG_SGD)
        opt = nb_sgd_new(n[0], groups[0],
                         (nb_sgd_opts){.lr = c->group_lr[0],
                                       .momentum = c->momentum,
                                       .weight_decay = c->group_wd[0]});
    else {
        nb_adam_opts a = {.lr = c->group_lr[0],
                          .beta1 = c->beta1,
                          .beta2 = c->beta2,
                          .eps = c->eps,
                          .weight_decay = c->group_wd[0]};
        opt = c->kind == OPTG_ADAM ? nb_adam_new(n[0], groups[0], a)
                                   : nb_adamw_new(n[0], groups[0], a);
    }
    if (opt && c->ngroups == 2)
        CU_ASSERT_EQUAL(
            nb_optimizer_add_group(opt, n[1], groups[1], c->group_lr[1], c->group_wd[1]), 1);
    return opt;
}

/* Parameter j's index in the optimizer: group 0's parameters come first. */
static int optf_index(const optf_case *c, int j) {
    int at = 0;
    for (int g = 0; g < c->ngroups; g++)
        for (int i = 0; i < 3; i++) {
            if (c->group_of[i] != g) continue;
            if (i == j) return at;
            at++;
        }
    return -1;
}

/* Step k as a training loop makes it: freeze or unfreeze, scale every group's lr, zero the
 * gradients and backward into the parameters that require grad. */
static void optf_step(const optf_case *c, nb_optimizer *opt, nb_tensor **q, int k) {
    nb_scope_begin();
    for (int j = 0; j < 3; j++) nb_requires_grad_(q[j], c->trainable[k][j]);
    CU_ASSERT_TRUE(nb_optimizer_set_lr_factor(opt, optf_lr_factors[k]));
    nb_optimizer_zero_grad(opt);
    for (int j = 0; j < 3; j++)
        if (c->trainable[k][j])
            CU_ASSERT_TRUE(nb_backward(
                q[j], from_doubles(q[j]->dtype, optf_ndim(j), optf_shapes[j], optf_grads[k][j])));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    nb_scope_end();
}

static void check_optf_case(const optf_case *c, nb_dtype dt) {
    nb_module *model;
    nb_tensor *q[3];
    optf_model(dt, &model, q);
    for (int j = 0; j < 3; j++) nb_requires_grad_(q[j], c->trainable[0][j]);
    nb_optimizer *opt = optf_optimizer(c, model, q);
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    CU_ASSERT_EQUAL(nb_optimizer_group_count(opt), c->ngroups);
    for (int k = 0; k < OPTF_STEPS; k++) optf_step(c, opt, q, k);
    double rtol = dt == NB_F64 ? 1e-12 : 1e-6;
    char what[160];
    for (int j = 0; j < 3; j++) {
        snprintf(what, sizeof what, "%s %s q%d", c->name, nb_dtype_name(dt), j);
        CU_ASSERT_TRUE(close_to(q[j], dt == NB_F64 ? c->q_f64[j] : c->q_f32[j], (int)nb_numel(q[j]),
                                rtol, what));
        if (dt != NB_F64) continue;
        char name[64];
        int i = optf_index(c, j);
        snprintf(name, sizeof name, "step.%d", i);
        nb_tensor *step = state_named(opt, name);
        if (c->kind == OPTG_SGD && c->momentum == 0) continue;
        if (c->steps[j] < 0) {
            CU_ASSERT_PTR_NULL(step);
            continue;
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(step);
        CU_ASSERT_EQUAL((long long)nb_item(step), c->steps[j]);
        for (int k = 0; k < (c->kind == OPTG_SGD ? 1 : 2); k++) {
            snprintf(name, sizeof name, "%s.%d",
                     c->kind == OPTG_SGD ? "momentum_buffer"
                     : k                 ? "exp_avg_sq"
                                         : "exp_avg",
                     i);
            snprintf(what, sizeof what, "%s state %s (q%d)", c->name, name, j);
            CU_ASSERT_TRUE(
                close_to(state_named(opt, name), c->state[j][k], (int)nb_numel(q[j]), rtol, what));
        }
    }
    nb_optimizer_free(opt);
    nb_module_free(model);
}

static void test_frozen_and_groups_match_torch(void) {
    for (int i = 0; i < OPTF_NCASES; i++) {
        check_optf_case(&optf_cases[i], NB_F64);
        check_optf_case(&optf_cases[i], NB_F32);
    }
}

/* nb_adamw_new_decay_split puts matrices in group 0 with the weight decay, vectors in group 1
 * without; a model with no parameters is refused. */
static void test_decay_split_groups(void) {
    nb_module *model = nb_model_new(NB_F32, 2);
    nb_linear_new(model, "fc", 3, 2, true);
    nb_adam_opts opts = nb_adamw_defaults(0.25);
    opts.weight_decay = 0.5;
    nb_optimizer *opt = nb_adamw_new_decay_split(model, opts);
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    CU_ASSERT_EQUAL(nb_optimizer_group_count(opt), 2);
    CU_ASSERT_EQUAL(nb_optimizer_group_weight_decay(opt, 0), 0.5);
    CU_ASSERT_EQUAL(nb_optimizer_group_weight_decay(opt, 1), 0);
    CU_ASSERT_EQUAL(nb_optimizer_group_lr(opt, 1), 0.25);
    /* Which parameter is where, by its state's shape: index 0 is fc.weight, 1 fc.bias. */
    nb_scope_begin();
    nb_module_zero_grad(model);
    nb_backward(nb_module_param(model, "fc.weight"), nb_ones(NB_F32, NB_SHAPE(2, 3)));
    nb_backward(nb_module_param(model, "fc.bias"), nb_ones(NB_F32, NB_SHAPE(2)));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    nb_scope_end();
    CU_ASSERT_EQUAL(state_named(opt, "exp_avg.0")->ndim, 2);
    CU_ASSERT_EQUAL(state_named(opt, "exp_avg.1")->ndim, 1);
    nb_optimizer_free(opt);
    nb_module_free(model);

    model = nb_model_new(NB_F32, 2);
    CU_ASSERT_PTR_NULL(nb_adamw_new_decay_split(model, opts));
    NBT_ASSERT_ERROR("nb_adamw_new_decay_split: 'Model' has no parameters");
    CU_ASSERT_PTR_NULL(nb_adamw_new_decay_split(NULL, opts));
    NBT_ASSERT_ERROR("module is NULL");
    nb_module_free(model);
}

/* Group learning rates: set one by one, together, or scaled from the rates they were made
 * with; and the groups' bad input. */
static void test_group_rates(void) {
    nb_scope *s = nb_scope_new();
    nb_scope_push(s);
    nb_tensor *a = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(2)), true),
              *b = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(3)), true),
              *c = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(3)), true);
    nb_scope_pop();
    nb_optimizer *opt = nb_sgd_new(1, &a, nb_sgd_defaults(0.5));
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, 0, NULL, 0.5, 0), 1); /* an empty group */
    CU_ASSERT_TRUE(nb_optimizer_set_lr(opt, 0.25));                   /* same rates: one for all */
    CU_ASSERT_EQUAL(nb_optimizer_group_lr(opt, 1), 0.25);
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, 1, &b, 2.0, 0.1), 2);
    CU_ASSERT_EQUAL(nb_optimizer_group_count(opt), 3);
    CU_ASSERT_FALSE(nb_optimizer_set_lr(opt, 0.1));
    NBT_ASSERT_ERROR("nb_optimizer_set_lr: groups 0 and 2 were made with different learning "
                     "rates (0.5 and 2)");
    CU_ASSERT_EQUAL(nb_optimizer_lr(opt), 0.25);
    CU_ASSERT_TRUE(nb_optimizer_set_lr_factor(opt, 0.5));
    CU_ASSERT_EQUAL(nb_optimizer_group_lr(opt, 0), 0.25);
    CU_ASSERT_EQUAL(nb_optimizer_group_lr(opt, 2), 1.0);
    CU_ASSERT_TRUE(nb_optimizer_set_group_lr(opt, 2, 3.0));
    CU_ASSERT_EQUAL(nb_optimizer_group_lr(opt, 2), 3.0);
    CU_ASSERT_EQUAL(nb_optimizer_group_weight_decay(opt, 2), 0.1);
    /* One step: a with lr 0.25, b with lr 3 and L2 0.1 (p = 0 adds nothing). */
    nb_backward(a, nb_ones(NB_F64, NB_SHAPE(2)));
    nb_backward(b, nb_ones(NB_F64, NB_SHAPE(3)));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    NBT_ASSERT_VALUES(a, 0, -0.25, -0.25);
    NBT_ASSERT_VALUES(b, 0, -3, -3, -3);

    CU_ASSERT_TRUE(isnan(nb_optimizer_group_lr(opt, 3)));
    NBT_ASSERT_ERROR("nb_optimizer_group_lr: group 3 is out of range: the optimizer has 3 groups");
    CU_ASSERT_FALSE(nb_optimizer_set_group_lr(opt, -1, 0.1));
    NBT_ASSERT_ERROR("group -1 is out of range");
    CU_ASSERT_FALSE(nb_optimizer_set_group_lr(opt, 0, -0.1));
    NBT_ASSERT_ERROR("nb_optimizer_set_group_lr: lr is -0.1");
    CU_ASSERT_FALSE(nb_optimizer_set_lr_factor(opt, NAN));
    NBT_ASSERT_ERROR("nb_optimizer_set_lr_factor: factor is nan");
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, 1, &b, 0.1, 0), -1);
    NBT_ASSERT_ERROR("nb_optimizer_add_group: parameter 2 (shape [3]) is already in group 2, as "
                     "parameter 1");
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, 1, &c, 0.1, 0), -1);
    NBT_ASSERT_ERROR("parameter 2 (shape [3]) is float32 but the optimizer's parameters are "
                     "float64");
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, -1, &c, 0.1, 0), -1);
    NBT_ASSERT_ERROR("n is -1");
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, 0, &a, -1, 0), -1);
    NBT_ASSERT_ERROR("nb_optimizer_add_group: lr is -1");
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, 0, NULL, 0.1, -2), -1);
    NBT_ASSERT_ERROR("weight_decay is -2");
    CU_ASSERT_EQUAL(nb_optimizer_group_count(opt), 3);
    CU_ASSERT_EQUAL(nb_optimizer_add_group(NULL, 1, &c, 0.1, 0), -1);
    CU_ASSERT_EQUAL(nb_optimizer_group_count(NULL), -1);
    nb_optimizer_free(opt);
    nb_scope_free(s);
}

/* Messages name a model's parameter by its path, whoever made the list. */
static void test_errors_name_module_paths(void) {
    nb_module *model = nb_model_new(NB_F32, 4);
    nb_module *layer = nb_module_container(nb_module_container(model, "layers"), "0");
    nb_linear_new(nb_module_container(layer, "attention"), "wq", 32, 12, false);
    int n;
    nb_tensor **params = nb_module_param_tensors(model, &n);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    nb_tensor *twice[2] = {params[0], params[0]};
    CU_ASSERT_PTR_NULL(nb_adamw_new(2, twice, nb_adamw_defaults(0.1)));
    NBT_ASSERT_ERROR("nb_adamw_new: parameter 'layers.0.attention.wq.weight' (shape [12, 32]) is "
                     "listed twice, as parameters 0 and 1");
    nb_tensor *mixed[2] = {params[0], nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(4)), true)};
    CU_ASSERT_PTR_NULL(nb_sgd_new(2, mixed, nb_sgd_defaults(0.1)));
    NBT_ASSERT_ERROR("nb_sgd_new: parameter 1 (shape [4]) is float64 but parameter "
                     "'layers.0.attention.wq.weight' (shape [12, 32]) is float32");
    nb_optimizer *opt = nb_adamw_new(n, params, nb_adamw_defaults(0.1));
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, 1, params, 0.1, 0), -1);
    NBT_ASSERT_ERROR("nb_optimizer_add_group: parameter 'layers.0.attention.wq.weight' (shape "
                     "[12, 32]) is already in group 0, as parameter 0");
    nb_scope_begin();
    params[0]->grad = nb_zeros(NB_F32, NB_SHAPE(4)); /* deliberately corrupt */
    CU_ASSERT_FALSE(nb_optimizer_step(opt));
    NBT_ASSERT_ERROR("nb_optimizer_step: parameter 'layers.0.attention.wq.weight' (shape [12, "
                     "32]) is float32 but its gradient has shape [4] (float32)");
    params[0]->grad = NULL;
    nb_scope_end();
    /* A tensor outside any model keeps its index, also once its model is gone. */
    nb_tensor *loose = nb_zeros(NB_F32, NB_SHAPE(1, 2));
    CU_ASSERT_EQUAL(nb_optimizer_add_group(opt, 2, (nb_tensor *[]){loose, loose}, 0.1, 0), -1);
    NBT_ASSERT_ERROR("parameter 2 (shape [1, 2]) is listed twice, as parameters 1 and 2");
    nb_optimizer_free(opt);
    free(params);
    nb_module_free(model);
}

/* ---- schedules ---- */
static void check_factors(nb_lr_schedule s, const double *want, int n, double tol,
                          const char *what) {
    for (int k = 0; k < n; k++) {
        double got = nb_lr_schedule_factor(s, k);
        if (!(fabs(got - want[k]) <= tol)) {
            fprintf(stderr, "%s: step %d: factor %.17g, expected %.17g\n", what, k, got, want[k]);
            CU_FAIL("schedule factor");
        }
    }
}

/* Without warm-up, the decays are torch's schedulers (tests/goldens/optim_golden.h). torch's
 * CosineAnnealingLR is periodic: past T_max it rises again, where nabla's stays at its end. */
static void test_schedules_match_torch(void) {
    check_factors(nb_lr_linear(0, 10, 0.2), optl_linear, OPTL_STEPS, 1e-15, "linear");
    check_factors(nb_lr_cosine(0, 10, 0.1), optl_cosine, 11, 1e-15, "cosine");
    check_factors(nb_lr_cosine(0, 7, 0), optl_cosine_to_zero, 8, 1e-15, "cosine to 0");
    for (int k = 11; k < 14; k++)
        CU_ASSERT_EQUAL(nb_lr_schedule_factor(nb_lr_cosine(0, 10, 0.1), k), 0.1);
    check_factors(nb_lr_step_decay(0, 3, 0.5), optl_step, OPTL_STEPS, 0, "step");
    check_factors(nb_lr_constant(0), (const double[]){1, 1, 1}, 3, 0, "constant");
}

/* With warm-up, by hand: the factor rises by 1 / warmup a step from 0, then decays over the
 * steps after warm-up. */
static void test_schedules_by_hand(void) {
    check_factors(nb_lr_constant(4), (const double[]){0, 0.25, 0.5, 0.75, 1, 1, 1}, 7, 0,
                  "constant, warm-up 4");
    /* linear from 1 at step 2 to 0.2 at step 10: 0.1 a step */
    check_factors(nb_lr_linear(2, 10, 0.2),
                  (const double[]){0, 0.5, 1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.2, 0.2}, 13,
                  1e-15, "linear, warm-up 2");
    /* cosine over steps 4..12: a quarter, half and three quarters in */
    check_factors(nb_lr_cosine(4, 12, 0.1), (const double[]){0, 0.25, 0.5, 0.75, 1}, 5, 0,
                  "cosine, warm-up 4");
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_schedule_factor(nb_lr_cosine(4, 12, 0.1), 6),
                           0.1 + 0.9 * (2 + sqrt(2)) / 4, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_schedule_factor(nb_lr_cosine(4, 12, 0.1), 8), 0.55, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_schedule_factor(nb_lr_cosine(4, 12, 0.1), 10),
                           0.1 + 0.9 * (2 - sqrt(2)) / 4, 1e-15);
    CU_ASSERT_EQUAL(nb_lr_schedule_factor(nb_lr_cosine(4, 12, 0.1), 12), 0.1);
    CU_ASSERT_EQUAL(nb_lr_schedule_factor(nb_lr_cosine(4, 12, 0.1), 1000), 0.1);
    /* warm-up as long as the whole schedule: 1 is never reached, min_factor from the end */
    CU_ASSERT_EQUAL(nb_lr_schedule_factor(nb_lr_cosine(4, 4, 0.5), 3), 0.75);
    CU_ASSERT_EQUAL(nb_lr_schedule_factor(nb_lr_cosine(4, 4, 0.5), 4), 0.5);
    check_factors(nb_lr_step_decay(3, 2, 0.5),
                  (const double[]){0, 1. / 3, 2. / 3, 1, 1, 0.5, 0.5, 0.25}, 8, 1e-15,
                  "step, warm-up 3");

    /* Every group follows its own initial rate. */
    nb_tensor *p[2] = {nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(1)), true),
                       nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(1)), true)};
    nb_optimizer *opt = nb_adamw_new(1, &p[0], nb_adamw_defaults(0.1));
    nb_optimizer_add_group(opt, 1, &p[1], 0.3, 0);
    CU_ASSERT_TRUE(nb_lr_schedule_apply(nb_lr_cosine(0, 8, 0), opt, 4));
    CU_ASSERT_DOUBLE_EQUAL(nb_optimizer_group_lr(opt, 0), 0.05, 1e-17);
    CU_ASSERT_DOUBLE_EQUAL(nb_optimizer_group_lr(opt, 1), 0.15, 1e-17);
    CU_ASSERT_FALSE(nb_lr_schedule_apply(nb_lr_cosine(0, 8, 0), opt, -1));
    NBT_ASSERT_ERROR("nb_lr_schedule_factor: step is -1");
    CU_ASSERT_DOUBLE_EQUAL(nb_optimizer_group_lr(opt, 1), 0.15, 1e-17);
    CU_ASSERT_FALSE(nb_lr_schedule_apply(nb_lr_constant(0), NULL, 0));
    NBT_ASSERT_ERROR("nb_optimizer_set_lr_factor: optimizer is NULL");
    nb_optimizer_free(opt);
}

static void test_schedule_errors(void) {
    static const struct {
        nb_lr_schedule s;
        const char *why;
    } bad[] = {
        {{.decay = NB_LR_CONSTANT, .warmup_steps = -1}, "constant schedule: warmup_steps is -1"},
        {{.decay = NB_LR_LINEAR, .warmup_steps = 5, .total_steps = 4},
         "linear schedule: need warmup_steps <= total_steps and min_factor in [0, 1], got "
         "warmup_steps 5, total_steps 4, min_factor 0"},
        {{.decay = NB_LR_COSINE, .total_steps = 4, .min_factor = 1.5}, "min_factor 1.5"},
        {{.decay = NB_LR_COSINE, .total_steps = 4, .min_factor = NAN}, "min_factor nan"},
        {{.decay = NB_LR_STEP, .step_size = 0, .gamma = 0.5},
         "step schedule: need step_size >= 1 and gamma in [0, 1], got step_size 0, gamma 0.5"},
        {{.decay = NB_LR_STEP, .step_size = 2, .gamma = 2}, "gamma 2"},
        {{.decay = (nb_lr_decay)7}, "decay is 7, not one of the nb_lr_decay values"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        nb_clear_error();
        CU_ASSERT_TRUE(isnan(nb_lr_schedule_factor(bad[i].s, 0)));
        NBT_ASSERT_ERROR("nb_lr_schedule_factor: ");
        NBT_ASSERT_ERROR(bad[i].why);
    }
}

/* ---- checkpoints with frozen parameters: state made lazily round-trips ---- */
typedef struct {
    nb_module *model;
    nb_tensor *w1, *b1, *w2;
    nb_optimizer *opt;
} frozen_run;

/* Two linear layers (the second without bias), its weight frozen, AdamW over all. */
static frozen_run frozen_run_new(void) {
    frozen_run r;
    r.model = nb_model_new(NB_F32, 11);
    nb_linear *a = nb_linear_new(r.model, "a", 3, 2, true),
              *b = nb_linear_new(r.model, "b", 2, 2, false);
    r.w1 = nb_module_param(r.model, "a.weight");
    r.b1 = nb_module_param(r.model, "a.bias");
    r.w2 = nb_module_param(r.model, "b.weight");
    CU_ASSERT_PTR_NOT_NULL(a);
    CU_ASSERT_PTR_NOT_NULL(b);
    nb_requires_grad_(r.w2, false);
    int n;
    nb_tensor **params = nb_module_param_tensors(r.model, &n);
    r.opt = nb_adamw_new(n, params, nb_adamw_defaults(0.05));
    free(params);
    return r;
}

static void frozen_run_step(frozen_run *r, int k) {
    nb_scope_begin();
    nb_optimizer_zero_grad(r->opt);
    double x[6] = {1, -2, 0.5 * k, 3, 0.25, -1};
    nb_tensor *in = from_doubles(NB_F32, NB_SHAPE(2, 3), x);
    nb_tensor *y =
        nb_linear_forward((nb_linear *)nb_module_child(r->model, 1),
                          nb_linear_forward((nb_linear *)nb_module_child(r->model, 0), in));
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(y, y)), NULL));
    CU_ASSERT_TRUE(nb_optimizer_step(r->opt));
    nb_scope_end();
}

static void frozen_run_free(frozen_run *r) {
    nb_optimizer_free(r->opt);
    nb_module_free(r->model);
}

static int state_count(nb_optimizer *opt) {
    const nb_named_tensor *st;
    return nb_optimizer_state(opt, "optim.", &st);
}

/* Makes the temporary directory dir (a mkdtemp template) and two file paths in it (128 bytes). */
static void temp_files(char *dir, char *first, const char *first_name, char *second,
                       const char *second_name) {
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(first, 128, "%s/%s", dir, first_name);
    snprintf(second, 128, "%s/%s", dir, second_name);
}

static void test_frozen_checkpoint_round_trip(void) {
    char dir[] = "/tmp/nabla_optim_XXXXXX", path[128], bad[128];
    temp_files(dir, path, "frozen.safetensors", bad, "bad.safetensors");
    frozen_run a = frozen_run_new(), b = frozen_run_new();
    for (int k = 0; k < 2; k++) frozen_run_step(&a, k);
    CU_ASSERT_EQUAL(state_count(a.opt), 6); /* a.weight and a.bias; b.weight has none */
    CU_ASSERT_PTR_NULL(state_named(a.opt, "step.2"));
    CU_ASSERT_TRUE_FATAL(nb_module_save_with(a.model, a.opt, path));
    CU_ASSERT_EQUAL(state_count(b.opt), 0);
    CU_ASSERT_TRUE_FATAL(nb_module_load_with(b.model, b.opt, path));
    CU_ASSERT_EQUAL(state_count(b.opt), 6);
    CU_ASSERT_EQUAL(nb_item(state_named(b.opt, "step.1")), 2);
    /* Unfrozen in both: b.weight's state is made on its first step, the same in both runs. */
    nb_requires_grad_(a.w2, true);
    nb_requires_grad_(b.w2, true);
    for (int k = 2; k < 4; k++) {
        frozen_run_step(&a, k);
        frozen_run_step(&b, k);
    }
    nb_tensor *pa[3] = {a.w1, a.b1, a.w2}, *pb[3] = {b.w1, b.b1, b.w2};
    for (int j = 0; j < 3; j++)
        CU_ASSERT_EQUAL(memcmp(nb_data(pa[j]), nb_data(pb[j]), (size_t)nb_numel(pa[j]) * 4), 0);
    CU_ASSERT_EQUAL(nb_item(state_named(b.opt, "step.2")), 2);
    CU_ASSERT_EQUAL(nb_item(state_named(b.opt, "step.0")), 4);

    /* Loading the file (state for two parameters) takes b.weight's state away, as torch's
     * load_state_dict replaces the state; a load that fails leaves the state as it was. */
    int n = 0;
    nb_scope_begin();
    nb_named_tensor *all = nb_safetensors_read(path, &n);
    for (int i = 0; i < n; i++)
        if (strcmp(all[i].name, "optim.step.1") == 0) *(int64_t *)nb_data(all[i].tensor) = -5;
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(bad, n, all));
    nb_scope_end();
    CU_ASSERT_FALSE(nb_module_load_with(b.model, b.opt, bad));
    NBT_ASSERT_ERROR("optim.step.1");
    CU_ASSERT_EQUAL(state_count(b.opt), 9);
    CU_ASSERT_EQUAL(nb_item(state_named(b.opt, "step.2")), 2);
    CU_ASSERT_TRUE(nb_module_load_with(b.model, b.opt, path));
    CU_ASSERT_EQUAL(state_count(b.opt), 6);
    CU_ASSERT_PTR_NULL(state_named(b.opt, "step.2"));
    /* ... and b.weight's next step starts it afresh (step 1). */
    frozen_run_step(&b, 4);
    CU_ASSERT_EQUAL(nb_item(state_named(b.opt, "step.2")), 1);
    CU_ASSERT_EQUAL(nb_item(state_named(b.opt, "step.0")), 3);

    /* State for a parameter the optimizer does not have is refused as an extra tensor. */
    nb_scope_begin();
    all = nb_safetensors_read(path, &n);
    nb_named_tensor more[16];
    for (int i = 0; i < n; i++) more[i] = all[i];
    more[n] = (nb_named_tensor){"optim.step.7", nb_zeros(NB_I64, 0, (int64_t[1]){0})};
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(bad, n + 1, more));
    nb_scope_end();
    CU_ASSERT_FALSE(nb_module_load_with(b.model, b.opt, bad));
    NBT_ASSERT_ERROR("optim.step.7");
    CU_ASSERT_EQUAL(state_count(b.opt), 9);
    frozen_run_free(&a);
    frozen_run_free(&b);
    unlink(path);
    unlink(bad);
    rmdir(dir);
}

/* A linear model and Adam after two steps (in the current scope's caller: free both). */
static nb_optimizer *trained_linear(nb_module **model) {
    *model = nb_model_new(NB_F32, 3);
    nb_linear *lin = nb_linear_new(*model, "lin", 3, 2, true);
    nb_param ps[2];
    int np = nb_module_named_params(*model, ps, 2);
    nb_tensor *pt[2] = {ps[0].tensor, ps[1].tensor};
    nb_optimizer *opt = nb_adam_new(np, pt, nb_adam_defaults(1e-2));
    for (int k = 0; k < 2; k++) {
        nb_scope_begin();
        nb_optimizer_zero_grad(opt);
        nb_tensor *y = nb_linear_forward(lin, nb_ones(NB_F32, NB_SHAPE(4, 3)));
        CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(y, y)), NULL));
        CU_ASSERT_TRUE(nb_optimizer_step(opt));
        nb_scope_end();
    }
    return opt;
}

/* Every parameter and state value of model and opt, flattened. */
static int64_t snapshot(nb_module *model, nb_optimizer *opt, double *out) {
    nb_param ps[2];
    int np = nb_module_named_params(model, ps, 2);
    const nb_named_tensor *st;
    int ns = nb_optimizer_state(opt, "optim.", &st);
    int64_t k = 0;
    for (int i = 0; i < np + ns; i++) {
        const nb_tensor *t = i < np ? ps[i].tensor : st[i - np].tensor;
        nb_to_doubles(t, out + k);
        k += nb_numel(t);
    }
    return k;
}

/* A checkpoint with one state value replaced is refused whole, naming the tensor; the same
 * value written behind the optimizer's back makes nb_optimizer_step refuse to run. */
static void test_bad_optimizer_state_refused(void) {
    char dir[] = "/tmp/nabla_optim_XXXXXX", good[128], bad[128];
    temp_files(dir, good, "good.safetensors", bad, "bad.safetensors");
    nb_module *model;
    nb_optimizer *opt = trained_linear(&model);
    CU_ASSERT_TRUE_FATAL(nb_module_save_with(model, opt, good));
    static const struct {
        const char *name;
        int64_t index;
        double value;
        const char *why;
    } cases[] = {
        {"optim.step.0", 0, -1, "step count -1 is out of range"},
        {"optim.step.1", 0, (double)INT64_MAX, "step count 9223372036854775807 is out of range"},
        {"optim.exp_avg.0", 4, NAN, "element 4 is nan, expected a finite value"},
        {"optim.exp_avg.1", 1, INFINITY, "element 1 is inf, expected a finite value"},
        {"optim.exp_avg_sq.0", 2, -1e-3, "element 2 is -0.001, expected a finite value >= 0"},
    };
    double before[64], after[64];
    int64_t count = snapshot(model, opt, before);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nb_scope_begin();
        int n = 0;
        nb_named_tensor *all = nb_safetensors_read(good, &n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(all);
        for (int i = 0; i < n; i++)
            if (strcmp(all[i].name, cases[c].name) == 0) {
                nb_tensor *t = all[i].tensor;
                if (t->dtype == NB_I64)
                    ((int64_t *)nb_data(t))[cases[c].index] =
                        cases[c].value == (double)INT64_MAX ? INT64_MAX : (int64_t)cases[c].value;
                else
                    ((float *)nb_data(t))[cases[c].index] = (float)cases[c].value;
            }
        CU_ASSERT_TRUE_FATAL(nb_safetensors_save(bad, n, all));
        nb_clear_error();
        CU_ASSERT_FALSE(nb_module_load_with(model, opt, bad));
        NBT_ASSERT_ERROR(cases[c].name);
        NBT_ASSERT_ERROR(cases[c].why);
        NBT_ASSERT_ERROR(bad);
        CU_ASSERT_EQUAL(snapshot(model, opt, after), count);
        CU_ASSERT_EQUAL(memcmp(before, after, sizeof(double) * (size_t)count), 0);
        nb_scope_end();
    }
    /* The good file still loads. */
    CU_ASSERT_TRUE(nb_module_load_with(model, opt, good));
    /* Loaded around the check (straight into the state tensors): the step refuses to run. */
    const nb_named_tensor *st;
    nb_optimizer_state(opt, "optim.", &st);
    *(int64_t *)nb_data(st[2].tensor) = -1; /* optim.step.0 */
    nb_scope_begin();
    nb_param ps[2];
    nb_module_named_params(model, ps, 2);
    nb_backward(nb_sum(ps[0].tensor), NULL);
    snapshot(model, opt, before);
    nb_clear_error();
    CU_ASSERT_FALSE(nb_optimizer_step(opt));
    NBT_ASSERT_ERROR("nb_optimizer_step: parameter 'lin.weight' (shape [2, 3]) has step count -1");
    snapshot(model, opt, after);
    CU_ASSERT_EQUAL(memcmp(before, after, sizeof(double) * (size_t)count), 0);
    nb_scope_end();
    nb_optimizer_free(opt);
    nb_module_free(model);
    unlink(good);
    unlink(bad);
    rmdir(dir);
}

/* ---- clip_grad_norm: grads [3, 4] and [[12]]: norm sqrt(9 + 16 + 144) = 13 ---- */
static void make_clip_params(nb_dtype dt, nb_tensor **p) {
    p[0] = nb_requires_grad_(nb_zeros(dt, NB_SHAPE(2)), true);
    p[1] = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(1, 1)), true);
    p[2] = nb_requires_grad_(nb_zeros(dt, NB_SHAPE(3)), true); /* never gets a gradient */
    nb_backward(p[0], from_doubles(dt, NB_SHAPE(2), (double[]){3, 4}));
    nb_backward(p[1], nb_from_array(NB_F64, NB_SHAPE(1, 1), (double[]){12}));
}

static void test_clip_grad_norm(void) {
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        double tol = d ? 1e-6 : 1e-15;
        nb_tensor *p[3];
        make_clip_params(dt, p);
        /* Below the threshold: untouched. */
        CU_ASSERT_DOUBLE_EQUAL(nb_clip_grad_norm(3, p, 20), 13, 1e-12);
        NBT_ASSERT_VALUES(nb_grad(p[0]), 0, 3, 4);
        NBT_ASSERT_VALUES(nb_grad(p[1]), 0, 12);
        CU_ASSERT_PTR_NULL(nb_grad(p[2]));
        /* Above: scaled by max_norm / (norm + 1e-6). */
        double coef = 6.5 / (13 + 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(nb_clip_grad_norm(3, p, 6.5), 13, 1e-12);
        NBT_ASSERT_VALUES(nb_grad(p[0]), tol, 3 * coef, 4 * coef);
        NBT_ASSERT_VALUES(nb_grad(p[1]), 1e-15, 12 * coef);
        /* The clipped norm is now just under 6.5. */
        CU_ASSERT_DOUBLE_EQUAL(nb_clip_grad_norm(3, p, 100), 13 * coef, 1e-5);
    }
    nb_tensor *none[1] = {nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2)), true)};
    CU_ASSERT_EQUAL(nb_clip_grad_norm(1, none, 1.0), 0);
    CU_ASSERT_EQUAL(nb_clip_grad_norm(0, NULL, 1.0), 0);
}

static void test_clip_grad_norm_nan(void) {
    nb_tensor *p[2];
    p[0] = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(2)), true);
    p[1] = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(1)), true);
    nb_backward(p[0], nb_from_array(NB_F64, NB_SHAPE(2), (double[]){NAN, 1}));
    nb_backward(p[1], nb_from_array(NB_F64, NB_SHAPE(1), (double[]){2}));
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(2, p, 1.0)));
    /* torch multiplies by the NaN coefficient: every gradient becomes NaN. */
    CU_ASSERT_TRUE(isnan(nb_item(nb_grad(p[1]))));
}

static void test_clip_grad_norm_errors(void) {
    nb_tensor *p[2] = {nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2)), true), NULL};
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(1, NULL, 1.0)));
    NBT_ASSERT_ERROR("nb_clip_grad_norm: params is NULL");
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(2, p, 1.0)));
    NBT_ASSERT_ERROR("parameter 1 is NULL");
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(1, p, -1.0)));
    NBT_ASSERT_ERROR("max_norm is -1");
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(1, p, NAN)));
    NBT_ASSERT_ERROR("max_norm is nan");
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(-1, p, 1.0)));
    NBT_ASSERT_ERROR("n is -1");
}

/* ---- schedule: warmup 10, total 110, base 1e-3, min 1e-5 ---- */
static void test_lr_schedule(void) {
    double base = 1e-3, min = 1e-5, span = base - min;
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(0, 10, 110, base, min), 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(1, 10, 110, base, min), 1e-4, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(5, 10, 110, base, min), 5e-4, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(10, 10, 110, base, min), base, 1e-18);
    /* a quarter, half and three quarters into the decay: cos = sqrt(2)/2, 0, -sqrt(2)/2 */
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(35, 10, 110, base, min),
                           min + span * (2 + sqrt(2)) / 4, 1e-17);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(60, 10, 110, base, min), (base + min) / 2, 1e-17);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(85, 10, 110, base, min),
                           min + span * (2 - sqrt(2)) / 4, 1e-17);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(110, 10, 110, base, min), min, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(1000, 10, 110, base, min), min, 0);
    /* no warmup starts at base_lr; warmup == total jumps to min_lr at the end */
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(0, 0, 4, 2.0, 0.0), 2.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(1, 0, 4, 2.0, 0.0), 1 + sqrt(2) / 2, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(3, 4, 4, 2.0, 0.5), 1.5, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_lr_warmup_cosine(4, 4, 4, 2.0, 0.5), 0.5, 0);
    /* bad arguments */
    CU_ASSERT_TRUE(isnan(nb_lr_warmup_cosine(-1, 10, 110, base, min)));
    NBT_ASSERT_ERROR("got step -1");
    CU_ASSERT_TRUE(isnan(nb_lr_warmup_cosine(0, 20, 10, base, min)));
    NBT_ASSERT_ERROR("warmup_steps 20, total_steps 10");
    CU_ASSERT_TRUE(isnan(nb_lr_warmup_cosine(0, -1, 10, base, min)));
    CU_ASSERT_TRUE(isnan(nb_lr_warmup_cosine(0, 1, 10, min, base)));
    NBT_ASSERT_ERROR("min_lr <= base_lr");
    CU_ASSERT_TRUE(isnan(nb_lr_warmup_cosine(0, 1, 10, NAN, 0)));
    CU_ASSERT_TRUE(isnan(nb_lr_warmup_cosine(0, 1, 10, 1, -1)));
}

/* ---- bad input ---- */
static void test_bad_params(void) {
    nb_tensor *leaf = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2, 3)), true);
    nb_tensor *other = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(4)), true);
    nb_sgd_opts sgd = nb_sgd_defaults(0.1);

    nb_tensor *nonleaf[2] = {other, nb_view(leaf, NB_SHAPE(6))};
    CU_ASSERT_PTR_NULL(nb_sgd_new(2, nonleaf, sgd));
    NBT_ASSERT_ERROR("nb_sgd_new: parameter 1 (shape [6]) is not a leaf");
    CU_ASSERT_PTR_NULL(nb_adam_new(1, NULL, nb_adam_defaults(0.1)));
    NBT_ASSERT_ERROR("nb_adam_new: params is NULL");
    nb_tensor *with_null[2] = {leaf, NULL};
    CU_ASSERT_PTR_NULL(nb_adamw_new(2, with_null, nb_adamw_defaults(0.1)));
    NBT_ASSERT_ERROR("nb_adamw_new: parameter 1 is NULL");
    CU_ASSERT_PTR_NULL(nb_sgd_new(0, &leaf, sgd));
    NBT_ASSERT_ERROR("empty parameter list");
    nb_tensor *mixed[2] = {leaf, nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(4)), true)};
    CU_ASSERT_PTR_NULL(nb_adam_new(2, mixed, nb_adam_defaults(0.1)));
    NBT_ASSERT_ERROR(
        "parameter 1 (shape [4]) is float64 but parameter 0 (shape [2, 3]) is float32");
    nb_tensor *ints = nb_zeros(NB_I64, NB_SHAPE(3));
    CU_ASSERT_PTR_NULL(nb_sgd_new(1, &ints, sgd));
    NBT_ASSERT_ERROR("is int64, expected float32 or float64");
    nb_tensor *twice[3] = {leaf, other, leaf};
    CU_ASSERT_PTR_NULL(nb_sgd_new(3, twice, sgd));
    NBT_ASSERT_ERROR("parameter 2 (shape [2, 3]) is listed twice, as parameters 0 and 2");
    nb_tensor *expanded =
        nb_requires_grad_(nb_expand(nb_zeros(NB_F32, NB_SHAPE(1, 3)), NB_SHAPE(4, 3)), true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(expanded);
    CU_ASSERT_PTR_NULL(nb_sgd_new(1, &expanded, sgd));
    NBT_ASSERT_ERROR("is an expanded view");
}

static void test_bad_hyperparameters(void) {
    nb_tensor *p = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2)), true);
    CU_ASSERT_PTR_NULL(nb_sgd_new(1, &p, nb_sgd_defaults(-0.1)));
    NBT_ASSERT_ERROR("nb_sgd_new: lr is -0.1");
    CU_ASSERT_PTR_NULL(nb_adam_new(1, &p, nb_adam_defaults(NAN)));
    NBT_ASSERT_ERROR("nb_adam_new: lr is nan");
    CU_ASSERT_PTR_NULL(nb_adamw_new(1, &p, nb_adamw_defaults(-1)));
    NBT_ASSERT_ERROR("nb_adamw_new: lr is -1");
    nb_adam_opts a = nb_adam_defaults(0.1);
    a.beta1 = 1.0;
    CU_ASSERT_PTR_NULL(nb_adam_new(1, &p, a));
    NBT_ASSERT_ERROR("beta1 is 1, expected a value in [0, 1)");
    a = nb_adam_defaults(0.1);
    a.eps = -1e-8;
    CU_ASSERT_PTR_NULL(nb_adam_new(1, &p, a));
    NBT_ASSERT_ERROR("eps is -1e-08");
    a = nb_adamw_defaults(0.1);
    a.weight_decay = -0.01;
    CU_ASSERT_PTR_NULL(nb_adamw_new(1, &p, a));
    NBT_ASSERT_ERROR("weight_decay is -0.01");
    CU_ASSERT_PTR_NULL(nb_sgd_new(1, &p, (nb_sgd_opts){.lr = 0.1, .nesterov = true}));
    NBT_ASSERT_ERROR("Nesterov momentum requires a momentum > 0 and zero dampening");
    CU_ASSERT_PTR_NULL(nb_sgd_new(1, &p, (nb_sgd_opts){.lr = 0.1, .momentum = -0.5}));
    NBT_ASSERT_ERROR("momentum is -0.5");
    CU_ASSERT_PTR_NULL(
        nb_sgd_new(1, &p, (nb_sgd_opts){.lr = 0.1, .momentum = 0.5, .dampening = 2}));
    NBT_ASSERT_ERROR("dampening is 2");

    nb_optimizer *opt = nb_sgd_new(1, &p, nb_sgd_defaults(0.1));
    CU_ASSERT_FALSE(nb_optimizer_set_lr(opt, -0.5));
    NBT_ASSERT_ERROR("nb_optimizer_set_lr: lr is -0.5");
    CU_ASSERT_FALSE(nb_optimizer_set_lr(opt, NAN));
    CU_ASSERT_EQUAL(nb_optimizer_lr(opt), 0.1);
    CU_ASSERT_TRUE(nb_optimizer_set_lr(opt, 0.25));
    CU_ASSERT_EQUAL(nb_optimizer_lr(opt), 0.25);
    nb_optimizer_free(opt);

    CU_ASSERT_FALSE(nb_optimizer_step(NULL));
    NBT_ASSERT_ERROR("nb_optimizer_step: optimizer is NULL");
    CU_ASSERT_TRUE(isnan(nb_optimizer_lr(NULL)));
    CU_ASSERT_FALSE(nb_optimizer_set_lr(NULL, 0.1));
    const nb_named_tensor *st;
    CU_ASSERT_EQUAL(nb_optimizer_state(NULL, "", &st), -1);
    nb_optimizer_zero_grad(NULL);
    nb_optimizer_free(NULL);
}

/* A gradient that does not match its parameter cannot come from nb_backward; step still
 * checks, so a corrupted one fails cleanly and changes no parameter. */
static void test_step_rejects_mismatched_grad(void) {
    nb_tensor *p[2] = {nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2)), true),
                       nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(3)), true)};
    nb_optimizer *opt = nb_sgd_new(2, p, nb_sgd_defaults(0.5));
    nb_backward(p[0], nb_ones(NB_F64, NB_SHAPE(2)));
    p[1]->grad = nb_ones(NB_F64, NB_SHAPE(4)); /* deliberately corrupt */
    CU_ASSERT_FALSE(nb_optimizer_step(opt));
    NBT_ASSERT_ERROR("parameter 1 (shape [3]) is float64 but its gradient has shape [4] (float64)");
    NBT_ASSERT_VALUES(p[0], 0, 1, 1);
    p[1]->grad = NULL;
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    NBT_ASSERT_VALUES(p[0], 0, 0.5, 0.5);
    nb_optimizer_free(opt);
}

int main(void) {
    const nbtest_case cases[] = {
        {"SGD, Adam, AdamW match torch.optim over 5 steps", test_matches_torch},
        {"Adam first step by hand", test_adam_first_step_by_hand},
        {"AdamW: wide kernels, a job cut inside a parameter, strided leaves",
         test_adamw_wide_split_and_strided},
        {"parameters sharing a storage", test_params_sharing_a_storage},
        {"no malloc after the first step", test_no_alloc_after_first_step},
        {"parameters without a gradient are skipped", test_skips_params_without_grad},
        {"state names", test_state_names},
        {"frozen parameters and groups match torch", test_frozen_and_groups_match_torch},
        {"the weight-decay split", test_decay_split_groups},
        {"group learning rates", test_group_rates},
        {"errors name module paths", test_errors_name_module_paths},
        {"schedules match torch.optim.lr_scheduler", test_schedules_match_torch},
        {"schedules with warm-up by hand", test_schedules_by_hand},
        {"bad schedules", test_schedule_errors},
        {"checkpoint round trip with a frozen parameter", test_frozen_checkpoint_round_trip},
        {"bad optimizer state in a checkpoint is refused", test_bad_optimizer_state_refused},
        {"clip_grad_norm by hand", test_clip_grad_norm},
        {"clip_grad_norm with a NaN gradient", test_clip_grad_norm_nan},
        {"clip_grad_norm bad input", test_clip_grad_norm_errors},
        {"warmup + cosine schedule", test_lr_schedule},
        {"bad parameters", test_bad_params},
        {"bad hyperparameters", test_bad_hyperparameters},
        {"step rejects a mismatched gradient", test_step_rejects_mismatched_grad},
    };
    return nbtest_run("optim", cases, sizeof cases / sizeof cases[0]);
}
