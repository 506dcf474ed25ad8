/* The DeepSeek-style LM of nn/blocks/ (blk_deepseek_lm: MLA and mixture-of-experts blocks,
 * the first dense): parameter names, float64 gradchecks of the logits and the summed aux loss
 * with respect to every parameter (routing away from ties), float32 against float64, errors
 * naming module paths, save/load, the latent cache (cached logits equal the full causal
 * forward at every position, token by token and in chunks; greedy generation equals the full
 * recompute; no malloc per decoded token) and 1 and 2 threads bitwise equal training steps.
 * PyTorch's golden (tests/goldens/deepseek.json, tests/gen_deepseek_goldens.py) is checked by
 * tests/test_blocks_goldens.c. */
#include <nabla/blocks.h>
#include "harness.h"

#include <stdio.h>
#include <string.h>

#define VOCAB 11

/* Three blocks: the first dense, two of four experts (top 2, one shared); MLA with a value
 * head size different from the query/key one. q_rank chooses the query path. */
static blk_deepseek_config small_config(int64_t q_rank) {
    return (blk_deepseek_config){
        .attn = {.dim = 8,
                 .n_heads = 2,
                 .q_rank = q_rank,
                 .kv_rank = 6,
                 .nope_dim = 4,
                 .rope_dim = 2,
                 .v_dim = 3,
                 .norm_eps = 1e-6,
                 .rope_base = 100},
        .moe = {.dim = 8, .hidden = 5, .n_experts = 4, .top_k = 2, .n_shared = 1, .aux_alpha = 0.3},
        .n_dense_layers = 1,
        .dense_hidden = 6,
        .norm_eps = 1e-6};
}

/* RMSNorm weights start at ones; random ones make their gradients mean something. */
static void perturb_norms(nb_module *m, nb_rng *rng) {
    nb_param ps[96];
    int n = nb_module_named_params(m, ps, 96);
    for (int i = 0; i < n; i++)
        if (strstr(ps[i].name, "norm.weight"))
            CU_ASSERT_TRUE(nb_copy_(
                ps[i].tensor,
                nb_add_scalar(nb_mul_scalar(nb_randn(rng, ps[i].tensor->dtype, ps[i].tensor->ndim,
                                                     ps[i].tensor->shape),
                                            0.3),
                              1.0)));
}

