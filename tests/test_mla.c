/* DeepSeek-V2's multi-head latent attention (nn/blocks/mla*.c, <nabla/blocks.h>): parameter
 * names, float64 gradchecks of the module (input and every parameter) with and without the
 * query low-rank path, with masks, with a value head size other than the key's and through
 * each attention path; float32 against float64; the cached, absorbed forward against the full
 * causal forward at every position (token by token and in chunks, through a two-layer MLA LM
 * defined here); generation; the cache's bytes per token; errors; no malloc per decoded token.
 * PyTorch goldens are in tests/test_blocks_goldens.c (tests/goldens/mla.json). */
#include <nabla/blocks.h>
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nb_tensor *randn64(nb_rng *rng, int ndim, const int64_t *shape) {
    return nb_randn(rng, NB_F64, ndim, shape);
}

/* Keys of 2 + 2 (no-rotary + rotary), values of 3 (not the keys' 4), latent 5, one projection
 * for the queries. */
static const blk_mla_config plain = {.dim = 8,
                                     .n_heads = 2,
                                     .q_rank = 0,
                                     .kv_rank = 5,
                                     .nope_dim = 2,
                                     .rope_dim = 2,
                                     .v_dim = 3,
                                     .norm_eps = 1e-6,
                                     .rope_base = 100};
/* Queries through a rank-3 path; values of 4 = the keys' head size (nb_sdpa's path). */
static const blk_mla_config low_rank = {.dim = 8,
                                        .n_heads = 2,
                                        .q_rank = 3,
                                        .kv_rank = 4,
                                        .nope_dim = 2,
                                        .rope_dim = 2,
                                        .v_dim = 4,
                                        .norm_eps = 1e-6,
                                        .rope_base = 100};

/* RMSNorm weights start at ones; redrawn so a forward that ignored them would show. */
static void perturb_norms(blk_mla *m, nb_rng *rng) {
    blk_rms_norm *norms[2] = {m->kv_norm, m->q_norm};
    for (int i = 0; i < 2; i++)
        if (norms[i])
            nb_copy_(norms[i]->weight,
                     nb_add_scalar(nb_mul_scalar(nb_randn(rng, nb_module_dtype(&m->base), 1,
                                                          norms[i]->weight->shape),
                                                 0.3),
                                   1));
}

