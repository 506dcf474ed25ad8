/* Tokenizers (text.h): making them from characters or merges, encoding, decoding, and their
 * tokens. Training is in tokenizer_bpe.c, checkpoint metadata in tokenizer_io.c. */
#include "tokenizer_impl.h"
#include "tensor/nbt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the pair map ---- */
bool nbtok_pair_map_init(nbtok_pair_map *m, size_t expected) {
    size_t cap = 64;
    while (cap < 2 * expected) cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->values = calloc(cap, sizeof *m->values);
    m->cap = cap;
    m->used = 0;
    return m->keys && m->values;
}

void nbtok_pair_map_free(nbtok_pair_map *m) {
    free(m->keys);
    free(m->values);
    *m = (nbtok_pair_map){0};
}

static size_t slot_of(const nbtok_pair_map *m, uint64_t key) {
    uint64_t h = key * 0x9e3779b97f4a7c15ULL;
    size_t i = (size_t)(h >> 17) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

int64_t *nbtok_pair_map_find(const nbtok_pair_map *m, int32_t left, int32_t right) {
    if (!m->cap) return NULL;
    size_t i = slot_of(m, nbtok_pair_key(left, right));
    return m->keys[i] ? &m->values[i] : NULL;
}

static bool grow(nbtok_pair_map *m) {
    nbtok_pair_map bigger = {0};
    if (!nbtok_pair_map_init(&bigger, m->cap)) return nbtok_pair_map_free(&bigger), false;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            size_t j = slot_of(&bigger, m->keys[i]);
            bigger.keys[j] = m->keys[i];
            bigger.values[j] = m->values[i];
        }
    bigger.used = m->used;
    nbtok_pair_map_free(m);
    *m = bigger;
    return true;
}

int64_t *nbtok_pair_map_get(nbtok_pair_map *m, int32_t left, int32_t right) {
    if (2 * (m->used + 1) > m->cap && !grow(m)) return NULL;
    uint64_t key = nbtok_pair_key(left, right);
    size_t i = slot_of(m, key);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->values[i] = 0;
        m->used++;
    }
    return &m->values[i];
}

/* ---- making tokenizers ---- */
/* The most bytes all of a tokenizer's tokens may have together. */
#define MAX_TOKEN_BYTES (1 << 28)

void nb_tokenizer_free(nb_tokenizer *t) {
    if (!t) return;
    free(t->bytes);
    free(t->offset);
    free(t->merges);
    nbtok_pair_map_free(&t->rank);
    free(t->meta_value);
    free(t->token_ptrs);
    free(t->token_lens);
    free(t->merge_pairs);
    free(t);
}

/* The arrays nb_tokenizer_gguf_vocab points at, once t's tokens are made; NULL if out of memory
 * (t freed). */
static nb_tokenizer *finish(const char *op, nb_tokenizer *t) {
    t->token_ptrs = malloc(sizeof *t->token_ptrs * (size_t)t->size);
    t->token_lens = malloc(sizeof *t->token_lens * (size_t)t->size);
    t->merge_pairs = malloc(sizeof *t->merge_pairs * (size_t)(t->n_merges + 1));
    if (!t->token_ptrs || !t->token_lens || !t->merge_pairs)
        return nb_tokenizer_free(t), nbt_error(op, "out of memory");
    for (int64_t id = 0; id < t->size; id++) {
        t->token_ptrs[id] = t->bytes + t->offset[id];
        t->token_lens[id] = (int64_t)(t->offset[id + 1] - t->offset[id]);
    }
    for (int64_t i = 0; i < t->n_merges; i++)
        t->merge_pairs[i][0] = t->merges[2 * i], t->merge_pairs[i][1] = t->merges[2 * i + 1];
    return t;
}

nb_tokenizer *nbtok_chars_from_set(const char *op, const bool present[256]) {
    nb_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return nbt_error(op, "out of memory");
    t->kind = NB_TOKENIZER_CHARS;
    t->bytes = malloc(256);
    t->offset = malloc(sizeof *t->offset * 257);
    t->meta_value = malloc(2 * 256 + 1);
    if (!t->bytes || !t->offset || !t->meta_value)
        return nb_tokenizer_free(t), nbt_error(op, "out of memory");
    t->offset[0] = 0;
    for (int b = 0; b < 256; b++) {
        t->id_of[b] = -1;
        if (!present[b]) continue;
        t->id_of[b] = (int32_t)t->size;
        t->bytes[t->size] = (char)b;
        sprintf(t->meta_value + 2 * t->size, "%02x", b);
        t->size++;
        t->offset[t->size] = (size_t)t->size;
    }
    t->meta_value[2 * t->size] = '\0';
    if (t->size == 0) return nb_tokenizer_free(t), nbt_error(op, "the text has no bytes");
    return finish(op, t);
}

