/* TransformerLM through the cache and nb_generate: cached forwards equal the full recompute
 * at every position (token by token and in chunks of every size), no malloc per token,
 * errors, and generate()'s greedy / top-k / top-p / temperature choices. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

/* A small LM with its parameters drawn from seed; dropout 0. */
static nb_transformer_lm *small_lm(nb_module **model, nb_dtype dt, int64_t vocab, int64_t max_len,
                                   uint64_t seed) {
    *model = nb_model_new(dt, seed);
    return nb_transformer_lm_new(*model, "", vocab, max_len, 16, 4, 2, 0.0);
}

/* Feeds tokens [B, T] to the cache in the chunks listed (summing to T) and checks each chunk's
 * logits against the full causal forward at the same positions. */
static void check_lm_chunks(nb_dtype dt, double tol, const int64_t *chunks, int nchunks,
                            int64_t B) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, dt, 11, 24, 3);
    nb_module_train(model, false);
    int64_t T = 0;
    for (int i = 0; i < nchunks; i++) T += chunks[i];
    nb_rng rng;
    nb_rng_seed(&rng, 9);
    nb_tensor *tokens = nb_randint(&rng, 0, 11, NB_SHAPE(B, T));
    nb_tensor *full = nb_transformer_lm_forward(lm, tokens, true, NULL, NULL);
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, B);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const nb_causal_lm clm = nb_transformer_lm_causal(lm);
    nbtest_check_cached_chunks(&clm, c, tokens, full, chunks, nchunks, tol);
    /* After a reset the cache starts over and gives the same logits again. */
    nb_kv_cache_reset(c);
    NBT_ASSERT_CLOSE(nb_transformer_lm_forward_cached(lm, tokens, c), full, tol, tol);
    /* Truncated back to 3 positions, the rest fed again gives the same logits. */
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, T));
    CU_ASSERT_TRUE(nb_kv_cache_truncate(c, 3));
    NBT_ASSERT_CLOSE(nb_transformer_lm_forward_cached(lm, nb_narrow(tokens, 1, 3, T - 3), c),
                     nb_narrow(full, 1, 3, T - 3), tol, tol);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

static void test_lm_cached_equals_full_f32(void) {
    /* a prompt, single tokens, a chunk of several, single tokens up to the context */
    const int64_t chunks[] = {5, 1, 1, 3, 1, 1, 1, 4, 1, 1, 1, 1, 1, 1, 1};
    check_lm_chunks(NB_F32, 1e-5, chunks, 15, 2);
    check_lm_chunks(NB_F32, 1e-5, chunks, 15, 1); /* one row: the matrix-vector path */
}

/* The prompt in chunks of every size from 1 to T: with the length advancing only at each
 * commit, every layer of a chunk's forward reads the same positions. */
static void test_lm_cached_every_chunk_size(void) {
    enum { T = 12 };
    for (int64_t size = 1; size <= T; size++) {
        int64_t chunks[T];
        int n = 0;
        for (int64_t at = 0; at < T; at += size) chunks[n++] = at + size <= T ? size : T - at;
        check_lm_chunks(NB_F64, 1e-12, chunks, n, 1);
    }
}

static void test_lm_cached_equals_full_f64(void) {
    const int64_t chunks[] = {1, 1, 7, 1, 2};
    check_lm_chunks(NB_F64, 1e-12, chunks, 5, 2);
    check_lm_chunks(NB_F64, 1e-12, chunks, 5, 1);
}

/* A model wide enough that one-token products are split between threads (fc1 is 512 x 128),
 * with a context long enough that heads are too (250 cached keys): cached logits match the
 * full forward, and 1 and 2 threads give the same bits. */
