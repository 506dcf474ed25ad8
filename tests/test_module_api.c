/* The public module API (nabla/module.h) as a user writes modules with it: a custom module
 * with a parameter, a buffer and a child; initialisers; names; all-or-nothing constructors;
 * buffers in checkpoints, optimizers, zero_grad and the printed table. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* y = (x * gain) masked where `keep` is false, then a Linear. gain is a parameter, keep a
 * buffer (like register_buffer('mask', ...)), proj a child. */
typedef struct {
    nb_module base;
    nb_tensor *gain, *keep;
    nb_linear *proj;
} gated;

static gated *gated_new(nb_module *parent, const char *name, int64_t dim) {
    gated *m = nb_module_new(parent, name, "Gated", sizeof *m);
    if (!m) return NULL;
    nb_scope_begin();
    nb_tensor *keep = nb_ones(NB_BOOL, NB_SHAPE(dim));
    nb_set(keep, NB_IDX(0), 0); /* the first feature is dropped */
    m->keep = nb_module_add_buffer(&m->base, "keep", keep);
    nb_scope_end();
    if (!m->keep ||
        !(m->gain = nb_module_add_param(&m->base, "gain", NB_SHAPE(dim), nb_init_ones())) ||
        !(m->proj = nb_linear_new(&m->base, "proj", dim, 2, true)))
        return nb_module_discard(&m->base);
    return m;
}

static nb_tensor *gated_forward(gated *m, const nb_tensor *x) {
    nb_tensor *h = nb_mul(x, m->gain);
    h = nb_mul(h, nb_to_dtype(m->keep, nb_module_dtype(&m->base)));
    return nb_linear_forward(m->proj, h);
}