nb_tokenizer *nb_tokenizer_chars(const char *text, size_t len) {
    if (!text && len) return nbt_error("nb_tokenizer_chars", "NULL text");
    bool present[256] = {false};
    for (size_t i = 0; i < len; i++) present[(unsigned char)text[i]] = true;
    return nbtok_chars_from_set("nb_tokenizer_chars", present);
}

nb_tokenizer *nb_tokenizer_bytes(void) {
    bool present[256];
    for (int b = 0; b < 256; b++) present[b] = true;
    return nbtok_chars_from_set("nb_tokenizer_bytes", present);
}

/* The merges as a JSON array of pairs (tokenizer's metadata). */
static char *merges_json(const int32_t *merges, int64_t n) {
    size_t cap = 3 + (size_t)n * 18, used = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[used++] = '[';
    for (int64_t i = 0; i < n; i++)
        used += (size_t)snprintf(s + used, cap - used, "%s[%d,%d]", i ? "," : "",
                                 (int)merges[2 * i], (int)merges[2 * i + 1]);
    s[used++] = ']';
    s[used] = '\0';
    return s;
}

nb_tokenizer *nbtok_bpe_from_merges(const char *op, const int64_t *merges, int64_t n_merges) {
    nb_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return nbt_error(op, "out of memory");
    t->kind = NB_TOKENIZER_BPE;
    t->n_merges = n_merges;
    t->size = 256 + n_merges;
    t->merges = malloc(sizeof *t->merges * (size_t)(2 * n_merges + 1));
    t->offset = malloc(sizeof *t->offset * (size_t)(t->size + 1));
    if (!t->merges || !t->offset || !nbtok_pair_map_init(&t->rank, (size_t)n_merges))
        return nb_tokenizer_free(t), nbt_error(op, "out of memory");
    /* Every merge is checked before its token's length is summed: a merge refers only to
     * earlier tokens, so the lengths stay below 2^(merge index + 1) and each is known. */
    t->offset[0] = 0;
    for (int b = 0; b < 256; b++) t->id_of[b] = b, t->offset[b + 1] = (size_t)b + 1;
    for (int64_t i = 0; i < n_merges; i++) {
        if (merges[2 * i] < 0 || merges[2 * i + 1] < 0 || merges[2 * i] >= 256 + i ||
            merges[2 * i + 1] >= 256 + i)
            return nb_tokenizer_free(t),
                   nbt_error(op,
                             "merge %lld joins tokens %lld and %lld, but only tokens 0..%lld "
                             "exist before it",
                             (long long)i, (long long)merges[2 * i], (long long)merges[2 * i + 1],
                             (long long)(255 + i));
        const int32_t l = (int32_t)merges[2 * i], r = (int32_t)merges[2 * i + 1];
        t->merges[2 * i] = l;
        t->merges[2 * i + 1] = r;
        int64_t *rank = nbtok_pair_map_get(&t->rank, l, r);
        if (!rank) return nb_tokenizer_free(t), nbt_error(op, "out of memory");
        if (t->rank.used != (size_t)i + 1) {
            const long long earlier = (long long)*rank;
            nb_tokenizer_free(t);
            return nbt_error(op, "merge %lld joins tokens %d and %d, as merge %lld already does",
                             (long long)i, (int)l, (int)r, earlier);
        }
        *rank = i;
        size_t len = (t->offset[l + 1] - t->offset[l]) + (t->offset[r + 1] - t->offset[r]);
        t->offset[257 + i] = t->offset[256 + i] + len;
        if (t->offset[257 + i] > MAX_TOKEN_BYTES) /* lengths can double with each merge */
            return nb_tokenizer_free(t),
                   nbt_error(op, "the tokens up to merge %lld's have more than %d bytes in all",
                             (long long)i, MAX_TOKEN_BYTES);
    }
    t->bytes = malloc(t->offset[t->size] ? t->offset[t->size] : 1);
    t->meta_value = merges_json(t->merges, n_merges);
    if (!t->bytes || !t->meta_value) return nb_tokenizer_free(t), nbt_error(op, "out of memory");
    for (int b = 0; b < 256; b++) t->bytes[b] = (char)b;
    for (int64_t i = 0; i < n_merges; i++) {
        int32_t l = t->merges[2 * i], r = t->merges[2 * i + 1];
        size_t ll = t->offset[l + 1] - t->offset[l];
        memcpy(t->bytes + t->offset[256 + i], t->bytes + t->offset[l], ll);
        memcpy(t->bytes + t->offset[256 + i] + ll, t->bytes + t->offset[r],
               t->offset[r + 1] - t->offset[r]);
    }
    return finish(op, t);
}

