/* nabla text: tokenizers (characters or bytes, and a byte-level BPE) that travel with a model in
 * its checkpoint, and a text corpus split into training and validation text, tokenized, from
 * which language-model batches are drawn.
 *
 * Token ids. A characters tokenizer numbers the distinct bytes of a text in byte order (0..n-1);
 * bytes outside it have no token and are left out of an encoding (counted). A BPE tokenizer
 * starts from all 256 bytes (ids 0..255) and adds one token per merge: merge i joins tokens
 * (left, right) into token 256 + i, whose bytes are left's then right's. Every byte string
 * encodes, and decodes back to itself (invalid UTF-8 and NUL bytes included).
 *
 * BPE training (nb_tokenizer_bpe_train) and encoding both first cut the text into pieces and
 * never merge across pieces, so a merge stays within a word. A piece is (bytes classed as
 * letters: A-Z, a-z and every byte >= 0x80, so UTF-8 characters stay whole; digits 0-9;
 * spaces: space, \t, \n, \v, \f, \r; others: the rest, NUL included):
 *   - a run of letters, of digits or of others, with the one space before it if there is one;
 *   - a run of spaces, less its last byte when that is a space followed by a non-space (that
 *     space starts the next piece).
 * (GPT-2's rule without its contractions and with bytes for Unicode classes.) Training counts
 * adjacent token pairs within pieces, weighted by how often each piece occurs, and merges the
 * most frequent pair; ties go to the smallest left id, then the smallest right id, so training
 * is deterministic. A merge replaces the pair's occurrences in each piece left to right
 * ("aaa" with a+a gives [aa, a]). Encoding applies, within each piece, the earliest-learned
 * merge among the piece's adjacent pairs, all its occurrences left to right, until no merge
 * applies: on the training text this reproduces training's segmentation.
 *
 * In a checkpoint. nb_tokenizer_metadata gives string entries to pass to
 * nb_transformer_lm_save or nb_module_save_with_metadata; nb_tokenizer_read rebuilds the
 * tokenizer from the file alone:
 *   "nabla.tokenizer"        "chars" or "bpe"
 *   "nabla.tokenizer.chars"  (chars) the bytes, sorted, as lowercase hex (2 digits a byte)
 *   "nabla.tokenizer.merges" (bpe) a JSON array of [left, right] id pairs, merge 0 first
 * Metadata values are UTF-8 strings, which is why neither format holds raw token bytes. */
#ifndef NABLA_TEXT_H
#define NABLA_TEXT_H

#include "nabla/checkpoint.h"
#include "nabla/gguf.h"
#include "nabla/tensor.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Tokenizers ------------------------------------------------------------------------- */
typedef struct nb_tokenizer nb_tokenizer; /* immutable once made; safe to share across threads */

typedef enum { NB_TOKENIZER_CHARS, NB_TOKENIZER_BPE } nb_tokenizer_kind;

/* The most metadata entries nb_tokenizer_metadata gives. */
#define NB_TOKENIZER_METADATA_MAX 2
#define NB_TOKENIZER_KEY "nabla.tokenizer"

/* A characters tokenizer of the distinct bytes of text (len bytes; NUL is a byte like any
 * other). Caller owns; free with nb_tokenizer_free. NULL with an error if text has no bytes. */
nb_tokenizer *nb_tokenizer_chars(const char *text, size_t len);
/* The characters tokenizer of all 256 bytes: token id = byte. Caller owns. */
nb_tokenizer *nb_tokenizer_bytes(void);
/* A byte-level BPE trained on text to vocab_size tokens (256 bytes + vocab_size - 256 merges;
 * vocab_size from 256 to 1 << 20), by the rules above. Training stops early, with fewer tokens,
 * when no piece has two tokens left to merge. Caller owns. NULL with an error naming the call. */
nb_tokenizer *nb_tokenizer_bpe_train(const char *text, size_t len, int64_t vocab_size);
/* A BPE of the given merges: merge i joins tokens merges[2i] and merges[2i+1] (each a byte or
 * the token of an earlier merge, no pair twice) into token 256 + i. Caller owns. NULL with an
 * error saying which merge is invalid. */
nb_tokenizer *nb_tokenizer_bpe_from_merges(int64_t n_merges, const int64_t *merges);
/* Frees t (NULL is fine). */
void nb_tokenizer_free(nb_tokenizer *t);

nb_tokenizer_kind nb_tokenizer_kind_of(const nb_tokenizer *t);
/* "chars" or "bpe". A static string. */
const char *nb_tokenizer_kind_name(const nb_tokenizer *t);
/* The number of tokens: ids are 0..size-1. */
int64_t nb_tokenizer_vocab_size(const nb_tokenizer *t);
/* True if byte has a token of its own (always, for a BPE). */
bool nb_tokenizer_has_byte(const nb_tokenizer *t, unsigned char byte);
/* The bytes of token id (*len of them; not NUL-terminated), owned by t; NULL with an error
 * naming nb_tokenizer_token if id is outside the vocabulary. */
