/* A decoder defined here, with only the public <nabla/...> API, shaped like DeepSeek's
 * multi-head latent attention (MLA): what its cache keeps is not keys and values but, per
 * layer, a compressed latent of width R and one shared "rope" key of width DR per position
 * (nb_kv_cache_add_rows), from which keys (head size KD + DR) and values (head size VD, not
 * the keys' size) are projected again at every step. It has ONE forward, mla_forward(model,
 * tokens, cache), for training (cache NULL) and for cached inference. The tests check that
 * the cached path equals the full forward at every position (token by token and in chunks of
 * every size), that nb_generate drives it through nb_causal_lm exactly as a full recompute
 * would (past the context too), that a cache it cannot use is refused with a message, and that
 * a decoded token costs no malloc once warm. */
#include "harness.h"

#include <nabla/generate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LAYERS 4

/* One MLA block: x + out(attention(q(x), keys and values from the latent down(x))). */
typedef struct {
    nb_module base;
    nb_linear *q;    /* D -> H * (KD + DR): each head's query, its rope part last */
    nb_linear *down; /* D -> R: the latent the cache keeps */
    nb_linear *rope; /* D -> DR: one key part shared by every head, also kept */
    nb_linear *up_k; /* R -> H * KD */
    nb_linear *up_v; /* R -> H * VD */
    nb_linear *out;  /* H * VD -> D */
} mla_block;

typedef struct {
    nb_module base;
    nb_embedding *tok;
    nb_tensor *pos; /* learned positions [max_len, D] */
    mla_block *blocks[MAX_LAYERS];
    nb_linear *head; /* D -> vocab */
    int layers;
    int64_t vocab, max_len, dim, heads, kd, vd, r, dr;
} mla_model;

typedef struct {
    int layers;
    int64_t vocab, max_len, dim, heads, kd, vd, r, dr;
} mla_config;

static mla_block *mla_block_new(nb_module *parent, const char *name, const mla_config *cf) {
    mla_block *b = nb_module_new(parent, name, "MLABlock", sizeof *b);
    if (!b) return NULL;
    b->q = nb_linear_new(&b->base, "q", cf->dim, cf->heads * (cf->kd + cf->dr), false);
    b->down = nb_linear_new(&b->base, "down", cf->dim, cf->r, false);
    b->rope = nb_linear_new(&b->base, "rope", cf->dim, cf->dr, false);
    b->up_k = nb_linear_new(&b->base, "up_k", cf->r, cf->heads * cf->kd, false);
    b->up_v = nb_linear_new(&b->base, "up_v", cf->r, cf->heads * cf->vd, false);
    b->out = nb_linear_new(&b->base, "out", cf->heads * cf->vd, cf->dim, true);
    if (!b->q || !b->down || !b->rope || !b->up_k || !b->up_v || !b->out)
        return nb_module_discard(&b->base);
    return b;
}

static mla_model *mla_new(nb_module *root, const mla_config *cf) {
    mla_model *m = nb_module_new(root, "mla", "MLA", sizeof *m);
    if (!m) return NULL;
    m->layers = cf->layers;
    m->vocab = cf->vocab, m->max_len = cf->max_len, m->dim = cf->dim, m->heads = cf->heads;
    m->kd = cf->kd, m->vd = cf->vd, m->r = cf->r, m->dr = cf->dr;
    m->tok = nb_embedding_new(&m->base, "tok", cf->vocab, cf->dim);
    m->pos = nb_module_add_param(&m->base, "pos", NB_SHAPE(cf->max_len, cf->dim),
                                 nb_init_normal(0, 0.5));
    nb_module *blocks = nb_module_container(&m->base, "blocks");
    for (int i = 0; blocks && i < cf->layers; i++) {
        char name[8];
        snprintf(name, sizeof name, "%d", i);
        if (!(m->blocks[i] = mla_block_new(blocks, name, cf))) return nb_module_discard(&m->base);
    }
    m->head = nb_linear_new(&m->base, "head", cf->dim, cf->vocab, true);
    if (!m->tok || !m->pos || !blocks || !m->head) return nb_module_discard(&m->base);
    return m;
}

