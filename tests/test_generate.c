/* KV cache and generation: cached forwards equal the full recompute at every position, no
 * malloc per token, errors, and generate()'s greedy / top-k / top-p / temperature choices. */
#include "harness.h"
#include "nn/lm_decode.h"

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
    int64_t at = 0;
    for (int i = 0; i < nchunks; i++) {
        CU_ASSERT_EQUAL(nb_kv_cache_len(c), at);
        nb_tensor *part = nb_narrow(tokens, 1, at, chunks[i]);
        nb_tensor *logits = nb_transformer_lm_forward_cached(lm, part, c);
        CU_ASSERT_FALSE(logits && logits->requires_grad);
        NBT_ASSERT_SHAPE(logits, B, chunks[i], 11);
        NBT_ASSERT_CLOSE(logits, nb_narrow(full, 1, at, chunks[i]), tol, tol);
        at += chunks[i];
    }
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), T);
    /* After a reset the cache starts over and gives the same logits again. */
    nb_kv_cache_reset(c);
    NBT_ASSERT_CLOSE(nb_transformer_lm_forward_cached(lm, tokens, c), full, tol, tol);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

static void test_lm_cached_equals_full_f32(void) {
    /* a prompt, single tokens, a chunk of several, single tokens up to the context */
    const int64_t chunks[] = {5, 1, 1, 3, 1, 1, 1, 4, 1, 1, 1, 1, 1, 1, 1};
    check_lm_chunks(NB_F32, 1e-5, chunks, 15, 2);
    check_lm_chunks(NB_F32, 1e-5, chunks, 15, 1); /* one row: the matrix-vector path */
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
        for (int64_t t = PROMPT; t < T; t++) {
            got[threads - 1][t - PROMPT] =
                nb_transformer_lm_forward_cached(lm, nb_narrow(tokens, 1, t, 1), c);
            NBT_ASSERT_CLOSE(got[threads - 1][t - PROMPT], nb_narrow(full, 1, t, 1), 1e-5, 1e-5);
        }
        nb_kv_cache_free(c);
    }
    for (int64_t t = 0; t < T - PROMPT; t++) NBT_ASSERT_CLOSE(got[0][t], got[1][t], 0, 0);
    nb_set_num_threads(before);
    nb_module_free(model);
}

/* The fused one-token path (nn/lm_decode.c) takes one float32 sequence a token at a time, the
 * general cached path everything else. Token by token, a batch of 1 (fused) and the same
 * sequence twice in a batch of 2 (general) give the same logits within f32 rounding; the
 * fused path gives the same bits at 1 and 2 threads. Shapes cover whole vectors and tails:
 * head dims 8, 5, 32 and 16, five heads split 2 + 3 between the threads, one head (the second
 * half has none), 40 keys (a block of 32 and a tail). */
static void test_fused_decode_matches_general(void) {
    enum { T = 40, V = 13 };
    const int64_t dims[][2] = {{32, 4}, {25, 5}, {64, 2}, {16, 1}}; /* dim, heads */
    const int before = nb_get_num_threads();
    nb_set_num_threads(2);
    for (int cfg = 0; cfg < 4; cfg++) {
        nb_module *model = nb_model_new(NB_F32, 21 + (uint64_t)cfg);
        nb_transformer_lm *lm =
            nb_transformer_lm_new(model, "", V, T, dims[cfg][0], dims[cfg][1], 2, 0.0);
        nb_rng rng;
        nb_rng_seed(&rng, 4);
        nb_tensor *tokens = nb_randint(&rng, 0, V, NB_SHAPE(1, T));
        nb_tensor *full = nb_transformer_lm_forward(lm, tokens, true, NULL, NULL);
        nb_kv_cache *one = nb_kv_cache_for_lm(lm, 1), *two = nb_kv_cache_for_lm(lm, 1);
        nb_kv_cache *pair = nb_kv_cache_for_lm(lm, 2);
        CU_ASSERT_PTR_NOT_NULL_FATAL(pair);
        nbn_kv_cache_force_decode_threads(one, 1);
        nbn_kv_cache_force_decode_threads(two, 2);
        for (int64_t t = 0; t < T; t++) {
            nb_tensor *tok = nb_narrow(tokens, 1, t, 1);
            nb_tensor *tok2 = nb_concat(2, (nb_tensor *const[]){tok, tok}, 0);
            CU_ASSERT_TRUE(nbn_lm_decode_covers(lm, tok, one));
            CU_ASSERT_FALSE(nbn_lm_decode_covers(lm, tok2, pair));
            nb_tensor *fused = nb_transformer_lm_forward_cached(lm, tok, one);
            nb_tensor *general = nb_transformer_lm_forward_cached(lm, tok2, pair);
            NBT_ASSERT_SHAPE(fused, 1, 1, V);
            NBT_ASSERT_CLOSE(fused, nb_narrow(general, 0, 0, 1), 1e-5, 1e-5);
            NBT_ASSERT_CLOSE(fused, nb_narrow(general, 0, 1, 1), 1e-5, 1e-5);
            NBT_ASSERT_CLOSE(fused, nb_narrow(full, 1, t, 1), 1e-5, 1e-5);
            NBT_ASSERT_CLOSE(nb_transformer_lm_forward_cached(lm, tok, two), fused, 0, 0);
        }
        CU_ASSERT_EQUAL(nb_kv_cache_len(one), T);
        CU_ASSERT_EQUAL(nb_kv_cache_len(two), T);
        nb_kv_cache_free(one);
        nb_kv_cache_free(two);
        nb_kv_cache_free(pair);
        nb_module_free(model);
    }
    nb_set_num_threads(before);
}