/* ---- names and shapes ------------------------------------------------------------------- */
static void test_parameter_names(void) {
    nb_module *root = nb_model_new(NB_F32, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(blk_mla_new(root, "a", &plain));
    CU_ASSERT_PTR_NOT_NULL_FATAL(blk_mla_new(root, "b", &low_rank));
    /* DeepSeek's names; wq [H (nope + rope), dim], wkv_a [kv_rank + rope, dim],
     * wkv_b [H (nope + v), kv_rank], wo [dim, H v] */
    NBT_ASSERT_SHAPE(nb_module_param(root, "a.wq.weight"), 8, 8);
    NBT_ASSERT_SHAPE(nb_module_param(root, "a.wkv_a.weight"), 7, 8);
    NBT_ASSERT_SHAPE(nb_module_param(root, "a.kv_norm.weight"), 5);
    NBT_ASSERT_SHAPE(nb_module_param(root, "a.wkv_b.weight"), 10, 5);
    NBT_ASSERT_SHAPE(nb_module_param(root, "a.wo.weight"), 8, 6);
    CU_ASSERT_PTR_NULL(nb_module_param(root, "a.wq_a.weight"));
    NBT_ASSERT_SHAPE(nb_module_param(root, "b.wq_a.weight"), 3, 8);
    NBT_ASSERT_SHAPE(nb_module_param(root, "b.q_norm.weight"), 3);
    NBT_ASSERT_SHAPE(nb_module_param(root, "b.wq_b.weight"), 8, 3);
    NBT_ASSERT_SHAPE(nb_module_param(root, "b.wkv_b.weight"), 12, 4);
    CU_ASSERT_PTR_NULL(nb_module_param(root, "b.wq.weight"));
    CU_ASSERT_EQUAL(nb_module_param_count(root), 5 + 7);
    nb_module_free(root);
}

/* ---- gradchecks: inputs[0] is x, the rest every parameter -------------------------------- */
typedef struct {
    blk_mla *m;
    blk_attn_opts opts;
} mla_ctx;

static nb_tensor *run_mla(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    mla_ctx *c = vctx;
    return blk_mla_forward(c->m, in[0], &c->opts);
}

/* x [B, T, dim] random; transposed from [T, B, dim] (not contiguous) if strided. */
static void gradcheck_mla(const char *what, const blk_mla_config *cfg, blk_attn_opts opts,
                          int64_t B, int64_t T, bool strided) {
    nb_module *root = nb_model_new(NB_F64, 3);
    blk_mla *m = blk_mla_new(root, "mla", cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    nb_rng rng;
    nb_rng_seed(&rng, 21);
    perturb_norms(m, &rng);
    nb_tensor *inputs[16];
    nb_param params[15];
    int np = nb_module_named_params(&m->base, params, 15);
    CU_ASSERT_TRUE_FATAL(np >= 5);
    inputs[0] = strided ? nb_transpose(randn64(&rng, NB_SHAPE(T, B, cfg->dim)), 0, 1)
                        : randn64(&rng, NB_SHAPE(B, T, cfg->dim));
    CU_ASSERT_EQUAL(nb_is_contiguous(inputs[0]), !strided);
    nb_requires_grad_(inputs[0], true);
    for (int i = 0; i < np; i++) inputs[i + 1] = params[i].tensor;
    nb_gradcheck_result res;
    mla_ctx ctx = {m, opts};
    bool ok = nb_gradcheck(run_mla, np + 1, inputs, &ctx, NULL, &res);
    printf("  %s (%d parameters): %s\n", what, np, res.message);
    CU_ASSERT_TRUE(ok);
    nb_module_free(root);
}

static void test_gradcheck(void) {
    nb_tensor *pad = nb_zeros(NB_BOOL, NB_SHAPE(2, 4));
    nb_set(pad, NB_IDX(1, 3), 1);
    nb_set(pad, NB_IDX(0, 1), 1);
    gradcheck_mla("no q low-rank, v_dim 3 != 4, causal, key padding, x strided", &plain,
                  (blk_attn_opts){.causal = true, .key_padding_mask = pad}, 2, 4, true);
    /* attn_mask [T, T] blocking key 0 for query 2 and key 2 for query 0, at offset 3 */
    nb_tensor *am = nb_zeros(NB_BOOL, NB_SHAPE(3, 3));
    nb_set(am, NB_IDX(2, 0), 1);
    nb_set(am, NB_IDX(0, 2), 1);
    gradcheck_mla("q low-rank, v_dim = 4 (nb_sdpa), attn_mask, offset 3", &low_rank,
                  (blk_attn_opts){.attn_mask = am, .offset = 3}, 2, 3, false);
    gradcheck_mla("q low-rank, v_dim = 4 (nb_sdpa), causal, key padding", &low_rank,
                  (blk_attn_opts){.causal = true, .key_padding_mask = pad}, 2, 4, false);
    blk_mla_config wide_v = low_rank;
    wide_v.v_dim = 5;
    nb_tensor *weights = NULL;
    gradcheck_mla("q low-rank, v_dim 5 > 4, causal, weights asked for", &wide_v,
                  (blk_attn_opts){.causal = true, .attn_weights = &weights}, 1, 4, false);
    NBT_ASSERT_SHAPE(weights, 1, 2, 4, 4);
}

/* The weights asked for are a softmax over the keys a query sees: rows sum to 1, and the
 * causal entries above the diagonal are 0. The result is the same with or without them. */
static void test_weights_and_paths_agree(void) {
    nb_module *root = nb_model_new(NB_F64, 5);
    blk_mla *m = blk_mla_new(root, "mla", &low_rank);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    nb_rng rng;
    nb_rng_seed(&rng, 8);
    nb_tensor *x = randn64(&rng, NB_SHAPE(2, 5, 8)), *w = NULL;
    nb_tensor *fused = blk_mla_forward(m, x, &(blk_attn_opts){.causal = true});
    nb_tensor *ops = blk_mla_forward(m, x, &(blk_attn_opts){.causal = true, .attn_weights = &w});
    NBT_ASSERT_CLOSE(fused, ops, 1e-12, 1e-12);
    NBT_ASSERT_SHAPE(w, 2, 2, 5, 5);
    NBT_ASSERT_CLOSE(nb_sum_dims(w, 1, (int[]){3}, false), nb_ones(NB_F64, NB_SHAPE(2, 2, 5)),
                     1e-12, 0);
    CU_ASSERT_EQUAL(nb_get(w, NB_IDX(1, 1, 2, 3)), 0);
    nb_module_free(root);
}

/* ---- float32 against float64 ------------------------------------------------------------ */
/* The same parameters, input and output gradient in both dtypes: output and every gradient of
 * the float32 module within float32 rounding of the float64 ones. */
static void check_f32_against_f64(const blk_mla_config *cfg) {
    nb_module *r64 = nb_model_new(NB_F64, 4), *r32 = nb_model_new(NB_F32, 4);
    blk_mla *m64 = blk_mla_new(r64, "m", cfg), *m32 = blk_mla_new(r32, "m", cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m32);
    nb_rng rng;
    nb_rng_seed(&rng, 31);
    perturb_norms(m64, &rng);
    nb_param p64[16], p32[16];
    int n = nb_module_named_params(r64, p64, 16);
    CU_ASSERT_EQUAL_FATAL(nb_module_named_params(r32, p32, 16), n);
    for (int i = 0; i < n; i++) CU_ASSERT_TRUE(nb_copy_(p32[i].tensor, p64[i].tensor));
    nb_tensor *pad = nb_zeros(NB_BOOL, NB_SHAPE(2, 6));
    nb_set(pad, NB_IDX(0, 5), 1);
    blk_attn_opts opts = {.causal = true, .key_padding_mask = pad};
    nb_tensor *x64 = nb_requires_grad_(randn64(&rng, NB_SHAPE(2, 6, cfg->dim)), true);
    nb_tensor *x32 = nb_requires_grad_(nb_detach(nb_to_dtype(x64, NB_F32)), true);
    nb_tensor *y64 = blk_mla_forward(m64, x64, &opts), *y32 = blk_mla_forward(m32, x32, &opts);
    nb_tensor *g = randn64(&rng, NB_SHAPE(2, 6, cfg->dim));
    CU_ASSERT_TRUE_FATAL(nb_backward(y64, g) && nb_backward(y32, nb_to_dtype(g, NB_F32)));
    NBT_ASSERT_CLOSE(nb_to_dtype(y32, NB_F64), y64, 1e-5, 1e-4);
    NBT_ASSERT_CLOSE(nb_to_dtype(nb_grad(x32), NB_F64), nb_grad(x64), 1e-5, 1e-4);
    for (int i = 0; i < n; i++) {
        bool ok = nbtest_close(nb_to_dtype(nb_grad(p32[i].tensor), NB_F64), nb_grad(p64[i].tensor),
                               1e-5, 1e-4);
        if (!ok) printf("  %s: float32 gradient off\n", p64[i].name);
        CU_ASSERT_TRUE(ok);
    }
    nb_module_free(r64);
    nb_module_free(r32);
}

static void test_f32_against_f64(void) {
    check_f32_against_f64(&plain);
    check_f32_against_f64(&low_rank);
}

/* ---- a two-layer MLA LM, for the cache --------------------------------------------------- */
/* tok -> x + mla_0(x) -> x + mla_1(x) -> head: layer 0 is `plain`, layer 1 has a query
 * low-rank path and a latent and rotary key of other widths, so each cache layer has rows of
 * its own width. */
typedef struct {
    nb_module base;
    nb_embedding *tok;
    blk_mla *layers[2];
    nb_linear *head;
    int64_t vocab;
} mla_lm;

static const blk_mla_config second = {.dim = 8,
                                      .n_heads = 3,
                                      .q_rank = 4,
                                      .kv_rank = 6,
                                      .nope_dim = 3,
                                      .rope_dim = 4,
                                      .v_dim = 2,
                                      .norm_eps = 1e-6,
                                      .rope_base = 50};

static mla_lm *lm_new(nb_module *root, int64_t vocab) {
    mla_lm *m = nb_module_new(root, "lm", "MLALM", sizeof *m);
    if (!m) return NULL;
    m->vocab = vocab;
    m->tok = nb_embedding_new(&m->base, "tok", vocab, 8);
    m->layers[0] = blk_mla_new(&m->base, "0", &plain);
    m->layers[1] = blk_mla_new(&m->base, "1", &second);
    m->head = nb_linear_new(&m->base, "head", 8, vocab, true);
    if (!m->tok || !m->layers[0] || !m->layers[1] || !m->head) return nb_module_discard(&m->base);
    return m;
}

/* The one forward: causal, through the cache's layers when there is one (no autograd). */
static nb_tensor *lm_forward(void *model, const nb_tensor *tokens, nb_kv_cache *cache) {
    mla_lm *m = model;
    const bool grad = cache ? nb_set_grad_enabled(false) : nb_is_grad_enabled();
    nb_tensor *x = nb_embedding_forward(m->tok, tokens);
    for (int i = 0; i < 2 && x; i++) {
        blk_attn_opts o = {.causal = true, .cache = cache, .cache_layer = i};
        nb_tensor *a = blk_mla_forward(m->layers[i], x, &o);
        x = a ? nb_add(x, a) : NULL;
    }
    nb_tensor *logits = x ? nb_linear_forward(m->head, x) : NULL;
    nb_set_grad_enabled(grad);
    return logits;
}

static nb_kv_cache *lm_cache(void *model, int64_t batch, int64_t max_len) {
    mla_lm *m = model;
    return blk_mla_cache_new(2, m->layers, batch, max_len);
}

static nb_causal_lm lm_causal(mla_lm *m, int64_t max_len) {
    return (nb_causal_lm){.model = m,
                          .module = &m->base,
                          .vocab = m->vocab,
                          .max_len = max_len,
                          .forward = lm_forward,
                          .new_cache = lm_cache};
}

static mla_lm *small_lm(nb_module **root, nb_dtype dt, uint64_t seed) {
    *root = nb_model_new(dt, seed);
    mla_lm *m = lm_new(*root, 11);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    nb_rng rng;
    nb_rng_seed(&rng, seed + 100);
    perturb_norms(m->layers[0], &rng);
    perturb_norms(m->layers[1], &rng);
    return m;
}

/* Cached (absorbed) logits equal the full causal forward's at every position: token by token,
 * in chunks of every size and in mixed chunks, for 1 and 2 sequences; float64 to 1e-12,
 * float32 to 1e-5. */
static void check_cached(nb_dtype dt, double tol) {
    nb_module *root;
    mla_lm *m = small_lm(&root, dt, 3);
    const nb_causal_lm lm = lm_causal(m, 12);
    enum { N = 12 };
    for (int64_t batch = 1; batch <= 2; batch++) {
        nb_rng rng;
        nb_rng_seed(&rng, 10 + (uint64_t)batch);
        nb_tensor *tokens = nb_randint(&rng, 0, 11, NB_SHAPE(batch, N));
        nb_tensor *full = lm_forward(m, tokens, NULL);
        NBT_ASSERT_SHAPE(full, batch, N, 11);
        nb_kv_cache *c = lm_cache(m, batch, N);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        nbtest_check_every_chunking(&lm, c, tokens, full, tol);
        nb_kv_cache_free(c);
    }
    nb_module_free(root);
}

static void test_cached_equals_full_f64(void) {
    check_cached(NB_F64, 1e-12);
}
static void test_cached_equals_full_f32(void) {
    check_cached(NB_F32, 1e-5);
}

/* One layer alone: its cached output for the second half of a sequence, after the first half
 * went in, equals the full causal forward's second half. */
static void test_layer_cached_equals_full(void) {
    nb_module *root = nb_model_new(NB_F64, 9);
    blk_mla *m = blk_mla_new(root, "attn", &second);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    nb_rng rng;
    nb_rng_seed(&rng, 9);
    perturb_norms(m, &rng);
    nb_tensor *x = randn64(&rng, NB_SHAPE(2, 7, 8));
    nb_tensor *full = blk_mla_forward(m, x, &(blk_attn_opts){.causal = true});
    nb_kv_cache *c = blk_mla_cache_new(1, &m, 2, 7);
    blk_attn_opts o = {.cache = c}; /* causal whatever .causal says */
    CU_ASSERT_PTR_NOT_NULL(blk_mla_forward(m, nb_narrow(x, 1, 0, 3), &o));
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 3));
    nb_tensor *rest = blk_mla_forward(m, nb_narrow(x, 1, 3, 4), &o);
    CU_ASSERT_FALSE(rest && rest->requires_grad);
    NBT_ASSERT_CLOSE(rest, nb_narrow(full, 1, 3, 4), 1e-12, 1e-12);
    nb_kv_cache_free(c);
    nb_module_free(root);
}

