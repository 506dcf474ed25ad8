/* generate(): a prompt continued token by token through a KV cache, with greedy, temperature,
 * top-k and top-p (nucleus) choices from a seeded generator. */
#include "lm_decode.h"
#include "nabla/module.h"
#include "tensor/nbt.h"
#include "nabla/generate.h"

#include <math.h>
#include <stdlib.h>

nb_generate_opts nb_generate_defaults(int64_t max_new_tokens) {
    return (nb_generate_opts){.max_new_tokens = max_new_tokens, .stop_token = -1};
}

/* Candidate order for top-k / top-p: most likely first, ties by the lower token id. */
typedef struct {
    double logit;
    int64_t id;
} candidate;

static int by_logit_desc(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit < b->logit ? 1 : -1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Index of the first maximum of x[0..n). */
static int64_t first_max(const double *x, int64_t n) {
    int64_t best = 0;
    for (int64_t j = 1; j < n; j++)
        if (x[j] > x[best]) best = j;
    return best;
}

/* The first maximum of float logits x[0..n), or -1 with an error at the first NaN: what the
 * general path below gives, without its copy to doubles (which are exact, so compare the same),
 * for the greedy decoding loop of nb_generate. */
static int64_t greedy_f32(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t j = 0; j < n; j++) {
        if (isnan(x[j])) return nbt_error("sample_logits", "logit %lld is NaN", (long long)j), -1;
        if (x[j] > x[best]) best = j;
    }
    return best;
}

int64_t nb_sample_logits(const nb_tensor *logits, const nb_generate_opts *o, nb_rng *rng) {
    if (!logits || !o || !rng) return nbt_error("sample_logits", "NULL argument"), -1;
    if (!nbt_check_live("sample_logits", logits)) return -1; /* debug-checks builds */
    if (!nb_is_float(logits) || logits->ndim != 1 || logits->shape[0] < 1)
        return nbt_error("sample_logits", "expects float logits [V], got %s %s",
                         nb_dtype_name(logits->dtype), nbt_shape(logits)),
               -1;
    if (o->top_k < 0)
        return nbt_error("sample_logits", "top_k must be >= 0, got %lld", (long long)o->top_k), -1;
    const int64_t V = logits->shape[0];
    if (o->temperature <= 0 && logits->dtype == NB_F32 && nb_is_contiguous(logits))
        return greedy_f32((const float *)nbt_ptr(logits), V);
    /* Scratch in the current scope: pooled, so a loop of calls stops allocating. */
    nb_tensor *xs = nbt_new("sample_logits", NB_F64, NB_SHAPE(V));
    nb_tensor *cs = nbt_new("sample_logits", NB_F64, NB_SHAPE(2 * V)); /* V candidates */
    if (!xs || !cs || !nb_to_doubles(logits, nb_data(xs))) return -1;
    double *x = nb_data(xs);
    for (int64_t j = 0; j < V; j++)
        if (isnan(x[j])) return nbt_error("sample_logits", "logit %lld is NaN", (long long)j), -1;
    if (o->temperature <= 0) return first_max(x, V);

    candidate *cand = nb_data(cs);
    for (int64_t j = 0; j < V; j++) cand[j] = (candidate){x[j] / o->temperature, j};
    int64_t n = V;
    const bool nucleus = o->top_p > 0 && o->top_p < 1;
    if ((o->top_k > 0 && o->top_k < V) || nucleus) {
        qsort(cand, (size_t)V, sizeof *cand, by_logit_desc);
        if (o->top_k > 0 && o->top_k < V) n = o->top_k;
    } else {
        int64_t best = first_max(x, V); /* only to subtract the max below */
        cand[0] = (candidate){x[best] / o->temperature, best};
        for (int64_t j = 0, w = 1; j < V; j++)
            if (j != best) cand[w++] = (candidate){x[j] / o->temperature, j};
    }
    /* Probabilities of the kept candidates, relative to the largest (cand[0]). */
    const double top = cand[0].logit;
    double total = 0;
    for (int64_t j = 0; j < n; j++) total += exp(cand[j].logit - top);
    if (nucleus) { /* the fewest leading candidates whose probability reaches top_p */
        double acc = 0, kept = 0;
        int64_t m = 0;
        while (m < n && acc < o->top_p) {
            double p = exp(cand[m].logit - top);
            acc += p / total;
            kept += p;
            m++;
        }
        n = m;
        total = kept;
    }
    double u = nb_rng_uniform(rng) * total, acc = 0;
    for (int64_t j = 0; j < n; j++) {
        acc += exp(cand[j].logit - top);
        if (u < acc) return cand[j].id;
    }
    return cand[n - 1].id; /* u landed on the rounding slack of the last sum */
}

