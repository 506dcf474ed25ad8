/* A program written the way a nabla user writes one: only <nabla/...> headers, built with
 * `cc user_extension.c $(pkg-config --cflags --libs nabla)` against an installed nabla.
 * tests/install_check.sh builds and runs it outside the source tree. It defines
 *   - a differentiable function, softplus(x) = log(1 + exp(x)), with its own backward and a
 *     forward loop run on nabla's threads (nb_parallel_for);
 *   - a module, Gate: y = proj(softplus(x * scale + shift)), with a parameter (scale), a
 *     buffer (shift) and a child (a built-in Linear);
 * gradchecks both, checks the parallel loop (every index once, the same softplus on 1 and 2
 * threads, its errors), trains a few steps, saves with the optimizer's state and reloads. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <nabla/nabla.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "user_extension: line %d: %s failed (%s)\n", __LINE__, #cond,          \
                    nb_last_error());                                                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- the function ---- */
/* The forward's loop runs on nabla's threads (nb_parallel_for): each index writes only its
 * own output, so the result is the same for any thread count. */
typedef struct {
    const void *x;
    void *y;
    bool f64;
} softplus_job;

static void softplus_range(void *ctx, int64_t begin, int64_t end) {
    const softplus_job *j = ctx;
    for (int64_t i = begin; i < end; i++)
        if (j->f64)
            ((double *)j->y)[i] = log1p(exp(((const double *)j->x)[i]));
        else
            ((float *)j->y)[i] = log1pf(expf(((const float *)j->x)[i]));
}

static bool softplus_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                             nb_tensor **out) {
    (void)nin, (void)nout;
    const nb_tensor *x = nb_contiguous(in[0]);
    if (!x || !(out[0] = nb_empty(x->dtype, x->ndim, x->shape))) return false;
    softplus_job job = {nb_data(x), nb_data(out[0]), x->dtype == NB_F64};
    return nb_parallel_for(nb_numel(x), 4096, softplus_range, &job) && nb_ctx_save(ctx, in[0]);
}

static bool softplus_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                              nb_tensor **gin) {
    (void)nout, (void)nin;
    gin[0] = nb_mul(gout[0], nb_sigmoid(nb_ctx_saved(ctx, 0))); /* d softplus = sigmoid */
    return gin[0] != NULL;
}

static const nb_function softplus_fn = {"softplus", softplus_forward, softplus_backward};

static nb_tensor *softplus(const nb_tensor *x) {
    return nb_function_apply1(&softplus_fn, 1, &x, NULL);
}

/* ---- the module ---- */
typedef struct {
    nb_module base;
    nb_tensor *scale, *shift;
    nb_linear *proj;
} gate;

static gate *gate_new(nb_module *parent, const char *name, int64_t dim) {
    gate *m = nb_module_new(parent, name, "Gate", sizeof *m);
    if (!m) return NULL;
    nb_scope_begin(); /* the buffer's initial value is copied; this temporary goes */
    m->shift = nb_module_add_buffer(&m->base, "shift",
                                    nb_full(nb_module_dtype(&m->base), NB_SHAPE(dim), 0.25));
    nb_scope_end();
    if (!m->shift ||
        !(m->scale = nb_module_add_param(&m->base, "scale", NB_SHAPE(dim), nb_init_ones())) ||
        !(m->proj = nb_linear_new(&m->base, "proj", dim, 1, true)))
        return nb_module_discard(&m->base);
    return m;
}

static nb_tensor *gate_forward(gate *m, const nb_tensor *x) {
    if (x && x->shape[x->ndim - 1] != m->scale->shape[0])
        return nb_error("Gate", "'%s' expects [..., %lld], got %s", nb_module_path(&m->base),
                        (long long)m->scale->shape[0], nb_shape_text(x));
    return nb_linear_forward(m->proj, softplus(nb_add(nb_mul(x, m->scale), m->shift)));
}

/* ---- checks ---- */
static nb_tensor *run_softplus(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return softplus(in[0]);
}

static nb_tensor *run_gate(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return gate_forward(ctx, in[0]);
}

static void gradchecks(void) {
    nb_scope_begin();
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(3, 4)), true);
    nb_gradcheck_result res;
    CHECK(nb_gradcheck(run_softplus, 1, &x, NULL, NULL, &res));
    printf("softplus: %s\n", res.message);

    nb_module *model = nb_model_new(NB_F64, 2);
    gate *g = gate_new(model, "gate", 4);
    CHECK(g);
    nb_param p[3];
    CHECK(nb_module_named_params(model, p, 3) == 3); /* scale, proj.weight, proj.bias */
    nb_tensor *in[4] = {x, p[0].tensor, p[1].tensor, p[2].tensor};
    CHECK(nb_gradcheck(run_gate, 4, in, g, NULL, &res));
    printf("Gate: %s\n", res.message);
    CHECK(gate_forward(g, nb_zeros(NB_F64, NB_SHAPE(2, 5))) == NULL);
    CHECK(strstr(nb_last_error(), "'gate' expects [..., 4], got [2, 5]"));
    nb_module_free(model);
    nb_scope_end();
}

