/* Building and writing GGUF files (nabla/gguf.h). Metadata is serialised as it is set, into
 * one growing byte buffer; tensors keep their converted bytes until the save. */
#include "nabla/gguf.h"

#include "atomic_file.h"
#include "tensor/nbt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ALIGNMENT = 32, MAX_NAME = 63, MAX_KEY = 65535, MAX_DIMS = 4 };

/* gguf_metadata_value_type */
enum { T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7, T_STRING = 8, T_ARRAY = 9 };

typedef struct {
    unsigned char *p;
    size_t len, cap;
} bytes;

typedef struct {
    char *name;
    int ndim;
    uint64_t ne[MAX_DIMS]; /* innermost first */
    nb_gguf_type type;
    unsigned char *data;
    size_t nbytes;
} gguf_tensor;

struct nb_gguf {
    bytes kv; /* the serialised key/values */
    uint64_t n_kv;
    char **keys; /* for the uniqueness check */
    gguf_tensor *tensors;
    int64_t n_tensors, cap_tensors;
};

static bool reserve(bytes *b, size_t more) {
    if (b->len + more <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

static bool put(bytes *b, const void *data, size_t n) {
    if (!reserve(b, n)) return false;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    return true;
}

/* Little-endian integers whatever the host (the format is little-endian). */
static bool put_u32(bytes *b, uint32_t v) {
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    return put(b, x, 4);
}

static bool put_u64(bytes *b, uint64_t v) {
    return put_u32(b, (uint32_t)v) && put_u32(b, (uint32_t)(v >> 32));
}

static bool put_string(bytes *b, const char *s, size_t n) {
    return put_u64(b, n) && put(b, s, n);
}

static bool put_f32(bytes *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return put_u32(b, u);
}

nb_gguf *nb_gguf_new(void) {
    nb_gguf *g = calloc(1, sizeof *g);
    if (!g) nbt_error("nb_gguf_new", "out of memory");
    return g;
}

void nb_gguf_free(nb_gguf *g) {
    if (!g) return;
    free(g->kv.p);
    for (uint64_t i = 0; i < g->n_kv; i++) free(g->keys[i]);
    free(g->keys);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        free(g->tensors[i].name);
        free(g->tensors[i].data);
    }
    free(g->tensors);
    free(g);
}

/* Whether key is lower_snake_case segments joined by '.' (the spec's rule for keys). */
static bool key_ok(const char *key) {
    size_t n = strlen(key);
    if (n == 0 || n > MAX_KEY || key[0] == '.' || key[n - 1] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (c == '.' ? key[i + 1] == '.'
                     : !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

/* Checks key and starts its entry (key, value type); false with an error. */
static bool begin_kv(nb_gguf *g, const char *op, const char *key, uint32_t type) {
    if (!g || !key) return nbt_error(op, "NULL %s", g ? "key" : "nb_gguf"), false;
    if (!key_ok(key))
        return nbt_error(op, "key '%.80s' is not lower_snake_case segments joined by '.'", key),
               false;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->keys[i], key) == 0)
            return nbt_error(op, "key '%s' is already set", key), false;
    char **keys = realloc(g->keys, sizeof *keys * (g->n_kv + 1));
    if (keys) g->keys = keys;
    char *copy = keys ? strdup(key) : NULL;
    if (!copy || !put_string(&g->kv, key, strlen(key)) || !put_u32(&g->kv, type)) {
        free(copy);
        return nbt_error(op, "key '%s': out of memory", key), false;
    }
    g->keys[g->n_kv++] = copy;
    return true;
}

/* Ends an entry whose value was written (ok) or not (out of memory: the entry is taken back). */
static bool end_kv(nb_gguf *g, const char *op, const char *key, size_t start, bool ok) {
    if (ok) return true;
    g->kv.len = start;
    free(g->keys[--g->n_kv]);
    return nbt_error(op, "key '%s': out of memory", key), false;
}

#define SCALAR_SETTER(fn, ctype, tag, writer)                                                      \
    bool fn(nb_gguf *g, const char *key, ctype value) {                                            \
        size_t start = g ? g->kv.len : 0;                                                          \
        if (!begin_kv(g, #fn, key, tag)) return false;                                             \
        return end_kv(g, #fn, key, start, writer);                                                 \
    }

SCALAR_SETTER(nb_gguf_set_u32, uint32_t, T_U32, put_u32(&g->kv, value))
SCALAR_SETTER(nb_gguf_set_i32, int32_t, T_I32, put_u32(&g->kv, (uint32_t)value))
SCALAR_SETTER(nb_gguf_set_f32, float, T_F32, put_f32(&g->kv, value))
SCALAR_SETTER(nb_gguf_set_bool, bool, T_BOOL, put(&g->kv, &(unsigned char){value ? 1 : 0}, 1))

bool nb_gguf_set_string(nb_gguf *g, const char *key, const char *value) {
    const char *op = "nb_gguf_set_string";
    if (!value) return nbt_error(op, "key '%s': NULL value", key ? key : "(null)"), false;
    size_t start = g ? g->kv.len : 0;
    if (!begin_kv(g, op, key, T_STRING)) return false;
    return end_kv(g, op, key, start, put_string(&g->kv, value, strlen(value)));
}

/* Checks an array's arguments and starts its entry; the caller writes array_head and the
 * elements, then ends the entry. False with an error. */
static bool begin_array(nb_gguf *g, const char *op, const char *key, int64_t n,
                        const void *values) {
    if (n < 0 || (n > 0 && !values))
        return nbt_error(op, "key '%s': %s", key ? key : "(null)",
                         n < 0 ? "negative count" : "NULL values"),
               false;
    return begin_kv(g, op, key, T_ARRAY);
}

static bool array_head(bytes *b, uint32_t elem, int64_t n) {
    return put_u32(b, elem) && put_u64(b, (uint64_t)n);
}

bool nb_gguf_set_strings(nb_gguf *g, const char *key, int64_t n, const char *const *values,
                         const int64_t *lens) {
    const char *op = "nb_gguf_set_strings";
    size_t start = g ? g->kv.len : 0;
    for (int64_t i = 0; values && i < n; i++)
        if (!values[i] || (lens && lens[i] < 0))
            return nbt_error(op, "key '%s': string %lld is %s", key ? key : "(null)", (long long)i,
                             values[i] ? "of negative length" : "NULL"),
                   false;
    if (!begin_array(g, op, key, n, values)) return false;
    bool ok = array_head(&g->kv, T_STRING, n);
    for (int64_t i = 0; ok && i < n; i++)
        ok = put_string(&g->kv, values[i], lens ? (size_t)lens[i] : strlen(values[i]));
    return end_kv(g, op, key, start, ok);
}

/* An array of n 4-byte elements of type elem (int32 or float32), written as the little-endian
 * uint32 of each element's bits. */
static bool set_words(nb_gguf *g, const char *op, const char *key, int64_t n, const void *values,
                      uint32_t elem) {
    size_t start = g ? g->kv.len : 0;
    if (!begin_array(g, op, key, n, values)) return false;
    bool ok = array_head(&g->kv, elem, n);
    for (int64_t i = 0; ok && i < n; i++) {
        uint32_t bits;
        memcpy(&bits, (const char *)values + 4 * i, 4);
        ok = put_u32(&g->kv, bits);
    }
    return end_kv(g, op, key, start, ok);
}

bool nb_gguf_set_i32s(nb_gguf *g, const char *key, int64_t n, const int32_t *values) {
    return set_words(g, "nb_gguf_set_i32s", key, n, values, T_I32);
}

bool nb_gguf_set_f32s(nb_gguf *g, const char *key, int64_t n, const float *values) {
    return set_words(g, "nb_gguf_set_f32s", key, n, values, T_F32);
}

uint16_t nb_gguf_f16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) return sign | 0x7e00;  /* NaN stays NaN (quiet) */
    if (a >= 0x477ff000) return sign | 0x7c00; /* rounds to beyond 65504: inf */
    if (a < 0x38800000) {                      /* below 2^-14: subnormal or 0 */
        if (a < 0x33000000) return sign;       /* below half the least: 0 */
        /* The significand with its hidden bit, shifted to units of 2^-24, rounded to even. */
        uint32_t m = (a & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(a >> 23); /* 2^e with e in [-25, -15]: shift 14 .. 24 */
        uint32_t q = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    /* Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even; a carry
     * into the exponent is the right result. */
    uint32_t h = ((a - 0x38000000) >> 13), rest = a & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

/* t's values as type's bytes; false when out of memory. */
static bool convert(const nb_tensor *t, nb_gguf_type type, gguf_tensor *out) {
    int64_t n = nb_numel(t);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    out->nbytes = (size_t)n * (type == NB_GGUF_F16 ? 2 : 4);
    out->data = malloc(out->nbytes ? out->nbytes : 1);
    bool ok = v && out->data && nb_to_doubles(t, v);
    for (int64_t i = 0; ok && i < n; i++) {
        float f = (float)v[i];
        uint32_t u;
        memcpy(&u, &f, 4);
        uint32_t bits = type == NB_GGUF_F16 ? nb_gguf_f16_bits(f) : u;
        for (size_t b = 0; b < (type == NB_GGUF_F16 ? 2u : 4u); b++)
            out->data[(size_t)i * (type == NB_GGUF_F16 ? 2 : 4) + b] =
                (unsigned char)(bits >> (8 * b));
    }
    free(v);
    return ok;
}

bool nb_gguf_add_tensor(nb_gguf *g, const char *name, const nb_tensor *t, nb_gguf_type type) {
    const char *op = "nb_gguf_add_tensor";
    if (!g || !name || !t)
        return nbt_error(op, "NULL %s", !g ? "nb_gguf" : !name ? "name" : "tensor"), false;
    size_t len = strlen(name);
    if (len == 0 || len > MAX_NAME)
        return nbt_error(op, "tensor name '%.80s' must be 1 to %d bytes", name, MAX_NAME), false;
    if (t->dtype != NB_F32 && t->dtype != NB_F64)
        return nbt_error(op, "tensor '%s': %s %s must be float32 or float64", name,
                         nb_dtype_name(t->dtype), nbt_shape(t)),
               false;
    if (t->ndim < 1 || t->ndim > MAX_DIMS)
        return nbt_error(op, "tensor '%s': %s must have 1 to %d dims", name, nbt_shape(t),
                         MAX_DIMS),
               false;
    if (type != NB_GGUF_F32 && type != NB_GGUF_F16)
        return nbt_error(op, "tensor '%s': unknown type %d", name, (int)type), false;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return nbt_error(op, "tensor '%s' is already added", name), false;
    if (g->n_tensors == g->cap_tensors) {
        int64_t cap = g->cap_tensors ? 2 * g->cap_tensors : 16;
        gguf_tensor *p = realloc(g->tensors, sizeof *p * (size_t)cap);
        if (!p) return nbt_error(op, "tensor '%s': out of memory", name), false;
        g->tensors = p;
        g->cap_tensors = cap;
    }
    gguf_tensor e = {.name = strdup(name), .ndim = t->ndim, .type = type};
    for (int d = 0; d < t->ndim; d++) e.ne[d] = (uint64_t)t->shape[t->ndim - 1 - d];
    if (!e.name || !convert(t, type, &e)) {
        free(e.name);
        free(e.data);
        return nbt_error(op, "tensor '%s' %s: out of memory", name, nbt_shape(t)), false;
    }
    g->tensors[g->n_tensors++] = e;
    return true;
}

static uint64_t aligned(uint64_t offset) {
    return (offset + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
}

/* The whole file but the tensors' data: header, metadata, tensor infos, padding. */
static bool build_head(const nb_gguf *g, bytes *b) {
    bool ok = put(b, "GGUF", 4) && put_u32(b, 3) && put_u64(b, (uint64_t)g->n_tensors) &&
              put_u64(b, g->n_kv) && put(b, g->kv.p, g->kv.len);
    uint64_t offset = 0;
    for (int64_t i = 0; ok && i < g->n_tensors; i++) {
        const gguf_tensor *e = &g->tensors[i];
        ok = put_string(b, e->name, strlen(e->name)) && put_u32(b, (uint32_t)e->ndim);
        for (int d = 0; ok && d < e->ndim; d++) ok = put_u64(b, e->ne[d]);
        ok = ok && put_u32(b, (uint32_t)e->type) && put_u64(b, offset);
        offset = aligned(offset + e->nbytes);
    }
    static const unsigned char zeros[ALIGNMENT];
    return ok && put(b, zeros, aligned(b->len) - b->len);
}

static bool write_gguf(int fd, void *ctx) {
    const nb_gguf *g = ctx;
    bytes head = {0};
    bool ok = build_head(g, &head) && nbn_write_all(fd, head.p, head.len);
    if (!ok && !head.p) errno = ENOMEM;
    free(head.p);
    static const unsigned char zeros[ALIGNMENT];
    for (int64_t i = 0; ok && i < g->n_tensors; i++) {
        const gguf_tensor *e = &g->tensors[i];
        ok = nbn_write_all(fd, e->data, e->nbytes) &&
             nbn_write_all(fd, zeros, aligned(e->nbytes) - e->nbytes);
    }
    return ok;
}

bool nb_gguf_save(const nb_gguf *g, const char *path) {
    if (!g || !path) return nbt_error("nb_gguf_save", "NULL %s", g ? "path" : "nb_gguf"), false;
    return nbn_replace_file("nb_gguf_save", path, write_gguf, (void *)g);
}