/* Token at position i of prompt followed by the generated tokens. */
static int64_t token_at(const int64_t *prompt, int64_t prompt_len, const int64_t *out, int64_t i) {
    return i < prompt_len ? prompt[i] : out[i - prompt_len];
}

/* window[0 .. to - from) = tokens [from, to) of the sequence. */
static void fill_window(int64_t *window, const int64_t *prompt, int64_t prompt_len,
                        const int64_t *out, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++) window[i - from] = token_at(prompt, prompt_len, out, i);
}

/* Feeds tokens [from, to) of the sequence to the cache and returns the last logits row. */
static nb_tensor *feed(nb_transformer_lm *lm, nb_kv_cache *c, int64_t *window,
                       const int64_t *prompt, int64_t prompt_len, const int64_t *out, int64_t from,
                       int64_t to) {
    fill_window(window, prompt, prompt_len, out, from, to);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, to - from), window);
    nb_tensor *logits = nb_transformer_lm_forward_cached(lm, tokens, c);
    return logits ? nb_select(nb_select(logits, 0, 0), 0, to - from - 1) : NULL;
}

/* One nb_generate call's sequence: the prompt, then out[0 .. made); tokens [0, fed) are in
 * the cache, and total = prompt_len + made. */
typedef struct {
    nb_transformer_lm *lm;
    nb_kv_cache *c;
    const nb_generate_opts *o;
    nb_rng rng;
    const int64_t *prompt;
    int64_t prompt_len, *out, made, total, fed, ctx_len;
    nb_tensor *logits_row; /* the fused path's logits */
    int64_t told;          /* tokens on_token has been called for */
    bool over, failed;
} sequence;

/* Samples the next token from row and appends it; sets over once the sequence is complete
 * (max_new_tokens, the stop token) or sampling failed (failed). */
static void take_next(sequence *g, const nb_tensor *row) {
    nb_scope_begin();
    const int64_t next = nb_sample_logits(row, g->o, &g->rng);
    nb_scope_end();
    if (next < 0) {
        g->over = g->failed = true;
        return;
    }
    g->fed = g->total;
    g->out[g->made++] = next;
    g->total++;
    g->over = next == g->o->stop_token || g->made >= g->o->max_new_tokens;
}

/* Calls on_token for the token taken last, if not yet called for it; outside the fused path's
 * pool job, where the caller's code would run on one thread while the other spins. */
static void tell_on_token(sequence *g) {
    if (!g->o->on_token || g->told == g->made) return;
    g->told = g->made;
    g->o->on_token(g->out[g->made - 1], g->o->ctx);
    nbn_lm_decode_trust_model(g->c, g->lm, false); /* on_token may change the model */
}

/* The fused path's next token: the one sampled from the logits it has just written, while
 * the cache has room for it and no on_token is waiting to be called (and may change the
 * model); else -1, and nb_generate's loop goes on. */
static int64_t fused_next(void *ctx) {
    sequence *g = ctx;
    take_next(g, g->logits_row);
    if (g->over || g->o->on_token || nb_kv_cache_len(g->c) >= g->ctx_len) return -1;
    return g->out[g->made - 1];
}

