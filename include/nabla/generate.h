/* nabla generation: a cache for incremental decoding that any attention can keep its state
 * in, and a generate() call in the spirit of Hugging Face's (greedy, temperature, top-k,
 * top-p, stop token, seeded) for any model that supplies a cached forward (nb_causal_lm).
 *
 * Incremental decoding: a transformer that has already read positions 0..n-1 only needs what
 * its attention layers kept of those positions (keys and values, or a compressed latent) to
 * compute position n. An nb_kv_cache keeps it, per layer, for up to max_len positions; it is
 * allocated once, so feeding a token costs no malloc once the scope's buffers are warm.
 * Feeding several tokens at once (a prompt) is causal: new token i attends to every cached
 * position and to new tokens 0..i.
 *
 * A model has one forward: the cache is an option of the ordinary forward, and T = 1 is
 * decoding. The cached forwards are for inference: they run without autograd (as under
 * no_grad), so their results have no history and need no gradient. They compute what the full
 * forward computes at the same positions, within float rounding (tests/test_generate.c). */
#ifndef NABLA_GENERATE_H
#define NABLA_GENERATE_H

#include "nabla/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The cache: what each attention layer keeps of the positions it has seen ----------- */
typedef struct nb_kv_cache nb_kv_cache;

/* A cache has `layers` layers, each holding what its attention keeps for `batch` sequences of
 * up to max_len positions, in one float dtype:
 *   - heads: keys and values of kv_heads heads (keys of k_dim, values of v_dim, which may
 *     differ), read by nb_kv_cache_attend; grouped-query attention gives a layer fewer
 *     key/value heads than query heads;
 *   - rows: named tensors of a width of the layer's choosing, one row per position (such as
 *     multi-head latent attention's latent and shared rotary key), through
 *     nb_kv_cache_append.
 *
 * Positions. The cache's length (nb_kv_cache_len) is the number of committed positions. A
 * model's forward over T new tokens writes positions [len, len + T) in every layer and reads
 * [0, len + T); nothing advances the length until the caller commits the forward with
 * nb_kv_cache_commit(c, T). So every layer of one forward sees the same offset (a layer may
 * read nb_kv_cache_len for its rotary positions), and running the same forward again simply
 * rewrites the same positions. nb_generate commits for you.
 *
 * Cached forwards are for inference: their results have no autograd history. */

/* An empty cache of `layers` layers (add what each keeps with nb_kv_cache_add_heads/_rows),
 * for `batch` sequences of up to max_len positions, dt NB_F32 or NB_F64. Caller owns; free
 * with nb_kv_cache_free. NULL with an error on bad sizes. */
nb_kv_cache *nb_kv_cache_empty(int layers, int64_t batch, int64_t max_len, nb_dtype dt);
/* Gives `layer` keys of k_dim and values of v_dim for kv_heads heads (zeroed memory, owned by
 * the cache). False with an error if the layer already has heads or a size is not positive. */
bool nb_kv_cache_add_heads(nb_kv_cache *c, int layer, int64_t kv_heads, int64_t k_dim,
                           int64_t v_dim);
/* Gives `layer` a tensor named name (1..63 bytes, unique within the layer) of width numbers
 * per position, [batch, max_len, width] (owned by the cache). False with an error otherwise. */
bool nb_kv_cache_add_rows(nb_kv_cache *c, int layer, const char *name, int64_t width);
/* A cache of `layers` layers, each with heads of kv_heads keys and values of head_dim
 * (nb_kv_cache_empty + nb_kv_cache_add_heads(c, l, kv_heads, head_dim, head_dim)). Caller
 * owns. */
nb_kv_cache *nb_kv_cache_new(int layers, int64_t batch, int64_t max_len, int64_t kv_heads,
                             int64_t head_dim, nb_dtype dt);
/* A cache for every block of lm (its heads in each layer), for `batch` sequences of up to
 * lm->max_len positions, in the model's dtype. Caller owns. */
