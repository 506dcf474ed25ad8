/* The Llama-style blocks of nn/blocks/: values computed by hand, equivalences with
 * nabla's built-in attention and with explicitly repeated kv heads, float64 gradchecks of every
 * function and module (input and every parameter), checkpoints and errors. PyTorch goldens
 * are in tests/test_blocks_goldens.c. */
#include <nabla/blocks.h>
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static nb_tensor *randn64(nb_rng *rng, int ndim, const int64_t *shape) {
    return nb_randn(rng, NB_F64, ndim, shape);
}

static void report(const char *what, bool ok, const nb_gradcheck_result *res) {
    printf("  %s: %s\n", what, res->message);
    CU_ASSERT_TRUE(ok);
}

/* ---- values by hand ---------------------------------------------------------------------- */
static void test_rms_norm_values(void) {
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(1, 2), (double[]){3, 4});
    nb_tensor *w = nb_from_array(NB_F64, NB_SHAPE(2), (double[]){1, 2});
    /* rms = sqrt((9 + 16) / 2) = 3.5355339...; with eps 1: sqrt(13.5) = 3.6742346... */
    NBT_ASSERT_VALUES(blk_f_rms_norm(x, w, 0), 1e-7, 0.8485281, 2.2627417);
    NBT_ASSERT_VALUES(blk_f_rms_norm(x, NULL, 1), 1e-7, 0.8164966, 1.0886621);
}

static void test_rope_values(void) {
    /* hd 2: one pair rotating by the position itself (inv_freq 1). Positions 1 and 2. */
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(2, 2), (double[]){1, 0, 0, 1});
    NBT_ASSERT_VALUES(blk_rope(x, 0, 1, 10000), 1e-7, 0.5403023, 0.8414710, /* (cos 1, sin 1) */
                      -0.9092974, -0.4161468); /* (0, 1) rotated by 2: (-sin 2, cos 2) */
    /* hd 4, base 100: pair 1 (elements 1 and 3) turns at 100^(-1/2) = 0.1 per position; at
     * position 3 by 0.3. Pair 0 (elements 0 and 2) turns by 3. */
    nb_tensor *y = nb_from_array(NB_F64, NB_SHAPE(1, 4), (double[]){0, 1, 0, 0});
    NBT_ASSERT_VALUES(blk_rope(y, 0, 3, 100), 1e-7, 0, 0.9553365, 0, 0.2955202);
    nb_tensor *z = nb_from_array(NB_F64, NB_SHAPE(1, 4), (double[]){1, 0, 0, 0});
    NBT_ASSERT_VALUES(blk_rope(z, 0, 3, 100), 1e-7, -0.9899925, 0, 0.1411200, 0);
}

/* Rotating positions t0.. of a sequence equals rotating the whole sequence from 0 and keeping
 * rows t0..: what a KV-cache user relies on. And positions along dim 1 of [B, T, H, hd] give
 * the transpose of positions along dim -2 of [B, H, T, hd]. */
static void test_rope_offset_and_layouts(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_tensor *x = randn64(&rng, NB_SHAPE(2, 3, 7, 6)); /* [B, H, T, hd] */
    nb_tensor *full = blk_rope(x, -2, 0, 500);
    nb_tensor *tail = blk_rope(nb_narrow(x, 2, 4, 3), -2, 4, 500);
    NBT_ASSERT_CLOSE(tail, nb_narrow(full, 2, 4, 3), 1e-12, 0);
    nb_tensor *bthd = nb_contiguous(nb_transpose(x, 1, 2)); /* [B, T, H, hd] */
    NBT_ASSERT_CLOSE(nb_transpose(blk_rope(bthd, 1, 0, 500), 1, 2), full, 1e-12, 0);
    /* A rotation keeps each pair's length. */
    nb_tensor *sq = nb_mul(full, full), *sq_in = nb_mul(x, x);
    nb_tensor *pairs = nb_add(nb_narrow(sq, -1, 0, 3), nb_narrow(sq, -1, 3, 3));
    nb_tensor *pairs_in = nb_add(nb_narrow(sq_in, -1, 0, 3), nb_narrow(sq_in, -1, 3, 3));
    NBT_ASSERT_CLOSE(pairs, pairs_in, 1e-12, 1e-12);
    /* Tables made once (the attention module's q and k) rotate as blk_rope does; tables for
     * another length or head dim are refused. */
    blk_rope_tables tables;
    CU_ASSERT_TRUE_FATAL(blk_rope_tables_make(NB_F64, 3, 6, 4, 500, &tables));
    NBT_ASSERT_CLOSE(blk_rope_apply(nb_narrow(x, 2, 4, 3), -2, &tables), tail, 0, 0);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_rope_apply(x, -2, &tables));
    NBT_ASSERT_ERROR("rope: tables float64 [3, 3] do not fit x float64 [2, 3, 7, 6] along dim -2");
}

static void test_swiglu_values(void) {
    /* D = hidden = 1, every weight 1: silu(2) * 2 = 2 sigmoid(2) * 2 = 3.5231883... */
    nb_tensor *one = nb_ones(NB_F64, NB_SHAPE(1, 1));
    nb_tensor *x = nb_full(NB_F64, NB_SHAPE(1, 1), 2);
    NBT_ASSERT_VALUES(blk_f_swiglu(x, one, one, one), 1e-7, 3.5231883);
}