int64_t nb_generate(nb_transformer_lm *lm, const int64_t *prompt, int64_t prompt_len,
                    const nb_generate_opts *o, int64_t *out, nb_kv_cache *cache) {
    if (!lm || !prompt || !o || (!out && o->max_new_tokens > 0))
        return nbt_error("generate", "NULL argument"), -1;
    if (prompt_len < 1 || o->max_new_tokens < 0)
        return nbt_error("generate",
                         "needs a prompt of at least 1 token and max_new_tokens >= 0, "
                         "got %lld and %lld",
                         (long long)prompt_len, (long long)o->max_new_tokens),
               -1;
    if (lm->out_features != lm->vocab)
        return nbt_error("generate",
                         "'%s' predicts %lld classes, not its %lld tokens: it cannot generate",
                         lm->base.path, (long long)lm->out_features, (long long)lm->vocab),
               -1;
    for (int64_t i = 0; i < prompt_len; i++)
        if (prompt[i] < 0 || prompt[i] >= lm->vocab)
            return nbt_error("generate", "prompt token %lld is %lld, outside [0, %lld)",
                             (long long)i, (long long)prompt[i], (long long)lm->vocab),
                   -1;
    nb_kv_cache *c = cache ? cache : nb_kv_cache_for_lm(lm, 1);
    if (!c) return -1;
    /* The tokens fed at once, in a scope of this call: pooled, so repeated calls with a cache
     * of the caller's never allocate. */
    nb_scope_begin();
    nb_tensor *window_t = nbt_new("generate", NB_I64, NB_SHAPE(lm->max_len));
    nb_tensor *logits_row = window_t ? nbt_new("generate", NB_F32, NB_SHAPE(lm->vocab)) : NULL;
    if (!logits_row) {
        nb_scope_end();
        if (!cache) nb_kv_cache_free(c);
        return -1;
    }
    int64_t *window = nb_data(window_t);
    const int64_t ctx_len =
        nb_kv_cache_max_len(c) < lm->max_len ? nb_kv_cache_max_len(c) : lm->max_len;
    const int64_t keep = ctx_len / 2 > 0 ? ctx_len / 2 : 1;
    sequence g = {.lm = lm,
                  .c = c,
                  .o = o,
                  .prompt = prompt,
                  .prompt_len = prompt_len,
                  .out = out,
                  .total = prompt_len,
                  .fed = prompt_len > ctx_len ? prompt_len - keep : 0,
                  .ctx_len = ctx_len,
                  .logits_row = logits_row,
                  .over = o->max_new_tokens == 0};
    nb_rng_seed(&g.rng, o->seed);
    const bool was_training = lm->base.training, grad = nb_set_grad_enabled(false);
    nb_module_train(&lm->base, false);
    nb_kv_cache_reset(c);
    /* Nothing changes the model's parameters inside this loop (but on_token, below), so the
     * fused path checks them once here rather than for every token, and without on_token reads
     * them from a copy in the order it reads them, made here. */
    nbn_lm_decode_trust_model(c, lm, !o->on_token);

    while (!g.over) {
        if (g.total - g.fed > ctx_len - nb_kv_cache_len(c)) { /* no room: slide the window */
            nb_kv_cache_reset(c);
            g.fed = g.total - keep;
        }
        if (g.total - g.fed == 1 && nbn_lm_decode_covers_next(lm, c)) {
            /* one token: the fused path, and the tokens after it while it covers them */
            if (!nbn_lm_decode_run(lm, token_at(prompt, prompt_len, out, g.fed), c,
                                   nb_data(logits_row), fused_next, &g))
                g.over = g.failed = true;
        } else if (nbn_lm_prefill_covers(lm, c, g.total - g.fed)) {
            /* a prompt (or the window kept after a slide): its tokens 16 at a time */
            fill_window(window, prompt, prompt_len, out, g.fed, g.total);
            if (nbn_lm_prefill(lm, window, g.total - g.fed, c, nb_data(logits_row)))
                take_next(&g, logits_row);
            else
                g.over = g.failed = true;
        } else {
            nb_scope_begin();
            nb_tensor *row = feed(lm, c, window, prompt, prompt_len, out, g.fed, g.total);
            if (row)
                take_next(&g, row);
            else
                g.over = g.failed = true;
            nb_scope_end();
        }
        tell_on_token(&g);
    }
    nbn_lm_decode_trust_model(c, NULL, false);
    nb_module_train(&lm->base, was_training);
    nb_set_grad_enabled(grad);
    nb_scope_end();
    if (!cache) nb_kv_cache_free(c);
    return g.failed ? -1 : g.made;
}
