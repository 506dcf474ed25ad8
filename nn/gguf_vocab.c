/* A byte-level BPE vocabulary as llama.cpp reads it ("gpt2"): GPT-2 stores each token's bytes
 * as printable unicode characters (its byte-to-unicode map), so that tokens and merges are
 * valid text; llama.cpp decodes them back to bytes. */
#include "nabla/gguf.h"

#include "tensor/nbt.h"

#include <stdlib.h>
#include <string.h>

/* GPT-2's map: the printable bytes 33-126, 161-172 and 174-255 stand for themselves; the
 * others (control characters, space, 127-160, the soft hyphen) take code points 256, 257, ...
 * in byte order. Made once a vocabulary, in one pass over the bytes. */
static void byte_code_points(uint32_t cp[256]) {
    uint32_t next = 256;
    for (unsigned b = 0; b < 256; b++)
        cp[b] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174 ? b : next++;
}

/* Appends bytes[0..len) through the map cp as UTF-8 (each byte becomes 1 or 2 UTF-8 bytes: all
 * code points are below 0x800), at out, which has room for 2 * len. Returns the length. */
static size_t encode(const uint32_t cp[256], const char *bytes, int64_t len, char *out) {
    size_t n = 0;
    for (int64_t i = 0; i < len; i++) {
        uint32_t c = cp[(unsigned char)bytes[i]];
        if (c < 0x80)
            out[n++] = (char)c;
        else {
            out[n++] = (char)(0xc0 | (c >> 6));
            out[n++] = (char)(0x80 | (c & 0x3f));
        }
    }
    return n;
}

static int64_t token_len(const nb_gguf_vocab *v, int64_t i) {
    return v->lens ? v->lens[i] : (int64_t)strlen(v->tokens[i]);
}

/* The encoded tokens (or, with merges, "left right" pairs) as one array of strings; false
 * when out of memory. */
static bool encoded(const nb_gguf_vocab *v, const uint32_t cp[256], bool merges, char ***strs,
                    int64_t **lens) {
    int64_t n = merges ? v->n_merges : v->n_tokens;
    *strs = calloc((size_t)(n ? n : 1), sizeof **strs);
    *lens = calloc((size_t)(n ? n : 1), sizeof **lens);
    bool ok = *strs && *lens;
    for (int64_t i = 0; ok && i < n; i++) {
        int64_t a = merges ? v->merges[i][0] : i, b = merges ? v->merges[i][1] : -1;
        int64_t la = token_len(v, a), lb = b >= 0 ? token_len(v, b) : 0;
        char *s = (*strs)[i] = malloc((size_t)(2 * (la + lb) + 2));
        if (!(ok = s != NULL)) break;
        size_t k = encode(cp, v->tokens[a], la, s);
        if (b >= 0) {
            s[k++] = ' ';
            k += encode(cp, v->tokens[b], lb, s + k);
        }
        (*lens)[i] = (int64_t)k;
    }
    return ok;
}

static void free_encoded(char **strs, int64_t *lens, int64_t n) {
    for (int64_t i = 0; strs && i < n; i++) free(strs[i]);
    free(strs);
    free(lens);
}

static bool check_vocab(const nb_gguf_vocab *v) {
    const char *op = "nb_gguf_set_vocab";
    if (!v || v->n_tokens < 1 || !v->tokens || v->n_merges < 0 || (v->n_merges && !v->merges))
        return nbt_error(op, "the vocabulary needs tokens (and merges when n_merges > 0)"), false;
    for (int64_t i = 0; i < v->n_tokens; i++)
        if (!v->tokens[i] || token_len(v, i) < 1)
            return nbt_error(op, "token %lld is NULL or empty", (long long)i), false;
    for (int64_t j = 0; j < v->n_merges; j++)
        for (int s = 0; s < 2; s++)
            if (v->merges[j][s] < 0 || v->merges[j][s] >= v->n_tokens)
                return nbt_error(op, "merge %lld names token %lld, outside [0, %lld)", (long long)j,
                                 (long long)v->merges[j][s], (long long)v->n_tokens),
                       false;
    if (v->bos < -1 || v->bos >= v->n_tokens || v->eos < -1 || v->eos >= v->n_tokens)
        return nbt_error(op, "bos %lld / eos %lld must be -1 or a token id in [0, %lld)",
                         (long long)v->bos, (long long)v->eos, (long long)v->n_tokens),
               false;
    return true;
}

bool nb_gguf_set_vocab(nb_gguf *g, const nb_gguf_vocab *v) {
    if (!check_vocab(v)) return false;
    uint32_t cp[256];
    byte_code_points(cp);
    char **tok = NULL, **mer = NULL;
    int64_t *tok_len = NULL, *mer_len = NULL;
    int32_t *types = malloc(sizeof *types * (size_t)v->n_tokens);
    bool ok =
        types && encoded(v, cp, false, &tok, &tok_len) && encoded(v, cp, true, &mer, &mer_len);
    if (!ok) nbt_error("nb_gguf_set_vocab", "out of memory");
    for (int64_t i = 0; ok && i < v->n_tokens; i++) types[i] = 1; /* normal */
    ok = ok && nb_gguf_set_string(g, "tokenizer.ggml.model", "gpt2") &&
         nb_gguf_set_string(g, "tokenizer.ggml.pre", "default") &&
         nb_gguf_set_strings(g, "tokenizer.ggml.tokens", v->n_tokens, (const char *const *)tok,
                             tok_len) &&
         nb_gguf_set_i32s(g, "tokenizer.ggml.token_type", v->n_tokens, types) &&
         nb_gguf_set_strings(g, "tokenizer.ggml.merges", v->n_merges, (const char *const *)mer,
                             mer_len) &&
         nb_gguf_set_bool(g, "tokenizer.ggml.add_bos_token", false) &&
         (v->bos < 0 || nb_gguf_set_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos)) &&
         (v->eos < 0 || nb_gguf_set_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos));
    free_encoded(tok, tok_len, v->n_tokens);
    free_encoded(mer, mer_len, v->n_merges);
    free(types);
    return ok;
}