/* A float64 model and a prompt of several tokens take the general path. */
static void test_fused_decode_coverage(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F64, 11, 8, 2);
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1);
    int64_t toks[3] = {1, 2, 3};
    CU_ASSERT_FALSE(nbn_lm_decode_covers(lm, nb_from_array(NB_I64, NB_SHAPE(1, 1), toks), c));
    nb_kv_cache_free(c);
    nb_module_free(model);
    lm = small_lm(&model, NB_F32, 11, 8, 2);
    c = nb_kv_cache_for_lm(lm, 1);
    CU_ASSERT_FALSE(nbn_lm_decode_covers(lm, nb_from_array(NB_I64, NB_SHAPE(1, 3), toks), c));
    CU_ASSERT_TRUE(nbn_lm_decode_covers(lm, nb_from_array(NB_I64, NB_SHAPE(1, 1), toks), c));
    nb_kv_cache_free(c);
    nb_module_free(model);
}

/* The fused path reading nb_generate's copy of the weights in reading order gives the same
 * logits, bit for bit, as reading the model's own (the same values in the same order), on 1 and
 * 2 threads, token after token. */
static void test_fused_decode_weight_copy(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 12, 6);
    nb_module_train(model, false);
    for (int threads = 1; threads <= 2; threads++) {
        nb_kv_cache *own = nb_kv_cache_for_lm(lm, 1), *copy = nb_kv_cache_for_lm(lm, 1);
        nbn_kv_cache_force_decode_threads(own, threads);
        nbn_kv_cache_force_decode_threads(copy, threads);
        nbn_lm_decode_trust_model(copy, lm, true);
        int same = 0;
        for (int64_t pos = 0; pos < 12; pos++) {
            nb_scope_begin();
            const int64_t tok = (pos * 5 + 3) % 11;
            nb_tensor *t = nb_from_array(NB_I64, NB_SHAPE(1, 1), &tok);
            nb_tensor *a = nb_transformer_lm_forward_cached(lm, t, own);
            nb_tensor *b = nb_transformer_lm_forward_cached(lm, t, copy);
            same += a && b && memcmp(nb_data(a), nb_data(b), sizeof(float) * 11) == 0;
            nb_scope_end();
        }
        CU_ASSERT_EQUAL(same, 12);
        nbn_lm_decode_trust_model(copy, NULL, false);
        nb_kv_cache_free(own);
        nb_kv_cache_free(copy);
    }
    nb_module_free(model);
}

/* A scripted run of nbn_lm_decode_run: next returns token i = (5i + 3) % 11 for i = 1, 2, ...
 * (bad_token instead at i = bad_at), keeping each token's logits, until `stop` tokens. */
typedef struct {
    float logits[16][11], *row;
    int64_t made, stop, bad_at, bad_token;
} decode_script;

static int64_t script_token(int64_t i) {
    return (5 * i + 3) % 11;
}

static int64_t scripted_next(void *ctx) {
    decode_script *s = ctx;
    memcpy(s->logits[s->made++], s->row, sizeof s->logits[0]);
    if (s->made >= s->stop) return -1;
    return s->made == s->bad_at ? s->bad_token : script_token(s->made);
}