static void test_lm_cached_threads(void) {
    enum { T = 258, PROMPT = 250 };
    nb_module *model = nb_model_new(NB_F32, 11);
    nb_transformer_lm *lm = nb_transformer_lm_new(model, "", 11, T, 128, 4, 1, 0.0);
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_tensor *tokens = nb_randint(&rng, 0, 11, NB_SHAPE(1, T));
    nb_tensor *full = nb_transformer_lm_forward(lm, tokens, true, NULL, NULL);
    nb_tensor *got[2][T - PROMPT];
    const int before = nb_get_num_threads();
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1);
        NBT_ASSERT_CLOSE(nb_transformer_lm_forward_cached(lm, nb_narrow(tokens, 1, 0, PROMPT), c),
                         nb_narrow(full, 1, 0, PROMPT), 1e-5, 1e-5);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, PROMPT));
        for (int64_t t = PROMPT; t < T; t++) {
            got[threads - 1][t - PROMPT] =
                nb_transformer_lm_forward_cached(lm, nb_narrow(tokens, 1, t, 1), c);
            NBT_ASSERT_CLOSE(got[threads - 1][t - PROMPT], nb_narrow(full, 1, t, 1), 1e-5, 1e-5);
            CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
        }
        nb_kv_cache_free(c);
    }
    for (int64_t t = 0; t < T - PROMPT; t++) NBT_ASSERT_CLOSE(got[0][t], got[1][t], 0, 0);
    nb_set_num_threads(before);
    nb_module_free(model);
}

/* Grouped-query attention through a cache of fewer key/value heads (4 query heads reading 2
 * key/value heads, query head h reading h / 2): token by token it equals causal attention
 * with each key/value head repeated for its query heads. */
static void test_kv_cache_attend_grouped(void) {
    enum { B = 2, T = 6, H = 4, KVH = 2, HD = 3 };
    nb_rng rng;
    nb_rng_seed(&rng, 8);
    nb_tensor *q = nb_randn(&rng, NB_F64, NB_SHAPE(B, T, H * HD));
    nb_tensor *k = nb_randn(&rng, NB_F64, NB_SHAPE(B, T, KVH * HD));
    nb_tensor *v = nb_randn(&rng, NB_F64, NB_SHAPE(B, T, KVH * HD));
    nb_tensor *kr[H], *vr[H];
    for (int h = 0; h < H; h++) {
        kr[h] = nb_narrow(k, 2, (h / (H / KVH)) * HD, HD);
        vr[h] = nb_narrow(v, 2, (h / (H / KVH)) * HD, HD);
    }
    nb_tensor *want = nb_f_attention(q, nb_concat(H, kr, 2), nb_concat(H, vr, 2), H, NULL, true,
                                     1.0 / sqrt((double)HD));
    nb_kv_cache *c = nb_kv_cache_new(1, B, T, KVH, HD, NB_F64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    NBT_ASSERT_CLOSE(nb_kv_cache_attend(c, 0, nb_narrow(q, 1, 0, 2), nb_narrow(k, 1, 0, 2),
                                        nb_narrow(v, 1, 0, 2), H),
                     nb_narrow(want, 1, 0, 2), 1e-12, 1e-12);
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 2));
    for (int64_t t = 2; t < T; t++) {
        NBT_ASSERT_CLOSE(nb_kv_cache_attend(c, 0, nb_narrow(q, 1, t, 1), nb_narrow(k, 1, t, 1),
                                            nb_narrow(v, 1, t, 1), H),
                         nb_narrow(want, 1, t, 1), 1e-12, 1e-12);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
    }
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), T);
    nb_kv_cache_reset(c);
    CU_ASSERT_PTR_NULL(nb_kv_cache_attend(c, 0, nb_narrow(q, 1, 0, 1), nb_narrow(k, 1, 0, 1),
                                          nb_narrow(v, 1, 0, 1), 3));
    NBT_ASSERT_ERROR("heads a multiple of 2");
    CU_ASSERT_PTR_NULL(nb_kv_cache_attend(c, 0, nb_narrow(q, 1, 0, 1), q, q, H));
    NBT_ASSERT_ERROR("kv_cache_attend");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 0);
    CU_ASSERT_PTR_NULL(nb_kv_cache_new(1, B, T, 0, HD, NB_F64));
    nb_kv_cache_free(c);
}