static void test_tree_names_and_accessors(void) {
    nb_module *model = nb_model_new(NB_F64, 1);
    nb_module *stack = nb_module_container(model, "stack");
    gated *g = gated_new(stack, "g0", 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_STRING_EQUAL(nb_module_path(&g->base), "stack.g0");
    CU_ASSERT_STRING_EQUAL(nb_module_type(&g->base), "Gated");
    CU_ASSERT_STRING_EQUAL(nb_module_path(model), "");
    CU_ASSERT_PTR_EQUAL(nb_module_parent(&g->base), stack);
    CU_ASSERT_PTR_EQUAL(nb_module_root(&g->base), model);
    CU_ASSERT_EQUAL(nb_module_dtype(&g->base), NB_F64);
    CU_ASSERT_EQUAL(nb_module_child_count(stack), 1);
    CU_ASSERT_PTR_EQUAL(nb_module_child(stack, 0), &g->base);
    CU_ASSERT_PTR_EQUAL(nb_module_child(&g->base, 0), &g->proj->base);
    CU_ASSERT_PTR_NULL(nb_module_child(stack, 1));
    NBT_ASSERT_ERROR("'stack' has 1 children, no child 1");
    /* Parameters: gain, proj.weight, proj.bias; the buffer is not one of them. */
    nb_param p[8];
    CU_ASSERT_EQUAL(nb_module_named_params(model, p, 8), 3);
    CU_ASSERT_STRING_EQUAL(p[0].name, "stack.g0.gain");
    CU_ASSERT_STRING_EQUAL(p[1].name, "stack.g0.proj.weight");
    CU_ASSERT_EQUAL(nb_module_param_numel(model), 4 + 8 + 2);
    CU_ASSERT_EQUAL(nb_module_buffer_count(model), 1);
    CU_ASSERT_EQUAL(nb_module_named_buffers(model, p, 8), 1);
    CU_ASSERT_STRING_EQUAL(p[0].name, "stack.g0.keep");
    CU_ASSERT_PTR_EQUAL(nb_module_buffer(model, "stack.g0.keep"), g->keep);
    CU_ASSERT_FALSE(g->keep->requires_grad);
    CU_ASSERT_EQUAL(g->keep->dtype, NB_BOOL);
    NBT_ASSERT_VALUES(g->keep, 0, 0, 1, 1, 1);
    CU_ASSERT_PTR_NULL(nb_module_buffer(model, "stack.g0.gain"));
    NBT_ASSERT_ERROR("no buffer named 'stack.g0.gain'");
    CU_ASSERT_TRUE(g->gain->requires_grad);
    /* Training flag: inherited at creation, set for a subtree. */
    CU_ASSERT_TRUE(nb_module_is_training(&g->base));
    nb_module_train(model, false);
    CU_ASSERT_FALSE(nb_module_is_training(&g->proj->base));
    nb_module_free(model);
}

static void test_initialisers(void) {
    nb_module *model = nb_model_new(NB_F64, 5);
    nb_tensor *z = nb_module_add_param(model, "z", NB_SHAPE(3), nb_init_zeros());
    nb_tensor *o = nb_module_add_param(model, "o", NB_SHAPE(2), nb_init_ones());
    nb_tensor *c = nb_module_add_param(model, "c", NB_SHAPE(2), nb_init_constant(-2.5));
    NBT_ASSERT_VALUES(z, 0, 0, 0, 0);
    NBT_ASSERT_VALUES(o, 0, 1, 1);
    NBT_ASSERT_VALUES(c, 0, -2.5, -2.5);
    enum { N = 20000 };
    static double v[N];
    /* uniform(0.3): inside [-0.3, 0.3), spread over it (mean ~0, variance 0.3^2/3) */
    nb_to_doubles(nb_module_add_param(model, "u", NB_SHAPE(N), nb_init_uniform(0.3)), v);
    double lo = 1, hi = -1, sum = 0, sq = 0;
    for (int i = 0; i < N; i++) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]), sum += v[i];
    CU_ASSERT_TRUE(lo >= -0.3 && hi < 0.3 && lo < -0.29 && hi > 0.29);
    CU_ASSERT_TRUE(fabs(sum / N) < 0.01);
    /* normal(2, 0.5): sample mean and standard deviation within 4 standard errors */
    nb_to_doubles(nb_module_add_param(model, "n", NB_SHAPE(N), nb_init_normal(2, 0.5)), v);
    sum = sq = 0;
    for (int i = 0; i < N; i++) sum += v[i];
    double mean = sum / N;
    for (int i = 0; i < N; i++) sq += (v[i] - mean) * (v[i] - mean);
    CU_ASSERT_TRUE(fabs(mean - 2) < 4 * 0.5 / sqrt(N));
    CU_ASSERT_TRUE(fabs(sqrt(sq / (N - 1)) - 0.5) < 0.02);
    /* nb_init_linear(fan_in) is uniform(1/sqrt(fan_in)), and nb_init_embedding N(0, 1): the
     * same draws as nb_uniform / nb_randn from the same generator state. */
    nb_module *a = nb_model_new(NB_F32, 9);
    nb_tensor *w = nb_module_add_param(a, "w", NB_SHAPE(4, 16), nb_init_linear(16));
    nb_tensor *e = nb_module_add_param(a, "e", NB_SHAPE(3, 5), nb_init_embedding());
    nb_rng rng;
    nb_rng_seed(&rng, 9);
    NBT_ASSERT_CLOSE(w, nb_uniform(&rng, NB_F32, NB_SHAPE(4, 16), -0.25, 0.25), 0, 0);
    NBT_ASSERT_CLOSE(e, nb_randn(&rng, NB_F32, NB_SHAPE(3, 5)), 0, 0);
    /* Bad initialisers are errors naming the module. */
    CU_ASSERT_PTR_NULL(nb_module_add_param(a, "bad", NB_SHAPE(2), nb_init_linear(0)));
    NBT_ASSERT_ERROR("fan_in > 0");
    CU_ASSERT_PTR_NULL(nb_module_add_param(a, "bad", NB_SHAPE(2), nb_init_normal(0, -1)));
    NBT_ASSERT_ERROR("invalid initialiser");
    CU_ASSERT_PTR_NULL(nb_module_add_param(a, "bad", NB_SHAPE(-2), nb_init_zeros()));
    NBT_ASSERT_ERROR("parameter 'bad'");
    CU_ASSERT_EQUAL(nb_module_param_count(a), 2);
    nb_module_free(model);
    nb_module_free(a);
}