nb_tokenizer *nb_tokenizer_bpe_from_merges(int64_t n_merges, const int64_t *merges) {
    static const char op[] = "nb_tokenizer_bpe_from_merges";
    if (n_merges < 0 || n_merges > (1 << 20) - 256 || (n_merges && !merges))
        return nbt_error(op, "%lld merges (from 0 to %d, non-NULL)", (long long)n_merges,
                         (1 << 20) - 256);
    return nbtok_bpe_from_merges(op, merges, n_merges);
}

/* ---- what a tokenizer holds ---- */
nb_tokenizer_kind nb_tokenizer_kind_of(const nb_tokenizer *t) {
    return t && t->kind == NB_TOKENIZER_BPE ? NB_TOKENIZER_BPE : NB_TOKENIZER_CHARS;
}

const char *nb_tokenizer_kind_name(const nb_tokenizer *t) {
    return t && t->kind == NB_TOKENIZER_BPE ? "bpe" : "chars";
}

int64_t nb_tokenizer_vocab_size(const nb_tokenizer *t) {
    return t ? t->size : 0;
}

bool nb_tokenizer_has_byte(const nb_tokenizer *t, unsigned char byte) {
    return t && t->id_of[byte] >= 0;
}

const char *nb_tokenizer_token(const nb_tokenizer *t, int64_t id, size_t *len) {
    if (!t || !len) return nbt_error("nb_tokenizer_token", "NULL argument");
    if (id < 0 || id >= t->size)
        return nbt_error("nb_tokenizer_token", "token id %lld is outside the vocabulary of %lld",
                         (long long)id, (long long)t->size);
    *len = t->offset[id + 1] - t->offset[id];
    return t->bytes + t->offset[id];
}

nb_gguf_vocab nb_tokenizer_gguf_vocab(const nb_tokenizer *t) {
    if (!t) return (nb_gguf_vocab){.bos = -1, .eos = -1};
    return (nb_gguf_vocab){.n_tokens = t->size,
                           .tokens = t->token_ptrs,
                           .lens = t->token_lens,
                           .n_merges = t->n_merges,
                           .merges = (const int64_t(*)[2])t->merge_pairs,
                           .bos = -1,
                           .eos = -1};
}

int64_t nb_tokenizer_merge_count(const nb_tokenizer *t) {
    return t ? t->n_merges : 0;
}

bool nb_tokenizer_merge(const nb_tokenizer *t, int64_t i, int64_t *left, int64_t *right) {
    if (!t || !left || !right) return nbt_error("nb_tokenizer_merge", "NULL argument"), false;
    if (i < 0 || i >= t->n_merges)
        return nbt_error("nb_tokenizer_merge", "merge %lld of a tokenizer with %lld merges",
                         (long long)i, (long long)t->n_merges),
               false;
    *left = t->merges[2 * i];
    *right = t->merges[2 * i + 1];
    return true;
}

/* ---- encoding and decoding ---- */
int64_t nb_tokenizer_encode(const nb_tokenizer *t, const char *text, size_t len, int64_t *ids,
                            size_t *skipped) {
    if (!t || (len && (!text || !ids)))
        return nbt_error("nb_tokenizer_encode", "NULL argument"), -1;
    const unsigned char *s = (const unsigned char *)text;
    int64_t n = 0;
    size_t left_out = 0;
    if (t->kind == NB_TOKENIZER_CHARS) {
        for (size_t i = 0; i < len; i++)
            if (t->id_of[s[i]] >= 0)
                ids[n++] = t->id_of[s[i]];
            else
                left_out++;
    } else {
        for (size_t at = 0; at < len;) {
            size_t piece = nbtok_piece_len(s + at, len - at);
            n += nbtok_bpe_encode_piece(t, s + at, piece, ids + n);
            at += piece;
        }
    }
    if (skipped) *skipped = left_out;
    return n;
}

int64_t nb_tokenizer_decode(const nb_tokenizer *t, const int64_t *ids, int64_t n, char *out,
                            size_t cap) {
    if (!t || n < 0 || (n && !ids) || (cap && !out))
        return nbt_error("nb_tokenizer_decode", "NULL argument or negative count"), -1;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->size)
            return nbt_error("nb_tokenizer_decode",
                             "id %lld at position %lld is outside the vocabulary of %lld tokens",
                             (long long)ids[i], (long long)i, (long long)t->size),
                   -1;
        size_t from = t->offset[ids[i]], len = t->offset[ids[i] + 1] - from;
        if (total < cap)
            memcpy(out + total, t->bytes + from, len < cap - total ? len : cap - total);
        total += len;
    }
    return (int64_t)total;
}