/* The attention layer alone and a block alone, with their one-slot caches, token by token. */
static void test_mha_and_block_cached(void) {
    nb_module *model = nb_model_new(NB_F64, 5);
    nb_mha *mha = nb_mha_new(model, "attn", 12, 8, 2, true, 0.0);
    nb_transformer_block *block = nb_transformer_block_new(model, "block", 12, 3, 0.0);
    nb_rng rng;
    nb_rng_seed(&rng, 2);
    nb_tensor *x = nb_randn(&rng, NB_F64, NB_SHAPE(3, 7, 12));
    nb_tensor *want_mha = nb_mha_forward(mha, x, &(nb_mha_opts){.causal = true});
    nb_tensor *want_block = nb_transformer_block_forward(block, x, &(nb_mha_opts){.causal = true});
    nb_kv_cache *cm = nb_kv_cache_for_mha(mha, 3, 7), *cb = nb_kv_cache_for_mha(block->attn, 3, 10);
    const nb_mha_opts om = {.cache = cm}, ob = {.cache = cb};
    for (int64_t t = 0; t < 7; t++) {
        nb_tensor *xt = nb_narrow(x, 1, t, 1);
        NBT_ASSERT_CLOSE(nb_mha_forward(mha, xt, &om), nb_narrow(want_mha, 1, t, 1), 1e-12, 1e-12);
        NBT_ASSERT_CLOSE(nb_transformer_block_forward(block, xt, &ob),
                         nb_narrow(want_block, 1, t, 1), 1e-12, 1e-12);
        CU_ASSERT_TRUE(nb_kv_cache_commit(cm, 1) && nb_kv_cache_commit(cb, 1));
    }
    /* Full: one more token overflows the mha cache (max_len 7) and changes nothing. */
    CU_ASSERT_PTR_NULL(nb_mha_forward(mha, nb_narrow(x, 1, 0, 1), &om));
    NBT_ASSERT_ERROR("overflow");
    CU_ASSERT_EQUAL(nb_kv_cache_len(cm), 7);
    CU_ASSERT_FALSE(nb_kv_cache_commit(cm, 1));
    NBT_ASSERT_ERROR("do not fit");
    /* A block's cache of another width is refused, naming the module. */
    CU_ASSERT_PTR_NULL(nb_mha_forward(mha, nb_narrow(x, 1, 0, 1), &ob));
    NBT_ASSERT_ERROR("MultiHeadAttention 'attn': 2 heads of 4 do not match cache layer 0 (3 "
                     "key/value heads, keys of 4, values of 4)");
    /* Its own cache, with inputs of another batch or dtype. */
    nb_kv_cache_reset(cm);
    CU_ASSERT_PTR_NULL(nb_mha_forward(mha, nb_zeros(NB_F64, NB_SHAPE(2, 1, 12)), &om));
    NBT_ASSERT_ERROR("[2, 1, 8]");
    CU_ASSERT_PTR_NULL(nb_mha_forward(mha, nb_zeros(NB_F32, NB_SHAPE(3, 1, 12)), &om));
    NBT_ASSERT_ERROR("float64");
    CU_ASSERT_EQUAL(nb_kv_cache_len(cm), 0);
    CU_ASSERT_PTR_NULL(
        nb_mha_forward(mha, nb_narrow(x, 1, 0, 1), &(nb_mha_opts){.cache = cb, .cache_layer = 1}));
    NBT_ASSERT_ERROR("layer 1 out of range");
    /* A cache serves self-attention only, without masks or returned weights. */
    nb_tensor *w;
    CU_ASSERT_PTR_NULL(nb_mha_forward_cross(mha, nb_narrow(x, 1, 0, 1), x, &om));
    NBT_ASSERT_ERROR("cross-attention");
    CU_ASSERT_PTR_NULL(nb_mha_forward(mha, nb_narrow(x, 1, 0, 1),
                                      &(nb_mha_opts){.cache = cm, .attn_weights = &w}));
    NBT_ASSERT_ERROR("attn_weights");
    nb_kv_cache_free(cm);
    nb_kv_cache_free(cb);
    nb_module_free(model);
}