static void test_duplicate_and_bad_names(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_module *blocks = nb_module_container(model, "blocks");
    CU_ASSERT_PTR_NOT_NULL(nb_linear_new(blocks, "0", 2, 2, true));
    CU_ASSERT_PTR_NULL(nb_linear_new(blocks, "0", 2, 2, true));
    NBT_ASSERT_ERROR("'blocks' already has a child module named '0'");
    CU_ASSERT_PTR_NULL(nb_module_container(model, "blocks"));
    NBT_ASSERT_ERROR("already has a child module named 'blocks'");
    CU_ASSERT_PTR_NULL(nb_module_container(model, "a.b"));
    NBT_ASSERT_ERROR("contain no '.'");
    nb_module *lin = nb_module_child(blocks, 0);
    CU_ASSERT_PTR_NULL(nb_module_add_param(lin, "weight", NB_SHAPE(2), nb_init_zeros()));
    NBT_ASSERT_ERROR("'blocks.0' already has a parameter named 'weight'");
    CU_ASSERT_PTR_NULL(nb_module_add_buffer(lin, "bias", nb_zeros(NB_F32, NB_SHAPE(2))));
    NBT_ASSERT_ERROR("'blocks.0' already has a parameter named 'bias'");
    CU_ASSERT_PTR_NOT_NULL(nb_module_add_buffer(lin, "mask", nb_zeros(NB_BOOL, NB_SHAPE(2))));
    CU_ASSERT_PTR_NULL(nb_module_add_param(lin, "mask", NB_SHAPE(2), nb_init_zeros()));
    NBT_ASSERT_ERROR("already has a buffer named 'mask'");
    CU_ASSERT_PTR_NULL(nb_module_add_param(lin, "", NB_SHAPE(2), nb_init_zeros()));
    NBT_ASSERT_ERROR("must be non-empty");
    /* A child with an empty name is named like its parent: its tensors must not clash. */
    CU_ASSERT_PTR_NOT_NULL(nb_module_add_param(model, "weight", NB_SHAPE(2), nb_init_ones()));
    CU_ASSERT_PTR_NULL(nb_linear_new(model, "", 2, 2, false));
    NBT_ASSERT_ERROR("already has a tensor named 'weight'");
    CU_ASSERT_PTR_NULL(nb_module_new(model, "x", "Tiny", 4));
    NBT_ASSERT_ERROR("sizeof(nb_module)");
    CU_ASSERT_EQUAL(nb_module_param_count(model), 3);
    CU_ASSERT_EQUAL(nb_module_child_count(model), 1);
    nb_module_free(model);
}

/* Names a checkpoint cannot hold (safetensors reserves __metadata__; its header is JSON, so
 * UTF-8) are refused where they are given, not by nb_module_save later. */