/* nbn_lm_decode_run decodes the tokens next returns, one pool job for the run on two threads,
 * with the same logits as one nbn_lm_decode_next each; it stops with an error naming the module
 * at a token outside the vocabulary or beyond the cache, keeping the tokens before it. */
static void test_fused_decode_run(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 12, 6);
    nb_module_train(model, false);
    float row[11], want[12][11];
    nb_kv_cache *ref = nb_kv_cache_for_lm(lm, 1);
    nbn_kv_cache_force_decode_threads(ref, 1);
    for (int64_t i = 0; i < 12; i++) {
        CU_ASSERT_TRUE(nbn_lm_decode_next(lm, script_token(i), ref, want[i]));
    }
    nb_kv_cache_free(ref);
    for (int threads = 1; threads <= 2; threads++) {
        nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1);
        nbn_kv_cache_force_decode_threads(c, threads);
        decode_script *s = calloc(1, sizeof *s);
        *s = (decode_script){.row = row, .stop = 10, .bad_at = -1};
        CU_ASSERT_TRUE(nbn_lm_decode_run(lm, script_token(0), c, row, scripted_next, s));
        CU_ASSERT_EQUAL(s->made, 10);
        CU_ASSERT_EQUAL(nb_kv_cache_len(c), 10);
        CU_ASSERT_EQUAL(memcmp(s->logits, want, sizeof(float) * 11 * 10), 0);
        /* a token outside the vocabulary at the fifth */
        nb_kv_cache_reset(c);
        *s = (decode_script){.row = row, .stop = 10, .bad_at = 4, .bad_token = 11};
        CU_ASSERT_FALSE(nbn_lm_decode_run(lm, script_token(0), c, row, scripted_next, s));
        CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), "token 11 is outside [0, 11)"));
        CU_ASSERT_EQUAL(nb_kv_cache_len(c), 4);
        /* past the cache's 12 positions */
        nb_kv_cache_reset(c);
        *s = (decode_script){.row = row, .stop = 16, .bad_at = -1};
        CU_ASSERT_FALSE(nbn_lm_decode_run(lm, script_token(0), c, row, scripted_next, s));
        CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), "no room for position 12"));
        CU_ASSERT_EQUAL(s->made, 12);
        CU_ASSERT_EQUAL(nb_kv_cache_len(c), 12);
        CU_ASSERT_EQUAL(memcmp(s->logits, want, sizeof want), 0);
        free(s);
        nb_kv_cache_free(c);
    }
    nb_module_free(model);
}

/* nbn_lm_prefill (16 tokens at a time, only the last token's logits) gives the general cached
 * forward's last logits within float32 rounding, and leaves keys and values in the cache that
 * the next decoded token reads to the same logits as after the general forward; on one thread
 * and on two, in one chunk and in two. Then its errors. */
static void test_prefill(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 24, 6);
    nb_module_train(model, false);
    int64_t tokens[22];
    for (int i = 0; i < 22; i++) tokens[i] = (7 * i + 2) % 11;
    const int64_t sizes[] = {1, 2, 5, 16, 21};
    for (int threads = 1; threads <= 2; threads++) {
        for (int si = 0; si < 5; si++) {
            const int64_t n = sizes[si];
            nb_scope_begin();
            nb_kv_cache *fused = nb_kv_cache_for_lm(lm, 1), *general = nb_kv_cache_for_lm(lm, 1);
            nbn_kv_cache_force_decode_threads(fused, threads);
            nbn_lm_decode_trust_model(fused, lm, true);
            CU_ASSERT_TRUE(nbn_lm_prefill_covers(lm, fused, n));
            nb_tensor *got = nb_zeros(NB_F32, NB_SHAPE(11));
            CU_ASSERT_TRUE(nbn_lm_prefill(lm, tokens, n, fused, nb_data(got)));
            CU_ASSERT_EQUAL(nb_kv_cache_len(fused), n);
            nb_tensor *all = nb_transformer_lm_forward_cached(
                lm, nb_from_array(NB_I64, NB_SHAPE(1, n), tokens), general);
            NBT_ASSERT_CLOSE(got, nb_select(nb_select(all, 0, 0), 0, n - 1), 1e-5, 1e-5);
            /* the next token through the cache each path filled */
            const int64_t next = tokens[n];
            nb_tensor *a = nb_zeros(NB_F32, NB_SHAPE(11)), *b = nb_zeros(NB_F32, NB_SHAPE(11));
            CU_ASSERT_TRUE(nbn_lm_decode_next(lm, next, fused, nb_data(a)));
            CU_ASSERT_TRUE(nbn_lm_decode_next(lm, next, general, nb_data(b)));
            NBT_ASSERT_CLOSE(a, b, 1e-5, 1e-5);
            nbn_lm_decode_trust_model(fused, NULL, false);
            nb_kv_cache_free(fused);
            nb_kv_cache_free(general);
            nb_scope_end();
        }
    }
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1);
    float logits[11];
    const int64_t bad[3] = {1, 11, 2};
    CU_ASSERT_FALSE(nbn_lm_prefill(lm, bad, 3, c, logits)); /* checked before coverage */
    CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), "token 11 is outside [0, 11)"));
    CU_ASSERT_FALSE(nbn_lm_prefill_covers(lm, c, 3)); /* not trusted: no weight copy */
    CU_ASSERT_FALSE(nbn_lm_prefill(lm, tokens, 3, c, logits));
    CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), "does not cover 3 tokens after 0"));
    nbn_lm_decode_trust_model(c, lm, true);
    CU_ASSERT_FALSE(nbn_lm_prefill_covers(lm, c, 25)); /* the cache holds 24 */
    CU_ASSERT_TRUE(nbn_lm_prefill_covers(lm, c, 24));
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 0); /* nothing appended by the refusals */
    nbn_lm_decode_trust_model(c, NULL, false);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