/* The cache this model keeps: per layer its latent and its shared rope key, nothing else. */
static nb_kv_cache *mla_new_cache(void *model, int64_t batch, int64_t max_len) {
    const mla_model *m = model;
    nb_kv_cache *c = nb_kv_cache_empty(m->layers, batch, max_len, nb_module_dtype(&m->base));
    for (int i = 0; c && i < m->layers; i++)
        if (!nb_kv_cache_add_rows(c, i, "latent", m->r) ||
            !nb_kv_cache_add_rows(c, i, "rope", m->dr)) {
            nb_kv_cache_free(c);
            return NULL;
        }
    return c;
}

/* One block over the new positions x [B, T, D] at [start, start + T), reading positions
 * [0, start + T): from the cache when there is one, else from x itself (start 0). */
static nb_tensor *mla_block_forward(const mla_model *m, int layer, const nb_tensor *x,
                                    nb_kv_cache *cache, int64_t start) {
    const mla_block *b = m->blocks[layer];
    const int64_t T = x->shape[1], H = m->heads, QD = m->kd + m->dr;
    nb_tensor *latent = nb_linear_forward(b->down, x), *rope = nb_linear_forward(b->rope, x);
    if (cache) { /* what the cache keeps, and everything kept so far */
        latent = nb_kv_cache_append(cache, layer, "latent", latent);
        rope = latent ? nb_kv_cache_append(cache, layer, "rope", rope) : NULL;
        if (!rope) return NULL;
    }
    const int64_t S = latent->shape[1]; /* start + T */
    nb_tensor *k = nb_linear_forward(b->up_k, latent), *v = nb_linear_forward(b->up_v, latent);
    nb_tensor *q = nb_linear_forward(b->q, x);
    /* Bottom-right causal mask: new query i (position start + i) sees keys j <= start + i. */
    nb_tensor *mask =
        nb_gt(nb_view(nb_arange(NB_F64, 0, (double)S, 1), NB_SHAPE(1, S)),
              nb_view(nb_arange(NB_F64, (double)start, (double)(start + T), 1), NB_SHAPE(T, 1)));
    nb_tensor *ctx[8];
    for (int64_t h = 0; h < H; h++) {
        nb_tensor *kh[2] = {nb_narrow(k, 2, h * m->kd, m->kd), rope};
        nb_tensor *scores =
            nb_matmul(nb_narrow(q, 2, h * QD, QD), nb_transpose(nb_concat(2, kh, 2), 1, 2));
        nb_tensor *p = nb_masked_softmax(scores, mask, false, 1 / sqrt((double)QD));
        ctx[h] = nb_matmul(p, nb_narrow(v, 2, h * m->vd, m->vd));
    }
    return nb_add(x, nb_linear_forward(b->out, nb_concat((int)H, ctx, 2)));
}

/* The model's one forward: tokens I64 [B, T] -> logits [B, T, vocab]. Without a cache the
 * tokens are positions [0, T) and autograd records as usual (training); with one they are
 * positions [len, len + T) of the cache, read without autograd, and nothing is committed. */
static nb_tensor *mla_forward(mla_model *m, const nb_tensor *tokens, nb_kv_cache *cache) {
    if (!m || !tokens || tokens->dtype != NB_I64 || tokens->ndim != 2)
        return nb_error("mla", "needs the model and tokens I64 [B, T], got %s",
                        nb_shape_text(tokens));
    const int64_t B = tokens->shape[0], T = tokens->shape[1];
    const int64_t start = cache ? nb_kv_cache_len(cache) : 0;
    if (cache &&
        (nb_kv_cache_layer_count(cache) != m->layers ||
         nb_kv_cache_dtype(cache) != nb_module_dtype(&m->base) || nb_kv_cache_batch(cache) != B))
        return nb_error("mla",
                        "a model of %d layers in %s for batch %lld cannot use a cache of %d "
                        "layers in %s for batch %lld",
                        m->layers, nb_dtype_name(nb_module_dtype(&m->base)), (long long)B,
                        nb_kv_cache_layer_count(cache), nb_dtype_name(nb_kv_cache_dtype(cache)),
                        (long long)nb_kv_cache_batch(cache));
    const int64_t room =
        cache && nb_kv_cache_max_len(cache) < m->max_len ? nb_kv_cache_max_len(cache) : m->max_len;
    if (start + T > room)
        return nb_error("mla", "%lld new tokens after %lld exceed the %lld positions it reads",
                        (long long)T, (long long)start, (long long)room);
    const bool grad = cache ? nb_set_grad_enabled(false) : nb_is_grad_enabled();
    nb_tensor *x = nb_add(nb_embedding_forward(m->tok, tokens), nb_narrow(m->pos, 0, start, T));
    for (int i = 0; x && i < m->layers; i++) x = mla_block_forward(m, i, x, cache, start);
    nb_tensor *logits = x ? nb_linear_forward(m->head, x) : NULL;
    nb_set_grad_enabled(grad);
    if (!logits && cache && strncmp(nb_last_error(), "kv_cache", 8) == 0) {
        /* the cache refused what the model keeps (a latent of another width, none at all):
         * say that the cache is the problem */
        char why[512];
        snprintf(why, sizeof why, "%s", nb_last_error());
        return nb_error("mla", "the cache does not fit this model: %s", why);
    }
    return logits;
}