nb_kv_cache *nb_kv_cache_for_lm(const nb_transformer_lm *lm, int64_t batch);
/* A one-layer cache for self-attention through m (or a transformer block whose attention is
 * m), up to max_len positions. Caller owns. */
nb_kv_cache *nb_kv_cache_for_mha(const nb_mha *m, int64_t batch, int64_t max_len);

/* Writes the new keys k [batch, T, kv_heads * k_dim] and values v [batch, T, kv_heads * v_dim]
 * (already projected, rotated, ...) at positions [len, len + T) of layer `layer`, and attends
 * the queries q [batch, T, heads * k_dim] to positions [0, len + T) causally (new query i sees
 * new keys 0..i), with scale 1/sqrt(k_dim). heads must be a multiple of kv_heads: query head h
 * reads key/value head h / (heads / kv_heads). Returns the heads' contexts side by side,
 * [batch, T, heads * v_dim] (current scope, no autograd history); NULL with an error naming
 * the shapes (cache unchanged) on a mismatch or when len + T exceeds max_len. T = 0 returns
 * an empty result and changes nothing. */
nb_tensor *nb_kv_cache_attend(nb_kv_cache *c, int layer, const nb_tensor *q, const nb_tensor *k,
                              const nb_tensor *v, int64_t heads);
/* Writes x [batch, T, width] at positions [len, len + T) of the layer's tensor `name` and
 * returns its rows [0, len + T): a [batch, len + T, width] view of the cache's memory (current
 * scope, no autograd history; valid until the cache changes). NULL with an error on a
 * mismatch or overflow (cache unchanged). */
nb_tensor *nb_kv_cache_append(nb_kv_cache *c, int layer, const char *name, const nb_tensor *x);

/* Advances the length by n after a forward of n new positions wrote them in every layer.
 * False with an error (length unchanged) if len + n exceeds max_len or some layer was not
 * written up to len + n. */
bool nb_kv_cache_commit(nb_kv_cache *c, int64_t n);
/* Forgets positions from len on (0 <= len <= nb_kv_cache_len): to reuse a prompt's prefix.
 * False with an error otherwise. */
bool nb_kv_cache_truncate(nb_kv_cache *c, int64_t len);
/* Forgets every position (keeps the memory): the next forward starts at position 0. */
void nb_kv_cache_reset(nb_kv_cache *c);
/* Committed positions (the position the next token gets), or -1 for NULL. */
int64_t nb_kv_cache_len(const nb_kv_cache *c);
/* Most positions the cache can hold, or -1 for NULL. */
int64_t nb_kv_cache_max_len(const nb_kv_cache *c);
/* Layers, sequences and dtype the cache was made for (0, 0 and NB_F32 for NULL). */
int nb_kv_cache_layer_count(const nb_kv_cache *c);
int64_t nb_kv_cache_batch(const nb_kv_cache *c);
nb_dtype nb_kv_cache_dtype(const nb_kv_cache *c);
/* What layer `layer` keeps, for a model to check a cache before writing to it: its heads
 * (false with an error if it has none), and the width of its tensor name (-1 with an error
 * if it has none). */
bool nb_kv_cache_heads(const nb_kv_cache *c, int layer, int64_t *kv_heads, int64_t *k_dim,
                       int64_t *v_dim);
int64_t nb_kv_cache_rows_width(const nb_kv_cache *c, int layer, const char *name);
/* Bytes of tensor memory the cache holds (all of max_len, whatever the length). */
int64_t nb_kv_cache_bytes(const nb_kv_cache *c);
/* Releases the cache and its tensors. NULL is a no-op. */
void nb_kv_cache_free(nb_kv_cache *c);

/* The built-in models' cached forwards are their ordinary forwards with a cache in the
 * options: nb_mha_opts.cache / cache_layer and nb_lm_forward_opts.cache (nabla/nn.h). This is
 * the same for TransformerLM: tokens NB_I64 [batch, T] at positions [len, len + T) of the
 * cache -> logits [batch, T, out] (current scope, no history), block i in layer i. Errors
 * naming the model and the cache if the cache does not fit (layers, heads, dtype, batch) or
 * len + T exceeds the cache or the model's max_len. Does not commit. */