/* The share of `tokens` decoded on two threads when the fused path's choice of thread count is
 * fed made-up token times: 30 us on one thread, two_ns on two, except that the first
 * slow_first two-thread tokens and every slow_every-th one (0: none) take slow_ns. */
static double share_on_two_threads(int64_t two_ns, int slow_first, int slow_every, int64_t slow_ns,
                                   int64_t tokens) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 8, 2);
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1);
    const int64_t tok = 1;
    CU_ASSERT_PTR_NOT_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 1), &tok), c));
    int threads = nbn_lm_decode_count_time(c, 30000);
    CU_ASSERT_EQUAL(threads, 1); /* one thread until two have shown they pay */
    int64_t on_two = 0, twos = 0;
    for (int64_t t = 0; t < tokens; t++) {
        int64_t ns = 30000;
        if (threads == 2) {
            on_two++;
            ++twos;
            ns = twos <= slow_first || (slow_every && twos % slow_every == 0) ? slow_ns : two_ns;
        }
        threads = nbn_lm_decode_count_time(c, ns);
    }
    nb_kv_cache_free(c);
    nb_module_free(model);
    return (double)on_two / (double)tokens;
}

/* Two threads are kept where they pay, also when the host stalls one token in forty for a
 * millisecond (a plain mean over a window had then switched to one thread for thousands of
 * tokens) and when the first two-thread window is slow (the worker's first start measured
 * 102 us a token here: blended into a running mean, that one window kept decoding on one
 * thread for 1,328 of a bench run's 2,369 windows), and dropped where they do not: slower, or
 * stalled at every other token. */