/* nb_generate through the latent cache: greedy tokens are the argmax of the full recompute,
 * past the context (the window slides), with the prompt whole and in chunks. */
static void test_generate_greedy(void) {
    enum { NEW = 20 };
    nb_module *root;
    mla_lm *m = small_lm(&root, NB_F64, 7);
    const nb_causal_lm lm = lm_causal(m, 10);
    const int64_t prompt[] = {1, 5, 2, 9};
    nbtest_check_greedy_generation(&lm, 10, prompt, 4, NEW);
    nb_module_free(root);
}

/* ---- bytes per token -------------------------------------------------------------------- */
/* The latent cache keeps kv_rank + rope_dim numbers a position and layer, against n_heads
 * keys of nope_dim + rope_dim and values of v_dim for multi-head attention: counted by hand,
 * and measured with nb_kv_cache_bytes on the caches themselves. */
static void test_bytes_per_token(void) {
    nb_module *root = nb_model_new(NB_F32, 1);
    mla_lm *m = lm_new(root, 11);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int64_t mha0, mha1;
    /* plain: (5 + 2) * 4 bytes; 2 heads of (2 + 2) + 3: 14 * 4 */
    CU_ASSERT_EQUAL(blk_mla_cache_bytes_per_token(m->layers[0], &mha0), 28);
    CU_ASSERT_EQUAL(mha0, 56);
    /* second: (6 + 4) * 4; 3 heads of (3 + 4) + 2: 27 * 4 */
    CU_ASSERT_EQUAL(blk_mla_cache_bytes_per_token(m->layers[1], &mha1), 40);
    CU_ASSERT_EQUAL(mha1, 108);
    nb_kv_cache *latent = blk_mla_cache_new(2, m->layers, 3, 10);
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(latent), (28 + 40) * 3 * 10);
    nb_kv_cache *mha = nb_kv_cache_empty(2, 3, 10, NB_F32);
    CU_ASSERT_TRUE(nb_kv_cache_add_heads(mha, 0, 2, 4, 3) &&
                   nb_kv_cache_add_heads(mha, 1, 3, 7, 2));
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(mha), (56 + 108) * 3 * 10);
    nb_kv_cache_free(latent);
    nb_kv_cache_free(mha);
    nb_module_free(root);
    /* DeepSeek-V2's attention shape (128 heads, nope 128, rope 64, v 128, kv_rank 512), as
     * caches of one layer for one sequence of 64 positions: (512 + 64) numbers against
     * 128 * (192 + 128) a position, 71.1 times less */
    nb_kv_cache *ds = nb_kv_cache_empty(1, 1, 64, NB_F32);
    nb_kv_cache *ds_mha = nb_kv_cache_empty(1, 1, 64, NB_F32);
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(ds, 0, "latent_rope", 576));
    CU_ASSERT_TRUE(nb_kv_cache_add_heads(ds_mha, 0, 128, 192, 128));
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(ds) / 64, 576 * 4);
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(ds_mha) / 64, 40960 * 4);
    printf("  DeepSeek-V2's shape: %lld bytes a token and layer (float32) against %lld for "
           "multi-head attention, %.1fx less\n",
           (long long)(nb_kv_cache_bytes(ds) / 64), (long long)(nb_kv_cache_bytes(ds_mha) / 64),
           (double)nb_kv_cache_bytes(ds_mha) / (double)nb_kv_cache_bytes(ds));
    nb_kv_cache_free(ds);
    nb_kv_cache_free(ds_mha);
}

