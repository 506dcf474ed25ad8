/* The DeepSeek-style mixture of experts of nn/blocks/ (blk_moe): a small case worked out by
 * hand (outputs, routing, the load-balancing loss) at several tile sizes, the same against
 * every expert run on every token, float64 gradchecks of the output and the loss with respect
 * to the input and every parameter, float32 against float64, names, errors, no allocation per
 * step once warm although the experts' batch sizes change, and 1 and 2 threads bitwise
 * equal. PyTorch's goldens (tests/goldens/moe.json, from tests/gen_moe_goldens.py) are checked
 * by tests/test_blocks_goldens.c with the other blocks'. */
#include <nabla/blocks.h>
#include "harness.h"

#include <stdio.h>
#include <string.h>

static nb_tensor *randn64(nb_rng *rng, int ndim, const int64_t *shape) {
    return nb_randn(rng, NB_F64, ndim, shape);
}

/* Copies the row-major values into parameter p. */
static void set_param(nb_tensor *p, const double *values) {
    CU_ASSERT_TRUE(nb_copy_(p, nb_from_array(NB_F64, p->ndim, p->shape, values)));
}

/* ---- a case by hand ---------------------------------------------------------------------- */
/* D 2, 3 experts of hidden 1, tokens t0 = (1, 0) and t1 = (0, 1). The router's columns are
 * logs, so the probabilities are ratios: t0 gets (1, 2, 3) / 6, t1 (4, 1, 3) / 8.
 * Expert e computes w2_e silu(w1_e . x) (w3_e . x):
 *   t0: expert 2: silu(-1) * 1 = -0.2689414 -> (-0.5378828, -0.2689414)
 *       expert 1: silu(2) * 0.5 = 0.8807971 -> (0, 0.8807971)
 *   t1: expert 0: silu(2) * 1 = 1.7615942   -> (1.7615942, -1.7615942)
 *       expert 2: silu(1) * 2 = 1.4621172   -> (2.9242343, 1.4621172)
 * The shared expert (hidden 1): w1 = w3 = (1, 1), w2 = (1, 2): silu(1) (1, 2) for either. */
static blk_moe *hand_moe(nb_module *model, const char *name, int64_t k, int64_t n_shared,
                         int64_t tile_rows) {
    blk_moe_config cfg = {.dim = 2,
                          .hidden = 1,
                          .n_experts = 3,
                          .top_k = k,
                          .n_shared = n_shared,
                          .aux_alpha = 0.1,
                          .tile_rows = tile_rows};
    blk_moe *m = blk_moe_new(model, name, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    set_param(m->gate->weight, (double[]){0, log(4), log(2), 0, log(3), log(3)});
    const double w1[3][2] = {{1, 2}, {2, 0}, {-1, 1}}, w3[3][2] = {{1, 1}, {0.5, 0}, {1, 2}},
                 w2[3][2] = {{1, -1}, {0, 1}, {2, 1}};
    for (int e = 0; e < 3; e++) {
        set_param(m->experts[e]->w1->weight, w1[e]);
        set_param(m->experts[e]->w3->weight, w3[e]);
        set_param(m->experts[e]->w2->weight, w2[e]);
    }
    if (n_shared) {
        set_param(m->shared_experts->w1->weight, (double[]){1, 1});
        set_param(m->shared_experts->w3->weight, (double[]){1, 1});
        set_param(m->shared_experts->w2->weight, (double[]){1, 2});
    }
    return m;
}

static void test_hand_top2(void) {
    nb_module *model = nb_model_new(NB_F64, 1);
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(2, 2), (double[]){1, 0, 0, 1});
    /* tile_rows 0 (one row a tile here), 1, 3 (the four slots in three tiles of 3) */
    const int64_t tiles[] = {0, 1, 3};
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "moe%d", i);
        blk_moe *m = hand_moe(model, name, 2, 0, tiles[i]);
        blk_moe_routing r;
        nb_tensor *y = blk_moe_forward(m, x, &r);
        /* t0: experts 2 and 1 with 3/6 and 2/6, renormalised to 3/5 and 2/5;
         * t1: experts 0 and 2 with 4/8 and 3/8, renormalised to 4/7 and 3/7 */
        NBT_ASSERT_VALUES(r.experts, 0, 2, 1, 0, 2);
        NBT_ASSERT_VALUES(r.weights, 1e-12, 0.6, 0.4, 4.0 / 7, 3.0 / 7);
        NBT_ASSERT_VALUES(r.load, 0, 1, 1, 2);
        /* y0 = 3/5 (-0.5378828, -0.2689414) + 2/5 (0, 0.8807971),
         * y1 = 4/7 (1.7615942, -1.7615942) + 3/7 (2.9242343, 1.4621172) */
        NBT_ASSERT_VALUES(y, 1e-9, -0.3227297056, 0.1909539784, 2.2598685096, -0.3800035931);
        /* f = (1, 1, 2) / 4 slots, P = ((1/6 + 4/8) / 2, (2/6 + 1/8) / 2, (3/6 + 3/8) / 2)
         *   = (1/3, 11/48, 7/16); aux = 0.1 * 3 * (1/12 + 11/192 + 7/32) = 0.1 * 3 * 69/192 */
        NBT_ASSERT_VALUES(r.aux_loss, 1e-12, 0.1 * 3 * 69.0 / 192);
    }
    nb_module_free(model);
}