/* nb_causal_lm's forward signature */
static nb_tensor *mla_causal_forward(void *model, const nb_tensor *tokens, nb_kv_cache *cache) {
    return mla_forward(model, tokens, cache);
}

static nb_causal_lm mla_causal(mla_model *m) {
    return (nb_causal_lm){.model = m,
                          .module = &m->base,
                          .vocab = m->vocab,
                          .max_len = m->max_len,
                          .forward = mla_causal_forward,
                          .new_cache = mla_new_cache};
}

/* 2 layers, 3 heads, keys of 4 + 2 (latent part + shared rope part), values of 3, latent 5. */
static const mla_config small = {.layers = 2,
                                 .vocab = 13,
                                 .max_len = 12,
                                 .dim = 8,
                                 .heads = 3,
                                 .kd = 4,
                                 .vd = 3,
                                 .r = 5,
                                 .dr = 2};

static mla_model *small_model(nb_module **root, nb_dtype dt, uint64_t seed, int64_t max_len) {
    *root = nb_model_new(dt, seed);
    mla_config cf = small;
    cf.max_len = max_len;
    mla_model *m = mla_new(*root, &cf);
    CU_ASSERT_PTR_NOT_NULL(m);
    return m;
}

/* Feeds tokens [B, n] in the chunks listed, committing after each, and checks each chunk's
 * logits against the full forward at the same positions. */