/* ---- grouped-query attention against references ------------------------------------------ */
/* k [B, KV, T, hd] with every kv head repeated G times in place: [B, KV * G, T, hd], head h
 * being kv head h / G (PyTorch's repeat_interleave). */
static nb_tensor *repeat_heads(const nb_tensor *k, int64_t G) {
    nb_tensor *parts[16];
    int n = 0;
    for (int64_t h = 0; h < k->shape[1]; h++)
        for (int64_t g = 0; g < G; g++) parts[n++] = nb_narrow(k, 1, h, 1);
    return nb_concat(n, parts, 1);
}

static void test_gqa_matches_repeated_heads_and_builtin(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 7);
    int64_t B = 2, H = 4, T = 5, hd = 3;
    nb_tensor *q = randn64(&rng, NB_SHAPE(B, H, T, hd));
    nb_tensor *pad = nb_zeros(NB_BOOL, NB_SHAPE(B, 1, 1, T));
    nb_set(pad, NB_IDX(1, 0, 0, 4), 1);
    for (int64_t kv = 1; kv <= H; kv *= 2) {
        nb_tensor *k = randn64(&rng, NB_SHAPE(B, kv, T, hd)),
                  *v = randn64(&rng, NB_SHAPE(B, kv, T, hd));
        nb_tensor *weights;
        nb_tensor *got = blk_gqa_attention(q, k, v, pad, true, 0.6, &weights);
        nb_tensor *kr = repeat_heads(k, H / kv), *vr = repeat_heads(v, H / kv);
        nb_tensor *probs =
            nb_masked_softmax(nb_matmul(q, nb_transpose(kr, -2, -1)), pad, true, 0.6);
        NBT_ASSERT_CLOSE(got, nb_matmul(probs, vr), 1e-12, 1e-12);
        NBT_ASSERT_CLOSE(weights, probs, 1e-12, 1e-12);
        /* nabla's fused op reads the kv heads itself */
        NBT_ASSERT_CLOSE(nb_sdpa(q, k, v, pad, true, 0.6), got, 1e-12, 1e-12);
        /* and nabla's fused multi-head attention on the merged [B, T, H * hd] layout */
        nb_tensor *merge[3] = {q, kr, vr};
        for (int i = 0; i < 3; i++)
            merge[i] = nb_reshape(nb_transpose(merge[i], 1, 2), NB_SHAPE(B, T, H * hd));
        nb_tensor *fused = nb_f_attention(merge[0], merge[1], merge[2], H, pad, true, 0.6);
        NBT_ASSERT_CLOSE(nb_reshape(nb_transpose(got, 1, 2), NB_SHAPE(B, T, H * hd)), fused, 1e-12,
                         1e-12);
    }
}

/* The module's two paths: fused nb_sdpa, and op by op when the weights are asked for. */
static void test_attention_paths_agree(void) {
    nb_module *model = nb_model_new(NB_F64, 4);
    blk_attention *attn = blk_attention_new(model, "attn", 8, 4, 2, 100);
    nb_rng rng;
    nb_rng_seed(&rng, 21);
    nb_tensor *x = randn64(&rng, NB_SHAPE(2, 5, 8));
    nb_tensor *pad = nb_zeros(NB_BOOL, NB_SHAPE(2, 5));
    nb_set(pad, NB_IDX(0, 4), 1);
    nb_tensor *weights = NULL;
    blk_attn_opts fused = {.causal = true, .key_padding_mask = pad, .offset = 3};
    blk_attn_opts by_ops = fused;
    by_ops.attn_weights = &weights;
    NBT_ASSERT_CLOSE(blk_attention_forward(attn, x, &by_ops),
                     blk_attention_forward(attn, x, &fused), 1e-12, 1e-12);
    NBT_ASSERT_SHAPE(weights, 2, 4, 5, 5);
    /* causal: row 0 reads only key 0; padding: batch 0's key 4 gets nothing */
    CU_ASSERT_DOUBLE_EQUAL(nb_get(weights, NB_IDX(1, 3, 0, 0)), 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(weights, NB_IDX(0, 2, 4, 4)), 0.0, 0);
    blk_llama_config cfg = {
        .dim = 8, .n_heads = 4, .n_kv_heads = 1, .hidden = 8, .norm_eps = 1e-5, .rope_base = 100};
    blk_llama_lm *lm = blk_llama_lm_new(model, "lm", 6, 2, &cfg);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, 3), (int64_t[]){5, 1, 1});
    nb_tensor *layers[2] = {NULL, NULL};
    NBT_ASSERT_CLOSE(blk_llama_lm_forward(lm, tokens, &(blk_attn_opts){.attn_weights = layers}),
                     blk_llama_lm_forward(lm, tokens, NULL), 1e-12, 1e-12);
    NBT_ASSERT_SHAPE(layers[0], 1, 4, 3, 3);
    NBT_ASSERT_SHAPE(layers[1], 1, 4, 3, 3);
    nb_module_free(model);
}