/* ---- errors name the module path and the shapes ------------------------------------------ */
static void test_errors(void) {
    blk_mla_config odd = plain;
    odd.rope_dim = 3;
    nb_module *root = nb_model_new(NB_F64, 1);
    EXPECT_NULL(blk_mla_new(root, "x", &odd), "MLA: needs", "rope_dim 3");
    blk_mla_config neg = low_rank;
    neg.q_rank = -1;
    EXPECT_NULL(blk_mla_new(root, "x", &neg), "q_rank -1");
    EXPECT_NULL(blk_mla_new(root, "x", NULL), "MLA: NULL argument");
    CU_ASSERT_EQUAL(nb_module_param_count(root), 0); /* nothing left behind */
    nb_module *parent = nb_module_container(root, "blocks");
    blk_mla *m = blk_mla_new(parent, "attn", &plain);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    nb_tensor *x = nb_zeros(NB_F64, NB_SHAPE(2, 3, 8));
    EXPECT_NULL(blk_mla_forward(m, nb_zeros(NB_F64, NB_SHAPE(2, 3, 7)), NULL),
                "MLA: 'blocks.attn' expects x [B, T, 8], got [2, 3, 7]");
    EXPECT_NULL(blk_mla_forward(m, nb_zeros(NB_F32, NB_SHAPE(2, 3, 8)), NULL),
                "MLA: 'blocks.attn'");
    EXPECT_NULL(blk_mla_forward(NULL, x, NULL), "MLA: NULL argument");
    nb_tensor *pad = nb_zeros(NB_BOOL, NB_SHAPE(2, 4));
    EXPECT_NULL(blk_mla_forward(m, x, &(blk_attn_opts){.key_padding_mask = pad}),
                "MLA: 'blocks.attn': key_padding_mask must be bool [2, 3]", "got [2, 4]");
    EXPECT_NULL(blk_mla_forward(m, x, &(blk_attn_opts){.offset = -1}),
                "MLA: 'blocks.attn': offset must be >= 0, got -1");
    /* caches */
    nb_kv_cache *c = blk_mla_cache_new(1, &m, 2, 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    nb_tensor *pad3 = nb_zeros(NB_BOOL, NB_SHAPE(2, 3));
    EXPECT_NULL(blk_mla_forward(m, x, &(blk_attn_opts){.cache = c, .key_padding_mask = pad3}),
                "MLA: 'blocks.attn': a cache takes no key_padding_mask");
    EXPECT_NULL(
        blk_mla_forward(m, nb_zeros(NB_F64, NB_SHAPE(1, 3, 8)), &(blk_attn_opts){.cache = c}),
        "MLA: 'blocks.attn': a layer in float64 for x [1, 3, 8] cannot use layer 0 of a "
        "cache of 1 layers in float64 for batch 2");
    EXPECT_NULL(blk_mla_forward(m, x, &(blk_attn_opts){.cache = c, .cache_layer = 1}),
                "cannot use layer 1 of a cache of 1 layers");
    CU_ASSERT_PTR_NOT_NULL(blk_mla_forward(m, x, &(blk_attn_opts){.cache = c}));
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 3));
    EXPECT_NULL(blk_mla_forward(m, nb_narrow(x, 1, 0, 2), &(blk_attn_opts){.cache = c}),
                "MLA: 'blocks.attn': kv_cache_append");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 3);
    nb_kv_cache_free(c);
    /* a cache of keys and values (an MHA layer's), one of another latent width, another dtype */
    nb_kv_cache *heads = nb_kv_cache_new(1, 2, 4, 2, 4, NB_F64);
    EXPECT_NULL(blk_mla_forward(m, x, &(blk_attn_opts){.cache = heads}),
                "MLA: 'blocks.attn':", "no tensor 'latent_rope'");
    nb_kv_cache_free(heads);
    nb_kv_cache *wide = nb_kv_cache_empty(1, 2, 4, NB_F64);
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(wide, 0, "latent_rope", 9));
    EXPECT_NULL(blk_mla_forward(m, x, &(blk_attn_opts){.cache = wide}),
                "MLA: 'blocks.attn': layer 0 of the cache keeps rows 'latent_rope' of width 9, "
                "this layer kv_rank + rope_dim = 7");
    nb_kv_cache_free(wide);
    nb_kv_cache *f32 = nb_kv_cache_empty(1, 2, 4, NB_F32);
    EXPECT_NULL(blk_mla_forward(m, x, &(blk_attn_opts){.cache = f32}),
                "cache of 1 layers in float32");
    nb_kv_cache_free(f32);
    EXPECT_NULL(blk_mla_cache_new(1, NULL, 1, 4), "MLA: blk_mla_cache_new needs 1 or more layers");
    EXPECT_NULL(blk_mla_cache_new(2, (blk_mla *[]){m, NULL}, 1, 4), "layer 1 is NULL");
    EXPECT_NULL(blk_mla_cache_new(1, &m, 0, 4), "kv_cache");
    nb_clear_error();
    CU_ASSERT_EQUAL(blk_mla_cache_bytes_per_token(NULL, NULL), -1);
    NBT_ASSERT_ERROR("MLA: NULL argument");
    nb_module_free(root);
}