static bool same_values(const nb_tensor *a, const nb_tensor *b) {
    int64_t n = nb_numel(a);
    double *x = malloc(sizeof *x * (size_t)n * 2);
    bool same = x && n == nb_numel(b) && nb_to_doubles(a, x) && nb_to_doubles(b, x + n) &&
                memcmp(x, x + n, sizeof *x * (size_t)n) == 0;
    free(x);
    return same;
}

static void count_visits(void *ctx, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) ((int *)ctx)[i]++;
}

static void parallel_checks(void) {
    nb_set_num_threads(2);
    enum { n = 100000 };
    int *visits = calloc(n, sizeof *visits);
    CHECK(visits && nb_parallel_for(n, 1000, count_visits, visits));
    for (int i = 0; i < n; i++) CHECK(visits[i] == 1);
    free(visits);
    CHECK(!nb_parallel_for(-1, 1, count_visits, NULL));
    CHECK(strstr(nb_last_error(), "nb_parallel_for"));
    CHECK(!nb_parallel_for(10, 0, count_visits, NULL) && !nb_parallel_for(10, 1, NULL, NULL));

    nb_scope_begin(); /* a forward big enough to split: 1 and 2 threads give the same bits */
    nb_rng rng;
    nb_rng_seed(&rng, 3);
    nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(64, 1024));
    nb_set_num_threads(1);
    nb_tensor *one = softplus(x);
    nb_set_num_threads(2);
    nb_tensor *two = softplus(x);
    CHECK(one && two && same_values(one, two));
    nb_scope_end();
    nb_set_num_threads(0);
    printf("parallel loop: ok\n");
}

/* Fits y = sum(x) with a few Adam steps; returns the last loss. */
static double train(nb_module *model, gate *g, nb_optimizer *opt, int steps) {
    double loss_value = 0;
    for (int s = 0; s < steps; s++) {
        nb_scope_begin();
        nb_rng rng;
        nb_rng_seed(&rng, 100 + (uint64_t)s);
        nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(16, 4));
        nb_tensor *y = nb_sum_dims(x, 1, (int[]){1}, true);
        nb_optimizer_zero_grad(opt);
        nb_tensor *loss = nb_mse_loss(gate_forward(g, x), y, NB_REDUCE_MEAN);
        CHECK(loss && nb_backward(loss, NULL));
        CHECK(nb_optimizer_step(opt));
        loss_value = nb_item(loss);
        nb_scope_end();
    }
    (void)model;
    return loss_value;
}

static nb_optimizer *adam_for(nb_module *model) {
    static nb_tensor *params[8];
    nb_param p[8];
    int n = nb_module_named_params(model, p, 8);
    CHECK(n == 3);
    for (int i = 0; i < n; i++) params[i] = p[i].tensor;
    return nb_adam_new(n, params, nb_adam_defaults(0.05));
}

int main(void) {
    gradchecks();
    parallel_checks();

    nb_module *model = nb_model_new(NB_F32, 7);
    gate *g = gate_new(model, "gate", 4);
    CHECK(g);
    nb_optimizer *opt = adam_for(model);
    double first = train(model, g, opt, 1), last = train(model, g, opt, 60);
    printf("training: loss %.4f after one step, %.4f after 61\n", first, last);
    CHECK(last < 0.5 * first);
    nb_module_fprint(stdout, model);

    char path[] = "/tmp/nabla_user_extension_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    nb_fill_(g->shift, 0.5); /* buffers are saved too */
    CHECK(nb_module_save_with(model, opt, path));

    /* A second model, different seed and buffer: loading makes it the same model. */
    nb_module *copy = nb_model_new(NB_F32, 99);
    gate *h = gate_new(copy, "gate", 4);
    CHECK(h);
    nb_optimizer *copy_opt = adam_for(copy);
    CHECK(!same_values(g->proj->weight, h->proj->weight));
    CHECK(nb_module_load_with(copy, copy_opt, path));
    remove(path);
    CHECK(same_values(g->scale, h->scale) && same_values(g->shift, h->shift));
    CHECK(same_values(g->proj->weight, h->proj->weight) &&
          same_values(g->proj->bias, h->proj->bias));
    /* Training on from the checkpoint matches training on from the original. */
    train(model, g, opt, 3);
    train(copy, h, copy_opt, 3);
    CHECK(same_values(g->proj->weight, h->proj->weight) && same_values(g->scale, h->scale));

    nb_optimizer_free(opt);
    nb_optimizer_free(copy_opt);
    nb_module_free(model);
    nb_module_free(copy);
    nb_shutdown();
    printf("user extension: ok\n");
    return 0;
}
