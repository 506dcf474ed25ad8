/* The fused one-token path of nb_transformer_lm_forward_cached (nn/lm_decode.c). Internal to
 * nn/ (and its tests). */
#ifndef NABLA_LM_DECODE_H
#define NABLA_LM_DECODE_H

#include "nabla/generate.h"

struct nbn_lm_decoder;

/* True if the fused path computes tokens for m through c: one token of one sequence, float32,
 * every parameter contiguous, and c's slots shaped for m's blocks with room for the token. */
bool nbn_lm_decode_covers(const nb_transformer_lm *m, const nb_tensor *tokens,
                          const nb_kv_cache *c);
/* The same for the next token of a sequence, whatever its id: nbn_lm_decode_next's case. */
bool nbn_lm_decode_covers_next(const nb_transformer_lm *m, const nb_kv_cache *c);
/* Until called again, nbn_lm_decode_covers takes m's parameters as checked once here (when
 * they pass), for a caller that decodes token after token and does not let them change in
 * between (nb_generate); with copy_weights the fused path also reads a copy of the block
 * weights in reading order made here (lm_decode_weights.h), when the model is small enough.
 * NULL ends it. */
void nbn_lm_decode_trust_model(nb_kv_cache *c, const nb_transformer_lm *m, bool copy_weights);
/* The logits [1, 1, out_features] of the one token in tokens (a case nbn_lm_decode_covers
 * accepts), appending its keys and values to c. Returned in the current scope, no autograd
 * history; NULL with an error for a token outside the vocabulary or out of memory. */
nb_tensor *nbn_lm_decode_token(nb_transformer_lm *m, const nb_tensor *tokens, nb_kv_cache *c);
/* The same into logits (out_features floats, the caller's) for token id token, without a
 * tensor either way (nb_generate's loop); false with an error as above. */
bool nbn_lm_decode_next(nb_transformer_lm *m, int64_t token, nb_kv_cache *c, float *logits);
/* Returns the token to decode after the one whose logits nbn_lm_decode_run has just written,
 * or -1 to stop; a token returned must have room in the cache (nbn_lm_decode_covers_next). */
typedef int64_t (*nbn_next_token_fn)(void *ctx);
/* nbn_lm_decode_next for token, then for each token next(ctx) returns, until it returns -1:
 * token after token in one pool job while two threads are in use (nbt_parallel_phase_rounds),
 * not a job each. next reads the logits of the token before it. False with an error as
 * above, or for a token beyond the cache. */
bool nbn_lm_decode_run(nb_transformer_lm *m, int64_t token, nb_kv_cache *c, float *logits,
                       nbn_next_token_fn next, void *ctx);
/* True if nbn_lm_prefill feeds n tokens to c for m: the fused path covers m, nb_generate has
 * trusted m with a copy of its weights (nbn_lm_decode_trust_model), and c has room for them. */
bool nbn_lm_prefill_covers(const nb_transformer_lm *m, const nb_kv_cache *c, int64_t n);
/* Appends tokens[0..n) (a case nbn_lm_prefill_covers accepts) to c, up to 16 at once, and
 * writes the last one's logits into logits (out_features floats, the caller's); false with
 * an error for a token outside the vocabulary or a case it does not cover. */
bool nbn_lm_prefill(nb_transformer_lm *m, const int64_t *tokens, int64_t n, nb_kv_cache *c,
                    float *logits);
/* True if c's fused path has found one thread faster than two (then the prompt's general
 * forward should stay on one thread too); false before it has decoded. */
bool nbn_lm_decode_prefers_one_thread(const nb_kv_cache *c);
/* Frees a decoder's buffers (c->decoder). NULL is a no-op. */
void nbn_lm_decoder_free(struct nbn_lm_decoder *d);
/* Tests: 1 or 2 makes c's fused path always use that many threads (2 still needs a thread
 * budget of 2); 0 (the default) lets it choose by measuring both. */
void nbn_kv_cache_force_decode_threads(nb_kv_cache *c, int threads);
/* Tests: counts ns as the time of a token decoded through c on the thread count in use, as
 * the fused path counts each token's, and returns the count the next token will use; 0 when
 * c has no decoder yet. */
int nbn_lm_decode_count_time(nb_kv_cache *c, int64_t ns);

#endif