static blk_deepseek_lm *small_lm(nb_module **root, nb_dtype dt, uint64_t seed, int64_t q_rank) {
    *root = nb_model_new(dt, seed);
    blk_deepseek_config cfg = small_config(q_rank);
    blk_deepseek_lm *m = blk_deepseek_lm_new(*root, "ds", VOCAB, 3, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    nb_rng rng;
    nb_rng_seed(&rng, seed + 100);
    perturb_norms(*root, &rng);
    return m;
}

static void test_parameter_names(void) {
    nb_module *root;
    small_lm(&root, NB_F64, 1, 3);
    const char *names[] = {"ds.embed.weight",
                           "ds.layers.0.attn_norm.weight",
                           "ds.layers.0.attn.wq_a.weight",
                           "ds.layers.0.attn.q_norm.weight",
                           "ds.layers.0.attn.wq_b.weight",
                           "ds.layers.0.attn.wkv_a.weight",
                           "ds.layers.0.attn.kv_norm.weight",
                           "ds.layers.0.attn.wkv_b.weight",
                           "ds.layers.0.attn.wo.weight",
                           "ds.layers.0.ffn_norm.weight",
                           "ds.layers.0.ffn.w1.weight",
                           "ds.layers.0.ffn.w3.weight",
                           "ds.layers.0.ffn.w2.weight",
                           "ds.layers.1.ffn.gate.weight",
                           "ds.layers.1.ffn.experts.3.w2.weight",
                           "ds.layers.2.ffn.shared_experts.w1.weight",
                           "ds.norm.weight",
                           "ds.head.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        nb_clear_error();
        nb_tensor *p = nb_module_param(root, names[i]);
        if (!p) printf("  missing %s\n", names[i]);
        CU_ASSERT_PTR_NOT_NULL(p);
    }
    CU_ASSERT_PTR_NULL(nb_module_param(root, "ds.layers.0.ffn.gate.weight")); /* dense */
    nb_module_free(root);
}

/* Active parameters by hand: 3 blocks, two of them MoE with 4 experts of 3 [5, 8] matrices
 * (120 numbers each) of which each token uses 2: 2 x 2 x 120 idle. */
static void test_active_params(void) {
    nb_module *root;
    blk_deepseek_lm *m = small_lm(&root, NB_F64, 1, 0);
    int64_t total = 0;
    CU_ASSERT_EQUAL(blk_deepseek_lm_active_params(m, &total), total - 2 * 2 * 120);
    CU_ASSERT_EQUAL(total, nb_module_param_numel(root));
    nb_module_free(root);
}

/* ---- routing margin: how far every MoE block's routing is from a tie ------------------- */
static double moe_margin(const blk_moe *moe, const nb_tensor *x) {
    const int64_t k = moe->cfg.top_k;
    nb_tensor *x2 = nb_reshape(x, NB_SHAPE(-1, moe->cfg.dim));
    nb_tensor *top =
        nb_topk(nb_softmax(nb_f_linear(x2, moe->gate->weight, NULL), -1), k + 1, -1, true, NULL);
    nb_tensor *gap = nb_sub(nb_narrow(top, 1, k - 1, 1), nb_narrow(top, 1, k, 1));
    return nb_item(nb_topk(nb_reshape(gap, NB_SHAPE(-1)), 1, 0, false, NULL));
}

/* The smallest margin over the MoE blocks, each block's input rebuilt from the public parts. */
static double lm_margin(blk_deepseek_lm *m, const nb_tensor *tokens) {
    const bool grad = nb_set_grad_enabled(false);
    nb_tensor *x = nb_embedding_forward(m->embed, tokens);
    double smallest = 1;
    for (int i = 0; i < m->n_layers; i++) {
        blk_deepseek_block *b = m->layers[i];
        nb_tensor *h = nb_add(x, blk_mla_forward(b->attn, blk_rms_norm_forward(b->attn_norm, x),
                                                 &(blk_attn_opts){.causal = true}));
        if (b->moe) {
            double g = moe_margin(b->moe, blk_rms_norm_forward(b->ffn_norm, h));
            smallest = g < smallest ? g : smallest;
        }
        x = blk_deepseek_block_forward(b, x, &(blk_attn_opts){.causal = true}, NULL);
    }
    nb_set_grad_enabled(grad);
    return smallest;
}

/* ---- gradcheck ---------------------------------------------------------------------------- */
typedef struct {
    blk_deepseek_lm *m;
    const nb_tensor *tokens;
} run_ctx;

/* logits + aux (broadcast): one projection checks both. */
static nb_tensor *run_lm(nb_tensor *const *in, int n, void *vctx) {
    (void)in, (void)n;
    run_ctx *c = vctx;
    nb_tensor *aux;
    nb_tensor *logits =
        blk_deepseek_lm_forward(c->m, c->tokens, &(blk_attn_opts){.causal = true}, &aux);
    return nb_add(logits, aux);
}

static void gradcheck_lm(int64_t q_rank, uint64_t seed) {
    nb_module *root;
    blk_deepseek_lm *m = small_lm(&root, NB_F64, seed, q_rank);
    nb_rng rng;
    nb_rng_seed(&rng, seed + 7);
    nb_tensor *tokens = nb_randint(&rng, 0, VOCAB, NB_SHAPE(2, 5));
    const double margin = lm_margin(m, tokens);
    printf("  q_rank %lld: routing margin %.3g\n", (long long)q_rank, margin);
    CU_ASSERT_TRUE(margin > 1e-3);
    nb_param ps[96];
    nb_tensor *inputs[96];
    int np = nb_module_named_params(root, ps, 96);
    CU_ASSERT_TRUE_FATAL(np > 50);
    /* Under valgrind (nbtest_under_valgrind) every fourth parameter is differenced: the
     * forward and the backward still run whole, every parameter requiring grad. */
    const int stride = nbtest_under_valgrind() ? 4 : 1;
    int ninputs = 0;
    for (int i = 0; i < np; i += stride) inputs[ninputs++] = ps[i].tensor;
    nb_gradcheck_result res;
    bool ok = nb_gradcheck(run_lm, ninputs, inputs, &(run_ctx){m, tokens}, NULL, &res);
    printf("  %d of %d parameters: %s\n", ninputs, np, res.message);
    CU_ASSERT_TRUE(ok);
    nb_module_free(root);
}

static void test_gradcheck(void) {
    gradcheck_lm(0, 11);
    gradcheck_lm(3, 12);
}

/* ---- float32 against float64 -------------------------------------------------------------- */
static void test_f32_against_f64(void) {
    /* seeds whose routing stays 1e-4 from a tie */
    nb_module *r64, *r32;
    blk_deepseek_lm *a = small_lm(&r64, NB_F64, 21, 0), *b = small_lm(&r32, NB_F32, 22, 0);
    nb_param p64[96], p32[96];
    int np = nb_module_named_params(r64, p64, 96);
    CU_ASSERT_EQUAL_FATAL(nb_module_named_params(r32, p32, 96), np);
    for (int i = 0; i < np; i++) CU_ASSERT_TRUE(nb_copy_(p32[i].tensor, p64[i].tensor));
    /* the float64 model holds float32-representable weights, so both compute one function */
    for (int i = 0; i < np; i++) CU_ASSERT_TRUE(nb_copy_(p64[i].tensor, p32[i].tensor));
    nb_rng rng;
    nb_rng_seed(&rng, 24);
    nb_tensor *tokens = nb_randint(&rng, 0, VOCAB, NB_SHAPE(2, 6));
    CU_ASSERT_TRUE(lm_margin(a, tokens) > 1e-4);
    nb_tensor *aux64, *aux32;
    nb_tensor *l64 = blk_deepseek_lm_forward(a, tokens, &(blk_attn_opts){.causal = true}, &aux64);
    nb_tensor *l32 = blk_deepseek_lm_forward(b, tokens, &(blk_attn_opts){.causal = true}, &aux32);
    CU_ASSERT_EQUAL_FATAL(l32->dtype, NB_F32);
    NBT_ASSERT_CLOSE(nb_to_dtype(l32, NB_F64), l64, 1e-5, 1e-4);
    NBT_ASSERT_CLOSE(nb_to_dtype(aux32, NB_F64), aux64, 1e-6, 1e-5);
    CU_ASSERT_TRUE(nb_backward(nb_add(nb_mean(nb_mul(l64, l64)), aux64), NULL));
    CU_ASSERT_TRUE(nb_backward(nb_add(nb_mean(nb_mul(l32, l32)), aux32), NULL));
    for (int i = 0; i < np; i++) {
        bool ok = nbtest_close(nb_to_dtype(nb_grad(p32[i].tensor), NB_F64), nb_grad(p64[i].tensor),
                               1e-5, 1e-3);
        if (!ok) printf("  %s differs\n", p64[i].name);
        CU_ASSERT_TRUE(ok);
    }
    nb_module_free(r64);
    nb_module_free(r32);
}

/* ---- errors --------------------------------------------------------------------------- */
static void test_errors(void) {
    nb_module *root;
    blk_deepseek_lm *m = small_lm(&root, NB_F64, 31, 0);
    blk_deepseek_config bad = small_config(0);
    bad.moe.dim = 6;
    EXPECT_NULL(blk_deepseek_lm_new(root, "bad", VOCAB, 2, &bad), "DeepSeekBlock", "moe.dim 6");
    bad = small_config(0);
    bad.n_dense_layers = 3;
    EXPECT_NULL(blk_deepseek_lm_new(root, "bad", VOCAB, 2, &bad), "DeepSeekLM", "n_dense_layers 3");
    bad = small_config(0);
    bad.moe.top_k = 5;
    EXPECT_NULL(blk_deepseek_lm_new(root, "bad", VOCAB, 2, &bad), "MoE", "top_k 5");
    EXPECT_NULL(blk_deepseek_lm_new(root, "bad", 0, 2, &bad), "DeepSeekLM", "vocab 0");
    EXPECT_NULL(blk_deepseek_lm_forward(m, nb_zeros(NB_F64, NB_SHAPE(1, 3)), NULL, NULL),
                "DeepSeekLM", "'ds'", "float64 [1, 3]");
    EXPECT_NULL(blk_deepseek_lm_forward(m, nb_full(NB_I64, NB_SHAPE(1, 3), VOCAB), NULL, NULL),
                "embed", "11");
    /* a Llama cache (keys and values, not latents): the first attention names itself */
    nb_kv_cache *llama = nb_kv_cache_new(3, 1, 8, 2, 4, NB_F64);
    EXPECT_NULL(blk_deepseek_lm_forward(m, nb_zeros(NB_I64, NB_SHAPE(1, 2)),
                                        &(blk_attn_opts){.cache = llama}, NULL),
                "MLA", "'ds.layers.0.attn'");
    nb_kv_cache_free(llama);
    /* a cache too short, of the wrong batch, or of too few layers */
    nb_kv_cache *c = blk_deepseek_lm_cache_new(m, 1, 4);
    EXPECT_NULL(blk_deepseek_lm_forward(m, nb_zeros(NB_I64, NB_SHAPE(1, 5)),
                                        &(blk_attn_opts){.cache = c}, NULL),
                "DeepSeekLM", "'ds'", "5 new tokens", "cache's 4");
    EXPECT_NULL(blk_deepseek_lm_forward(m, nb_zeros(NB_I64, NB_SHAPE(2, 1)),
                                        &(blk_attn_opts){.cache = c}, NULL),
                "DeepSeekLM", "batch 2");
    nb_kv_cache_free(c);
    c = blk_mla_cache_new(1, &m->layers[0]->attn, 1, 4);
    EXPECT_NULL(blk_deepseek_lm_forward(m, nb_zeros(NB_I64, NB_SHAPE(1, 1)),
                                        &(blk_attn_opts){.cache = c}, NULL),
                "DeepSeekLM", "3 blocks", "cache of 1 layers");
    nb_kv_cache_free(c);
    EXPECT_NULL(blk_deepseek_lm_forward(NULL, nb_zeros(NB_I64, NB_SHAPE(1, 1)), NULL, NULL),
                "DeepSeekLM");
    EXPECT_NULL(blk_deepseek_lm_cache_new(NULL, 1, 4), "DeepSeekLM");
    nb_clear_error();
    CU_ASSERT_EQUAL(blk_deepseek_lm_active_params(NULL, NULL), -1);
    NBT_ASSERT_ERROR("DeepSeekLM");
    nb_module_free(root);
}

/* ---- save and load ------------------------------------------------------------------- */
static void test_save_load(void) {
    nb_module *ra, *rb;
    blk_deepseek_lm *a = small_lm(&ra, NB_F64, 41, 3), *b = small_lm(&rb, NB_F64, 42, 3);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, 6), (int64_t[]){1, 4, 9, 2, 0, 7});
    nb_tensor *before = blk_deepseek_lm_forward(a, tokens, NULL, NULL);
    const char *path = nbtest_tmp_path("deepseek.safetensors");
    CU_ASSERT_TRUE(nb_module_save(ra, path));
    CU_ASSERT_FALSE(nbtest_close(blk_deepseek_lm_forward(b, tokens, NULL, NULL), before, 0, 0));
    CU_ASSERT_TRUE(nb_module_load(rb, path));
    NBT_ASSERT_CLOSE(blk_deepseek_lm_forward(b, tokens, NULL, NULL), before, 0, 0);
    nb_module_free(ra);
    nb_module_free(rb);
}