/* ---- gradchecks of the functions --------------------------------------------------------- */
typedef struct {
    const nb_tensor *mask;
    bool causal;
    int64_t offset;
} fn_ctx;

static nb_tensor *f_rms_norm(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return blk_f_rms_norm(in[0], in[1], 1e-5);
}
static nb_tensor *f_rope(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return blk_rope(in[0], -2, ((fn_ctx *)ctx)->offset, 100);
}
static nb_tensor *f_swiglu(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return blk_f_swiglu(in[0], in[1], in[2], in[3]);
}
static nb_tensor *f_gqa(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    fn_ctx *c = vctx;
    /* q arrives as [B, T, H, hd] and is read through a transposed view */
    return blk_gqa_attention(nb_transpose(in[0], 1, 2), in[1], in[2], c->mask, c->causal, 0.5,
                             NULL);
}

/* Tables handed in through opts (blk_llama_lm_forward makes one set for all its layers) are
 * the ones used, with and without a cache; tables that do not fit are refused. float32 tables
 * are the float64 ones rounded. */
static void test_attention_given_rope_tables(void) {
    nb_module *model = nb_model_new(NB_F64, 4);
    blk_attention *attn = blk_attention_new(model, "attn", 8, 2, 1, 100); /* head dim 4 */
    nb_rng rng;
    nb_rng_seed(&rng, 8);
    nb_tensor *x = randn64(&rng, NB_SHAPE(1, 5, 8));
    blk_rope_tables at3, at0;
    CU_ASSERT_TRUE_FATAL(blk_rope_tables_make(NB_F64, 5, 4, 3, 100, &at3));
    CU_ASSERT_TRUE_FATAL(blk_rope_tables_make(NB_F64, 5, 4, 0, 100, &at0));
    nb_tensor *want3 =
        blk_attention_forward(attn, x, &(blk_attn_opts){.causal = true, .offset = 3});
    nb_tensor *want0 = blk_attention_forward(attn, x, &(blk_attn_opts){.causal = true});
    NBT_ASSERT_CLOSE(
        blk_attention_forward(attn, x, &(blk_attn_opts){.causal = true, .offset = 3, .rope = &at3}),
        want3, 0, 0);
    /* the given tables win over the offset: tables of positions 0.. give offset 0's result */
    NBT_ASSERT_CLOSE(
        blk_attention_forward(attn, x, &(blk_attn_opts){.causal = true, .offset = 3, .rope = &at0}),
        want0, 0, 0);
    nb_kv_cache *c = nb_kv_cache_new(1, 1, 8, 1, 4, NB_F64);
    NBT_ASSERT_CLOSE(blk_attention_forward(attn, x, &(blk_attn_opts){.cache = c, .rope = &at0}),
                     want0, 1e-12, 1e-12);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_attention_forward(attn, nb_narrow(x, 1, 0, 4),
                                             &(blk_attn_opts){.causal = true, .rope = &at0}));
    NBT_ASSERT_ERROR("Attention: 'attn': the given RoPE cos table is float64 [5, 2]; x float64 "
                     "[1, 4, 8] needs float64 [4, 2]");
    blk_rope_tables f32;
    CU_ASSERT_TRUE_FATAL(blk_rope_tables_make(NB_F32, 5, 4, 3, 100, &f32));
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_attention_forward(attn, x, &(blk_attn_opts){.rope = &f32}));
    NBT_ASSERT_ERROR("needs float64 [5, 2]");
    NBT_ASSERT_CLOSE(f32.cos, nb_to_dtype(at3.cos, NB_F32), 0, 0);
    NBT_ASSERT_CLOSE(f32.sin, nb_to_dtype(at3.sin, NB_F32), 0, 0);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

static void test_gradcheck_functions(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 9);
    nb_gradcheck_result res;
    /* RMSNorm on a transposed input with a random weight */
    nb_tensor *x =
        nb_requires_grad_(nb_detach(nb_transpose(randn64(&rng, NB_SHAPE(5, 3)), 0, 1)), true);
    nb_tensor *w = nb_requires_grad_(randn64(&rng, NB_SHAPE(5)), true);
    report("rms_norm", nb_gradcheck(f_rms_norm, 2, (nb_tensor *[]){x, w}, NULL, NULL, &res), &res);
    /* RoPE at offset 6 */
    nb_tensor *r = nb_requires_grad_(randn64(&rng, NB_SHAPE(2, 2, 3, 4)), true);
    report("rope offset 6",
           nb_gradcheck(f_rope, 1, (nb_tensor *[]){r}, &(fn_ctx){.offset = 6}, NULL, &res), &res);
    nb_tensor *sw[4] = {randn64(&rng, NB_SHAPE(2, 3, 4)), randn64(&rng, NB_SHAPE(6, 4)),
                        randn64(&rng, NB_SHAPE(6, 4)), randn64(&rng, NB_SHAPE(4, 6))};
    for (int i = 0; i < 4; i++) nb_requires_grad_(sw[i], true);
    report("swiglu", nb_gradcheck(f_swiglu, 4, sw, NULL, NULL, &res), &res);
    /* GQA with 4 query heads over 2 kv heads and over 1 (MQA), causal with key padding */
    nb_tensor *pad = nb_zeros(NB_BOOL, NB_SHAPE(2, 1, 1, 4));
    nb_set(pad, NB_IDX(0, 0, 0, 3), 1);
    for (int64_t kv = 1; kv <= 2; kv++) {
        nb_tensor *in[3] = {randn64(&rng, NB_SHAPE(2, 4, 4, 2)),
                            randn64(&rng, NB_SHAPE(2, kv, 4, 2)),
                            randn64(&rng, NB_SHAPE(2, kv, 4, 2))};
        for (int i = 0; i < 3; i++) nb_requires_grad_(in[i], true);
        char what[64];
        snprintf(what, sizeof what, "gqa_attention 4 heads over %lld kv", (long long)kv);
        report(what, nb_gradcheck(f_gqa, 3, in, &(fn_ctx){.mask = pad, .causal = true}, NULL, &res),
               &res);
    }
}

