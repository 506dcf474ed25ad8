/* The README's generation excerpts, compiled and run by the test suite: nb_generate with
 * sampling options (the same seed gives the same tokens), then greedy decoding by hand through
 * the cache, which must give nb_generate's greedy tokens. */
#include <nabla/nabla.h>
#include <stdio.h>
#include <string.h>

enum { NEW = 12 };

/* Greedy decoding by hand: the prompt as one cached forward, then one token at a time. */
static bool greedy_by_hand(nb_transformer_lm *lm, const int64_t *prompt, int64_t T, int64_t *out) {
    nb_scope_begin();
    nb_kv_cache *c = nb_kv_cache_for_lm(lm, /*batch*/ 1);
    nb_tensor *prompt_tokens = nb_from_array(NB_I64, NB_SHAPE(1, T), prompt);
    nb_tensor *logits = nb_transformer_lm_forward_cached(lm, prompt_tokens, c); /* [1, T, V] */
    nb_kv_cache_commit(c, T);
    for (int i = 0; i < NEW; i++) { /* then one token at a time: forward, pick, commit 1 */
        out[i] = (int64_t)nb_get(nb_argmax(logits, -1, false), NB_IDX(0, -1));
        nb_tensor *next = nb_from_array(NB_I64, NB_SHAPE(1, 1), &out[i]);
        logits = nb_transformer_lm_forward_cached(lm, next, c);
        nb_kv_cache_commit(c, 1);
    }
    const bool ok = logits != NULL;
    nb_kv_cache_free(c);
    nb_scope_end();
    return ok;
}

int main(void) {
    nb_module *root = nb_model_new(NB_F32, /*seed*/ 3);
    nb_transformer_lm *lm = nb_transformer_lm_new(root, "lm", /*vocab*/ 16, /*max_len*/ 32,
                                                  /*dim*/ 16, /*heads*/ 2, /*layers*/ 2, 0.0);
    const int64_t prompt[] = {1, 2, 3}, prompt_len = 3, newline_id = 0;
    int64_t again[NEW], greedy[NEW], by_hand[NEW];

    nb_generate_opts o = nb_generate_defaults(/*max_new_tokens*/ NEW);
    o.temperature = 0.8;       /* 0: greedy */
    o.top_k = 40;              /* 0: off */
    o.top_p = 0.95;            /* 0 or 1: off */
    o.stop_token = newline_id; /* -1: none */
    o.seed = 7;                /* same seed, same text */
    int64_t out[NEW];
    nb_causal_lm model = nb_transformer_lm_causal(lm);
    int64_t n = nb_generate(&model, prompt, prompt_len, &o, out, /*cache*/ NULL);

    const int64_t n_again = nb_generate(&model, prompt, prompt_len, &o, again, NULL);
    const nb_generate_opts greedy_opts = nb_generate_defaults(NEW);
    if (n < 1 || n_again != n || memcmp(out, again, sizeof(int64_t) * (size_t)n) != 0 ||
        nb_generate(&model, prompt, prompt_len, &greedy_opts, greedy, NULL) != NEW ||
        !greedy_by_hand(lm, prompt, prompt_len, by_hand) ||
        memcmp(greedy, by_hand, sizeof greedy) != 0) {
        fprintf(stderr, "readme_generate: failed: %s\n", nb_last_error());
        return 1;
    }
    for (int i = 0; i < NEW; i++) printf("%lld ", (long long)greedy[i]);
    printf("\nreadme_generate: ok\n");
    nb_module_free(root);
    nb_shutdown();
    return 0;
}
