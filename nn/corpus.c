/* A text corpus (text.h): the block split, tokens, and language-model batches. */
#include "nabla/text.h"
#include "tensor/nbt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nb_corpus_free(nb_corpus *c) {
    if (!c) return;
    free(c->train_text);
    free(c->val_text);
    free(c->train);
    free(c->val);
    *c = (nb_corpus){0};
}

bool nb_corpus_split(nb_corpus *c, const char *text, size_t len, size_t block, int every) {
    static const char op[] = "nb_corpus_split";
    if (!c) return nbt_error(op, "NULL corpus"), false;
    *c = (nb_corpus){0};
    if (!text && len) return nbt_error(op, "NULL text"), false;
    if (block < 1 || every < 0 || every == 1)
        return nbt_error(op, "block %zu and every %d: block >= 1, every >= 2 or 0", block, every),
               false;
    c->train_text = malloc(len + 1);
    c->val_text = malloc(len + 1);
    if (!c->train_text || !c->val_text)
        return nb_corpus_free(c), nbt_error(op, "out of memory"), false;
    for (size_t at = 0, k = 0; at < len; at += block, k++) {
        size_t n = len - at < block ? len - at : block;
        bool val = every > 0 && k % (size_t)every == (size_t)every - 1;
        memcpy(val ? c->val_text + c->val_bytes : c->train_text + c->train_bytes, text + at, n);
        *(val ? &c->val_bytes : &c->train_bytes) += n;
    }
    return true;
}

/* Appends the bytes of path to *buf (len, cap), grown as needed. */
static bool append_file(const char *path, char **buf, size_t *len, size_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    bool ok = true;
    for (size_t got = 1; ok && got > 0;) {
        if (*cap - *len < 65536) {
            size_t bigger = 2 * *cap + 65536;
            char *grown = realloc(*buf, bigger);
            if (!grown)
                ok = false;
            else
                *buf = grown, *cap = bigger;
        }
        if (ok) *len += got = fread(*buf + *len, 1, *cap - *len, f);
    }
    ok = ok && !ferror(f);
    fclose(f);
    return ok;
}

bool nb_corpus_read(nb_corpus *c, int n, const char *const *paths, size_t block, int every) {
    if (!c) return nbt_error("nb_corpus_read", "NULL corpus"), false;
    *c = (nb_corpus){0};
    if (n < 1 || !paths) return nbt_error("nb_corpus_read", "no files (%d)", n), false;
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (int i = 0; i < n; i++)
        if (!paths[i] || !append_file(paths[i], &text, &len, &cap)) {
            free(text);
            return nbt_error("nb_corpus_read", "cannot read %s", paths[i] ? paths[i] : "(NULL)"),
                   false;
        }
    bool ok = nb_corpus_split(c, text, len, block, every);
    free(text);
    return ok;
}

bool nb_corpus_encode(nb_corpus *c, const nb_tokenizer *t) {
    if (!c || !t) return nbt_error("nb_corpus_encode", "NULL argument"), false;
    free(c->train);
    free(c->val);
    c->train = malloc(sizeof *c->train * (c->train_bytes + 1));
    c->val = malloc(sizeof *c->val * (c->val_bytes + 1));
    c->train_tokens = c->val_tokens = 0;
    if (!c->train || !c->val) {
        free(c->train), free(c->val);
        c->train = c->val = NULL;
        return nbt_error("nb_corpus_encode", "out of memory"), false;
    }
    size_t skipped_train, skipped_val;
    c->train_tokens =
        nb_tokenizer_encode(t, c->train_text, c->train_bytes, c->train, &skipped_train);
    c->val_tokens = nb_tokenizer_encode(t, c->val_text, c->val_bytes, c->val, &skipped_val);
    c->skipped = skipped_train + skipped_val;
    return true;
}

/* x and y [batch, T] of the windows of ids starting at start[0..batch). */
static bool windows(const char *op, const int64_t *ids, const int64_t *start, int64_t batch,
                    int64_t T, nb_tensor **x, nb_tensor **y) {
    *x = nb_empty(NB_I64, NB_SHAPE(batch, T));
    *y = nb_empty(NB_I64, NB_SHAPE(batch, T));
    if (!*x || !*y) return nbt_error(op, "out of memory"), false;
    int64_t *xd = nb_data(*x), *yd = nb_data(*y);
    for (int64_t b = 0; b < batch; b++) {
        memcpy(xd + b * T, ids + start[b], sizeof *xd * (size_t)T);
        memcpy(yd + b * T, ids + start[b] + 1, sizeof *yd * (size_t)T);
    }
    return true;
}

bool nb_corpus_batch(const nb_corpus *c, nb_rng *rng, int64_t batch, int64_t T, nb_tensor **x,
                     nb_tensor **y) {
    static const char op[] = "nb_corpus_batch";
    if (!c || !rng || !x || !y) return nbt_error(op, "NULL argument"), false;
    if (batch < 1 || T < 1)
        return nbt_error(op, "batch %lld, T %lld", (long long)batch, (long long)T), false;
    if (!c->train) return nbt_error(op, "the corpus is not encoded (nb_corpus_encode)"), false;
    if (c->train_tokens < T + 1)
        return nbt_error(op, "%lld training tokens, fewer than a window's %lld",
                         (long long)c->train_tokens, (long long)T + 1),
               false;
    int64_t *start = malloc(sizeof *start * (size_t)batch);
    if (!start) return nbt_error(op, "out of memory"), false;
    const uint64_t starts = (uint64_t)(c->train_tokens - T);
    for (int64_t b = 0; b < batch; b++) start[b] = (int64_t)(nb_rng_next(rng) % starts);
    bool ok = windows(op, c->train, start, batch, T, x, y);
    free(start);
    return ok;
}

bool nb_corpus_val_batch(const nb_corpus *c, int64_t first, int64_t batch, int64_t n_windows,
                         int64_t T, nb_tensor **x, nb_tensor **y) {
    static const char op[] = "nb_corpus_val_batch";
    if (!c || !x || !y) return nbt_error(op, "NULL argument"), false;
    if (T < 1 || batch < 1 || first < 0 || n_windows < 1 || first > n_windows - batch)
        return nbt_error(op, "windows %lld..%lld of %lld, T %lld", (long long)first,
                         (long long)(first + batch - 1), (long long)n_windows, (long long)T),
               false;
    if (!c->val) return nbt_error(op, "the corpus is not encoded (nb_corpus_encode)"), false;
    if (c->val_tokens < T + 2)
        return nbt_error(op, "%lld validation tokens, fewer than %lld", (long long)c->val_tokens,
                         (long long)T + 2),
               false;
    int64_t *start = malloc(sizeof *start * (size_t)batch);
    if (!start) return nbt_error(op, "out of memory"), false;
    const int64_t stride = (c->val_tokens - T - 1) / n_windows;
    for (int64_t b = 0; b < batch; b++) start[b] = (first + b) * stride;
    bool ok = windows(op, c->val, start, batch, T, x, y);
    free(start);
    return ok;
}