/* ---- gradchecks of the modules: inputs[0] is x, the rest every parameter ----------------- */
typedef enum { K_RMSNORM, K_SWIGLU, K_ATTENTION, K_BLOCK, K_LM } module_kind;
typedef struct {
    void *module;
    module_kind kind;
    blk_attn_opts opts;
    const nb_tensor *tokens;
} module_ctx;

static nb_tensor *run_module(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    module_ctx *c = vctx;
    switch (c->kind) {
    case K_RMSNORM:
        return blk_rms_norm_forward(c->module, in[0]);
    case K_SWIGLU:
        return blk_swiglu_forward(c->module, in[0]);
    case K_ATTENTION:
        return blk_attention_forward(c->module, in[0], &c->opts);
    case K_BLOCK:
        return blk_llama_block_forward(c->module, in[0], &c->opts);
    /* tokens are not differentiable; in[0] is a dummy added in so every input gets a gradient */
    case K_LM:
        return nb_add(blk_llama_lm_forward(c->module, c->tokens, &c->opts), in[0]);
    }
    return NULL;
}

static void gradcheck_module(module_ctx c, nb_tensor *x) {
    nb_module *m = c.module;
    nb_tensor *inputs[64];
    nb_param params[63];
    int np = nb_module_named_params(m, params, 63);
    CU_ASSERT_TRUE_FATAL(np > 0);
    inputs[0] = nb_requires_grad_(x, true);
    for (int i = 0; i < np; i++) inputs[i + 1] = params[i].tensor;
    nb_gradcheck_result res;
    bool ok = nb_gradcheck(run_module, np + 1, inputs, &c, NULL, &res);
    printf("  %s '%s' (%d parameters): %s\n", nb_module_type(m), nb_module_path(m), np,
           res.message);
    CU_ASSERT_TRUE(ok);
}

static void test_gradcheck_modules(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    nb_rng rng;
    nb_rng_seed(&rng, 13);
    blk_rms_norm *norm = blk_rms_norm_new(model, "norm", 6, 1e-5);
    nb_fill_(norm->weight, 0.7); /* a weight other than ones */
    gradcheck_module((module_ctx){.module = norm, .kind = K_RMSNORM},
                     randn64(&rng, NB_SHAPE(2, 3, 6)));
    gradcheck_module((module_ctx){.module = blk_swiglu_new(model, "ff", 4, 6), .kind = K_SWIGLU},
                     randn64(&rng, NB_SHAPE(2, 3, 4)));
    nb_tensor *pad = nb_zeros(NB_BOOL, NB_SHAPE(2, 4));
    nb_set(pad, NB_IDX(1, 3), 1);
    blk_attn_opts opts = {.causal = true, .key_padding_mask = pad, .offset = 2};
    gradcheck_module((module_ctx){.module = blk_attention_new(model, "mqa", 8, 4, 1, 100),
                                  .kind = K_ATTENTION,
                                  .opts = opts},
                     randn64(&rng, NB_SHAPE(2, 4, 8)));
    gradcheck_module((module_ctx){.module = blk_attention_new(model, "gqa", 8, 4, 2, 100),
                                  .kind = K_ATTENTION,
                                  .opts = opts},
                     randn64(&rng, NB_SHAPE(2, 4, 8)));
    blk_llama_config cfg = {
        .dim = 8, .n_heads = 2, .n_kv_heads = 1, .hidden = 6, .norm_eps = 1e-5, .rope_base = 10000};
    gradcheck_module((module_ctx){.module = blk_llama_block_new(model, "block", &cfg),
                                  .kind = K_BLOCK,
                                  .opts = opts},
                     randn64(&rng, NB_SHAPE(2, 4, 8)));
    blk_llama_lm *lm = blk_llama_lm_new(model, "lm", 5, 2, &cfg);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, 3), (int64_t[]){4, 0, 4});
    gradcheck_module(
        (module_ctx){.module = lm, .kind = K_LM, .opts = {.causal = true}, .tokens = tokens},
        randn64(&rng, NB_SHAPE(1, 3, 5)));
    nb_module_free(model);
}