const char *nb_tokenizer_token(const nb_tokenizer *t, int64_t id, size_t *len);
/* The number of merges of a BPE (0 for characters). */
int64_t nb_tokenizer_merge_count(const nb_tokenizer *t);
/* Merge i's pair (it made token 256 + i). False with an error if i is out of range. */
bool nb_tokenizer_merge(const nb_tokenizer *t, int64_t i, int64_t *left, int64_t *right);
/* t's tokens and merges as a GGUF export takes them (nb_gguf_set_vocab, blk_llama_lm_save_gguf),
 * with no BOS or EOS token (set .bos/.eos on the copy if the model has them). The arrays are
 * owned by t and live as long as it. An all-empty vocabulary for a NULL t. */
nb_gguf_vocab nb_tokenizer_gguf_vocab(const nb_tokenizer *t);

/* Encodes len bytes of text into ids, which has room for len ids (a token covers at least one
 * byte), and returns how many ids it wrote. Bytes without a token (characters tokenizers only)
 * are left out; *skipped (if not NULL) receives how many. -1 with an error on NULL arguments. */
int64_t nb_tokenizer_encode(const nb_tokenizer *t, const char *text, size_t len, int64_t *ids,
                            size_t *skipped);
/* Decodes n ids into out (cap bytes, not NUL-terminated; out may be NULL when cap is 0) and
 * returns the number of bytes the whole decoding has, as snprintf does: only the first cap
 * are written. -1 with an error naming nb_tokenizer_decode, the position and the id when an
 * id is outside the vocabulary (nothing promised about out then). */
int64_t nb_tokenizer_decode(const nb_tokenizer *t, const int64_t *ids, int64_t n, char *out,
                            size_t cap);

/* Fills out with t's metadata entries (see above) and returns how many (at most
 * NB_TOKENIZER_METADATA_MAX). The strings are owned by t and live as long as it. */
int nb_tokenizer_metadata(const nb_tokenizer *t, nb_metadata_entry *out);
/* The tokenizer described by metadata entries (other keys are ignored). Caller owns. NULL with
 * an error naming nb_tokenizer_from_metadata and the key when there is none or it is
 * invalid. */
nb_tokenizer *nb_tokenizer_from_metadata(int n, const nb_metadata_entry *meta);
/* The tokenizer stored in the metadata of the safetensors file at path (a checkpoint saved with
 * nb_tokenizer_metadata's entries), read from the file alone. Caller owns. NULL with an error
 * naming nb_tokenizer_read and the file when it cannot be read, holds no tokenizer or an
 * invalid one. */
nb_tokenizer *nb_tokenizer_read(const char *path);

/* ---- A text corpus ---------------------------------------------------------------------- */
/* A text split into training and validation bytes, then (nb_corpus_encode) into tokens. The
 * split is by blocks, without a seed: the last of every `every` blocks of `block` bytes is
 * validation text. So the validation text is spread over the whole corpus (every file of a
 * corpus read from several contributes, not only the last), yet made of long runs of
 * contiguous text; its share is 1/every (to within one block). The fields are owned by the
 * corpus; read them, do not change them. */
typedef struct {
    char *train_text, *val_text;
    size_t train_bytes, val_bytes;
    int64_t *train, *val; /* token ids, after nb_corpus_encode; NULL before */
    int64_t train_tokens, val_tokens;
    size_t skipped; /* bytes nb_corpus_encode left out: without a token */
} nb_corpus;

/* The split of len bytes of text (copied): block >= 1; every >= 2, or 0 for no validation text.
 * False with an error naming nb_corpus_split on bad sizes or out of memory. Free with
 * nb_corpus_free (also after a failure). */
bool nb_corpus_split(nb_corpus *c, const char *text, size_t len, size_t block, int every);
/* The split of the bytes of n files, read in the order given and joined end to end. False with
 * an error naming nb_corpus_read and the file that could not be read. */
bool nb_corpus_read(nb_corpus *c, int n, const char *const *paths, size_t block, int every);
/* Tokenizes both texts with t (replacing any earlier encoding). False with an error on NULL
 * arguments or out of memory. */
bool nb_corpus_encode(nb_corpus *c, const nb_tokenizer *t);
/* `batch` windows of T + 1 consecutive training tokens, each starting at a position drawn from
 * rng (nb_rng_next() modulo the train_tokens - T starts there are), in order: *x the first T
 * tokens of each [batch, T], *y the last T [batch, T] (x shifted by one), both NB_I64 in the
 * current scope. The same rng state draws the same batch. False with an error naming
 * nb_corpus_batch when the corpus is not encoded or has fewer than T + 1 training tokens. */
bool nb_corpus_batch(const nb_corpus *c, nb_rng *rng, int64_t batch, int64_t T, nb_tensor **x,
                     nb_tensor **y);
/* Windows first..first+batch-1 of `windows` fixed windows of the validation tokens, evenly
 * spaced (window w starts at w * ((val_tokens - T - 1) / windows)), as nb_corpus_batch gives
 * them: the same windows on every call, for comparable validation losses. False with an error
 * when the validation text has fewer than T + 2 tokens or the range is outside 0..windows-1. */
bool nb_corpus_val_batch(const nb_corpus *c, int64_t first, int64_t batch, int64_t windows,
                         int64_t T, nb_tensor **x, nb_tensor **y);
/* Frees what c holds and zeroes it (a zeroed corpus is fine). */
void nb_corpus_free(nb_corpus *c);

#ifdef __cplusplus
}
#endif
#endif
