/* The tokenizer's representation, shared by nn/tokenizer*.c. Not installed. */
#ifndef NABLA_TOKENIZER_IMPL_H
#define NABLA_TOKENIZER_IMPL_H

#include "nabla/text.h"

#include <stdint.h>

/* An open-addressing map from a pair of token ids to a value (a merge's rank, or a count),
 * for the BPE's merge lookups and training's pair counts. */
typedef struct {
    uint64_t *keys; /* (left << 32 | right) + 1; 0 marks an empty slot */
    int64_t *values;
    size_t cap, used; /* cap a power of two */
} nbtok_pair_map;

bool nbtok_pair_map_init(nbtok_pair_map *m, size_t expected);
void nbtok_pair_map_free(nbtok_pair_map *m);
/* The value of (left, right), or NULL. */
int64_t *nbtok_pair_map_find(const nbtok_pair_map *m, int32_t left, int32_t right);
/* The value of (left, right), added as 0 if absent; NULL if out of memory. */
int64_t *nbtok_pair_map_get(nbtok_pair_map *m, int32_t left, int32_t right);
static inline uint64_t nbtok_pair_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
}

struct nb_tokenizer {
    nb_tokenizer_kind kind;
    int64_t size;
    /* chars: id_of[byte] is the byte's token or -1. bpe: the identity on 0..255. */
    int32_t id_of[256];
    /* Token id's bytes are bytes[offset[id] .. offset[id + 1]). */
    char *bytes;
    size_t *offset;
    /* bpe: merge i joins merges[2i], merges[2i + 1]; rank maps each pair to i. */
    int64_t n_merges;
    int32_t *merges;
    nbtok_pair_map rank;
    /* The metadata values, made once (the tokenizer never changes). */
    char *meta_value;
    /* The tokens and merges as an nb_gguf_vocab points at them. */
    const char **token_ptrs;
    int64_t *token_lens;
    int64_t (*merge_pairs)[2];
};

/* A characters tokenizer of the bytes present, or a BPE of n_merges merges (pairs of ids,
 * flattened; checked, then copied), with its token bytes and metadata made. NULL with an error
 * naming op. */
nb_tokenizer *nbtok_chars_from_set(const char *op, const bool present[256]);
nb_tokenizer *nbtok_bpe_from_merges(const char *op, const int64_t *merges, int64_t n_merges);

/* Cuts text into BPE pieces (text.h's rule): the length of the piece at the start of text. */
size_t nbtok_piece_len(const unsigned char *text, size_t len);
/* Encodes one piece of a BPE into ids; returns how many. sym has room for len ids. */
int64_t nbtok_bpe_encode_piece(const nb_tokenizer *t, const unsigned char *piece, size_t len,
                               int64_t *ids);

#endif