/* ---- the module tree: names, checkpoints ------------------------------------------------- */
static void test_lm_names_and_checkpoint(void) {
    blk_llama_config cfg = {.dim = 8,
                            .n_heads = 4,
                            .n_kv_heads = 2,
                            .hidden = 12,
                            .norm_eps = 1e-5,
                            .rope_base = 10000};
    nb_module *a = nb_model_new(NB_F32, 1), *b = nb_model_new(NB_F32, 2);
    blk_llama_lm *lm_a = blk_llama_lm_new(a, "lm", 7, 2, &cfg);
    blk_llama_lm *lm_b = blk_llama_lm_new(b, "lm", 7, 2, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm_a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm_b);
    /* tok_embeddings + 2 x (2 norms + 4 attention + 3 feed-forward) + norm + output */
    CU_ASSERT_EQUAL(nb_module_param_count(a), 1 + 2 * 9 + 2);
    /* 7*8 + 2 * (8 + 8*8 + 2 * 4*8 + 8*8 + 8 + 3 * 8*12) + 8 + 8*7 */
    CU_ASSERT_EQUAL(nb_module_param_numel(a), 56 + 2 * (8 + 64 + 64 + 64 + 8 + 288) + 8 + 56);
    nb_tensor *wk = nb_module_param(a, "lm.layers.1.attention.wk.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(wk);
    NBT_ASSERT_SHAPE(wk, 4, 8);
    CU_ASSERT_PTR_NOT_NULL(nb_module_param(a, "lm.layers.0.feed_forward.w3.weight"));
    CU_ASSERT_PTR_NOT_NULL(nb_module_param(a, "lm.layers.0.attention_norm.weight"));
    CU_ASSERT_PTR_NOT_NULL(nb_module_param(a, "lm.norm.weight"));
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, 4), (int64_t[]){1, 2, 3, 6});
    blk_attn_opts causal = {.causal = true};
    nb_tensor *la = blk_llama_lm_forward(lm_a, tokens, &causal);
    CU_ASSERT_FALSE(nbtest_close(la, blk_llama_lm_forward(lm_b, tokens, &causal), 1e-3, 0));
    char path[] = "/tmp/nabla_blocks_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_TRUE_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_TRUE(nb_module_save(a, path));
    CU_ASSERT_TRUE(nb_module_load(b, path));
    NBT_ASSERT_CLOSE(blk_llama_lm_forward(lm_b, tokens, &causal), la, 0, 0);
    unlink(path);
    nb_module_free(a);
    nb_module_free(b);
}

/* ---- errors name the op or module path and the shapes ------------------------------------ */
static void test_errors(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3, 5));
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_rope(x, 1, 0, 10000));
    NBT_ASSERT_ERROR("rope: head dim (last of [2, 3, 5]) must be even");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_f_rms_norm(x, nb_ones(NB_F32, NB_SHAPE(4)), 1e-5));
    NBT_ASSERT_ERROR("weight must be float32 [5] for x [2, 3, 5], got float32 [4]");
    nb_tensor *w13 = nb_zeros(NB_F32, NB_SHAPE(4, 5)), *w2 = nb_zeros(NB_F32, NB_SHAPE(5, 4));
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_f_swiglu(x, w13, nb_zeros(NB_F32, NB_SHAPE(4, 4)), w2));
    NBT_ASSERT_ERROR("swiglu: expects x [..., D], w1 and w3 [hidden, D], w2 [D, hidden], got x "
                     "[2, 3, 5], w1 [4, 5], w3 [4, 4], w2 [5, 4]");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_f_swiglu(x, w13, nb_zeros(NB_F64, NB_SHAPE(4, 5)), w2));
    NBT_ASSERT_ERROR("swiglu: w1 float32 and w3 float64 differ in dtype");
    nb_tensor *q = nb_zeros(NB_F32, NB_SHAPE(1, 4, 2, 2)),
              *k = nb_zeros(NB_F32, NB_SHAPE(1, 3, 2, 2));
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_gqa_attention(q, k, k, NULL, false, 1, NULL));
    NBT_ASSERT_ERROR("gqa_attention");
    NBT_ASSERT_ERROR("q float32 [1, 4, 2, 2], k float32 [1, 3, 2, 2]");

    nb_module *model = nb_model_new(NB_F32, 1);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_attention_new(model, "attn", 8, 4, 3, 10000));
    NBT_ASSERT_ERROR("n_kv_heads 3");
    blk_llama_config cfg = {
        .dim = 8, .n_heads = 2, .n_kv_heads = 2, .hidden = 4, .norm_eps = 1e-5, .rope_base = 10000};
    blk_llama_lm *lm = blk_llama_lm_new(model, "lm", 5, 1, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    /* a failing piece deep inside names the module path it failed in */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_block_forward(lm->layers[0], x, NULL));
    NBT_ASSERT_ERROR("'lm.layers.0.attention_norm'");
    NBT_ASSERT_ERROR("[2, 3, 5]");
    nb_tensor *bad_pad = nb_zeros(NB_BOOL, NB_SHAPE(2, 9));
    nb_tensor *tokens = nb_zeros(NB_I64, NB_SHAPE(2, 3));
    nb_clear_error();
    CU_ASSERT_PTR_NULL(
        blk_llama_lm_forward(lm, tokens, &(blk_attn_opts){.key_padding_mask = bad_pad}));
    NBT_ASSERT_ERROR("'lm.layers.0.attention': key_padding_mask must be bool [2, 3]");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_lm_forward(lm, tokens, &(blk_attn_opts){.offset = -2}));
    NBT_ASSERT_ERROR("'lm.layers.0.attention': offset must be >= 0, got -2");
    nb_module_free(model);
}