static void test_lm_cached_errors(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 8, 1);
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1);
    int64_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 9), toks), c));
    NBT_ASSERT_ERROR("T <= 8");
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(2, 1), toks), c));
    NBT_ASSERT_ERROR("given tokens of batch 2, cannot use a cache of 2 layers in float32 for "
                     "batch 1");
    CU_ASSERT_PTR_NOT_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 6), toks), c));
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 6));
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 3), toks), c));
    NBT_ASSERT_ERROR("3 new tokens after 6 cached positions exceed the 8");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 6);
    /* Committing more than the forward wrote is refused. */
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, 1));
    NBT_ASSERT_ERROR("layer 0's heads hold positions up to 6, not 7");
    /* An out-of-vocabulary token fails in the embedding and leaves the cache as it was. */
    int64_t bad = 11;
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 1), &bad), c));
    NBT_ASSERT_ERROR("index 11 at position [0, 0] is out of range for V = 11");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 6);
    /* A cache made for a model with another number of blocks. */
    nb_module *other = nb_model_new(NB_F32, 1);
    nb_transformer_lm *lm3 = nb_transformer_lm_new(other, "", 11, 8, 16, 4, 3, 0.0);
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm3, nb_from_array(NB_I64, NB_SHAPE(1, 1), toks), c));
    NBT_ASSERT_ERROR("a model of 3 blocks in float32");
    /* A cache of another dtype, the same shapes otherwise: refused before anything is read
     * (it used to read float32 data as float64). */
    nb_kv_cache *c64 = nb_kv_cache_new(2, 1, 8, 4, 4, NB_F64);
    for (int64_t n = 1; n <= 3; n += 2) {
        CU_ASSERT_PTR_NULL(
            nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, n), toks), c64));
        NBT_ASSERT_ERROR("cannot use a cache of 2 layers in float64");
    }
    CU_ASSERT_EQUAL(nb_kv_cache_len(c64), 0);
    const nb_causal_lm clm = nb_transformer_lm_causal(lm);
    nb_generate_opts greedy = nb_generate_defaults(2);
    int64_t out[2];
    CU_ASSERT_EQUAL(nb_generate(&clm, toks, 3, &greedy, out, c64), -1);
    NBT_ASSERT_ERROR("float64");
    nb_kv_cache_free(c64);
    /* nb_generate decodes one sequence: a cache for batch 2 is named as the problem. */
    nb_kv_cache *c2 = nb_kv_cache_for_lm(lm, 2);
    CU_ASSERT_EQUAL(nb_generate(&clm, toks, 3, &greedy, out, c2), -1);
    NBT_ASSERT_ERROR("the cache given is for batch 2");
    nb_kv_cache_free(c2);
    CU_ASSERT_PTR_NULL(nb_kv_cache_for_lm(NULL, 1));
    CU_ASSERT_PTR_NULL(nb_kv_cache_for_lm(lm, 0));
    NBT_ASSERT_ERROR("got 2, 0, 8 and float32");
    nb_kv_cache_free(c);
    nb_module_free(other);
    nb_module_free(model);
}

/* Once warm, a decoding step (inside its own scope) calls malloc zero times. */
static void test_no_malloc_per_token(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 64, 4);
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1);
    const nb_causal_lm causal = nb_transformer_lm_causal(lm);
    CU_ASSERT_EQUAL(nbtest_decode_mallocs(&causal, c, 3, 4, 36), 0);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

static void test_generate_greedy_is_argmax(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 12, 6);
    nb_module_train(model, false);
    const int64_t prompt[] = {1, 5, 2};
    int64_t want[30], got[30];
    const nb_causal_lm clm = nb_transformer_lm_causal(lm);
    nbtest_greedy_reference(&clm, 12, prompt, 3, 30, want); /* 30 > 12: slides twice */
    nb_module_train(model, true);
    nb_generate_opts o = nb_generate_defaults(30);
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 3, &o, got, NULL), 30);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    CU_ASSERT_TRUE(model->training); /* restored */
    CU_ASSERT_TRUE(nb_is_grad_enabled());
    /* top-k = 1 and a tiny top-p are greedy whatever the temperature. */
    o.temperature = 1.5;
    o.top_k = 1;
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 3, &o, got, NULL), 30);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    o.top_k = 0;
    o.top_p = 1e-9;
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1); /* a cache of the caller's, reused */
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 3, &o, got, c), 30);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    /* the prompt fed in chunks of 1 and 2 tokens, and on one thread and two */
    o = nb_generate_defaults(30);
    const int before = nb_get_num_threads();
    for (int chunk = 1; chunk <= 2; chunk++) {
        nb_set_num_threads(chunk);
        o.prompt_chunk = chunk;
        memset(got, 0xff, sizeof got);
        CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 3, &o, got, c), 30);
        CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    }
    nb_set_num_threads(before);
    /* stop_token: generation ends right after the first occurrence, which is included. */
    int64_t first = 0;
    while (first < 29 && want[first] == want[0]) first++; /* a token that is not the first one */
    o = nb_generate_defaults(30);
    o.stop_token = want[first];
    int64_t stop_at = 0;
    while (want[stop_at] != want[first]) stop_at++;
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 3, &o, got, c), stop_at + 1);
    CU_ASSERT_EQUAL(got[stop_at], want[first]);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

