/* nabla generation: a key/value cache for incremental decoding, and a generate() call in the
 * spirit of Hugging Face's (greedy, temperature, top-k, top-p, stop token, seeded).
 *
 * Incremental decoding: a transformer that has already read positions 0..n-1 only needs the
 * keys and values of those positions to compute position n. An nb_kv_cache keeps them, one
 * slot per attention layer, for up to max_len positions; it is allocated once, so feeding a
 * token costs no malloc once the scope's buffers are warm. Feeding several tokens at once (a
 * prompt) is causal: new token i attends to every cached position and to new tokens 0..i.
 *
 * The cached forwards are for inference: they run without autograd (as under no_grad), so
 * their results have no history and need no gradient. They compute what the full forward
 * computes at the same positions, within float rounding (tests/test_generate.c). */
#ifndef NABLA_GENERATE_H
#define NABLA_GENERATE_H

#include "nabla/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Key/value cache ------------------------------------------------------------------- */
typedef struct nb_kv_cache nb_kv_cache;

/* A cache for every block of lm, for `batch` sequences of up to lm->max_len positions, in the
 * model's dtype. Caller owns; free with nb_kv_cache_free. NULL with an error on bad sizes. */
nb_kv_cache *nb_kv_cache_for_lm(const nb_transformer_lm *lm, int64_t batch);
/* A one-slot cache for a single attention layer (self-attention through m, or a transformer
 * block whose attention is m), up to max_len positions. Caller owns. */
nb_kv_cache *nb_kv_cache_for_mha(const nb_mha *m, int64_t batch, int64_t max_len);
/* A cache of `layers` slots, each kv_heads key/value heads of head_dim, for attention layers
 * of your own (grouped-query attention, rotary positions) through nb_kv_cache_attend. dt is
 * NB_F32 or NB_F64. Caller owns. */
nb_kv_cache *nb_kv_cache_new(int layers, int64_t batch, int64_t max_len, int64_t kv_heads,
                             int64_t head_dim, nb_dtype dt);
/* Appends the new keys and values k, v [batch, T_new, kv_heads * head_dim] (already projected,
 * rotated, ...) to slot `layer`, and attends the queries q [batch, T_new, heads * head_dim]
 * to every cached position, causally (new query i sees new keys 0..i), with scale
 * 1/sqrt(head_dim). heads must be a multiple of kv_heads: query head h reads key/value head
 * h / (heads / kv_heads). Returns the heads' contexts side by side, [batch, T_new,
 * heads * head_dim] (current scope, no autograd history); NULL with an error naming the shapes
 * (cache unchanged) on a mismatch or overflow. */
nb_tensor *nb_kv_cache_attend(nb_kv_cache *c, int layer, const nb_tensor *q, const nb_tensor *k,
                              const nb_tensor *v, int64_t heads);
/* Forgets every position (keeps the memory): the next forward starts at position 0. */
void nb_kv_cache_reset(nb_kv_cache *c);
/* Positions held so far (the position the next token gets), or -1 for NULL. */
int64_t nb_kv_cache_len(const nb_kv_cache *c);
/* Most positions the cache can hold. */
int64_t nb_kv_cache_max_len(const nb_kv_cache *c);
/* Releases the cache and its tensors. NULL is a no-op. */
void nb_kv_cache_free(nb_kv_cache *c);

/* Self-attention of new tokens x [batch, T_new, d_in] against slot `layer` of the cache:
 * their keys and values are appended, and new token i attends to every cached position and
 * to new tokens 0..i. Returns [batch, T_new, d_out] (current scope, no autograd history). An
 * error (NULL, cache unchanged) if the slot's shapes differ from m's or T_new would overflow
 * max_len. */
nb_tensor *nb_mha_forward_cached(nb_mha *m, const nb_tensor *x, nb_kv_cache *c, int layer);
/* The pre-LN block of nb_transformer_block_forward with its attention cached in slot layer. */
nb_tensor *nb_transformer_block_forward_cached(nb_transformer_block *m, const nb_tensor *x,
                                               nb_kv_cache *c, int layer);
/* tokens NB_I64 [batch, T_new] at positions len..len+T_new-1 of the cache (len =
 * nb_kv_cache_len(c)) -> logits [batch, T_new, out] (current scope, no history). Every block
 * uses its own slot. Errors if len + T_new exceeds the cache or the model's max_len. */
nb_tensor *nb_transformer_lm_forward_cached(nb_transformer_lm *m, const nb_tensor *tokens,
                                            nb_kv_cache *c);

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
    void (*on_token)(int64_t token, void *ctx);
    void *ctx;
} nb_generate_opts;

/* Defaults: max_new_tokens, greedy, no top-k/top-p, no stop token, seed 0. */
nb_generate_opts nb_generate_defaults(int64_t max_new_tokens);

/* Continues prompt (prompt_len >= 1 tokens in [0, vocab)) with up to opts->max_new_tokens
 * tokens written to out (room for that many), for one sequence, reading the model's logits
 * through a KV cache. cache may be NULL (one is made and freed here) or a cache from
 * nb_kv_cache_for_lm(lm, 1), which is reset first. A sequence longer than the model's context
 * continues from its last max_len / 2 tokens (re-read into the cache), as a sliding window
 * that moves in half-context jumps. Runs in eval mode without autograd and restores both.
 * Decoding one float32 sequence without on_token reads a copy of the block weights laid out
 * in the order it reads them (faster), made at the start of each call and kept in the cache
 * for the next (at most 32 MB; larger models read their own weights).
 * Returns how many tokens were written (fewer than max_new_tokens only after stop_token), or
 * -1 with an error. */
int64_t nb_generate(nb_transformer_lm *lm, const int64_t *prompt, int64_t prompt_len,
                    const nb_generate_opts *opts, int64_t *out, nb_kv_cache *cache);

/* Picks a token from one row of logits ([V] float) as opts says (temperature, top_k, top_p;
 * greedy when temperature <= 0), drawing from rng. Greedy takes the first of equal maxima.
 * Returns the token, or -1 with an error. Scratch lives in the current scope. */
int64_t nb_sample_logits(const nb_tensor *logits, const nb_generate_opts *opts, nb_rng *rng);

#ifdef __cplusplus
}
#endif
#endif