static void test_names_checkpoints_refuse(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    const char *latin1 = "caf\xe9", *overlong = "\xc0\xafx", *surrogate = "\xed\xa0\x80";
    CU_ASSERT_PTR_NULL(nb_module_add_param(model, "__metadata__", NB_SHAPE(2), nb_init_ones()));
    NBT_ASSERT_ERROR("'(root)': parameter '__metadata__' has a reserved name");
    CU_ASSERT_PTR_NULL(nb_module_add_buffer(model, "__metadata__", nb_zeros(NB_F32, NB_SHAPE(2))));
    NBT_ASSERT_ERROR("buffer '__metadata__' has a reserved name");
    const char *bad[] = {latin1, overlong, surrogate};
    for (int i = 0; i < 3; i++) {
        nb_clear_error();
        CU_ASSERT_PTR_NULL(nb_module_add_param(model, bad[i], NB_SHAPE(2), nb_init_ones()));
        NBT_ASSERT_ERROR("not valid UTF-8");
        nb_clear_error();
        CU_ASSERT_PTR_NULL(nb_module_add_buffer(model, bad[i], nb_zeros(NB_F32, NB_SHAPE(2))));
        NBT_ASSERT_ERROR("not valid UTF-8");
        nb_clear_error();
        CU_ASSERT_PTR_NULL(nb_module_container(model, bad[i]));
        NBT_ASSERT_ERROR("not valid UTF-8");
    }
    /* Valid UTF-8 beyond ASCII is a name like any other, and saves. */
    CU_ASSERT_PTR_NOT_NULL(nb_module_add_param(model, "caf\xc3\xa9", NB_SHAPE(2), nb_init_ones()));
    CU_ASSERT_PTR_NOT_NULL(
        nb_module_add_buffer(model, "\xf0\x9f\x98\x80", nb_zeros(NB_F32, NB_SHAPE(1))));
    CU_ASSERT_EQUAL(nb_module_param_count(model), 1);
    CU_ASSERT_EQUAL(nb_module_buffer_count(model), 1);
    CU_ASSERT_EQUAL(nb_module_child_count(model), 0);
    CU_ASSERT_TRUE(nb_module_save(model, nbtest_tmp_path("names.safetensors")));
    nb_module_free(model);
}

/* Discarding a module that is not the newest: later siblings keep their weights, and later
 * modules do not repeat weights already drawn. The reference is a model that builds the same
 * modules without the discarded one's draws being taken back: the generator just moves on. */