nb_tensor *nb_transformer_lm_forward_cached(nb_transformer_lm *m, const nb_tensor *tokens,
                                            nb_kv_cache *c);

/* ---- Any model that generates --------------------------------------------------------- */
/* What nb_generate needs of a model: a forward that maps tokens I64 [batch, n] at positions
 * [p, p + n) of a cache (p = nb_kv_cache_len) to logits [batch, n, vocab] in the current
 * scope, without committing, and a cache of the model's own design. */
typedef struct {
    void *model;       /* passed back to forward and new_cache */
    nb_module *module; /* put in eval mode while generating (restored after); may be NULL */
    int64_t vocab;     /* the logits' last dim; tokens are in [0, vocab) */
    int64_t max_len;   /* the longest context the model reads; generation slides past it */
    nb_tensor *(*forward)(void *model, const nb_tensor *tokens, nb_kv_cache *cache);
    /* A cache for batch sequences of up to max_len positions; the caller owns it. */
    nb_kv_cache *(*new_cache)(void *model, int64_t batch, int64_t max_len);
} nb_causal_lm;

/* lm as an nb_causal_lm (its forward is nb_transformer_lm_forward_cached). The struct
 * borrows lm. */
nb_causal_lm nb_transformer_lm_causal(nb_transformer_lm *lm);

/* ---- Generation ------------------------------------------------------------------------ */
typedef struct {
    int64_t max_new_tokens; /* how many tokens to generate at most */
    double temperature;     /* 0 (or less) = greedy: always the most likely token */
    int64_t top_k;          /* sample only among the k most likely tokens; 0 = all */
    double top_p;           /* sample only among the fewest most likely tokens whose
                               probabilities sum to at least top_p; 0 or >= 1 = all */
    int64_t stop_token;     /* stop after generating this token (it is included); -1 = none */
    uint64_t seed;          /* the same seed (and model and prompt) gives the same tokens */
    /* Called with each new token as it is chosen (for streaming output); may be NULL. It may
     * even change the model: the parameters are checked again after each call. */
    void (*on_token)(void *ctx, int64_t token);
    void *ctx;
    int64_t prompt_chunk; /* prompt tokens per forward; 0 = the whole prompt at once */
} nb_generate_opts;

/* Defaults: max_new_tokens, greedy, no top-k/top-p, no stop token, seed 0. */
nb_generate_opts nb_generate_defaults(int64_t max_new_tokens);

/* Continues prompt (prompt_len >= 1 tokens in [0, vocab)) with up to opts->max_new_tokens
 * tokens written to out (room for that many), for one sequence of model lm, reading its
 * logits through a cache. cache may be NULL (one is made with lm->new_cache and freed here)
 * or a cache the model accepts for batch 1, which is reset first. The prompt goes in chunks of
 * opts->prompt_chunk tokens (0 = all at once), each forward committed before the next. A
 * sequence longer than the context (the smaller of lm->max_len and the cache's max_len)
 * continues from its last half-context of tokens (re-read into the cache), as a sliding
 * window that moves in half-context jumps. Runs in eval mode without autograd and restores
 * both. Returns how many tokens were written (fewer than max_new_tokens only after
 * stop_token), or -1 with an error. */
int64_t nb_generate(const nb_causal_lm *lm, const int64_t *prompt, int64_t prompt_len,
                    const nb_generate_opts *opts, int64_t *out, nb_kv_cache *cache);

/* Picks a token from one row of logits ([V] float) as opts says (temperature, top_k, top_p;
 * greedy when temperature <= 0), drawing from rng. Greedy takes the first of equal maxima.
 * Sampling scales the logits after subtracting their maximum, so no temperature overflows
 * them, and +inf logits share the probability among themselves. Returns the token, or -1 with
 * an error for a NaN logit or temperature, or logits all -inf when sampling (no token has a
 * probability). Scratch lives in the current scope. */
int64_t nb_sample_logits(nb_rng *rng, const nb_tensor *logits, const nb_generate_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
