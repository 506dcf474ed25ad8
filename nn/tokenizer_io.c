/* Tokenizers in checkpoint metadata (text.h): the entries to save, and reading them back. */
#include "tensor/nbt.h"
#include "tokenizer_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHARS_KEY NB_TOKENIZER_KEY ".chars"
#define MERGES_KEY NB_TOKENIZER_KEY ".merges"

int nb_tokenizer_metadata(const nb_tokenizer *t, nb_metadata_entry *out) {
    if (!t || !out) return nbt_error("nb_tokenizer_metadata", "NULL argument"), 0;
    const bool bpe = t->kind == NB_TOKENIZER_BPE;
    out[0] = (nb_metadata_entry){NB_TOKENIZER_KEY, bpe ? "bpe" : "chars"};
    out[1] = (nb_metadata_entry){bpe ? MERGES_KEY : CHARS_KEY, t->meta_value};
    return 2;
}

static const char *value_of(int n, const nb_metadata_entry *meta, const char *key) {
    for (int i = 0; i < n; i++)
        if (meta[i].key && strcmp(meta[i].key, key) == 0) return meta[i].value;
    return NULL;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "chars": sorted distinct bytes in lowercase hex. */
static nb_tokenizer *chars_of(const char *op, const char *hex) {
    size_t n = strlen(hex);
    bool present[256] = {false};
    if (n == 0 || n % 2 || n > 512)
        return nbt_error(op, "metadata %s has %zu hex digits, not 2 to 512 in pairs", CHARS_KEY, n);
    for (size_t i = 0, last = 0; i < n; i += 2) {
        int hi = hex_digit(hex[i]), lo = hex_digit(hex[i + 1]);
        if (hi < 0 || lo < 0)
            return nbt_error(op, "metadata %s: '%.2s' at %zu is not two lowercase hex digits",
                             CHARS_KEY, hex + i, i);
        size_t b = (size_t)(hi * 16 + lo);
        if (i > 0 && b <= last)
            return nbt_error(op, "metadata %s: byte %02zx at %zu is not above the one before",
                             CHARS_KEY, b, i);
        present[b] = true;
        last = b;
    }
    return nbtok_chars_from_set(op, present);
}

/* "bpe": a JSON array of [left, right] pairs of ids. */
static nb_tokenizer *bpe_of(const char *op, const char *text) {
    json_error_t err;
    json_t *arr = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_array(arr) || json_array_size(arr) > (1 << 20) - 256) {
        json_decref(arr);
        return nbt_error(op, "metadata %s is not a JSON array of at most %d merges%s%.80s",
                         MERGES_KEY, (1 << 20) - 256, arr ? "" : ": ", arr ? "" : err.text);
    }
    size_t n = json_array_size(arr);
    int64_t *merges = malloc(sizeof *merges * (2 * n + 1));
    if (!merges) return json_decref(arr), nbt_error(op, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *pair = json_array_get(arr, i);
        for (size_t k = 0; k < 2; k++) {
            json_t *id = json_array_get(pair, k);
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(id)) {
                free(merges);
                json_decref(arr);
                return nbt_error(op, "metadata %s: merge %zu is not a pair of integer ids",
                                 MERGES_KEY, i);
            }
            merges[2 * i + k] = json_integer_value(id);
        }
    }
    json_decref(arr);
    nb_tokenizer *t = nbtok_bpe_from_merges(op, merges, (int64_t)n);
    free(merges);
    return t;
}

nb_tokenizer *nb_tokenizer_from_metadata(int n, const nb_metadata_entry *meta) {
    static const char op[] = "nb_tokenizer_from_metadata";
    if (n < 0 || (n && !meta)) return nbt_error(op, "NULL metadata");
    const char *kind = value_of(n, meta, NB_TOKENIZER_KEY);
    if (!kind)
        return nbt_error(op, "no metadata %s: the file carries no tokenizer", NB_TOKENIZER_KEY);
    const bool bpe = strcmp(kind, "bpe") == 0;
    if (!bpe && strcmp(kind, "chars") != 0)
        return nbt_error(op, "metadata %s is '%.40s', not 'chars' or 'bpe'", NB_TOKENIZER_KEY,
                         kind);
    const char *key = bpe ? MERGES_KEY : CHARS_KEY, *value = value_of(n, meta, key);
    if (!value) return nbt_error(op, "a '%s' tokenizer without metadata %s", kind, key);
    return bpe ? bpe_of(op, value) : chars_of(op, value);
}

nb_tokenizer *nb_tokenizer_read(const char *path) {
    if (!path) return nbt_error("nb_tokenizer_read", "NULL path");
    nb_scope_begin();
    int n = 0;
    nb_metadata_entry *meta = nb_safetensors_read_metadata(path, &n);
    nb_tokenizer *t = meta ? nb_tokenizer_from_metadata(n, meta) : NULL;
    if (!t) {
        char why[512];
        snprintf(why, sizeof why, "%s", nb_last_error());
        nbt_error("nb_tokenizer_read", "%s: %s", path, why);
    }
    nb_scope_end();
    return t;
}