static void test_discard_not_newest(void) {
    nb_module *model = nb_model_new(NB_F32, 7), *ref = nb_model_new(NB_F32, 7);
    nb_linear *a = nb_linear_new(model, "a", 3, 2, false);
    nb_linear *b = nb_linear_new(model, "b", 3, 2, false);
    nb_linear *ra = nb_linear_new(ref, "a", 3, 2, false);
    nb_linear *rb = nb_linear_new(ref, "b", 3, 2, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    (void)ra;
    nb_module_discard(&a->base); /* b was built after a */
    CU_ASSERT_EQUAL(nb_module_child_count(model), 1);
    NBT_ASSERT_CLOSE(b->weight, rb->weight, 0, 0);
    nb_linear *c = nb_linear_new(model, "c", 3, 2, false);
    nb_linear *d = nb_linear_new(model, "d", 3, 2, false);
    nb_linear *rc = nb_linear_new(ref, "c", 3, 2, false);
    nb_linear *rd = nb_linear_new(ref, "d", 3, 2, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    NBT_ASSERT_CLOSE(c->weight, rc->weight, 0, 0);
    NBT_ASSERT_CLOSE(d->weight, rd->weight, 0, 0);
    CU_ASSERT_FALSE(nbtest_close(c->weight, b->weight, 0, 0));
    CU_ASSERT_FALSE(nbtest_close(d->weight, b->weight, 0, 0));
    /* A parameter the parent draws after making a child counts as a later draw too. */
    nb_module *p = nb_module_container(model, "p");
    nb_linear *e = nb_linear_new(p, "e", 3, 2, false);
    nb_tensor *pw = nb_module_add_param(p, "w", NB_SHAPE(2, 3), nb_init_linear(3));
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pw);
    nb_module_discard(&e->base);
    nb_linear *f = nb_linear_new(model, "f", 3, 2, false);
    nb_linear *g = nb_linear_new(model, "g", 3, 2, false); /* drawn where pw was, if rewound */
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_FALSE(nbtest_close(f->weight, pw, 0, 0));
    CU_ASSERT_FALSE(nbtest_close(g->weight, pw, 0, 0));
    nb_module_free(model);
    nb_module_free(ref);
}

/* A failed constructor leaves the model exactly as it was: no parameters, no child, and the
 * generator where it was (the next module gets the weights it would have had). */
static void test_constructors_are_all_or_nothing(void) {
    nb_module *model = nb_model_new(NB_F32, 3), *clean = nb_model_new(NB_F32, 3);
    CU_ASSERT_PTR_NULL(nb_transformer_block_new(model, "block", 8, 2, 1.0));
    NBT_ASSERT_ERROR("p must be in [0, 1)");
    CU_ASSERT_PTR_NULL(nb_mha_new(model, "attn", 6, 6, 4, false, 0.0));
    NBT_ASSERT_ERROR("not divisible by num_heads");
    CU_ASSERT_PTR_NULL(nb_transformer_lm_new(model, "lm", 10, 8, 6, 4, 2, 0.0));
    NBT_ASSERT_ERROR("not divisible by num_heads");
    CU_ASSERT_PTR_NULL(gated_new(model, "g", 0)); /* its buffer fails first */
    /* An oversized Linear reports its weight's overflow (the first failure), not the bias's. */
    CU_ASSERT_PTR_NULL(nb_linear_new(model, "big", INT64_C(1) << 40, INT64_C(1) << 40, true));
    NBT_ASSERT_ERROR("Linear: 'big': parameter 'weight'");
    NBT_ASSERT_ERROR("overflows");
    CU_ASSERT_EQUAL(nb_module_param_count(model), 0);
    CU_ASSERT_EQUAL(nb_module_buffer_count(model), 0);
    CU_ASSERT_EQUAL(nb_module_child_count(model), 0);
    /* The names are free again, and the weights are those of a model that never failed. */
    nb_linear *a = nb_linear_new(model, "block", 3, 2, true);
    nb_linear *b = nb_linear_new(clean, "block", 3, 2, true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    NBT_ASSERT_CLOSE(a->weight, b->weight, 0, 0);
    nb_module_free(model);
    nb_module_free(clean);
}

static char *temp_path(void) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/nabla_module_api_XXXXXX");
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    return path;
}

/* Buffers are saved and loaded with the parameters, but optimizers and zero_grad leave them. */
static void test_buffers_in_checkpoints_not_optimized(void) {
    nb_module *model = nb_model_new(NB_F32, 2);
    gated *g = gated_new(model, "g", 3);
    nb_tensor *stats = nb_module_add_buffer(&g->base, "stats", nb_full(NB_F32, NB_SHAPE(2), 7));
    CU_ASSERT_PTR_NOT_NULL_FATAL(stats);
    /* A derived table: a buffer, but not part of checkpoints (persistent=False). */
    nb_tensor *table =
        nb_module_add_nonpersistent_buffer(&g->base, "table", nb_full(NB_F32, NB_SHAPE(3), 4));
    CU_ASSERT_PTR_NOT_NULL_FATAL(table);
    CU_ASSERT_PTR_NULL(nb_module_add_nonpersistent_buffer(&g->base, "stats", table));
    NBT_ASSERT_ERROR("already has a buffer named 'stats'");
    nb_param b[4];
    CU_ASSERT_EQUAL(nb_module_named_buffers(model, b, 4), 3);
    CU_ASSERT_STRING_EQUAL(b[0].name, "g.keep");
    CU_ASSERT_STRING_EQUAL(b[1].name, "g.stats");
    CU_ASSERT_STRING_EQUAL(b[2].name, "g.table");
    CU_ASSERT_PTR_EQUAL(nb_module_buffer(model, "g.table"), table);
    nb_param p[4];
    int np = nb_module_named_params(model, p, 4);
    nb_tensor *params[4];
    for (int i = 0; i < np; i++) params[i] = p[i].tensor;
    nb_optimizer *opt = nb_sgd_new(np, params, nb_sgd_defaults(0.1));
    nb_tensor *gain_before = nb_clone(g->gain);
    nb_scope_begin();
    nb_tensor *x = nb_full(NB_F32, NB_SHAPE(2, 3), 1.0);
    CU_ASSERT_TRUE(nb_backward(nb_sum(gated_forward(g, x)), NULL));
    nb_scope_end();
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    nb_module_zero_grad(model);
    NBT_ASSERT_VALUES(stats, 0, 7, 7);
    NBT_ASSERT_VALUES(g->keep, 0, 0, 1, 1);
    CU_ASSERT_PTR_NULL(nb_grad(stats));
    /* The masked feature's gain got no gradient and kept its value; the others moved. */
    CU_ASSERT_EQUAL(nb_get(g->gain, NB_IDX(0)), nb_get(gain_before, NB_IDX(0)));
    CU_ASSERT_NOT_EQUAL(nb_get(g->gain, NB_IDX(1)), nb_get(gain_before, NB_IDX(1)));

    char *path = temp_path();
    CU_ASSERT_TRUE(nb_module_save(model, path));
    nb_named_tensor *saved;
    int count;
    CU_ASSERT_PTR_NOT_NULL_FATAL(saved = nb_safetensors_read(path, &count));
    CU_ASSERT_EQUAL(count, 3 + 2); /* gain, proj.weight, proj.bias; keep, stats; no table */
    nb_tensor *kept = NULL;
    for (int i = 0; i < count; i++)
        if (strcmp(saved[i].name, "g.keep") == 0) kept = saved[i].tensor;
    CU_ASSERT_TRUE(kept && kept->dtype == NB_BOOL);
    /* Change everything, then load: parameters and buffers come back. */
    nb_fill_(stats, -1);
    nb_fill_(g->keep, 1);
    nb_fill_(table, 5);
    nb_tensor *gain_saved = nb_clone(g->gain);
    nb_fill_(g->gain, 0);
    CU_ASSERT_TRUE(nb_module_load(model, path));
    NBT_ASSERT_VALUES(stats, 0, 7, 7);
    NBT_ASSERT_VALUES(g->keep, 0, 0, 1, 1);
    NBT_ASSERT_CLOSE(g->gain, gain_saved, 0, 0);
    NBT_ASSERT_VALUES(table, 0, 5, 5, 5); /* not in the file, untouched by the load */
    /* A model without the buffer refuses the file (it holds a tensor the model lacks). */
    nb_module *other = nb_model_new(NB_F32, 2);
    CU_ASSERT_PTR_NOT_NULL(gated_new(other, "g", 3));
    CU_ASSERT_FALSE(nb_module_load(other, path));
    NBT_ASSERT_ERROR("g.stats");
    remove(path);
    nb_optimizer_free(opt);
    nb_module_free(model);
    nb_module_free(other);
}

static void test_print_lists_buffers(void) {
    nb_module *model = nb_model_new(NB_F32, 2);
    gated *g = gated_new(model, "g", 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    nb_module_add_nonpersistent_buffer(&g->proj->base, "cos", nb_ones(NB_F64, NB_SHAPE(2, 2)));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    nb_module_fprint(f, model);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "g.gain"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "g.proj.weight"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "g.keep"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "(buffer, bool)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "g.proj.cos"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "(buffer, float64, not saved)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "3 tensors, 11 parameters; 2 buffers, 7 elements"));
    free(text);
    nb_module_fprint(NULL, model);
    NBT_ASSERT_ERROR("module_fprint");
    nb_module_free(model);
}