static void test_hand_top1_and_shared(void) {
    nb_module *model = nb_model_new(NB_F64, 1);
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(1, 2, 2), (double[]){1, 0, 0, 1});
    blk_moe_routing r;
    /* top-1: t0 -> expert 2, t1 -> expert 0, each with weight 1 */
    nb_tensor *y = blk_moe_forward(hand_moe(model, "top1", 1, 0, 0), x, &r);
    NBT_ASSERT_SHAPE(y, 1, 2, 2);
    NBT_ASSERT_SHAPE(r.experts, 1, 2, 1);
    NBT_ASSERT_VALUES(r.experts, 0, 2, 0);
    NBT_ASSERT_VALUES(r.weights, 0, 1, 1);
    NBT_ASSERT_VALUES(y, 1e-9, -0.5378828427, -0.2689414214, 1.7615941560, -1.7615941560);
    /* f = (1, 0, 1) / 2, P as in top-2: aux = 0.1 * 3 * (1/6 + 7/32) = 0.1 * 3 * 37/96 */
    NBT_ASSERT_VALUES(r.aux_loss, 1e-12, 0.1 * 3 * 37.0 / 96);
    NBT_ASSERT_VALUES(r.load, 0, 1, 0, 1);
    /* with the shared expert: silu(1) (1, 2) = (0.7310586, 1.4621172) more for each token */
    nb_tensor *ys = blk_moe_forward(hand_moe(model, "shared", 2, 1, 0), x, NULL);
    NBT_ASSERT_VALUES(ys, 1e-9, -0.3227297056 + 0.7310585786, 0.1909539784 + 1.4621171573,
                      2.2598685096 + 0.7310585786, -0.3800035931 + 1.4621171573);
    nb_module_free(model);
}

/* ---- against every expert run on every token --------------------------------------------- */
/* shared(x) + sum_e c_e expert_e(x) with c_e the token's renormalised weight of e (0 if not
 * chosen): the formula with no dispatch at all. The router is recomputed with the ops. */
