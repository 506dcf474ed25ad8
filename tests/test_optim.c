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
        return nb_sgd_new(params, 2,
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
    return c->kind == OPTG_ADAM ? nb_adam_new(params, 2, a) : nb_adamw_new(params, 2, a);
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
    nb_scope *model = nb_scope_create();
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
    nb_scope_destroy(model);
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
    nb_scope *model = nb_scope_create();
    nb_scope_push(model);
    nb_tensor *p = nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(2), (double[]){1, -2}), true);
    nb_scope_pop();
    nb_optimizer *opt = nb_adam_new(&p, 1, nb_adam_defaults(0.1));
    nb_backward(p, nb_from_array(NB_F64, NB_SHAPE(2), (double[]){0.5, -4}));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    NBT_ASSERT_VALUES(p, 1e-12, 1 - 0.1 * 0.5 / (0.5 + 1e-8), -2 + 0.1 * 4 / (4 + 1e-8));
    nb_optimizer_free(opt);
    nb_scope_destroy(model);
}

/* A training-loop shaped run: after the first step, step() never allocates, in the same
 * scope (so temporaries would pile up and need fresh memory) or across step scopes. */
static void check_no_alloc(nb_dtype dt, int which) {
    nb_scope *model = nb_scope_create();
    nb_tensor *p[2];
    make_params(model, dt, which == 1, &p[0], &p[1]);
    nb_optimizer *opt =
        which == 0 ? nb_adam_new(p, 2, nb_adam_defaults(0.01))
        : which == 1
            ? nb_adamw_new(p, 2, nb_adamw_defaults(0.01))
            : nb_sgd_new(p, 2, (nb_sgd_opts){.lr = 0.1, .momentum = 0.9, .nesterov = true});
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
    nb_scope_destroy(model);
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
    nb_scope *model = nb_scope_create();
    nb_tensor *p[WIDE_PARAMS];
    for (int i = 0; i < WIDE_PARAMS; i++) p[i] = wide_param(model, dt, i, transposed);
    CU_ASSERT_EQUAL(nb_is_contiguous(p[0]), !transposed);
    nb_optimizer *opt = nb_adamw_new(p, WIDE_PARAMS, nb_adamw_defaults(0.01));
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
    nb_scope_destroy(model);
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
    nb_scope *model = nb_scope_create();
    nb_scope_push(model);
    double v[2 * 40];
    for (int64_t k = 0; k < 80; k++) v[k] = wide_value(k % 40);
    nb_tensor *rows = from_doubles(NB_F32, NB_SHAPE(2, 40), v);
    nb_tensor *p[2] = {nb_view(nb_select(rows, 0, 0), NB_SHAPE(5, 8)),
                       nb_view(nb_select(rows, 0, 1), NB_SHAPE(5, 8))};
    for (int i = 0; i < 2; i++) nb_requires_grad_(p[i], true);
    nb_scope_pop();
    nb_optimizer *opt = nb_adamw_new(p, 2, nb_adamw_defaults(0.01));
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
    nb_scope_destroy(model);
    nb_set_num_threads(0);
    free(separate);
}

static void test_no_alloc_after_first_step(void) {
    for (int which = 0; which < 3; which++) {
        check_no_alloc(NB_F32, which);
        check_no_alloc(NB_F64, which);
    }
}

/* Params without a gradient are skipped: they do not move and their step does not count. */
static void test_skips_params_without_grad(void) {
    nb_scope *model = nb_scope_create();
    nb_scope_push(model);
    nb_tensor *p[2] = {nb_requires_grad_(nb_full(NB_F32, NB_SHAPE(3), 1.0), true),
                       nb_requires_grad_(nb_full(NB_F32, NB_SHAPE(2), 2.0), true)};
    nb_scope_pop();
    nb_optimizer *opt = nb_adamw_new(p, 2, nb_adamw_defaults(0.5));
    nb_backward(p[0], nb_full(NB_F32, NB_SHAPE(3), 1.0));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    NBT_ASSERT_VALUES(p[1], 0, 2, 2); /* not even decayed */
    CU_ASSERT_EQUAL(nb_item(state_named(opt, "step.0")), 1);
    CU_ASSERT_EQUAL(nb_item(state_named(opt, "step.1")), 0);
    nb_optimizer_free(opt);
    nb_scope_destroy(model);
}