static void test_decode_thread_choice(void) {
    CU_ASSERT_EQUAL(nbn_lm_decode_count_time(NULL, 1000), 0);
    CU_ASSERT(share_on_two_threads(20000, 0, 0, 0, 20000) > 0.95);
    CU_ASSERT(share_on_two_threads(20000, 0, 40, 1000000, 20000) > 0.95);
    CU_ASSERT(share_on_two_threads(20000, 20, 0, 100000, 20000) > 0.95);
    CU_ASSERT(share_on_two_threads(36000, 0, 0, 0, 20000) < 0.05);
    CU_ASSERT(share_on_two_threads(20000, 0, 2, 1000000, 20000) < 0.05);
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
    for (int64_t t = 2; t < T; t++)
        NBT_ASSERT_CLOSE(nb_kv_cache_attend(c, 0, nb_narrow(q, 1, t, 1), nb_narrow(k, 1, t, 1),
                                            nb_narrow(v, 1, t, 1), H),
                         nb_narrow(want, 1, t, 1), 1e-12, 1e-12);
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
    for (int64_t t = 0; t < 7; t++) {
        nb_tensor *xt = nb_narrow(x, 1, t, 1);
        NBT_ASSERT_CLOSE(nb_mha_forward_cached(mha, xt, cm, 0), nb_narrow(want_mha, 1, t, 1), 1e-12,
                         1e-12);
        NBT_ASSERT_CLOSE(nb_transformer_block_forward_cached(block, xt, cb, 0),
                         nb_narrow(want_block, 1, t, 1), 1e-12, 1e-12);
    }
    /* Full: one more token overflows the mha cache (max_len 7) and changes nothing. */
    CU_ASSERT_PTR_NULL(nb_mha_forward_cached(mha, nb_narrow(x, 1, 0, 1), cm, 0));
    NBT_ASSERT_ERROR("overflow");
    CU_ASSERT_EQUAL(nb_kv_cache_len(cm), 7);
    /* A block's cache of another width is refused, naming the module. */
    CU_ASSERT_PTR_NULL(nb_mha_forward_cached(mha, nb_narrow(x, 1, 0, 1), cb, 0));
    NBT_ASSERT_ERROR("'attn'");
    CU_ASSERT_PTR_NULL(nb_mha_forward_cached(mha, nb_zeros(NB_F64, NB_SHAPE(2, 1, 12)), cb, 0));
    NBT_ASSERT_ERROR("[2, 1, 12]");
    CU_ASSERT_PTR_NULL(nb_mha_forward_cached(mha, nb_zeros(NB_F32, NB_SHAPE(3, 1, 12)), cb, 0));
    NBT_ASSERT_ERROR("float64");
    CU_ASSERT_PTR_NULL(nb_mha_forward_cached(mha, nb_narrow(x, 1, 0, 1), cb, 1));
    NBT_ASSERT_ERROR("slot 1");
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
    NBT_ASSERT_ERROR("0 + T <= 8");
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(2, 1), toks), c));
    NBT_ASSERT_ERROR("[1, T]");
    CU_ASSERT_PTR_NOT_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 6), toks), c));
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 3), toks), c));
    NBT_ASSERT_ERROR("6 + T <= 8");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 6);
    /* An out-of-vocabulary token fails in the embedding and leaves the cache as it was. */
    int64_t bad = 11;
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 1), &bad), c));
    NBT_ASSERT_ERROR("token 11 is outside [0, 11)");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 6);
    /* A cache made for a model with another number of blocks. */
    nb_module *other = nb_model_new(NB_F32, 1);
    nb_transformer_lm *lm3 = nb_transformer_lm_new(other, "", 11, 8, 16, 4, 3, 0.0);
    CU_ASSERT_PTR_NULL(
        nb_transformer_lm_forward_cached(lm3, nb_from_array(NB_I64, NB_SHAPE(1, 1), toks), c));
    NBT_ASSERT_ERROR("3 blocks but the cache has 2 slots");
    CU_ASSERT_PTR_NULL(nb_kv_cache_for_lm(NULL, 1));
    CU_ASSERT_PTR_NULL(nb_kv_cache_for_lm(lm, 0));
    NBT_ASSERT_ERROR("batch 0");
    nb_kv_cache_free(c);
    nb_module_free(other);
    nb_module_free(model);
}

/* Once warm, a decoding step (inside its own scope) calls malloc zero times. */
static void test_no_malloc_per_token(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 64, 4);
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1);
    int64_t tok = 3;
    uint64_t before = 0;
    for (int t = 0; t < 40; t++) {
        if (t == 4) before = nb_alloc_count();
        nb_scope_begin();
        nb_tensor *logits =
            nb_transformer_lm_forward_cached(lm, nb_from_array(NB_I64, NB_SHAPE(1, 1), &tok), c);
        CU_ASSERT_PTR_NOT_NULL(logits);
        nb_tensor *idx;
        nb_max_dim(nb_select(nb_select(logits, 0, 0), 0, 0), 0, false, &idx);
        tok = (int64_t)nb_item(idx);
        nb_scope_end();
    }
    CU_ASSERT_EQUAL(nb_alloc_count() - before, 0);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

/* Greedy continuation by full recompute over the window the generate() rule reads: the
 * sequence so far, restarted from its last max_len / 2 tokens whenever it would not fit. */