/* ---- the latent cache and generation ------------------------------------------------- */
/* Cached (absorbed) logits equal the full causal forward's at every position, token by token,
 * in chunks of every size and mixed, for 1 and 2 sequences. */
static void check_cached(nb_dtype dt, int64_t q_rank, double tol) {
    nb_module *root;
    blk_deepseek_lm *m = small_lm(&root, dt, 3, q_rank);
    const nb_causal_lm lm = blk_deepseek_lm_causal(m, 12);
    enum { N = 12 };
    for (int64_t batch = 1; batch <= 2; batch++) {
        nb_rng rng;
        nb_rng_seed(&rng, 10 + (uint64_t)batch);
        nb_tensor *tokens = nb_randint(&rng, 0, VOCAB, NB_SHAPE(batch, N));
        CU_ASSERT_TRUE(lm_margin(m, tokens) > 1e-4);
        nb_tensor *full =
            blk_deepseek_lm_forward(m, tokens, &(blk_attn_opts){.causal = true}, NULL);
        NBT_ASSERT_SHAPE(full, batch, N, VOCAB);
        nb_kv_cache *c = blk_deepseek_lm_cache_new(m, batch, N);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        nbtest_check_every_chunking(&lm, c, tokens, full, tol);
        nb_kv_cache_free(c);
    }
    nb_module_free(root);
}