/* ---- cached inference: the same forward with a KV cache --------------------------------- */
/* The Llama LM of the cache tests: 4 query heads over 2 kv heads (grouped-query) of 4. */
static blk_llama_lm *cache_lm(nb_module **model, nb_dtype dt, uint64_t seed, int layers) {
    *model = nb_model_new(dt, seed);
    blk_llama_config cfg = {
        .dim = 16, .n_heads = 4, .n_kv_heads = 2, .hidden = 24, .norm_eps = 1e-5, .rope_base = 100};
    return blk_llama_lm_new(*model, "lm", 11, layers, &cfg);
}

/* Feeds tokens [B, T] to a cache in the chunks listed (summing to T), committing each, and
 * checks each chunk's logits against the full causal forward (no cache) at the same
 * positions. The model stays in training mode with autograd on: the cached path turns it off
 * for itself. */
static void check_llama_chunks(nb_dtype dt, double tol, const int64_t *chunks, int nchunks,
                               int64_t B) {
    nb_module *model;
    blk_llama_lm *lm = cache_lm(&model, dt, 3, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    int64_t T = 0;
    for (int i = 0; i < nchunks; i++) T += chunks[i];
    nb_rng rng;
    nb_rng_seed(&rng, 9);
    nb_tensor *tokens = nb_randint(&rng, 0, 11, NB_SHAPE(B, T));
    nb_tensor *full = blk_llama_lm_forward(lm, tokens, &(blk_attn_opts){.causal = true});
    CU_ASSERT_TRUE(full && full->requires_grad); /* the training forward records */
    nb_kv_cache *c = blk_llama_lm_cache_new(lm, B, T);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const blk_attn_opts cached = {.causal = true, .cache = c};
    const nb_causal_lm clm = blk_llama_lm_causal(lm, T);
    nbtest_check_cached_chunks(&clm, c, tokens, full, chunks, nchunks, tol);
    /* Truncated back to 3 positions, the rest fed again gives the same logits. */
    CU_ASSERT_TRUE(nb_kv_cache_truncate(c, 3));
    NBT_ASSERT_CLOSE(blk_llama_lm_forward(lm, nb_narrow(tokens, 1, 3, T - 3), &cached),
                     nb_narrow(full, 1, 3, T - 3), tol, tol);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

static void test_llama_cached_token_by_token(void) {
    enum { T = 10 };
    int64_t ones[T];
    for (int i = 0; i < T; i++) ones[i] = 1;
    check_llama_chunks(NB_F64, 1e-12, ones, T, 2);
    check_llama_chunks(NB_F32, 1e-5, ones, T, 2);
    check_llama_chunks(NB_F32, 1e-5, ones, T, 1); /* one row: the matrix-vector products */
    const int64_t mixed[] = {5, 1, 1, 3, 1, 4, 1};
    check_llama_chunks(NB_F32, 1e-5, mixed, 7, 2);
}

/* The prompt in chunks of every size from 1 to T: every layer of a chunk's forward must read
 * the same RoPE offset, the length the last commit left. */
static void test_llama_cached_every_chunk_size(void) {
    enum { T = 12 };
    for (int pass = 0; pass < 2; pass++)
        for (int64_t size = 1; size <= T; size++) {
            int64_t chunks[T];
            int n = 0;
            for (int64_t at = 0; at < T; at += size) chunks[n++] = at + size <= T ? size : T - at;
            if (pass == 0)
                check_llama_chunks(NB_F64, 1e-12, chunks, n, 1);
            else
                check_llama_chunks(NB_F32, 1e-5, chunks, n, 2);
        }
}

/* The attention module and a block alone, each with a one-layer cache, token by token. */
static void test_llama_attention_and_block_cached(void) {
    nb_module *model = nb_model_new(NB_F64, 4);
    blk_attention *attn = blk_attention_new(model, "attn", 12, 6, 3, 100);
    blk_llama_config cfg = {
        .dim = 12, .n_heads = 6, .n_kv_heads = 2, .hidden = 16, .norm_eps = 1e-5, .rope_base = 50};
    blk_llama_block *block = blk_llama_block_new(model, "block", &cfg);
    nb_rng rng;
    nb_rng_seed(&rng, 2);
    nb_tensor *x = randn64(&rng, NB_SHAPE(2, 6, 12));
    nb_tensor *want_a = blk_attention_forward(attn, x, &(blk_attn_opts){.causal = true});
    nb_tensor *want_b = blk_llama_block_forward(block, x, &(blk_attn_opts){.causal = true});
    nb_kv_cache *ca = nb_kv_cache_new(1, 2, 6, 3, 2, NB_F64),
                *cb = nb_kv_cache_new(1, 2, 6, 2, 2, NB_F64);
    for (int64_t t = 0; t < 6; t++) {
        nb_tensor *xt = nb_narrow(x, 1, t, 1);
        NBT_ASSERT_CLOSE(blk_attention_forward(attn, xt, &(blk_attn_opts){.cache = ca}),
                         nb_narrow(want_a, 1, t, 1), 1e-12, 1e-12);
        NBT_ASSERT_CLOSE(blk_llama_block_forward(block, xt, &(blk_attn_opts){.cache = cb}),
                         nb_narrow(want_b, 1, t, 1), 1e-12, 1e-12);
        CU_ASSERT_TRUE(nb_kv_cache_commit(ca, 1) && nb_kv_cache_commit(cb, 1));
    }
    nb_kv_cache_free(ca);
    nb_kv_cache_free(cb);
    nb_module_free(model);
}

/* A model wide enough that one-token products and the heads are split between threads
 * (hidden 344 x 128 weights, 250 cached keys): 1 and 2 threads give the same bits, both
 * equal to the full forward. */
static void test_llama_cached_threads(void) {
    enum { T = 258, PROMPT = 250 };
    nb_module *model = nb_model_new(NB_F32, 11);
    blk_llama_config cfg = {.dim = 128,
                            .n_heads = 4,
                            .n_kv_heads = 2,
                            .hidden = 344,
                            .norm_eps = 1e-5,
                            .rope_base = 10000};
    blk_llama_lm *lm = blk_llama_lm_new(model, "", 11, 1, &cfg);
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_tensor *tokens = nb_randint(&rng, 0, 11, NB_SHAPE(1, T));
    nb_tensor *full = blk_llama_lm_forward(lm, tokens, &(blk_attn_opts){.causal = true});
    nb_tensor *got[2][T - PROMPT + 1];
    const int before = nb_get_num_threads();
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        nb_kv_cache *c = blk_llama_lm_cache_new(lm, 1, T);
        const blk_attn_opts o = {.causal = true, .cache = c};
        got[threads - 1][0] = blk_llama_lm_forward(lm, nb_narrow(tokens, 1, 0, PROMPT), &o);
        NBT_ASSERT_CLOSE(got[threads - 1][0], nb_narrow(full, 1, 0, PROMPT), 1e-5, 1e-5);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, PROMPT));
        for (int64_t t = PROMPT; t < T; t++) {
            nb_tensor *l = blk_llama_lm_forward(lm, nb_narrow(tokens, 1, t, 1), &o);
            got[threads - 1][t - PROMPT + 1] = l;
            NBT_ASSERT_CLOSE(l, nb_narrow(full, 1, t, 1), 1e-5, 1e-5);
            CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
        }
        nb_kv_cache_free(c);
    }
    nb_set_num_threads(before);
    for (int64_t t = 0; t <= T - PROMPT; t++) NBT_ASSERT_CLOSE(got[0][t], got[1][t], 0, 0);
    nb_module_free(model);
}