static nb_tensor *dense_reference(blk_moe *m, const nb_tensor *x) {
    const int64_t E = m->cfg.n_experts, k = m->cfg.top_k;
    nb_tensor *probs = nb_softmax(nb_f_linear(x, m->gate->weight, NULL), -1), *idx;
    nb_tensor *top = nb_topk(probs, k, -1, true, &idx);
    nb_tensor *w = nb_div(top, nb_sum_dims(top, 1, (const int[]){-1}, true));
    nb_tensor *y = m->shared_experts ? blk_swiglu_forward(m->shared_experts, x)
                                     : nb_zeros(x->dtype, x->ndim, x->shape);
    for (int64_t e = 0; e < E; e++) {
        nb_tensor *chosen = nb_eq(idx, nb_full(NB_I64, NB_SHAPE(1), (double)e));
        nb_tensor *c = nb_sum_dims(nb_where(chosen, w, nb_zeros(x->dtype, NB_SHAPE(1))), 1,
                                   (const int[]){-1}, true);
        y = nb_add(y, nb_mul(c, blk_swiglu_forward(m->experts[e], x)));
    }
    return y;
}

/* The smallest gap between a token's k-th and (k+1)-th probability: how far the routing is
 * from a tie (a gradcheck's steps must not change it). */
static double routing_margin(blk_moe *m, const nb_tensor *x) {
    const int64_t k = m->cfg.top_k;
    if (k == m->cfg.n_experts) return 1;
    nb_tensor *x2 = nb_reshape(x, NB_SHAPE(-1, m->cfg.dim));
    nb_tensor *top =
        nb_topk(nb_softmax(nb_f_linear(x2, m->gate->weight, NULL), -1), k + 1, -1, true, NULL);
    nb_tensor *gap = nb_sub(nb_narrow(top, 1, k - 1, 1), nb_narrow(top, 1, k, 1));
    nb_tensor *smallest = nb_topk(nb_reshape(gap, NB_SHAPE(-1)), 1, 0, false, NULL);
    return nb_item(smallest);
}

static void test_matches_dense_reference(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    nb_rng rng;
    nb_rng_seed(&rng, 4);
    nb_tensor *x = randn64(&rng, NB_SHAPE(3, 7, 6));
    const int64_t tiles[] = {0, 1, 2, 5, 64};
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "moe%d", i);
        blk_moe_config cfg = {.dim = 6,
                              .hidden = 5,
                              .n_experts = 4,
                              .top_k = 2,
                              .n_shared = i % 2 ? 0 : 2,
                              .aux_alpha = 0.01,
                              .tile_rows = tiles[i]};
        blk_moe *m = blk_moe_new(model, name, &cfg);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        blk_moe_routing r;
        nb_tensor *y = blk_moe_forward(m, x, &r);
        NBT_ASSERT_SHAPE(y, 3, 7, 6);
        NBT_ASSERT_CLOSE(nb_reshape(y, NB_SHAPE(21, 6)),
                         dense_reference(m, nb_reshape(x, NB_SHAPE(21, 6))), 1e-12, 1e-12);
        /* the load counts every slot once */
        CU_ASSERT_EQUAL(nb_item(nb_sum(nb_to_dtype(r.load, NB_F64))), 21 * 2);
    }
    nb_module_free(model);
}

/* No tokens: an empty output, no failure. */
static void test_no_tokens(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    blk_moe_config cfg = {
        .dim = 4, .hidden = 3, .n_experts = 3, .top_k = 2, .n_shared = 1, .aux_alpha = 0.1};
    blk_moe *m = blk_moe_new(model, "moe", &cfg);
    blk_moe_routing r;
    nb_tensor *y = blk_moe_forward(m, nb_zeros(NB_F64, NB_SHAPE(2, 0, 4)), &r);
    if (!y) printf("  %s\n", nb_last_error());
    NBT_ASSERT_SHAPE(y, 2, 0, 4);
    NBT_ASSERT_SHAPE(r.experts, 2, 0, 2);
    NBT_ASSERT_VALUES(r.load, 0, 0, 0, 0);
    NBT_ASSERT_VALUES(r.aux_loss, 0, 0);
    nb_module_free(model);
}

/* ---- gradchecks: x and every parameter, through the output and the loss ---------------- */
typedef struct {
    blk_moe *m;
} run_ctx;