static void test_cached_equals_full(void) {
    check_cached(NB_F64, 0, 1e-12);
    check_cached(NB_F64, 3, 1e-12);
    check_cached(NB_F32, 0, 1e-5);
}

/* nb_generate through the latent cache: greedy tokens are the argmax of the full recompute,
 * past the context (the window slides), with the prompt whole and in chunks. */
static void test_generate_greedy(void) {
    enum { NEW = 20 };
    nb_module *root;
    blk_deepseek_lm *m = small_lm(&root, NB_F64, 7, 0);
    const nb_causal_lm lm = blk_deepseek_lm_causal(m, 10);
    const int64_t prompt[] = {1, 5, 2, 9};
    nbtest_check_greedy_generation(&lm, 10, prompt, 4, NEW);
    nb_module_free(root);
}

/* Once warm, a cached one-token forward and its commit call malloc zero times. */
static void test_no_malloc_per_token(void) {
    nb_module *root;
    blk_deepseek_lm *m = small_lm(&root, NB_F32, 9, 0);
    nb_kv_cache *c = blk_deepseek_lm_cache_new(m, 1, 64);
    const nb_causal_lm lm = blk_deepseek_lm_causal(m, 64);
    CU_ASSERT_EQUAL(nbtest_decode_mallocs(&lm, c, 3, 4, 36), 0);
    nb_kv_cache_free(c);
    nb_module_free(root);
}