static void test_llama_generate_greedy_is_argmax(void) {
    for (int d = 0; d < 2; d++) {
        nb_module *model;
        blk_llama_lm *lm = cache_lm(&model, d ? NB_F64 : NB_F32, 6, 2);
        const int64_t prompt[] = {1, 5, 2, 7};
        int64_t want[30], got[30];
        nb_module_train(model, true); /* generate runs in eval mode and restores this */
        const nb_causal_lm clm = blk_llama_lm_causal(lm, 12);
        nbtest_greedy_reference(&clm, 12, prompt, 4, 30, want); /* 34 > 12: slides */
        CU_ASSERT_EQUAL(clm.vocab, 11);
        CU_ASSERT_EQUAL(clm.max_len, 12);
        nb_generate_opts o = nb_generate_defaults(30);
        CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 4, &o, got, NULL), 30);
        CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
        CU_ASSERT_TRUE(model->training); /* restored */
        CU_ASSERT_TRUE(nb_is_grad_enabled());
        /* the prompt in chunks of 1 to 3, on one thread and two, with a cache of the caller's
         * longer than the context: the context is the smaller of the two */
        nb_kv_cache *c = blk_llama_lm_cache_new(lm, 1, 20);
        const int before = nb_get_num_threads();
        for (int chunk = 1; chunk <= 3; chunk++) {
            nb_set_num_threads(chunk == 2 ? 2 : 1);
            o.prompt_chunk = chunk;
            memset(got, 0xff, sizeof got);
            CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 4, &o, got, c), 30);
            CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
        }
        nb_set_num_threads(before);
        nb_kv_cache_free(c);
        nb_module_free(model);
    }
}

/* A cache that does not fit is refused with a message naming the model or its attention and
 * the cache, before any position is written. */