/* y + aux (broadcast): one projection checks both. */
static nb_tensor *run_moe(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    blk_moe_routing r;
    nb_tensor *y = blk_moe_forward(((run_ctx *)vctx)->m, in[0], &r);
    return nb_add(y, r.aux_loss);
}

static void gradcheck_moe(blk_moe *m, nb_tensor *x) {
    printf("  routing margin %.3g\n", routing_margin(m, x));
    CU_ASSERT_TRUE(routing_margin(m, x) > 1e-3);
    nb_tensor *inputs[64];
    nb_param params[63];
    int np = nb_module_named_params(&m->base, params, 63);
    CU_ASSERT_TRUE_FATAL(np > 0);
    inputs[0] = nb_requires_grad_(x, true);
    for (int i = 0; i < np; i++) inputs[i + 1] = params[i].tensor;
    nb_gradcheck_result res;
    bool ok = nb_gradcheck(run_moe, np + 1, inputs, &(run_ctx){m}, NULL, &res);
    printf("  %s (%d parameters, tile_rows %lld): %s\n", nb_module_path(&m->base), np,
           (long long)m->cfg.tile_rows, res.message);
    CU_ASSERT_TRUE(ok);
}

static void test_gradcheck(void) {
    nb_module *model = nb_model_new(NB_F64, 11);
    nb_rng rng;
    nb_rng_seed(&rng, 12);
    blk_moe_config cfg = {
        .dim = 4, .hidden = 3, .n_experts = 4, .top_k = 2, .n_shared = 1, .aux_alpha = 0.5};
    blk_moe *m = blk_moe_new(model, "moe", &cfg);
    /* x through a transposed view: [2, 4, 3] read as [2, 3, 4] */
    nb_tensor *x = nb_transpose(randn64(&rng, NB_SHAPE(2, 4, 3)), 1, 2);
    gradcheck_moe(m, nb_detach(x));
    /* top-1, no shared expert, tiles of 2 rows (padding rows in every tile count) */
    cfg = (blk_moe_config){
        .dim = 4, .hidden = 2, .n_experts = 3, .top_k = 1, .aux_alpha = 0.3, .tile_rows = 2};
    gradcheck_moe(blk_moe_new(model, "top1", &cfg), randn64(&rng, NB_SHAPE(5, 4)));
    /* every expert chosen (k = E): the weights are the probabilities themselves */
    cfg = (blk_moe_config){.dim = 3, .hidden = 2, .n_experts = 2, .top_k = 2, .aux_alpha = 1};
    gradcheck_moe(blk_moe_new(model, "all", &cfg), randn64(&rng, NB_SHAPE(4, 3)));
    nb_module_free(model);
}

/* ---- float32 against float64 -------------------------------------------------------------- */
/* |f32 - f64| <= 1e-5 max(max |f64|, 1e-3), the bound of the op catalogue's float32 check. */
static bool f32_close(const nb_tensor *a32, const nb_tensor *b64, const char *what) {
    int64_t n = nb_numel(b64);
    double a[4096], b[4096], big = 1e-3, worst = 0;
    if (!a32 || n > 4096 || nb_numel(a32) != n || !nb_to_doubles(a32, a) || !nb_to_doubles(b64, b))
        return false;
    for (int64_t i = 0; i < n; i++) big = fabs(b[i]) > big ? fabs(b[i]) : big;
    for (int64_t i = 0; i < n; i++) worst = fabs(a[i] - b[i]) > worst ? fabs(a[i] - b[i]) : worst;
    printf("    %-30s %.2g of tolerance\n", what, worst / (1e-5 * big));
    return worst <= 1e-5 * big;
}

