/* The byte-level BPE (text.h): cutting text into pieces, encoding a piece, and training. */
#include "tensor/nbt.h"
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- pieces ---- */
enum { LETTER, DIGIT, SPACE, OTHER };

static int byte_class(unsigned char b) {
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b >= 0x80) return LETTER;
    if (b >= '0' && b <= '9') return DIGIT;
    if (b == ' ' || (b >= '\t' && b <= '\r')) return SPACE;
    return OTHER;
}

size_t nbtok_piece_len(const unsigned char *s, size_t len) {
    size_t i = 0;
    if (s[0] == ' ' && len > 1 && byte_class(s[1]) != SPACE) i = 1; /* the space before a run */
    int c = byte_class(s[i]);
    size_t j = i + 1;
    while (j < len && byte_class(s[j]) == c) j++;
    /* A run of spaces before a non-space leaves its last space, if a space, to the next piece. */
    if (c == SPACE && j < len && j - i > 1 && s[j - 1] == ' ') j--;
    return j;
}

/* ---- encoding a piece ---- */
int64_t nbtok_bpe_encode_piece(const nb_tokenizer *t, const unsigned char *piece, size_t len,
                               int64_t *ids) {
    int64_t n = (int64_t)len;
    for (int64_t i = 0; i < n; i++) ids[i] = piece[i];
    /* Each merge applies at most once per piece: its token's id is above those of every merge
     * learned before it, so no later (higher-ranked) merge can rebuild its pair. */
    while (n > 1) {
        int64_t best = -1;
        for (int64_t i = 0; i + 1 < n; i++) {
            const int64_t *rank =
                nbtok_pair_map_find(&t->rank, (int32_t)ids[i], (int32_t)ids[i + 1]);
            if (rank && (best < 0 || *rank < best)) best = *rank;
        }
        if (best < 0) break;
        const int64_t l = t->merges[2 * best], r = t->merges[2 * best + 1];
        int64_t out = 0;
        for (int64_t i = 0; i < n; i++) {
            if (i + 1 < n && ids[i] == l && ids[i + 1] == r) {
                ids[out++] = 256 + best;
                i++;
            } else {
                ids[out++] = ids[i];
            }
        }
        n = out;
    }
    return n;
}

/* ---- training ---- */
/* The distinct pieces of the text, each with how often it occurs. */
typedef struct {
    size_t *slot_of; /* hash slots: 1 + index into the arrays below, 0 empty */
    size_t cap;
    size_t *start, *len; /* into the text */
    int64_t *count;
    size_t n, room;
} piece_set;

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

static bool piece_set_grow(piece_set *p, const unsigned char *text) {
    size_t cap = p->cap ? 2 * p->cap : 1024;
    size_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return false;
    for (size_t k = 0; k < p->n; k++) {
        size_t i = (size_t)hash_bytes(text + p->start[k], p->len[k]) & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = k + 1;
    }
    free(p->slot_of);
    p->slot_of = slots;
    p->cap = cap;
    p->room = cap / 2;
    size_t *start = realloc(p->start, sizeof *start * p->room);
    if (start) p->start = start;
    size_t *len = realloc(p->len, sizeof *len * p->room);
    if (len) p->len = len;
    int64_t *count = realloc(p->count, sizeof *count * p->room);
    if (count) p->count = count;
    return start && len && count;
}

static bool piece_set_add(piece_set *p, const unsigned char *text, size_t start, size_t len) {
    if (p->n + 1 > p->room && !piece_set_grow(p, text)) return false;
    size_t i = (size_t)hash_bytes(text + start, len) & (p->cap - 1);
    for (; p->slot_of[i]; i = (i + 1) & (p->cap - 1)) {
        size_t k = p->slot_of[i] - 1;
        if (p->len[k] == len && memcmp(text + p->start[k], text + start, len) == 0) {
            p->count[k]++;
            return true;
        }
    }
    p->slot_of[i] = p->n + 1;
    p->start[p->n] = start;
    p->len[p->n] = len;
    p->count[p->n++] = 1;
    return true;
}

static void piece_set_free(piece_set *p) {
    free(p->slot_of);
    free(p->start);
    free(p->len);
    free(p->count);
}

/* The pieces as token sequences, merged as training goes, with the pair counts. */
typedef struct {
    int32_t *sym; /* word w is sym[first[w] .. first[w] + len[w]) */
    size_t *first;
    size_t *len;
    int64_t *count;
    size_t n;
    nbtok_pair_map pairs; /* pair -> occurrences, weighted by the words' counts */
} words;