static void test_state_names(void) {
    nb_scope *model = nb_scope_create();
    nb_scope_push(model);
    nb_tensor *p[2] = {nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2, 3)), true),
                       nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(5)), true)};
    nb_scope_pop();
    nb_optimizer *opt = nb_adam_new(p, 2, nb_adam_defaults(1e-3));
    const nb_named_tensor *st;
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

    opt = nb_sgd_new(p, 2, (nb_sgd_opts){.lr = 0.1, .momentum = 0.5});
    CU_ASSERT_EQUAL_FATAL(nb_optimizer_state(opt, "o/", &st), 4);
    CU_ASSERT_STRING_EQUAL(st[0].name, "o/momentum_buffer.0");
    CU_ASSERT_STRING_EQUAL(st[3].name, "o/step.1");
    nb_optimizer_free(opt);
    opt = nb_sgd_new(p, 2, nb_sgd_defaults(0.1));
    CU_ASSERT_EQUAL(nb_optimizer_state(opt, "o/", &st), 0);
    nb_optimizer_free(opt);
    nb_scope_destroy(model);
}

/* Saving params + optimizer state and loading them into a fresh model and optimizer resumes
 * training exactly: both continue with bitwise equal parameters. */
static void test_resume_from_checkpoint(void) {
    char dir[] = "/tmp/nabla_optim_XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    const optg_case *c = &optg_cases[OPTG_NCASES - 1]; /* AdamW */
    nb_scope *m1 = nb_scope_create(), *m2 = nb_scope_create();
    nb_tensor *a[2], *b[2];
    make_params(m1, NB_F32, false, &a[0], &a[1]);
    make_params(m2, NB_F32, false, &b[0], &b[1]);
    nb_optimizer *oa = make_optimizer(c, a), *ob = make_optimizer(c, b);
    run_steps(oa, c, a[0], a[1]);

    const nb_named_tensor *st;
    int ns = nb_optimizer_state(oa, "optim.", &st);
    nb_named_tensor all[8] = {{"p0", a[0]}, {"p1", a[1]}};
    for (int i = 0; i < ns; i++) all[2 + i] = st[i];
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 2 + ns, all));
    CU_ASSERT_EQUAL(nb_optimizer_state(ob, "optim.", &st), ns);
    nb_named_tensor into[8] = {{"p0", b[0]}, {"p1", b[1]}};
    for (int i = 0; i < ns; i++) into[2 + i] = st[i];
    CU_ASSERT_TRUE_FATAL(nb_safetensors_load(path, 2 + ns, into));

    nb_optimizer_set_lr(ob, nb_optimizer_lr(oa));
    for (int k = 0; k < 2; k++) {
        nb_tensor *pa[2] = {a[0], a[1]}, *pb[2] = {b[0], b[1]};
        for (int j = 0; j < 2; j++) {
            nb_tensor *g = nb_full(NB_F32, pa[j]->ndim, pa[j]->shape, 0.25 * (k + 1));
            nb_zero_grad(pa[j]);
            nb_zero_grad(pb[j]);
            nb_backward(pa[j], g);
            nb_backward(pb[j], g);
        }
        nb_optimizer_step(oa);
        nb_optimizer_step(ob);
    }
    for (int j = 0; j < 2; j++)
        CU_ASSERT_EQUAL(memcmp(nb_data(a[j]), nb_data(b[j]), (size_t)nb_numel(a[j]) * 4), 0);
    nb_optimizer_free(oa);
    nb_optimizer_free(ob);
    nb_scope_destroy(m1);
    nb_scope_destroy(m2);
    unlink(path);
    rmdir(dir);
}