static void test_f32_against_f64(void) {
    nb_module *m64 = nb_model_new(NB_F64, 21), *m32 = nb_model_new(NB_F32, 22);
    blk_moe_config cfg = {
        .dim = 8, .hidden = 6, .n_experts = 4, .top_k = 2, .n_shared = 1, .aux_alpha = 0.1};
    blk_moe *a = blk_moe_new(m64, "moe", &cfg), *b = blk_moe_new(m32, "moe", &cfg);
    nb_param p64[32], p32[32];
    int np = nb_module_named_params(m64, p64, 32);
    CU_ASSERT_EQUAL_FATAL(nb_module_named_params(m32, p32, 32), np);
    for (int i = 0; i < np; i++) CU_ASSERT_TRUE(nb_copy_(p32[i].tensor, p64[i].tensor));
    nb_rng rng;
    nb_rng_seed(&rng, 23);
    /* rounded to float32 once, for both runs */
    nb_tensor *x32 =
        nb_requires_grad_(nb_to_dtype(nb_randn(&rng, NB_F32, NB_SHAPE(4, 8, 8)), NB_F32), true);
    nb_tensor *x64 = nb_requires_grad_(nb_to_dtype(x32, NB_F64), true);
    CU_ASSERT_TRUE(routing_margin(a, x64) > 1e-4);
    nb_tensor *g = nb_randn(&rng, NB_F64, NB_SHAPE(4, 8, 8));
    blk_moe_routing r64, r32;
    nb_tensor *y64 = blk_moe_forward(a, x64, &r64), *y32 = blk_moe_forward(b, x32, &r32);
    NBT_ASSERT_CLOSE(r32.experts, r64.experts, 0, 0);
    CU_ASSERT_TRUE(f32_close(y32, y64, "output"));
    CU_ASSERT_TRUE(f32_close(r32.aux_loss, r64.aux_loss, "aux loss"));
    CU_ASSERT_TRUE(nb_backward(nb_add(nb_sum(nb_mul(y64, g)), r64.aux_loss), NULL));
    CU_ASSERT_TRUE(
        nb_backward(nb_add(nb_sum(nb_mul(y32, nb_to_dtype(g, NB_F32))), r32.aux_loss), NULL));
    CU_ASSERT_TRUE(f32_close(nb_grad(x32), nb_grad(x64), "x"));
    for (int i = 0; i < np; i++)
        CU_ASSERT_TRUE(f32_close(nb_grad(p32[i].tensor), nb_grad(p64[i].tensor), p64[i].name));
    nb_module_free(m64);
    nb_module_free(m32);
}

