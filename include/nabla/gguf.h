/* GGUF files, the format llama.cpp and the tools built on it read (ggml's docs/gguf.md,
 * version 3): metadata key/values, then tensors, little-endian, every tensor's data aligned to
 * 32 bytes. nabla writes GGUF (it does not read it): build the file's contents in an nb_gguf,
 * then save it. blk_llama_lm_save_gguf (nabla/blocks.h) exports a Llama-style LM this way.
 *
 * Keys are ASCII, lower_snake_case segments joined by '.', at most 65535 bytes; tensor names at
 * most 63 bytes; both unique within a file. A tensor's dims are written innermost first, as
 * ggml counts them: a [rows, cols] weight is ne = {cols, rows}. */
#ifndef NABLA_GGUF_H
#define NABLA_GGUF_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_gguf nb_gguf;

/* ggml's tensor types that nabla writes. */
typedef enum { NB_GGUF_F32 = 0, NB_GGUF_F16 = 1 } nb_gguf_type;

/* An empty file's contents; the caller frees it with nb_gguf_free. NULL with an error when out
 * of memory. */
nb_gguf *nb_gguf_new(void);
/* Releases g and the values copied into it. NULL is fine. */
void nb_gguf_free(nb_gguf *g);

/* Metadata. Each copies its value into g; false with an error naming the key for a bad or
 * repeated key, a NULL value, or no memory. */
bool nb_gguf_set_string(nb_gguf *g, const char *key, const char *value);
bool nb_gguf_set_u32(nb_gguf *g, const char *key, uint32_t value);
bool nb_gguf_set_i32(nb_gguf *g, const char *key, int32_t value);
bool nb_gguf_set_f32(nb_gguf *g, const char *key, float value);
bool nb_gguf_set_bool(nb_gguf *g, const char *key, bool value);
/* An array of n strings; string i is lens[i] bytes at values[i] (any bytes), or NUL-terminated
 * when lens is NULL. */
bool nb_gguf_set_strings(nb_gguf *g, const char *key, int64_t n, const char *const *values,
                         const int64_t *lens);
bool nb_gguf_set_i32s(nb_gguf *g, const char *key, int64_t n, const int32_t *values);
bool nb_gguf_set_f32s(nb_gguf *g, const char *key, int64_t n, const float *values);

/* Adds tensor t (float, 1 to 4 dims, any strides) under name, its values converted now to type
 * (float16 rounds to nearest even; beyond its range is infinity); t is not kept. False with an
 * error naming the tensor for a bad name or tensor, or no memory. */
bool nb_gguf_add_tensor(nb_gguf *g, const char *name, const nb_tensor *t, nb_gguf_type type);

/* Writes g to path, replacing any file there atomically (a failed save leaves it unchanged).
 * False with an error naming the path. */
bool nb_gguf_save(const nb_gguf *g, const char *path);

/* A vocabulary for llama.cpp's byte-level BPE tokenizer (tokenizer.ggml.model "gpt2", as
 * GPT-2's): token i is the bytes tokens[i], lens[i] long (NUL-terminated when lens is NULL);
 * merges[j] = {left, right} says token left followed by token right merges (priority order,
 * as GPT-2's merges.txt), n_merges may be 0. bos and eos are token ids, or -1 for none. */
typedef struct {
    int64_t n_tokens;
    const char *const *tokens;
    const int64_t *lens;
    int64_t n_merges;
    const int64_t (*merges)[2];
    int64_t bos, eos;
} nb_gguf_vocab;

/* Sets the tokenizer.ggml.* keys for v: the tokens and merges written through GPT-2's
 * byte-to-unicode map (what llama.cpp expects of a "gpt2" vocabulary), every token normal,
 * no BOS added by the tokenizer. False with an error naming the bad token, merge or id. */
bool nb_gguf_set_vocab(nb_gguf *g, const nb_gguf_vocab *v);

/* Adds a model's weight t as nb_gguf_add_tensor does, but a 1-D t (a norm's weight, a bias)
 * always as float32, as llama.cpp reads them whatever the file's type. */
bool nb_gguf_add_weight(nb_gguf *g, const char *name, const nb_tensor *t, nb_gguf_type type);

/* What every model export writes besides the model's own keys and tensors. */
typedef struct {
    const char *arch;           /* general.architecture ("llama", ...), the prefix of its keys */
    const char *name;           /* general.name */
    int64_t max_len;            /* {arch}.context_length, in [1, 2^32) */
    int64_t n_vocab;            /* the model's vocabulary size ({arch}.vocab_size) */
    const nb_gguf_vocab *vocab; /* written by nb_gguf_set_vocab; must have n_vocab tokens */
    nb_gguf_type type;          /* the weights' type (general.file_type 0 or 1) */
} nb_gguf_model_info;

/* A model exporter's frame: checks info, sets the keys above and the vocabulary, calls
 * fill(g, model, info->type) to add the model's keys and tensors (tensors it makes in the
 * current scope are released after the save), and saves to path atomically. False with an
 * error "op: path: cause" (nothing written) when info, fill or the save fails. */
bool nb_gguf_save_model(const char *op, const char *path, const nb_gguf_model_info *info,
                        bool (*fill)(nb_gguf *g, const void *model, nb_gguf_type type),
                        const void *model);

/* float16 bits of x, rounded to nearest even (for tests and tools). */
uint16_t nb_gguf_f16_bits(float x);

#ifdef __cplusplus
}
#endif
#endif