/* A linear model and Adam after two steps (in the current scope's caller: free both). */
static nb_optimizer *trained_linear(nb_module **model) {
    *model = nb_model_new(NB_F32, 3);
    nb_linear *lin = nb_linear_new(*model, "lin", 3, 2, true);
    nb_param ps[2];
    int np = nb_module_params(*model, ps, 2);
    nb_tensor *pt[2] = {ps[0].tensor, ps[1].tensor};
    nb_optimizer *opt = nb_adam_new(pt, np, nb_adam_defaults(1e-2));
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
    int np = nb_module_params(model, ps, 2);
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
    char dir[] = "/tmp/nabla_optim_XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char good[128], bad[128];
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
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
    nb_module_params(model, ps, 2);
    nb_backward(nb_sum(ps[0].tensor), NULL);
    snapshot(model, opt, before);
    nb_clear_error();
    CU_ASSERT_FALSE(nb_optimizer_step(opt));
    NBT_ASSERT_ERROR("nb_optimizer_step: parameter 0");
    NBT_ASSERT_ERROR("step count -1");
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
        CU_ASSERT_DOUBLE_EQUAL(nb_clip_grad_norm(p, 3, 20), 13, 1e-12);
        NBT_ASSERT_VALUES(nb_grad(p[0]), 0, 3, 4);
        NBT_ASSERT_VALUES(nb_grad(p[1]), 0, 12);
        CU_ASSERT_PTR_NULL(nb_grad(p[2]));
        /* Above: scaled by max_norm / (norm + 1e-6). */
        double coef = 6.5 / (13 + 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(nb_clip_grad_norm(p, 3, 6.5), 13, 1e-12);
        NBT_ASSERT_VALUES(nb_grad(p[0]), tol, 3 * coef, 4 * coef);
        NBT_ASSERT_VALUES(nb_grad(p[1]), 1e-15, 12 * coef);
        /* The clipped norm is now just under 6.5. */
        CU_ASSERT_DOUBLE_EQUAL(nb_clip_grad_norm(p, 3, 100), 13 * coef, 1e-5);
    }
    nb_tensor *none[1] = {nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2)), true)};
    CU_ASSERT_EQUAL(nb_clip_grad_norm(none, 1, 1.0), 0);
    CU_ASSERT_EQUAL(nb_clip_grad_norm(NULL, 0, 1.0), 0);
}

static void test_clip_grad_norm_nan(void) {
    nb_tensor *p[2];
    p[0] = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(2)), true);
    p[1] = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(1)), true);
    nb_backward(p[0], nb_from_array(NB_F64, NB_SHAPE(2), (double[]){NAN, 1}));
    nb_backward(p[1], nb_from_array(NB_F64, NB_SHAPE(1), (double[]){2}));
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(p, 2, 1.0)));
    /* torch multiplies by the NaN coefficient: every gradient becomes NaN. */
    CU_ASSERT_TRUE(isnan(nb_item(nb_grad(p[1]))));
}

static void test_clip_grad_norm_errors(void) {
    nb_tensor *p[2] = {nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2)), true), NULL};
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(NULL, 1, 1.0)));
    NBT_ASSERT_ERROR("nb_clip_grad_norm: params is NULL");
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(p, 2, 1.0)));
    NBT_ASSERT_ERROR("parameter 1 is NULL");
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(p, 1, -1.0)));
    NBT_ASSERT_ERROR("max_norm is -1");
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(p, 1, NAN)));
    NBT_ASSERT_ERROR("max_norm is nan");
    CU_ASSERT_TRUE(isnan(nb_clip_grad_norm(p, -1, 1.0)));
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
    CU_ASSERT_PTR_NULL(nb_sgd_new(nonleaf, 2, sgd));
    NBT_ASSERT_ERROR("nb_sgd_new: parameter 1 (shape [6]) is not a leaf");
    CU_ASSERT_PTR_NULL(nb_adam_new(NULL, 1, nb_adam_defaults(0.1)));
    NBT_ASSERT_ERROR("nb_adam_new: params is NULL");
    nb_tensor *with_null[2] = {leaf, NULL};
    CU_ASSERT_PTR_NULL(nb_adamw_new(with_null, 2, nb_adamw_defaults(0.1)));
    NBT_ASSERT_ERROR("nb_adamw_new: parameter 1 is NULL");
    CU_ASSERT_PTR_NULL(nb_sgd_new(&leaf, 0, sgd));
    NBT_ASSERT_ERROR("empty parameter list");
    nb_tensor *mixed[2] = {leaf, nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(4)), true)};
    CU_ASSERT_PTR_NULL(nb_adam_new(mixed, 2, nb_adam_defaults(0.1)));
    NBT_ASSERT_ERROR(
        "parameter 1 (shape [4]) is float64 but parameter 0 (shape [2, 3]) is float32");
    nb_tensor *ints = nb_zeros(NB_I64, NB_SHAPE(3));
    CU_ASSERT_PTR_NULL(nb_sgd_new(&ints, 1, sgd));
    NBT_ASSERT_ERROR("is int64, expected float32 or float64");
    nb_tensor *frozen = nb_zeros(NB_F32, NB_SHAPE(3));
    CU_ASSERT_PTR_NULL(nb_sgd_new(&frozen, 1, sgd));
    NBT_ASSERT_ERROR("parameter 0 (shape [3]) does not require grad");
    nb_tensor *twice[2] = {leaf, leaf};
    CU_ASSERT_PTR_NULL(nb_sgd_new(twice, 2, sgd));
    NBT_ASSERT_ERROR("parameter 1 is the same tensor as parameter 0");
    nb_tensor *expanded =
        nb_requires_grad_(nb_expand(nb_zeros(NB_F32, NB_SHAPE(1, 3)), NB_SHAPE(4, 3)), true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(expanded);
    CU_ASSERT_PTR_NULL(nb_sgd_new(&expanded, 1, sgd));
    NBT_ASSERT_ERROR("is an expanded view");
}