/* The custom module gradchecks like a built-in one: x and every parameter. */
static nb_tensor *run_gated(nb_tensor *const *in, int n, void *ctx) {
    (void)in, (void)n;
    return gated_forward(ctx, in[0]);
}

static void test_gradcheck_custom_module(void) {
    nb_module *model = nb_model_new(NB_F64, 4);
    gated *g = gated_new(model, "g", 3);
    nb_fill_(g->gain, 0.5);
    nb_rng rng;
    nb_rng_seed(&rng, 8);
    nb_tensor *in[4] = {nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(2, 3)), true)};
    nb_param p[3];
    CU_ASSERT_EQUAL_FATAL(nb_module_named_params(model, p, 3), 3);
    for (int i = 0; i < 3; i++) in[i + 1] = p[i].tensor;
    nb_gradcheck_result res;
    CU_ASSERT_TRUE(nb_gradcheck(run_gated, 4, in, g, NULL, &res));
    printf("  %s\n", res.message);
    nb_module_free(model);
}

/* nb_module_requires_grad_ freezes and unfreezes a subtree, as torch's Module.requires_grad_:
 * a frozen layer gets no gradient and an optimizer over every parameter leaves it alone. */
static void test_requires_grad_subtree(void) {
    nb_module *model = nb_model_new(NB_F32, 5);
    nb_linear *fc1 = nb_linear_new(model, "fc1", 3, 4, true);
    nb_linear *fc2 = nb_linear_new(model, "fc2", 4, 2, true);
    CU_ASSERT_TRUE_FATAL(nb_module_requires_grad_(&fc1->base, false));
    CU_ASSERT_FALSE(fc1->weight->requires_grad);
    CU_ASSERT_FALSE(fc1->bias->requires_grad);
    CU_ASSERT_TRUE(fc2->weight->requires_grad);
    CU_ASSERT_TRUE(fc2->bias->requires_grad);
    int n;
    nb_tensor **params = nb_module_param_tensors(model, &n);
    nb_optimizer *opt = nb_sgd_new(n, params, nb_sgd_defaults(0.5));
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    nb_tensor *w1 = nb_clone(fc1->weight), *b2 = nb_clone(fc2->bias);
    nb_scope_begin();
    nb_tensor *x = nb_full(NB_F32, NB_SHAPE(2, 3), 1.0);
    CU_ASSERT_TRUE(
        nb_backward(nb_sum(nb_linear_forward(fc2, nb_relu(nb_linear_forward(fc1, x)))), NULL));
    nb_scope_end();
    CU_ASSERT_PTR_NULL(nb_grad(fc1->weight));
    CU_ASSERT_PTR_NOT_NULL(nb_grad(fc2->bias));
    CU_ASSERT_TRUE(nb_optimizer_step(opt));
    CU_ASSERT_EQUAL(nb_get(fc1->weight, NB_IDX(0, 0)), nb_get(w1, NB_IDX(0, 0)));
    /* d sum / d fc2.bias is 2 (two rows): SGD moves it by -0.5 * 2 = -1 exactly. */
    CU_ASSERT_DOUBLE_EQUAL(nb_get(fc2->bias, NB_IDX(0)), nb_get(b2, NB_IDX(0)) - 1.0, 1e-6);
    /* Unfrozen, the whole model trains again. */
    CU_ASSERT_TRUE(nb_module_requires_grad_(model, true));
    CU_ASSERT_TRUE(fc1->weight->requires_grad);
    CU_ASSERT_TRUE(fc1->bias->requires_grad);
    CU_ASSERT_FALSE(nb_module_requires_grad_(NULL, false));
    CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), "requires_grad_"));
    nb_optimizer_free(opt);
    free(params);
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"tree, names and accessors", test_tree_names_and_accessors},
        {"initialisers", test_initialisers},
        {"duplicate and bad names", test_duplicate_and_bad_names},
        {"constructors are all-or-nothing", test_constructors_are_all_or_nothing},
        {"names checkpoints refuse are refused when given", test_names_checkpoints_refuse},
        {"discarding a module that is not the newest", test_discard_not_newest},
        {"buffers saved and loaded, not optimized", test_buffers_in_checkpoints_not_optimized},
        {"printed table lists buffers", test_print_lists_buffers},
        {"gradcheck a custom module", test_gradcheck_custom_module},
        {"requires_grad_ freezes and unfreezes a subtree", test_requires_grad_subtree},
    };
    return nbtest_run("module api", cases, (int)(sizeof cases / sizeof cases[0]));
}