/* ---- training: no malloc per step, 1 and 2 threads the same bits ------------------------- */
/* AdamW steps of the LM loss plus the aux loss on new random tokens, at a width whose GEMMs
 * split over 2 threads. Returns every parameter after the steps, flattened, and the
 * allocations of the steps after the second in *mallocs. */
static nb_tensor *train_steps(int threads, uint64_t *mallocs) {
    nb_set_num_threads(threads);
    nb_module *root = nb_model_new(NB_F32, 51);
    blk_deepseek_config cfg = {
        .attn = {.dim = 64,
                 .n_heads = 4,
                 .kv_rank = 32,
                 .nope_dim = 16,
                 .rope_dim = 8,
                 .v_dim = 16,
                 .norm_eps = 1e-6,
                 .rope_base = 100},
        .moe =
            {.dim = 64, .hidden = 96, .n_experts = 4, .top_k = 2, .n_shared = 1, .aux_alpha = 0.01},
        .n_dense_layers = 1,
        .dense_hidden = 128,
        .norm_eps = 1e-6};
    blk_deepseek_lm *m = blk_deepseek_lm_new(root, "", 32, 2, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    nb_param ps[64];
    nb_tensor *pt[64];
    int np = nb_module_named_params(root, ps, 64);
    for (int i = 0; i < np; i++) pt[i] = ps[i].tensor;
    nb_optimizer *opt = nb_adamw_new(np, pt, nb_adamw_defaults(1e-2));
    nb_rng rng;
    nb_rng_seed(&rng, 52);
    uint64_t before = 0;
    for (int s = 0; s < 5; s++) {
        if (s == 2) before = nb_alloc_count();
        nb_scope_begin();
        nb_tensor *tokens = nb_randint(&rng, 0, 32, NB_SHAPE(4, 33)), *aux;
        nb_tensor *logits = blk_deepseek_lm_forward(m, nb_narrow(tokens, 1, 0, 32),
                                                    &(blk_attn_opts){.causal = true}, &aux);
        nb_tensor *loss = nb_cross_entropy(nb_reshape(logits, NB_SHAPE(-1, 32)),
                                           nb_reshape(nb_narrow(tokens, 1, 1, 32), NB_SHAPE(-1)),
                                           -100, NB_REDUCE_MEAN);
        CU_ASSERT_TRUE(nb_backward(nb_add(loss, aux), NULL));
        CU_ASSERT_TRUE(nb_optimizer_step(opt));
        nb_optimizer_zero_grad(opt);
        nb_scope_end();
    }
    *mallocs = nb_alloc_count() - before;
    nb_tensor *parts[64];
    for (int i = 0; i < np; i++) parts[i] = nb_reshape(pt[i], NB_SHAPE(-1));
    nb_tensor *copy = nb_clone(nb_detach(nb_concat(np, parts, 0))); /* outlives the model */
    nb_optimizer_free(opt);
    nb_module_free(root);
    return copy;
}

static void test_threads_bitwise(void) {
    const int before = nb_get_num_threads();
    uint64_t mallocs1, mallocs2;
    nb_tensor *one = train_steps(1, &mallocs1), *two = train_steps(2, &mallocs2);
    nb_set_num_threads(before);
    printf("  allocations in steps 3-5: %llu (1 thread), %llu (2 threads)\n",
           (unsigned long long)mallocs1, (unsigned long long)mallocs2);
    CU_ASSERT_EQUAL(mallocs1, 0);
    CU_ASSERT_EQUAL(mallocs2, 0);
    NBT_ASSERT_CLOSE(one, two, 0, 0);
}

int main(void) {
    const nbtest_case cases[] = {
        {"parameter names", test_parameter_names},
        {"active parameters", test_active_params},
        {"gradcheck: logits and aux loss, every parameter", test_gradcheck},
        {"float32 against float64", test_f32_against_f64},
        {"errors name the module", test_errors},
        {"save and load", test_save_load},
        {"cached logits equal the full forward", test_cached_equals_full},
        {"greedy generation equals full recompute", test_generate_greedy},
        {"no malloc per decoded token", test_no_malloc_per_token},
        {"training steps: no mallocs, 1 and 2 threads the same bits", test_threads_bitwise},
    };
    return nbtest_run("deepseek", cases, (int)(sizeof cases / sizeof cases[0]));
}