static void test_bad_hyperparameters(void) {
    nb_tensor *p = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2)), true);
    CU_ASSERT_PTR_NULL(nb_sgd_new(&p, 1, nb_sgd_defaults(-0.1)));
    NBT_ASSERT_ERROR("nb_sgd_new: lr is -0.1");
    CU_ASSERT_PTR_NULL(nb_adam_new(&p, 1, nb_adam_defaults(NAN)));
    NBT_ASSERT_ERROR("nb_adam_new: lr is nan");
    CU_ASSERT_PTR_NULL(nb_adamw_new(&p, 1, nb_adamw_defaults(-1)));
    NBT_ASSERT_ERROR("nb_adamw_new: lr is -1");
    nb_adam_opts a = nb_adam_defaults(0.1);
    a.beta1 = 1.0;
    CU_ASSERT_PTR_NULL(nb_adam_new(&p, 1, a));
    NBT_ASSERT_ERROR("beta1 is 1, expected a value in [0, 1)");
    a = nb_adam_defaults(0.1);
    a.eps = -1e-8;
    CU_ASSERT_PTR_NULL(nb_adam_new(&p, 1, a));
    NBT_ASSERT_ERROR("eps is -1e-08");
    a = nb_adamw_defaults(0.1);
    a.weight_decay = -0.01;
    CU_ASSERT_PTR_NULL(nb_adamw_new(&p, 1, a));
    NBT_ASSERT_ERROR("weight_decay is -0.01");
    CU_ASSERT_PTR_NULL(nb_sgd_new(&p, 1, (nb_sgd_opts){.lr = 0.1, .nesterov = true}));
    NBT_ASSERT_ERROR("Nesterov momentum requires a momentum > 0 and zero dampening");
    CU_ASSERT_PTR_NULL(nb_sgd_new(&p, 1, (nb_sgd_opts){.lr = 0.1, .momentum = -0.5}));
    NBT_ASSERT_ERROR("momentum is -0.5");
    CU_ASSERT_PTR_NULL(
        nb_sgd_new(&p, 1, (nb_sgd_opts){.lr = 0.1, .momentum = 0.5, .dampening = 2}));
    NBT_ASSERT_ERROR("dampening is 2");

    nb_optimizer *opt = nb_sgd_new(&p, 1, nb_sgd_defaults(0.1));
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
    nb_optimizer *opt = nb_sgd_new(p, 2, nb_sgd_defaults(0.5));
    nb_backward(p[0], nb_ones(NB_F64, NB_SHAPE(2)));
    p[1]->grad = nb_ones(NB_F64, NB_SHAPE(4)); /* deliberately corrupt */
    CU_ASSERT_FALSE(nb_optimizer_step(opt));
    NBT_ASSERT_ERROR("parameter 1 has shape [3] (float64) but its gradient has shape [4]");
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
        {"resume from a checkpoint with optimizer state", test_resume_from_checkpoint},
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