/* ---- names ------------------------------------------------------------------------------ */
static void test_names(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    blk_moe_config cfg = {
        .dim = 8, .hidden = 4, .n_experts = 3, .top_k = 2, .n_shared = 2, .aux_alpha = 0.01};
    blk_moe *m = blk_moe_new(nb_module_container(model, "layers"), "ffn", &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* gate + 3 experts x (w1, w2, w3) + shared (w1, w2, w3) */
    CU_ASSERT_EQUAL(nb_module_param_count(model), 1 + 3 * 3 + 3);
    CU_ASSERT_EQUAL(nb_module_param_numel(model), 3 * 8 + 3 * 3 * 8 * 4 + 3 * 8 * 8);
    NBT_ASSERT_SHAPE(nb_module_param(model, "layers.ffn.gate.weight"), 3, 8);
    NBT_ASSERT_SHAPE(nb_module_param(model, "layers.ffn.experts.2.w1.weight"), 4, 8);
    NBT_ASSERT_SHAPE(nb_module_param(model, "layers.ffn.experts.0.w2.weight"), 8, 4);
    NBT_ASSERT_SHAPE(nb_module_param(model, "layers.ffn.shared_experts.w3.weight"), 8, 8);
    cfg.n_shared = 0;
    blk_moe *plain = blk_moe_new(model, "plain", &cfg);
    CU_ASSERT_PTR_NULL(plain->shared_experts);
    CU_ASSERT_PTR_NULL(nb_module_param(model, "plain.shared_experts.w1.weight"));
    nb_clear_error();
    nb_module_free(model);
}

/* ---- errors name the module path and the shapes ----------------------------------------- */
static void test_errors(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    blk_moe_config cfg = {.dim = 4, .hidden = 3, .n_experts = 3, .top_k = 4, .aux_alpha = 0.1};
    EXPECT_NULL(blk_moe_new(model, "moe", &cfg), "MoE", "top_k 4", "n_experts 3");
    cfg.top_k = 2;
    cfg.aux_alpha = -1;
    EXPECT_NULL(blk_moe_new(model, "moe", &cfg), "MoE", "aux_alpha -1");
    cfg.aux_alpha = 0.1;
    cfg.tile_rows = -2;
    EXPECT_NULL(blk_moe_new(model, "moe", &cfg), "MoE", "tile_rows -2");
    cfg.tile_rows = 0;
    EXPECT_NULL(blk_moe_new(model, "moe", NULL), "MoE: NULL argument");
    /* a failed constructor leaves nothing behind: the name is free again */
    blk_moe *m = blk_moe_new(nb_module_container(model, "layers"), "moe", &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(nb_module_param_count(model), 1 + 3 * 3);
    blk_moe_routing r = {.aux_loss = nb_zeros(NB_F32, 0, NULL)};
    EXPECT_NULL(blk_moe_forward(m, nb_zeros(NB_F32, NB_SHAPE(2, 3, 5)), &r), "MoE",
                "'layers.moe' expects x float32 [..., 4], got float32 [2, 3, 5]");
    CU_ASSERT_PTR_NULL(r.aux_loss); /* routing is cleared on failure */
    EXPECT_NULL(blk_moe_forward(m, nb_zeros(NB_F64, NB_SHAPE(2, 4)), NULL), "'layers.moe'",
                "got float64 [2, 4]");
    EXPECT_NULL(blk_moe_forward(m, nb_zeros(NB_F32, 0, NULL), NULL), "'layers.moe'",
                "got float32 []");
    EXPECT_NULL(blk_moe_forward(m, NULL, NULL), "MoE: NULL argument");
    EXPECT_NULL(blk_moe_forward(NULL, nb_zeros(NB_F32, NB_SHAPE(4)), NULL), "MoE: NULL argument");
    nb_module_free(model);
}

/* ---- no allocation per step once warm ----------------------------------------------------- */
/* AdamW steps on a new random batch each step, so every expert's batch size changes from
 * step to step; after the first step nabla allocates nothing (nb_alloc_count). */
static void test_no_mallocs_per_step(void) {
    nb_module *model = nb_model_new(NB_F32, 31);
    blk_moe_config cfg = {
        .dim = 16, .hidden = 24, .n_experts = 4, .top_k = 2, .n_shared = 1, .aux_alpha = 0.01};
    blk_moe *m = blk_moe_new(model, "moe", &cfg);
    nb_param params[32];
    int np = nb_module_named_params(model, params, 32);
    nb_tensor *pt[32];
    for (int i = 0; i < np; i++) pt[i] = params[i].tensor;
    nb_optimizer *opt = nb_adamw_new(np, pt, nb_adamw_defaults(1e-2));
    nb_rng rng;
    nb_rng_seed(&rng, 32);
    enum { STEPS = 8 };
    int64_t loads[STEPS][4];
    uint64_t before = 0;
    for (int s = 0; s < STEPS; s++) {
        if (s == 2) before = nb_alloc_count();
        nb_scope_begin();
        nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(4, 16, 16));
        blk_moe_routing r;
        nb_tensor *y = blk_moe_forward(m, x, &r);
        CU_ASSERT_TRUE(nb_backward(nb_add(nb_mean(nb_mul(y, y)), r.aux_loss), NULL));
        CU_ASSERT_TRUE(nb_optimizer_step(opt));
        nb_optimizer_zero_grad(opt);
        memcpy(loads[s], nb_data(r.load), sizeof loads[s]);
        nb_scope_end();
    }
    printf("  allocations in steps 3-%d: %llu\n", STEPS,
           (unsigned long long)(nb_alloc_count() - before));
    CU_ASSERT_EQUAL(nb_alloc_count() - before, 0);
    /* the batch sizes did change: expert 0's load takes more than one value */
    int changes = 0;
    for (int s = 1; s < STEPS; s++) changes += loads[s][0] != loads[s - 1][0];
    printf("  expert 0's load: %lld %lld %lld %lld ... (%d changes)\n", (long long)loads[0][0],
           (long long)loads[1][0], (long long)loads[2][0], (long long)loads[3][0], changes);
    CU_ASSERT_TRUE(changes >= 3);
    nb_optimizer_free(opt);
    nb_module_free(model);
}

/* ---- 1 and 2 threads: the same bits ------------------------------------------------------- */
/* Tiles of 64 rows x 64 x 160 (655K multiply-adds: the GEMMs split over 2 threads), 256
 * tokens. Returns the output, the loss and every gradient, flattened into one tensor. */
static nb_tensor *threaded_run(int threads) {
    nb_set_num_threads(threads);
    nb_module *model = nb_model_new(NB_F32, 41);
    blk_moe_config cfg = {.dim = 64,
                          .hidden = 160,
                          .n_experts = 4,
                          .top_k = 2,
                          .n_shared = 1,
                          .aux_alpha = 0.01,
                          .tile_rows = 64};
    blk_moe *m = blk_moe_new(model, "moe", &cfg);
    nb_rng rng;
    nb_rng_seed(&rng, 42);
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, NB_F32, NB_SHAPE(4, 64, 64)), true);
    blk_moe_routing r;
    nb_tensor *y = blk_moe_forward(m, x, &r);
    CU_ASSERT_TRUE(nb_backward(nb_add(nb_mean(nb_mul(y, y)), r.aux_loss), NULL));
    nb_param params[32];
    int np = nb_module_named_params(model, params, 32);
    nb_tensor *parts[40] = {nb_reshape(y, NB_SHAPE(-1)), nb_reshape(r.aux_loss, NB_SHAPE(1)),
                            nb_reshape(nb_grad(x), NB_SHAPE(-1))};
    for (int i = 0; i < np; i++) parts[3 + i] = nb_reshape(nb_grad(params[i].tensor), NB_SHAPE(-1));
    nb_tensor *all = nb_detach(nb_concat(3 + np, parts, 0));
    nb_tensor *copy = nb_clone(all); /* outlives the model */
    nb_module_free(model);
    return copy;
}