/* on_token may change the model between tokens: here the callback gives block 0's query
 * projection a weight with the same values, transposed in memory (a non-contiguous view), so
 * the tokens must stay those of the full recompute; a path that kept a view of the old
 * weight's layout would read the transposed storage as the weight. */
typedef struct {
    nb_linear *linear;
    nb_tensor *swapped;
} weight_swap;

static void swap_weight(void *ctx, int64_t token) {
    (void)token;
    weight_swap *w = ctx;
    nb_tensor *was = w->linear->weight;
    w->linear->weight = w->swapped;
    w->swapped = was;
}

static void test_generate_rechecks_after_on_token(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 12, 6);
    nb_module_train(model, false);
    const int64_t prompt[] = {1, 5, 2};
    int64_t want[8], got[8];
    const nb_causal_lm clm = nb_transformer_lm_causal(lm);
    nbtest_greedy_reference(&clm, 12, prompt, 3, 8, want);
    nb_linear *wq = lm->blocks[0]->attn->W_query;
    nb_tensor *original = wq->weight;
    nb_scope_begin();
    weight_swap w = {wq, nb_transpose(nb_contiguous(nb_transpose(wq->weight, 0, 1)), 0, 1)};
    CU_ASSERT_FALSE(nb_is_contiguous(w.swapped));
    nb_generate_opts o = nb_generate_defaults(8);
    o.on_token = swap_weight;
    o.ctx = &w;
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 3, &o, got, NULL), 8);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    if (wq->weight != original) swap_weight(&w, 0); /* the model's own weight back */
    CU_ASSERT_PTR_EQUAL(wq->weight, original);
    nb_scope_end();
    nb_module_free(model);
}

static void test_generate_seeded(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 16, 8);
    const int64_t prompt[] = {4};
    int64_t a[40], b[40], d[40];
    const nb_causal_lm clm = nb_transformer_lm_causal(lm);
    nb_generate_opts o = nb_generate_defaults(40);
    o.temperature = 1.0;
    o.seed = 77;
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 1, &o, a, NULL), 40);
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 1, &o, b, NULL), 40);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    o.seed = 78;
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 1, &o, d, NULL), 40);
    CU_ASSERT_NOT_EQUAL(memcmp(a, d, sizeof a), 0);
    for (int i = 0; i < 40; i++) CU_ASSERT_TRUE(a[i] >= 0 && a[i] < 11);
    /* errors */
    const int64_t bad[] = {11};
    CU_ASSERT_EQUAL(nb_generate(&clm, bad, 1, &o, a, NULL), -1);
    NBT_ASSERT_ERROR("outside [0, 11)");
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 0, &o, a, NULL), -1);
    NBT_ASSERT_ERROR("at least 1 token");
    nb_lm_config classes = {
        .vocab = 11, .max_len = 8, .dim = 8, .num_heads = 2, .layers = 1, .out_features = 3};
    nb_transformer_lm *counter = nb_transformer_lm_new_config(model, "counter", &classes, 0.0);
    /* A model whose logits are not over its tokens: generation reads only 3 of them. */
    const nb_causal_lm ccounter = nb_transformer_lm_causal(counter);
    CU_ASSERT_EQUAL(ccounter.vocab, 3);
    const int64_t three[] = {3};
    CU_ASSERT_EQUAL(nb_generate(&ccounter, three, 1, &o, a, NULL), -1);
    NBT_ASSERT_ERROR("outside [0, 3)");
    /* NaN options are refused before the model runs. */
    o.temperature = NAN;
    CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 1, &o, a, NULL), -1);
    NBT_ASSERT_ERROR("must not be NaN");
    nb_module_free(model);
}

/* Draws n tokens from fixed logits and returns the chi-square statistic against want. */
static double chi_square(const double *logits, int64_t V, const nb_generate_opts *o,
                         const double *want, int n) {
    nb_tensor *row = nb_from_array(NB_F64, NB_SHAPE(V), logits);
    nb_rng rng;
    nb_rng_seed(&rng, 12345);
    int64_t counts[8] = {0};
    for (int i = 0; i < n; i++) {
        nb_scope_begin();
        int64_t t = nb_sample_logits(&rng, row, o);
        nb_scope_end();
        CU_ASSERT_TRUE_FATAL(t >= 0 && t < V);
        counts[t]++;
    }
    double chi = 0;
    for (int64_t j = 0; j < V; j++) {
        if (want[j] == 0) {
            CU_ASSERT_EQUAL(counts[j], 0); /* filtered out: never drawn */
            continue;
        }
        double e = want[j] * n;
        chi += (counts[j] - e) * (counts[j] - e) / e;
    }
    return chi;
}