/* Adds sign * count to the pairs of word w; false if out of memory. */
static bool count_pairs(words *w, size_t k, int64_t sign) {
    const int32_t *s = w->sym + w->first[k];
    for (size_t i = 0; i + 1 < w->len[k]; i++) {
        int64_t *c = nbtok_pair_map_get(&w->pairs, s[i], s[i + 1]);
        if (!c) return false;
        *c += sign * w->count[k];
    }
    return true;
}

/* The most frequent pair (ties: smallest left, then right); false if no pair occurs. */
static bool best_pair(const nbtok_pair_map *m, int32_t *left, int32_t *right) {
    int64_t best = 0;
    uint64_t best_key = 0;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] && m->values[i] > 0 &&
            (m->values[i] > best || (m->values[i] == best && m->keys[i] < best_key)))
            best = m->values[i], best_key = m->keys[i];
    if (!best) return false;
    *left = (int32_t)((best_key - 1) >> 32);
    *right = (int32_t)((best_key - 1) & 0xffffffffu);
    return true;
}

/* Merges (l, r) into id in every word that has the pair, keeping the pair counts. */
static bool merge_everywhere(words *w, int32_t l, int32_t r, int32_t id) {
    for (size_t k = 0; k < w->n; k++) {
        int32_t *s = w->sym + w->first[k];
        size_t n = w->len[k], i = 0;
        while (i + 1 < n && !(s[i] == l && s[i + 1] == r)) i++;
        if (i + 1 >= n) continue;
        if (!count_pairs(w, k, -1)) return false;
        size_t out = i;
        for (; i < n; i++) {
            if (i + 1 < n && s[i] == l && s[i + 1] == r)
                s[out++] = id, i++;
            else
                s[out++] = s[i];
        }
        w->len[k] = out;
        if (!count_pairs(w, k, +1)) return false;
    }
    return true;
}

static void words_free(words *w) {
    free(w->sym);
    free(w->first);
    free(w->len);
    free(w->count);
    nbtok_pair_map_free(&w->pairs);
}

/* The distinct pieces of text as words of bytes, with their pair counts. */
static bool words_of(words *w, const unsigned char *text, size_t len) {
    piece_set p = {0};
    bool ok = true;
    for (size_t at = 0; ok && at < len;) {
        size_t n = nbtok_piece_len(text + at, len - at);
        ok = piece_set_add(&p, text, at, n);
        at += n;
    }
    size_t total = 0;
    for (size_t k = 0; ok && k < p.n; k++) total += p.len[k];
    w->n = p.n;
    ok = ok && (w->sym = malloc(sizeof *w->sym * (total + 1))) &&
         (w->first = malloc(sizeof *w->first * (p.n + 1))) &&
         (w->len = malloc(sizeof *w->len * (p.n + 1))) &&
         (w->count = malloc(sizeof *w->count * (p.n + 1))) && nbtok_pair_map_init(&w->pairs, 4096);
    for (size_t k = 0, at = 0; ok && k < p.n; k++) {
        w->first[k] = at;
        w->len[k] = p.len[k];
        w->count[k] = p.count[k];
        for (size_t i = 0; i < p.len[k]; i++) w->sym[at++] = text[p.start[k] + i];
        ok = count_pairs(w, k, +1);
    }
    piece_set_free(&p);
    return ok;
}

nb_tokenizer *nb_tokenizer_bpe_train(const char *text, size_t len, int64_t vocab_size) {
    static const char op[] = "nb_tokenizer_bpe_train";
    if (!text && len) return nbt_error(op, "NULL text");
    if (vocab_size < 256 || vocab_size > (1 << 20))
        return nbt_error(op, "vocabulary size %lld (from 256 to %d)", (long long)vocab_size,
                         1 << 20);
    const int64_t wanted = vocab_size - 256;
    int64_t *merges = malloc(sizeof *merges * (size_t)(2 * wanted + 1));
    words w = {0};
    if (!merges || !words_of(&w, (const unsigned char *)text, len)) {
        free(merges);
        words_free(&w);
        return nbt_error(op, "out of memory");
    }
    int64_t n = 0;
    for (int32_t l, r; n < wanted && best_pair(&w.pairs, &l, &r); n++) {
        merges[2 * n] = l;
        merges[2 * n + 1] = r;
        if (!merge_everywhere(&w, l, r, (int32_t)(256 + n))) {
            free(merges);
            words_free(&w);
            return nbt_error(op, "out of memory");
        }
    }
    words_free(&w);
    nb_tokenizer *t = nbtok_bpe_from_merges(op, merges, n);
    free(merges);
    return t;
}