static void test_llama_cache_errors(void) {
    nb_module *model;
    blk_llama_lm *lm = cache_lm(&model, NB_F32, 1, 2);
    const int64_t toks[4] = {1, 2, 3, 4};
    nb_tensor *one = nb_from_array(NB_I64, NB_SHAPE(1, 1), toks);
    nb_kv_cache *c64 = nb_kv_cache_new(2, 1, 8, 2, 4, NB_F64);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_lm_forward(lm, one, &(blk_attn_opts){.cache = c64}));
    NBT_ASSERT_ERROR("LlamaLM: 'lm': a model of 2 blocks in float32, given tokens of batch 1, "
                     "cannot use a cache of 2 layers in float64 for batch 1");
    nb_kv_cache *c3 = nb_kv_cache_new(3, 1, 8, 2, 4, NB_F32);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_lm_forward(lm, one, &(blk_attn_opts){.cache = c3}));
    NBT_ASSERT_ERROR("cannot use a cache of 3 layers in float32");
    nb_kv_cache *kv4 = nb_kv_cache_new(2, 1, 8, 4, 4, NB_F32); /* 4 kv heads, the model 2 */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_lm_forward(lm, one, &(blk_attn_opts){.cache = kv4}));
    NBT_ASSERT_ERROR("Attention: 'lm.layers.0.attention': kv_cache_attend: layer 0 (4 key/value "
                     "heads, keys of 4");
    NBT_ASSERT_ERROR("k float32 [1, 1, 8]");
    CU_ASSERT_EQUAL(nb_kv_cache_len(kv4), 0);
    CU_ASSERT_FALSE(nb_kv_cache_commit(kv4, 1)); /* nothing was written */
    nb_kv_cache *c = blk_llama_lm_cache_new(lm, 1, 4);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_lm_forward(lm, nb_from_array(NB_I64, NB_SHAPE(2, 1), toks),
                                            &(blk_attn_opts){.cache = c}));
    NBT_ASSERT_ERROR("given tokens of batch 2, cannot use a cache of 2 layers in float32 for "
                     "batch 1");
    CU_ASSERT_PTR_NOT_NULL(blk_llama_lm_forward(lm, nb_from_array(NB_I64, NB_SHAPE(1, 3), toks),
                                                &(blk_attn_opts){.cache = c}));
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 3));
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_lm_forward(lm, nb_from_array(NB_I64, NB_SHAPE(1, 2), toks),
                                            &(blk_attn_opts){.cache = c}));
    NBT_ASSERT_ERROR("'lm': 2 new tokens after 3 cached positions exceed the cache's 4");
    nb_tensor *pad = nb_zeros(NB_BOOL, NB_SHAPE(1, 1));
    nb_tensor *w[2];
    const blk_attn_opts refused[] = {{.cache = c, .key_padding_mask = pad},
                                     {.cache = c, .attn_weights = w},
                                     {.cache = c, .offset = 3}};
    for (int i = 0; i < 3; i++) {
        nb_clear_error();
        CU_ASSERT_PTR_NULL(blk_llama_lm_forward(lm, one, &refused[i]));
        NBT_ASSERT_ERROR("'lm.layers.0.attention': a cache takes no key_padding_mask, "
                         "attn_mask, attn_weights or offset");
    }
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 3);
    /* nb_generate with a cache of another dtype or of too few layers */
    const nb_causal_lm clm = blk_llama_lm_causal(lm, 8);
    nb_generate_opts greedy = nb_generate_defaults(2);
    int64_t out[2];
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_generate(&clm, toks, 3, &greedy, out, c64), -1);
    NBT_ASSERT_ERROR("cannot use a cache of 2 layers in float64");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_generate(&clm, toks, 3, &greedy, out, c3), -1);
    NBT_ASSERT_ERROR("cannot use a cache of 3 layers");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_lm_cache_new(lm, 0, 4));
    NBT_ASSERT_ERROR("kv_cache");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(blk_llama_lm_cache_new(NULL, 1, 4));
    NBT_ASSERT_ERROR("LlamaLM: NULL argument");
    nb_kv_cache_free(c);
    nb_kv_cache_free(kv4);
    nb_kv_cache_free(c3);
    nb_kv_cache_free(c64);
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"rms_norm values by hand", test_rms_norm_values},
        {"rope values by hand", test_rope_values},
        {"rope at an offset and in both layouts", test_rope_offset_and_layouts},
        {"swiglu value by hand", test_swiglu_values},
        {"gqa equals repeated kv heads and the fused attention",
         test_gqa_matches_repeated_heads_and_builtin},
        {"attention module: fused and op-by-op paths agree", test_attention_paths_agree},
        {"attention with RoPE tables given through opts", test_attention_given_rope_tables},
        {"gradcheck: rms_norm, rope, swiglu, gqa (MQA and 2 of 4)", test_gradcheck_functions},
        {"gradcheck: every module with its parameters", test_gradcheck_modules},
        {"LM parameter names, counts and a checkpoint round trip", test_lm_names_and_checkpoint},
        {"errors name the op, module path and shapes", test_errors},
        {"LM cached = full forward, token by token (f64, f32)", test_llama_cached_token_by_token},
        {"LM cached, the prompt in chunks of every size", test_llama_cached_every_chunk_size},
        {"attention and block alone with a cache", test_llama_attention_and_block_cached},
        {"LM cached on 1 and 2 threads: the same bits", test_llama_cached_threads},
        {"nb_generate greedy = argmax of the full recompute, sliding",
         test_llama_generate_greedy_is_argmax},
        {"a cache that does not fit is refused", test_llama_cache_errors},
    };
    return nbtest_run("blocks", cases, sizeof cases / sizeof cases[0]);
}