/* Probabilities 0.1, 0.2, 0.3, 0.4 as logits. With temperature 0.5 they become p^2 / sum p^2 =
 * 1, 4, 9, 16 over 30; top-k 2 keeps 0.3 and 0.4 (3/7, 4/7); top-p 0.5 keeps the fewest whose
 * sum reaches 0.5: 0.4 + 0.3 (again 3/7, 4/7). Chi-square bounds for 3 and 1 degrees of freedom
 * at p = 0.001 are 16.27 and 10.83; the draws are seeded, so the test is deterministic. */
static void test_sampling_distribution(void) {
    const double logits[] = {log(0.1), log(0.2), log(0.3), log(0.4)};
    nb_generate_opts o = nb_generate_defaults(1);
    const int n = 20000;
    o.temperature = 1.0;
    CU_ASSERT_TRUE(chi_square(logits, 4, &o, (const double[]){0.1, 0.2, 0.3, 0.4}, n) < 16.27);
    o.temperature = 0.5;
    CU_ASSERT_TRUE(chi_square(logits, 4, &o, (const double[]){1 / 30., 4 / 30., 9 / 30., 16 / 30.},
                              n) < 16.27);
    o.temperature = 1.0;
    o.top_k = 2;
    CU_ASSERT_TRUE(chi_square(logits, 4, &o, (const double[]){0, 0, 3 / 7., 4 / 7.}, n) < 10.83);
    o.top_k = 0;
    o.top_p = 0.5;
    CU_ASSERT_TRUE(chi_square(logits, 4, &o, (const double[]){0, 0, 3 / 7., 4 / 7.}, n) < 10.83);
    /* The test has teeth: plain temperature 1 is far from the temperature-0.5 distribution. */
    o.top_p = 0;
    CU_ASSERT_TRUE(
        chi_square(logits, 4, &o, (const double[]){1 / 30., 4 / 30., 9 / 30., 16 / 30.}, n) > 1000);
    /* Greedy: the first of equal maxima. */
    nb_generate_opts g = nb_generate_defaults(1);
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    CU_ASSERT_EQUAL(nb_sample_logits(
                        &rng, nb_from_array(NB_F64, NB_SHAPE(4), (const double[]){1, 3, 3, 2}), &g),
                    1);
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, nb_zeros(NB_F32, NB_SHAPE(2, 2)), &g), -1);
    NBT_ASSERT_ERROR("[2, 2]");
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, nb_full(NB_F32, NB_SHAPE(3), NAN), &g), -1);
    NBT_ASSERT_ERROR("NaN");
    /* Contiguous float32 logits take a scan without the copy to doubles: the same first of equal
     * maxima as a strided row (the copy's path), all -inf included, and the first NaN named. */
    nb_tensor *f32_row = nb_from_array(NB_F32, NB_SHAPE(4), (const float[]){1, 3, 3, 2});
    nb_tensor *strided = nb_select(
        nb_from_array(NB_F32, NB_SHAPE(4, 2), (const float[]){1, 9, 3, 9, 3, 9, 2, 9}), 1, 0);
    CU_ASSERT_FALSE(nb_is_contiguous(strided));
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, f32_row, &g), 1);
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, strided, &g), 1);
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, nb_full(NB_F32, NB_SHAPE(3), -INFINITY), &g), 0);
    CU_ASSERT_EQUAL(
        nb_sample_logits(&rng, nb_from_array(NB_F32, NB_SHAPE(4), (const float[]){1, 5, NAN, NAN}),
                         &g),
        -1);
    NBT_ASSERT_ERROR("logit 2 is NaN");
}

/* Sampling cannot overflow: the logits are scaled after their maximum is subtracted, so a tiny
 * temperature, huge logits or a +inf logit still give the most likely token (each case below
 * put all the probability on one token by hand); what has no answer is refused. */