static void check_chunks(mla_model *m, const nb_tensor *tokens, const nb_tensor *full,
                         const int64_t *chunks, int nchunks, double tol) {
    nb_kv_cache *c = mla_new_cache(m, tokens->shape[0], m->max_len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const nb_causal_lm lm = mla_causal(m);
    nbtest_check_cached_chunks(&lm, c, tokens, full, chunks, nchunks, tol);
    nb_kv_cache_free(c);
}

/* Cached logits equal the full forward at every position: token by token and the sequence
 * in chunks of every size from 1 to n, for 1 and 2 sequences, in float64 to 1e-12. */
static void test_cached_equals_full(void) {
    nb_module *root;
    mla_model *m = small_model(&root, NB_F64, 3, 12);
    nb_module_train(root, false);
    for (int64_t batch = 1; batch <= 2; batch++) {
        nb_rng rng;
        nb_rng_seed(&rng, 10 + (uint64_t)batch);
        const int64_t n = 12;
        nb_tensor *tokens = nb_randint(&rng, 0, small.vocab, NB_SHAPE(batch, n));
        nb_tensor *full = mla_forward(m, tokens, NULL);
        NBT_ASSERT_SHAPE(full, batch, n, small.vocab);
        for (int64_t size = 1; size <= n; size++) {
            int64_t chunks[12];
            int nchunks = 0;
            for (int64_t at = 0; at < n; at += size)
                chunks[nchunks++] = at + size <= n ? size : n - at;
            check_chunks(m, tokens, full, chunks, nchunks, 1e-12);
        }
        const int64_t mixed[] = {5, 1, 3, 1, 2};
        check_chunks(m, tokens, full, mixed, 5, 1e-12);
    }
    nb_module_free(root);
}

/* float32: the same forward, the same agreement to float32 rounding. */
static void test_cached_equals_full_f32(void) {
    nb_module *root;
    mla_model *m = small_model(&root, NB_F32, 4, 12);
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_tensor *tokens = nb_randint(&rng, 0, small.vocab, NB_SHAPE(2, 12));
    nb_tensor *full = mla_forward(m, tokens, NULL);
    const int64_t chunks[] = {4, 1, 1, 3, 1, 1, 1};
    check_chunks(m, tokens, full, chunks, 7, 1e-5);
    nb_module_free(root);
}

/* The same forward trains: without a cache it records autograd, so a loss reaches every
 * parameter, including the latent's projections. */
static void test_trains_through_the_same_forward(void) {
    nb_module *root;
    mla_model *m = small_model(&root, NB_F64, 6, 12);
    nb_rng rng;
    nb_rng_seed(&rng, 6);
    nb_tensor *tokens = nb_randint(&rng, 0, small.vocab, NB_SHAPE(2, 12));
    nb_tensor *loss = nb_cross_entropy(mla_forward(m, nb_narrow(tokens, 1, 0, 11), NULL),
                                       nb_narrow(tokens, 1, 1, 11), -100, NB_REDUCE_MEAN);
    CU_ASSERT_TRUE_FATAL(loss && loss->requires_grad);
    CU_ASSERT_TRUE(nb_backward(loss, NULL));
    int count = 0;
    nb_tensor **params = nb_module_param_tensors(&m->base, &count);
    CU_ASSERT_EQUAL(count, 4 + 2 * 7); /* tok, pos, head.weight, head.bias; 7 per block */
    for (int i = 0; i < count; i++)
        CU_ASSERT_TRUE(params[i]->grad && nb_count_nonzero(params[i]->grad) > 0);
    free(params);
    nb_module_free(root);
}

typedef struct {
    int64_t seen[40];
    int n;
} streamed;

static void on_token(void *ctx, int64_t token) {
    streamed *s = ctx;
    if (s->n < 40) s->seen[s->n++] = token;
}

/* nb_generate through nb_causal_lm: greedy tokens are the argmax of the full recompute, past
 * the context of 10 (the window slides twice), with the prompt whole and in chunks, with a
 * cache nb_generate makes and one of the caller's; streaming sees the same tokens. */
static void test_generate_greedy(void) {
    enum { NEW = 30 };
    nb_module *root;
    mla_model *m = small_model(&root, NB_F64, 7, 10);
    nb_module_train(root, false);
    const int64_t prompt[] = {1, 5, 2, 9};
    int64_t want[NEW], got[NEW];
    const nb_causal_lm lm = mla_causal(m);
    nbtest_greedy_reference(&lm, m->max_len, prompt, 4, NEW, want);
    nb_module_train(root, true);
    streamed s = {.n = 0};
    nb_generate_opts o = nb_generate_defaults(NEW);
    o.on_token = on_token;
    o.ctx = &s;
    CU_ASSERT_EQUAL(nb_generate(&lm, prompt, 4, &o, got, NULL), NEW);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    CU_ASSERT_EQUAL(s.n, NEW);
    CU_ASSERT_EQUAL(memcmp(s.seen, want, sizeof want), 0);
    CU_ASSERT_TRUE(root->training); /* restored */
    nb_kv_cache *c = mla_new_cache(m, 1, 10);
    o = nb_generate_defaults(NEW);
    for (int64_t chunk = 0; chunk <= 4; chunk++) {
        o.prompt_chunk = chunk;
        memset(got, 0xff, sizeof got);
        CU_ASSERT_EQUAL(nb_generate(&lm, prompt, 4, &o, got, c), NEW);
        CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
    }
    /* a prompt longer than the context starts from its last half-context */
    int64_t long_prompt[14], want_long[8];
    for (int i = 0; i < 14; i++) long_prompt[i] = (i * 5 + 1) % small.vocab;
    nb_module_train(root, false);
    nbtest_greedy_reference(&lm, m->max_len, long_prompt, 14, 8, want_long);
    o = nb_generate_defaults(8);
    o.prompt_chunk = 3;
    CU_ASSERT_EQUAL(nb_generate(&lm, long_prompt, 14, &o, got, c), 8);
    CU_ASSERT_EQUAL(memcmp(got, want_long, sizeof want_long), 0);
    nb_kv_cache_free(c);
    nb_module_free(root);
}

/* A cache the model cannot use is refused by its forward with a message naming both, before
 * the length moves; nb_generate passes the message on. */
static void test_wrong_cache_refused(void) {
    nb_module *root;
    mla_model *m = small_model(&root, NB_F64, 8, 12);
    const int64_t toks[] = {1, 2, 3};
    nb_tensor *t3 = nb_from_array(NB_I64, NB_SHAPE(1, 3), toks);
    /* another number of layers, another dtype, another batch */
    nb_kv_cache *three = nb_kv_cache_empty(3, 1, 12, NB_F64);
    CU_ASSERT_PTR_NULL(mla_forward(m, t3, three));
    NBT_ASSERT_ERROR("a model of 2 layers in float64 for batch 1 cannot use a cache of 3 layers "
                     "in float64 for batch 1");
    nb_kv_cache_free(three);
    nb_kv_cache *f32 = nb_kv_cache_empty(2, 1, 12, NB_F32);
    CU_ASSERT_PTR_NULL(mla_forward(m, t3, f32));
    NBT_ASSERT_ERROR("cannot use a cache of 2 layers in float32");
    nb_kv_cache_free(f32);
    nb_kv_cache *b2 = mla_new_cache(m, 2, 12);
    CU_ASSERT_PTR_NULL(mla_forward(m, t3, b2));
    NBT_ASSERT_ERROR("for batch 2");
    nb_kv_cache_free(b2);
    /* the right layers, dtype and batch, but a latent of another width: the cache says which */
    nb_kv_cache *wide = nb_kv_cache_empty(2, 1, 12, NB_F64);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_TRUE(nb_kv_cache_add_rows(wide, i, "latent", small.r + 1));
        CU_ASSERT_TRUE(nb_kv_cache_add_rows(wide, i, "rope", small.dr));
    }
    CU_ASSERT_PTR_NULL(mla_forward(m, t3, wide));
    NBT_ASSERT_ERROR("the cache does not fit this model: kv_cache_append: layer 0's 'latent' "
                     "expects float64 [1, T, 6], got float64 [1, 3, 5]");
    CU_ASSERT_EQUAL(nb_kv_cache_len(wide), 0);
    nb_kv_cache_free(wide);
    /* a cache of keys and values (someone else's design) has no latent */
    nb_kv_cache *kv = nb_kv_cache_new(2, 1, 12, 3, 6, NB_F64);
    CU_ASSERT_PTR_NULL(mla_forward(m, t3, kv));
    NBT_ASSERT_ERROR("layer 0 has no tensor 'latent'");
    const nb_causal_lm lm = mla_causal(m);
    nb_generate_opts o = nb_generate_defaults(2);
    int64_t out[2];
    CU_ASSERT_EQUAL(nb_generate(&lm, toks, 3, &o, out, kv), -1);
    NBT_ASSERT_ERROR("layer 0 has no tensor 'latent'");
    CU_ASSERT_EQUAL(nb_kv_cache_len(kv), 0);
    nb_kv_cache_free(kv);
    /* past the model's context (the cache holds more than the model reads) */
    nb_kv_cache *big = mla_new_cache(m, 1, 20);
    nb_tensor *t12 = nb_zeros(NB_I64, NB_SHAPE(1, 12));
    CU_ASSERT_PTR_NOT_NULL(mla_forward(m, nb_narrow(t12, 1, 0, 10), big));
    CU_ASSERT_TRUE(nb_kv_cache_commit(big, 10));
    CU_ASSERT_PTR_NULL(mla_forward(m, t3, big));
    NBT_ASSERT_ERROR("3 new tokens after 10 exceed the 12 positions it reads");
    CU_ASSERT_EQUAL(nb_kv_cache_len(big), 10);
    nb_kv_cache_free(big);
    nb_module_free(root);
}