static void greedy_reference(nb_transformer_lm *lm, const int64_t *prompt, int64_t plen, int64_t n,
                             int64_t *out) {
    int64_t *seq = malloc(sizeof *seq * (size_t)(plen + n));
    memcpy(seq, prompt, sizeof *seq * (size_t)plen);
    int64_t total = plen, start = 0, keep = lm->max_len / 2;
    for (int64_t i = 0; i < n; i++) {
        if (total - start > lm->max_len) start = total - keep;
        nb_scope_begin();
        nb_tensor *logits = nb_transformer_lm_forward(
            lm, nb_from_array(NB_I64, NB_SHAPE(1, total - start), seq + start), true, NULL, NULL);
        nb_tensor *idx;
        nb_max_dim(nb_select(nb_select(logits, 0, 0), 0, total - start - 1), 0, false, &idx);
        out[i] = seq[total++] = (int64_t)nb_item(idx);
        nb_scope_end();
    }
    free(seq);
}

static void test_generate_greedy_is_argmax(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 12, 6);
    nb_module_train(model, false);
    const int64_t prompt[] = {1, 5, 2};
    int64_t want[30], got[30];
    greedy_reference(lm, prompt, 3, 30, want); /* 30 > 12: slides twice */
    nb_module_train(model, true);
    nb_generate_opts o = nb_generate_defaults(30);
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 3, &o, got, NULL), 30);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    CU_ASSERT_TRUE(model->training); /* restored */
    CU_ASSERT_TRUE(nb_is_grad_enabled());
    /* top-k = 1 and a tiny top-p are greedy whatever the temperature. */
    o.temperature = 1.5;
    o.top_k = 1;
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 3, &o, got, NULL), 30);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    o.top_k = 0;
    o.top_p = 1e-9;
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, 1); /* a cache of the caller's, reused */
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 3, &o, got, c), 30);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    /* the fused path's runs of tokens in one pool job, forced onto one thread and onto two */
    o = nb_generate_defaults(30);
    for (int threads = 1; threads <= 2; threads++) {
        nb_kv_cache *forced = nb_kv_cache_for_lm(lm, 1);
        nbn_kv_cache_force_decode_threads(forced, threads);
        memset(got, 0xff, sizeof got);
        CU_ASSERT_EQUAL(nb_generate(lm, prompt, 3, &o, got, forced), 30);
        CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
        nb_kv_cache_free(forced);
    }
    /* stop_token: generation ends right after the first occurrence, which is included. */
    int64_t first = 0;
    while (first < 29 && want[first] == want[0]) first++; /* a token that is not the first one */
    o = nb_generate_defaults(30);
    o.stop_token = want[first];
    int64_t stop_at = 0;
    while (want[stop_at] != want[first]) stop_at++;
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 3, &o, got, c), stop_at + 1);
    CU_ASSERT_EQUAL(got[stop_at], want[first]);
    nb_kv_cache_free(c);
    nb_module_free(model);
}

/* nb_generate checks the model once for the fused path, and again after each on_token, which
 * may change it: here the callback gives block 0's query projection a weight with the same
 * values, transposed in memory (a non-contiguous view, which the fused path does not read), so
 * the tokens must stay those of the full recompute; a stale check would read the transposed
 * storage as the weight. */
typedef struct {
    nb_linear *linear;
    nb_tensor *swapped;
} weight_swap;

static void swap_weight(int64_t token, void *ctx) {
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
    greedy_reference(lm, prompt, 3, 8, want);
    nb_linear *wq = lm->blocks[0]->attn->W_query;
    nb_tensor *original = wq->weight;
    nb_scope_begin();
    weight_swap w = {wq, nb_transpose(nb_contiguous(nb_transpose(wq->weight, 0, 1)), 0, 1)};
    CU_ASSERT_FALSE(nb_is_contiguous(w.swapped));
    nb_generate_opts o = nb_generate_defaults(8);
    o.on_token = swap_weight;
    o.ctx = &w;
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 3, &o, got, NULL), 8);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    if (wq->weight != original) swap_weight(0, &w); /* the model's own weight back */
    CU_ASSERT_PTR_EQUAL(wq->weight, original);
    nb_scope_end();
    nb_module_free(model);
}