static void test_sampling_overflow(void) {
    nb_generate_opts o = nb_generate_defaults(1);
    nb_rng rng;
    nb_rng_seed(&rng, 3);
    struct {
        double logits[4];
        int64_t V;
        double temperature;
        int64_t want;
    } cases[] = {
        {{1, 3, 2}, 3, 1e-320, 1},             /* (3 - 2) / 1e-320 overflows without the shift */
        {{1e308, -1e308, 1.7e308}, 3, 0.5, 2}, /* differences of 2.7e308 overflow to -inf */
        {{0, INFINITY, 0, 0}, 4, 1.0, 1},      /* inf - inf would be NaN */
        {{-INFINITY, 2, -INFINITY}, 3, INFINITY, 1}, /* -inf / inf would be NaN */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        o.temperature = cases[i].temperature;
        for (int top_k = 0; top_k <= 2; top_k += 2) { /* the full and the sorted path */
            o.top_k = top_k;
            for (int draw = 0; draw < 20; draw++)
                CU_ASSERT_EQUAL(
                    nb_sample_logits(
                        &rng, nb_from_array(NB_F64, NB_SHAPE(cases[i].V), cases[i].logits), &o),
                    cases[i].want);
        }
    }
    /* two +inf logits share the probability: both are drawn, nothing else is */
    o.temperature = 1.0;
    o.top_k = 0;
    int64_t seen[4] = {0};
    for (int draw = 0; draw < 200; draw++) {
        int64_t t = nb_sample_logits(
            &rng, nb_from_array(NB_F64, NB_SHAPE(4), (const double[]){0, INFINITY, 5, INFINITY}),
            &o);
        CU_ASSERT_TRUE_FATAL(t >= 0 && t < 4);
        seen[t]++;
    }
    CU_ASSERT_TRUE(seen[1] > 50 && seen[3] > 50 && seen[0] == 0 && seen[2] == 0);
    /* refused: NaN temperature (greedy or not), all -inf when sampling; greedy takes token 0 */
    nb_tensor *row = nb_from_array(NB_F64, NB_SHAPE(3), (const double[]){1, 2, 3});
    o.temperature = NAN;
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, row, &o), -1);
    NBT_ASSERT_ERROR("must not be NaN");
    o.temperature = 1.0;
    o.top_p = NAN;
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, row, &o), -1);
    NBT_ASSERT_ERROR("must not be NaN");
    o.top_p = 0;
    nb_tensor *blocked = nb_full(NB_F64, NB_SHAPE(3), -INFINITY);
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, blocked, &o), -1);
    NBT_ASSERT_ERROR("every one of the 3 logits is -inf");
    o.temperature = 0;
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, blocked, &o), 0);
}

/* An LM whose head bias is +inf on token 4 generates token 4, sampled or greedy. */
static void test_generate_infinite_logit(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 16, 8);
    CU_ASSERT_TRUE(nb_set(lm->head_bias, NB_IDX(4), INFINITY));
    const nb_causal_lm clm = nb_transformer_lm_causal(lm);
    const int64_t prompt[] = {1, 2};
    int64_t out[6];
    nb_generate_opts o = nb_generate_defaults(6);
    for (int sampled = 0; sampled <= 1; sampled++) {
        o.temperature = sampled ? 0.7 : 0;
        CU_ASSERT_EQUAL(nb_generate(&clm, prompt, 2, &o, out, NULL), 6);
        for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(out[i], 4);
    }
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"LM cached logits equal the full forward (f32, chunks)", test_lm_cached_equals_full_f32},
        {"LM cached logits equal the full forward (f64)", test_lm_cached_equals_full_f64},
        {"LM cached, the prompt in chunks of every size", test_lm_cached_every_chunk_size},
        {"LM cached on 1 and 2 threads", test_lm_cached_threads},
        {"grouped-query attention through nb_kv_cache_attend", test_kv_cache_attend_grouped},
        {"MHA and block cached equal the causal forward", test_mha_and_block_cached},
        {"LM cached errors", test_lm_cached_errors},
        {"no malloc per decoded token", test_no_malloc_per_token},
        {"generate greedy is the argmax of the full recompute", test_generate_greedy_is_argmax},
        {"generate reads a model on_token changed", test_generate_rechecks_after_on_token},
        {"generate seeded", test_generate_seeded},
        {"sampling distribution (chi-square)", test_sampling_distribution},
        {"sampling cannot overflow; NaN and all -inf refused", test_sampling_overflow},
        {"generate with a +inf logit", test_generate_infinite_logit},
    };
    return nbtest_run("generate", cases, (int)(sizeof cases / sizeof cases[0]));
}