/* Once warm, a cached one-token forward and its commit (in a scope of their own) call malloc
 * zero times: the cache is allocated once and the scope's buffers are pooled. */
static void test_no_malloc_per_token(void) {
    nb_module *root;
    mla_model *m = small_model(&root, NB_F32, 9, 64);
    nb_module_train(root, false);
    nb_kv_cache *c = mla_new_cache(m, 1, 64);
    const nb_causal_lm lm = mla_causal(m);
    CU_ASSERT_EQUAL(nbtest_decode_mallocs(&lm, c, 3, 4, 36), 0);
    nb_kv_cache_free(c);
    nb_module_free(root);
}

int main(void) {
    const nbtest_case cases[] = {
        {"MLA cached logits equal the full forward (f64, every chunk size)",
         test_cached_equals_full},
        {"MLA cached logits equal the full forward (f32)", test_cached_equals_full_f32},
        {"MLA trains through the same forward", test_trains_through_the_same_forward},
        {"MLA generates: greedy is the argmax of the full recompute", test_generate_greedy},
        {"MLA refuses a cache that does not fit", test_wrong_cache_refused},
        {"MLA: no malloc per decoded token", test_no_malloc_per_token},
    };
    return nbtest_run("custom_decoder", cases, (int)(sizeof cases / sizeof cases[0]));
}