static void test_threads_bitwise(void) {
    const int before = nb_get_num_threads();
    nb_tensor *one = threaded_run(1), *two = threaded_run(2);
    nb_set_num_threads(before);
    CU_ASSERT_TRUE(nb_get_num_threads() >= 1);
    NBT_ASSERT_CLOSE(one, two, 0, 0);
    CU_ASSERT_TRUE(nb_numel(one) > 64 * 256);
}

int main(void) {
    const nbtest_case cases[] = {
        {"top-2 by hand: routing, output, aux loss, at three tile sizes", test_hand_top2},
        {"top-1 and a shared expert by hand", test_hand_top1_and_shared},
        {"equals every expert run on every token, at five tile sizes",
         test_matches_dense_reference},
        {"no tokens: an empty output", test_no_tokens},
        {"gradcheck: x and every parameter, output and aux loss", test_gradcheck},
        {"float32 against float64", test_f32_against_f64},
        {"DeepSeek's parameter names", test_names},
        {"errors name the module path and the shapes", test_errors},
        {"no allocation per step once warm, batch sizes changing", test_no_mallocs_per_step},
        {"1 and 2 threads: the same bits", test_threads_bitwise},
    };
    return nbtest_run("mixture of experts", cases, sizeof cases / sizeof cases[0]);
}