/* ---- no malloc per decoded token --------------------------------------------------------- */
/* Once warm, a cached one-token forward of the LM and its commit (in a scope of their own)
 * call malloc zero times. */
static void test_no_malloc_per_token(void) {
    nb_module *root;
    mla_lm *m = small_lm(&root, NB_F32, 9);
    nb_kv_cache *c = lm_cache(m, 1, 64);
    const nb_causal_lm lm = lm_causal(m, 64);
    CU_ASSERT_EQUAL(nbtest_decode_mallocs(&lm, c, 3, 4, 36), 0);
    nb_kv_cache_free(c);
    nb_module_free(root);
}

int main(void) {
    const nbtest_case cases[] = {
        {"MLA: DeepSeek's parameter names and shapes", test_parameter_names},
        {"MLA: float64 gradchecks (input and every parameter)", test_gradcheck},
        {"MLA: the fused and op-by-op attention agree; weights", test_weights_and_paths_agree},
        {"MLA: float32 against float64", test_f32_against_f64},
        {"MLA: absorbed cached logits = full forward (f64)", test_cached_equals_full_f64},
        {"MLA: absorbed cached logits = full forward (f32)", test_cached_equals_full_f32},
        {"MLA: one layer cached = full forward", test_layer_cached_equals_full},
        {"MLA: nb_generate through the latent cache", test_generate_greedy},
        {"MLA: cache bytes per token", test_bytes_per_token},
        {"MLA: errors name the module and shapes", test_errors},
        {"MLA: no malloc per decoded token", test_no_malloc_per_token},
    };
    return nbtest_run("mla", cases, (int)(sizeof cases / sizeof cases[0]));
}