static void test_generate_seeded(void) {
    nb_module *model;
    nb_transformer_lm *lm = small_lm(&model, NB_F32, 11, 16, 8);
    const int64_t prompt[] = {4};
    int64_t a[40], b[40], d[40];
    nb_generate_opts o = nb_generate_defaults(40);
    o.temperature = 1.0;
    o.seed = 77;
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 1, &o, a, NULL), 40);
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 1, &o, b, NULL), 40);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    o.seed = 78;
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 1, &o, d, NULL), 40);
    CU_ASSERT_NOT_EQUAL(memcmp(a, d, sizeof a), 0);
    for (int i = 0; i < 40; i++) CU_ASSERT_TRUE(a[i] >= 0 && a[i] < 11);
    /* errors */
    const int64_t bad[] = {11};
    CU_ASSERT_EQUAL(nb_generate(lm, bad, 1, &o, a, NULL), -1);
    NBT_ASSERT_ERROR("outside [0, 11)");
    CU_ASSERT_EQUAL(nb_generate(lm, prompt, 0, &o, a, NULL), -1);
    NBT_ASSERT_ERROR("at least 1 token");
    nb_lm_config classes = {
        .vocab = 11, .max_len = 8, .dim = 8, .num_heads = 2, .layers = 1, .out_features = 3};
    nb_transformer_lm *counter = nb_transformer_lm_new_config(model, "counter", &classes, 0.0);
    CU_ASSERT_EQUAL(nb_generate(counter, prompt, 1, &o, a, NULL), -1);
    NBT_ASSERT_ERROR("predicts 3 classes, not its 11 tokens");
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
        int64_t t = nb_sample_logits(row, o, &rng);
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
                        nb_from_array(NB_F64, NB_SHAPE(4), (const double[]){1, 3, 3, 2}), &g, &rng),
                    1);
    CU_ASSERT_EQUAL(nb_sample_logits(nb_zeros(NB_F32, NB_SHAPE(2, 2)), &g, &rng), -1);
    NBT_ASSERT_ERROR("[2, 2]");
    CU_ASSERT_EQUAL(nb_sample_logits(nb_full(NB_F32, NB_SHAPE(3), NAN), &g, &rng), -1);
    NBT_ASSERT_ERROR("NaN");
    /* Contiguous float32 logits take a scan without the copy to doubles: the same first of equal
     * maxima as a strided row (the copy's path), all -inf included, and the first NaN named. */
    nb_tensor *f32_row = nb_from_array(NB_F32, NB_SHAPE(4), (const float[]){1, 3, 3, 2});
    nb_tensor *strided = nb_select(
        nb_from_array(NB_F32, NB_SHAPE(4, 2), (const float[]){1, 9, 3, 9, 3, 9, 2, 9}), 1, 0);
    CU_ASSERT_FALSE(nb_is_contiguous(strided));
    CU_ASSERT_EQUAL(nb_sample_logits(f32_row, &g, &rng), 1);
    CU_ASSERT_EQUAL(nb_sample_logits(strided, &g, &rng), 1);
    CU_ASSERT_EQUAL(nb_sample_logits(nb_full(NB_F32, NB_SHAPE(3), -INFINITY), &g, &rng), 0);
    CU_ASSERT_EQUAL(
        nb_sample_logits(nb_from_array(NB_F32, NB_SHAPE(4), (const float[]){1, 5, NAN, NAN}), &g,
                         &rng),
        -1);
    NBT_ASSERT_ERROR("logit 2 is NaN");
}

int main(void) {
    const nbtest_case cases[] = {
        {"LM cached logits equal the full forward (f32, chunks)", test_lm_cached_equals_full_f32},
        {"LM cached logits equal the full forward (f64)", test_lm_cached_equals_full_f64},
        {"LM cached on 1 and 2 threads", test_lm_cached_threads},
        {"grouped-query attention through nb_kv_cache_attend", test_kv_cache_attend_grouped},
        {"MHA and block cached equal the causal forward", test_mha_and_block_cached},
        {"LM cached errors", test_lm_cached_errors},
        {"no malloc per decoded token", test_no_malloc_per_token},
        {"fused one-token path equals the general one", test_fused_decode_matches_general},
        {"fused one-token path coverage", test_fused_decode_coverage},
        {"fused path's weight copy gives the same bits", test_fused_decode_weight_copy},
        {"fused path's runs of tokens, and their errors", test_fused_decode_run},
        {"prompt path: 16 tokens at once, as the general forward", test_prefill},
        {"fused path's choice of thread count", test_decode_thread_choice},
        {"generate greedy is the argmax of the full recompute", test_generate_greedy_is_argmax},
        {"generate checks the model again after on_token", test_generate_rechecks_after_on_token},
        {"generate seeded", test_generate_seeded},
        {"sampling distribution (chi-square)", test_sampling_distribution},
    };
    return nbtest_run("generate", cases, (int)(sizeof cases / sizeof cases[0]));
}
