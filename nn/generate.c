/* generate(): a prompt continued token by token through any model's cached forward
 * (nb_causal_lm), with a sliding window past the model's context. */
#include "nabla/module.h"
#include "sample.h"
#include "tensor/nbt.h"

nb_generate_opts nb_generate_defaults(int64_t max_new_tokens) {
    return (nb_generate_opts){.max_new_tokens = max_new_tokens, .stop_token = -1};
}

/* One nb_generate call's sequence: the prompt, then out[0 .. made), total = prompt_len + made
 * tokens; tokens [fed - len, fed) are in the cache, where len is its length. */
typedef struct {
    const nb_causal_lm *lm;
    nb_kv_cache *c;
    const nb_generate_opts *o;
    nb_rng rng;
    const int64_t *prompt;
    int64_t prompt_len, *out, made, total, fed;
    int64_t *window; /* room for the context's tokens */
    bool over, failed;
} sequence;

static int64_t token_at(const sequence *g, int64_t i) {
    return i < g->prompt_len ? g->prompt[i] : g->out[i - g->prompt_len];
}

/* Samples the next token from row and appends it; sets over once the sequence is complete
 * (max_new_tokens, the stop token) or sampling failed (failed). */
static void take_next(sequence *g, const nb_tensor *row) {
    const int64_t next = nb_sample_logits(&g->rng, row, g->o);
    if (next < 0) {
        g->over = g->failed = true;
        return;
    }
    g->out[g->made++] = next;
    g->total++;
    g->over = next == g->o->stop_token || g->made >= g->o->max_new_tokens;
    if (g->o->on_token) g->o->on_token(g->o->ctx, next);
}

/* Feeds the next n tokens from fed through the model and commits them; the logits row of
 * the last one when it is the sequence's last, else (or on failure, failed set) NULL. */
static nb_tensor *feed(sequence *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) g->window[i] = token_at(g, g->fed + i);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, n), g->window);
    nb_tensor *logits = tokens ? g->lm->forward(g->lm->model, tokens, g->c) : NULL;
    if (logits && (!nb_is_float(logits) || logits->ndim != 3 || logits->shape[0] != 1 ||
                   logits->shape[1] != n || logits->shape[2] != g->lm->vocab))
        logits = nbt_error("generate",
                           "the model's forward returned %s %s for tokens [1, %lld], "
                           "not logits [1, %lld, %lld]",
                           nb_dtype_name(logits->dtype), nbt_shape(logits), (long long)n,
                           (long long)n, (long long)g->lm->vocab);
    if (!logits || !nb_kv_cache_commit(g->c, n)) {
        g->over = g->failed = true;
        return NULL;
    }
    g->fed += n;
    return g->fed == g->total ? nb_select(nb_select(logits, 0, 0), 0, n - 1) : NULL;
}

/* Checks the arguments; false with an error naming what is wrong. */
static bool check_args(const nb_causal_lm *lm, const int64_t *prompt, int64_t prompt_len,
                       const nb_generate_opts *o, const int64_t *out, const nb_kv_cache *cache) {
    if (!lm || !prompt || !o || (!out && o->max_new_tokens > 0))
        return nbt_error("generate", "NULL %s",
                         !lm       ? "model"
                         : !prompt ? "prompt"
                         : !o      ? "options"
                                   : "output"),
               false;
    if (!lm->forward || (!cache && !lm->new_cache) || lm->vocab < 1 || lm->max_len < 1)
        return nbt_error("generate",
                         "the model needs a forward, a new_cache (or a cache given), and vocab "
                         "and max_len >= 1 (got %lld and %lld)",
                         (long long)lm->vocab, (long long)lm->max_len),
               false;
    if (prompt_len < 1 || o->max_new_tokens < 0 || o->prompt_chunk < 0)
        return nbt_error("generate",
                         "needs a prompt of at least 1 token, max_new_tokens >= 0 and "
                         "prompt_chunk >= 0, got %lld, %lld and %lld",
                         (long long)prompt_len, (long long)o->max_new_tokens,
                         (long long)o->prompt_chunk),
               false;
    if (!nbn_check_sampling(o, "generate")) return false;
    for (int64_t i = 0; i < prompt_len; i++)
        if (prompt[i] < 0 || prompt[i] >= lm->vocab)
            return nbt_error("generate", "prompt token %lld is %lld, outside [0, %lld)",
                             (long long)i, (long long)prompt[i], (long long)lm->vocab),
                   false;
    if (cache && nb_kv_cache_batch(cache) != 1)
        return nbt_error("generate",
                         "generates one sequence, but the cache given is for batch %lld",
                         (long long)nb_kv_cache_batch(cache)),
               false;
    return true;
}

int64_t nb_generate(const nb_causal_lm *lm, const int64_t *prompt, int64_t prompt_len,
                    const nb_generate_opts *o, int64_t *out, nb_kv_cache *cache) {
    if (!check_args(lm, prompt, prompt_len, o, out, cache)) return -1;
    nb_kv_cache *c = cache ? cache : lm->new_cache(lm->model, 1, lm->max_len);
    if (!c) return -1;
    const int64_t ctx_len =
        nb_kv_cache_max_len(c) < lm->max_len ? nb_kv_cache_max_len(c) : lm->max_len;
    const int64_t keep = ctx_len / 2 > 0 ? ctx_len / 2 : 1;
    /* The tokens fed at once, in a scope of this call: pooled, so repeated calls with a cache
     * of the caller's never allocate. */
    nb_scope_begin();
    nb_tensor *window = nbt_new("generate", NB_I64, NB_SHAPE(ctx_len));
    sequence g = {.lm = lm,
                  .c = c,
                  .o = o,
                  .prompt = prompt,
                  .prompt_len = prompt_len,
                  .out = out,
                  .total = prompt_len,
                  .fed = prompt_len > ctx_len ? prompt_len - keep : 0,
                  .window = window ? nb_data(window) : NULL,
                  .over = o->max_new_tokens == 0,
                  .failed = !window};
    g.over |= g.failed;
    nb_rng_seed(&g.rng, o->seed);
    const bool was_training = lm->module && lm->module->training;
    const bool grad = nb_set_grad_enabled(false);
    if (lm->module) nb_module_train(lm->module, false);
    nb_kv_cache_reset(c);
    while (!g.over) {
        if (g.total - g.fed > ctx_len - nb_kv_cache_len(c)) { /* no room: slide the window */
            nb_kv_cache_reset(c);
            g.fed = g.total - keep;
        }
        const int64_t left = g.total - g.fed;
        const int64_t n = o->prompt_chunk > 0 && o->prompt_chunk < left ? o->prompt_chunk : left;
        nb_scope_begin();
        nb_tensor *row = feed(&g, n);
        if (row) take_next(&g, row);
        nb_scope_end();
    }
    if (lm->module) nb_module_train(lm->module, was_training);
    nb_set_grad_enabled(grad);
    nb_scope_end();
    if (!cache) nb_kv_cache_free(c);
    return g.failed ? -1 : g.made;
}
