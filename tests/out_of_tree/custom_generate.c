/* A model of your own generates through nb_generate, with a cache of its own design: one
 * attention layer that keeps a compressed latent per position (not keys and values) and
 * projects keys (size 4) and values (size 8) from it. One forward serves training (cache
 * NULL) and decoding. Build: cc custom_generate.c $(pkg-config --cflags --libs nabla) */
#include <nabla/nabla.h>
#include <stdio.h>

typedef struct {
    nb_module base;
    nb_embedding *tok;
    nb_linear *q, *down, *up_k, *up_v, *head;
} tiny_lm;

/* tokens [B, T] at positions [start, start + T) -> logits [B, T, 16] */
static nb_tensor *forward(void *model, const nb_tensor *tokens, nb_kv_cache *cache) {
    tiny_lm *m = model;
    nb_tensor *x = nb_embedding_forward(m->tok, tokens);
    nb_tensor *latent = nb_linear_forward(m->down, x); /* [B, T, 2]: what the cache keeps */
    const int64_t start = cache ? nb_kv_cache_len(cache) : 0, T = tokens->shape[1];
    if (cache) latent = nb_kv_cache_append(cache, 0, "latent", latent); /* now [B, start+T, 2] */
    if (!latent) return NULL;
    const int64_t S = latent->shape[1];
    nb_tensor *k = nb_linear_forward(m->up_k, latent), *v = nb_linear_forward(m->up_v, latent);
    nb_tensor *blocked = nb_gt(nb_view(nb_arange(NB_F32, 0, S, 1), NB_SHAPE(1, S)), /* key j > */
                               nb_view(nb_arange(NB_F32, start, start + T, 1), NB_SHAPE(T, 1)));
    nb_tensor *scores = nb_matmul(nb_linear_forward(m->q, x), nb_transpose(k, 1, 2));
    nb_tensor *p = nb_masked_softmax(scores, blocked, false, 0.5); /* 1 / sqrt(key size) */
    return nb_linear_forward(m->head, nb_add(x, nb_matmul(p, v)));
}

static nb_kv_cache *new_cache(void *model, int64_t batch, int64_t max_len) {
    (void)model;
    nb_kv_cache *c = nb_kv_cache_empty(1, batch, max_len, NB_F32);
    if (c && !nb_kv_cache_add_rows(c, 0, "latent", 2)) nb_kv_cache_free(c), c = NULL;
    return c;
}

int main(void) {
    nb_module *root = nb_model_new(NB_F32, 18);
    tiny_lm *m = nb_module_new(root, "lm", "TinyLM", sizeof *m);
    m->tok = nb_embedding_new(&m->base, "tok", 16, 8);
    m->q = nb_linear_new(&m->base, "q", 8, 4, false);
    m->down = nb_linear_new(&m->base, "down", 8, 2, false);
    m->up_k = nb_linear_new(&m->base, "up_k", 2, 4, false);
    m->up_v = nb_linear_new(&m->base, "up_v", 2, 8, false);
    m->head = nb_linear_new(&m->base, "head", 8, 16, true);
    const nb_causal_lm lm = {.model = m,
                             .module = root,
                             .vocab = 16,
                             .max_len = 32,
                             .forward = forward,
                             .new_cache = new_cache};
    int64_t seq[23] = {1, 2, 3}; /* the prompt, then 20 new tokens */
    const nb_generate_opts opts = nb_generate_defaults(20);
    if (nb_generate(&lm, seq, 3, &opts, seq + 3, NULL) != 20) {
        fprintf(stderr, "custom_generate: %s\n", nb_last_error());
        return 1;
    }
    /* Greedy: each new token is the argmax of the full forward (no cache) at the one before. */
    nb_scope_begin();
    nb_tensor *best =
        nb_argmax(forward(m, nb_from_array(NB_I64, NB_SHAPE(1, 23), seq), NULL), -1, false);
    for (int i = 3; i < 23; i++) {
        printf("%lld ", (long long)seq[i]);
        if (nb_get(best, NB_IDX(0, i - 1)) != seq[i]) return fprintf(stderr, "mismatch\n"), 1;
    }
    printf("\ncustom_generate: ok\n");
    nb_scope_end();
    nb_module_free(root);
    nb_shutdown();
    return 0;
}
