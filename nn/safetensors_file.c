/* Reading a safetensors file defensively: every number in the header is checked against the
 * file before it is used, so a truncated, corrupted or hostile file is an error, never an
 * out-of-bounds read or a crash. */
#include "safetensors_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; nabla's checkpoints assume a little-endian host"
#endif

/* Every message starts "op: path: ". */
#define FILE_ERROR(f, fmt, ...) nbt_error((f)->op, "%s: " fmt, (f)->path, __VA_ARGS__)

/* RFC 3629 UTF-8, as jansson checks it: no overlong forms, no surrogates, nothing past
 * U+10FFFF. */
static bool valid_utf8(const unsigned char *s) {
    while (*s) {
        unsigned c = *s++;
        if (c < 0x80) continue;
        int more = c >= 0xC2 && c <= 0xDF   ? 1
                   : c >= 0xE0 && c <= 0xEF ? 2
                   : c >= 0xF0 && c <= 0xF4 ? 3
                                            : -1;
        if (more < 0) return false;
        uint32_t cp = c & (0x3F >> more);
        for (int k = 0; k < more; k++, s++) {
            if ((*s & 0xC0) != 0x80) return false; /* also stops at the terminator */
            cp = cp << 6 | (*s & 0x3F);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
    }
    return true;
}

const char *nbst_name_problem(const char *name) {
    if (!name) return "a NULL name";
    if (!name[0]) return "an empty name";
    if (strcmp(name, "__metadata__") == 0)
        return "a reserved name (the name __metadata__ is reserved for the file's metadata)";
    if (!valid_utf8((const unsigned char *)name)) return "a name that is not valid UTF-8";
    return NULL;
}

const char *nbst_dtype_name(nb_dtype dt) {
    switch (dt) {
    case NB_F32:
        return "F32";
    case NB_F64:
        return "F64";
    case NB_I64:
        return "I64";
    case NB_BOOL:
        return "BOOL";
    }
    return "?";
}

static bool dtype_from_name(const char *s, nb_dtype *dt) {
    static const nb_dtype all[] = {NB_F32, NB_F64, NB_I64, NB_BOOL};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, nbst_dtype_name(all[i])) == 0) {
            *dt = all[i];
            return true;
        }
    return false;
}

uint64_t nbst_nbytes(const nb_tensor *t) {
    return (uint64_t)nb_numel(t) * nb_dtype_size(t->dtype);
}

/* ---- bitwise strided copies ---- */
static void copy_elements(int64_t n, char **p, const int64_t *s, void *ctx) {
    size_t es = *(const size_t *)ctx;
    if (s[0] == (int64_t)es && s[1] == (int64_t)es) {
        memcpy(p[0], p[1], (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1] + i * s[1], es);
}

/* Copies t->shape elements from src to dst, each side with its own element strides. */
static void copy_bytes(const nb_tensor *t, char *dst, const int64_t *dst_strides, const char *src,
                       const int64_t *src_strides) {
    size_t es = nb_dtype_size(t->dtype);
    nbt_operands ops = {.nops = 2, .base = {dst, (char *)src}, .elem = {es, es}};
    memcpy(ops.strides[0], dst_strides, sizeof(int64_t) * (size_t)t->ndim);
    memcpy(ops.strides[1], src_strides, sizeof(int64_t) * (size_t)t->ndim);
    nbt_iterate(t->ndim, t->shape, &ops, copy_elements, &es);
}

void nbst_gather(void *dst, const nb_tensor *t) {
    int64_t packed[NB_MAX_DIMS];
    nbt_contiguous_strides(t->ndim, t->shape, packed);
    copy_bytes(t, dst, packed, nbt_ptr(t), t->strides);
}

void nbst_scatter(nb_tensor *t, const void *src) {
    int64_t packed[NB_MAX_DIMS];
    nbt_contiguous_strides(t->ndim, t->shape, packed);
    copy_bytes(t, nbt_ptr(t), t->strides, src, packed);
}

/* ---- file reading ---- */
/* Reads exactly len bytes at offset; false on a short read (the file changed) or an error. */
static bool read_at(nbst_file *f, void *buf, uint64_t len, uint64_t offset) {
    char *p = buf;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)len;
        ssize_t r = pread(f->fd, p, chunk, (off_t)offset);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            FILE_ERROR(f, "read failed: %s", strerror(errno));
            return false;
        }
        if (r == 0) {
            FILE_ERROR(f, "the file ended early (at byte %llu); was it changed while reading?",
                       (unsigned long long)offset);
            return false;
        }
        p += r;
        len -= (uint64_t)r;
        offset += (uint64_t)r;
    }
    return true;
}

/* A JSON integer in [0, INT64_MAX]. */
static bool get_count(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* 8 lowercase hex digits, exactly. */
static bool parse_hex32(const char *text, uint32_t *out) {
    bool valid = strlen(text) == 8;
    for (int i = 0; valid && i < 8; i++)
        valid = (text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f');
    if (valid) *out = (uint32_t)strtoul(text, NULL, 16);
    return valid;
}

static bool check_metadata(nbst_file *f, const json_t *meta) {
    if (!json_is_object(meta)) {
        FILE_ERROR(f, "%s", "__metadata__ is not a JSON object");
        return false;
    }
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)meta, key, value) {
        if (!json_is_string(value)) {
            FILE_ERROR(f, "__metadata__ entry '%s' is not a string", key);
            return false;
        }
    }
    f->metadata = meta;
    const json_t *crc = json_object_get(meta, NB_SAFETENSORS_CRC_KEY);
    if (!crc) return true;
    const char *text = json_string_value(crc);
    if (!parse_hex32(text, &f->crc)) {
        FILE_ERROR(f, "__metadata__ entry %s is \"%.20s\", not 8 lowercase hex digits",
                   NB_SAFETENSORS_CRC_KEY, text);
        return false;
    }
    f->has_crc = true;
    return true;
}

/* ---- what the checksum covers ---- */
int nbst_by_offsets(const void *a, const void *b) {
    const nbst_entry *x = *(const nbst_entry *const *)a, *y = *(const nbst_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

uint32_t nbst_index_crc(int n, const nbst_entry *const *sorted) {
    uLong c = crc32_z(0, Z_NULL, 0);
    for (int i = 0; i < n; i++) {
        const nbst_entry *e = sorted[i];
        c = crc32_z(c, (const unsigned char *)e->name, strlen(e->name) + 1);
        const char *dtype = nbst_dtype_name(e->dtype);
        c = crc32_z(c, (const unsigned char *)dtype, strlen(dtype) + 1);
        char num[32];
        for (int d = 0; d < e->ndim; d++) {
            int len = snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)e->shape[d]);
            c = crc32_z(c, (const unsigned char *)num, (size_t)len);
        }
        int len = snprintf(num, sizeof num, "%c%llu%c%llu%c", 0, (unsigned long long)e->begin, 0,
                           (unsigned long long)e->end, '\n');
        c = crc32_z(c, (const unsigned char *)num, (size_t)len);
    }
    return (uint32_t)c;
}

void nbst_covers_text(char out[NBST_COVERS_LEN], uint32_t index_crc, uint64_t data_len) {
    snprintf(out, NBST_COVERS_LEN, "%08x %llu", (unsigned)index_crc, (unsigned long long)data_len);
}

/* Decides whether the checksum is this file's: the covers entry, if any, must be well formed
 * and name this file's index and data length (sorted: the entries in offset order). */
static bool check_covers(nbst_file *f, const nbst_entry *const *sorted) {
    f->crc_applies = f->has_crc;
    const json_t *covers =
        f->metadata ? json_object_get(f->metadata, NB_SAFETENSORS_CRC_COVERS_KEY) : NULL;
    if (!covers) return true;
    const char *text = json_string_value(covers);
    uint32_t index_crc = 0;
    char *end = NULL;
    bool valid = strlen(text) > 9 && text[8] == ' ' && text[9] >= '0' && text[9] <= '9';
    char hex[9] = "";
    if (valid) memcpy(hex, text, 8);
    valid = valid && parse_hex32(hex, &index_crc);
    unsigned long long len = valid ? strtoull(text + 9, &end, 10) : 0;
    if (!valid || *end || (text[9] == '0' && text[10])) {
        FILE_ERROR(f, "__metadata__ entry %s is \"%.40s\", not \"<8 hex digits> <length>\"",
                   NB_SAFETENSORS_CRC_COVERS_KEY, text);
        return false;
    }
    f->crc_applies =
        f->has_crc && len == f->data_len && index_crc == nbst_index_crc(f->count, sorted);
    return true;
}

static bool parse_entry(nbst_file *f, const char *name, const json_t *desc, nbst_entry *e) {
    e->name = name;
    if (!json_is_object(desc)) {
        FILE_ERROR(f, "tensor '%s': its description is not a JSON object", name);
        return false;
    }
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)desc, key, value) {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
            strcmp(key, "data_offsets") != 0) {
            FILE_ERROR(f, "tensor '%s': unknown field '%s'", name, key);
            return false;
        }
    }
    const json_t *dtype = json_object_get(desc, "dtype");
    if (!json_is_string(dtype)) {
        FILE_ERROR(f, "tensor '%s': dtype is missing or not a string", name);
        return false;
    }
    if (!dtype_from_name(json_string_value(dtype), &e->dtype)) {
        FILE_ERROR(f, "tensor '%s': dtype %s is not supported (nabla reads F32, F64, I64, BOOL)",
                   name, json_string_value(dtype));
        return false;
    }
    const json_t *shape = json_object_get(desc, "shape");
    if (!json_is_array(shape)) {
        FILE_ERROR(f, "tensor '%s': shape is missing or not an array", name);
        return false;
    }
    if (json_array_size(shape) > NB_MAX_DIMS) {
        FILE_ERROR(f, "tensor '%s': shape has %zu dims, nabla allows at most %d", name,
                   json_array_size(shape), NB_MAX_DIMS);
        return false;
    }
    e->ndim = (int)json_array_size(shape);
    uint64_t nbytes = nb_dtype_size(e->dtype);
    for (int i = 0; i < e->ndim; i++) {
        uint64_t dim;
        if (!get_count(json_array_get(shape, (size_t)i), &dim)) {
            FILE_ERROR(f, "tensor '%s': shape entry %d is not a non-negative integer", name, i);
            return false;
        }
        if (__builtin_mul_overflow(nbytes, dim, &nbytes) || nbytes > (uint64_t)INT64_MAX) {
            FILE_ERROR(f, "tensor '%s': shape is too large", name);
            return false;
        }
        e->shape[i] = (int64_t)dim;
    }
    /* Sizes beside a 0 must still give strides that fit (nabla's limit on any shape). */
    if (!nbt_check_shape(f->op, e->ndim, e->shape, e->dtype)) {
        FILE_ERROR(f, "tensor '%s': shape %s is too large", name, nbt_dims(e->ndim, e->shape));
        return false;
    }
    const json_t *offsets = json_object_get(desc, "data_offsets");
    if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
        !get_count(json_array_get(offsets, 0), &e->begin) ||
        !get_count(json_array_get(offsets, 1), &e->end)) {
        FILE_ERROR(f, "tensor '%s': data_offsets is not a pair of non-negative integers", name);
        return false;
    }
    if (e->begin > e->end) {
        FILE_ERROR(f, "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
                   (unsigned long long)e->begin, (unsigned long long)e->end);
        return false;
    }
    if (e->end > f->data_len) {
        FILE_ERROR(f,
                   "tensor '%s': data_offsets [%llu, %llu] reach past the data section of %llu "
                   "bytes",
                   name, (unsigned long long)e->begin, (unsigned long long)e->end,
                   (unsigned long long)f->data_len);
        return false;
    }
    if (e->end - e->begin != nbytes) {
        FILE_ERROR(f,
                   "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs "
                   "%llu",
                   name, (unsigned long long)e->begin, (unsigned long long)e->end,
                   (unsigned long long)(e->end - e->begin), nbst_dtype_name(e->dtype),
                   nbt_dims(e->ndim, e->shape), (unsigned long long)nbytes);
        return false;
    }
    return true;
}

/* The ranges, in offset order, must tile [0, data_len): no gap, no overlap, nothing left. */
static bool check_coverage(nbst_file *f) {
    const nbst_entry **sorted = nbt_malloc(sizeof *sorted * (size_t)(f->count ? f->count : 1));
    if (!sorted) {
        FILE_ERROR(f, "%s", "out of memory");
        return false;
    }
    for (int i = 0; i < f->count; i++) sorted[i] = &f->entries[i];
    qsort(sorted, (size_t)f->count, sizeof *sorted, nbst_by_offsets);
    uint64_t pos = 0;
    const nbst_entry *prev = NULL;
    bool ok = true;
    for (int i = 0; ok && i < f->count; i++) {
        const nbst_entry *e = sorted[i];
        if (e->begin < pos) {
            FILE_ERROR(f, "tensor '%s': data_offsets [%llu, %llu] overlap those of tensor '%s'",
                       e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       prev->name);
            ok = false;
        } else if (e->begin > pos) {
            FILE_ERROR(f, "the data section has a gap: bytes [%llu, %llu) belong to no tensor",
                       (unsigned long long)pos, (unsigned long long)e->begin);
            ok = false;
        }
        pos = e->end;
        prev = e;
    }
    if (ok && pos != f->data_len) {
        FILE_ERROR(f, "the data section has %llu bytes but the tensors cover only %llu",
                   (unsigned long long)f->data_len, (unsigned long long)pos);
        ok = false;
    }
    ok = ok && check_covers(f, sorted);
    nbt_free(sorted);
    return ok;
}

static bool parse_header(nbst_file *f, const char *text) {
    json_error_t jerr;
    f->header = json_loadb(text, (size_t)f->header_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header) {
        FILE_ERROR(f, "the header is not valid JSON (line %d, column %d: %s)", jerr.line,
                   jerr.column, jerr.text);
        return false;
    }
    if (!json_is_object(f->header)) {
        FILE_ERROR(f, "%s", "the header is not a JSON object");
        return false;
    }
    size_t n = json_object_size(f->header);
    if (n > (size_t)INT32_MAX) {
        FILE_ERROR(f, "the header lists %zu entries, too many", n);
        return false;
    }
    f->entries = nbt_malloc(sizeof *f->entries * (n ? n : 1));
    if (!f->entries) {
        FILE_ERROR(f, "%s", "out of memory");
        return false;
    }
    const char *key;
    json_t *value;
    json_object_foreach(f->header, key, value) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!check_metadata(f, value)) return false;
            continue;
        }
        if (!parse_entry(f, key, value, &f->entries[f->count])) return false;
        f->count++;
    }
    return check_coverage(f);
}

/* What a path that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "not a file";
}

bool nbst_open(nbst_file *f, const char *op, const char *path) {
    memset(f, 0, sizeof *f);
    f->op = op;
    f->path = path ? path : "(null)";
    f->fd = -1;
    if (!path) {
        nbt_error(op, "path is NULL");
        return false;
    }
    /* Opening a FIFO for reading blocks until a writer comes, and opening a device can have
     * effects of its own: stat first so neither is opened, then open without blocking (the
     * name may have been replaced in between) and trust only what fstat says of the open file. */
    struct stat st;
    if (stat(path, &st) != 0) {
        FILE_ERROR(f, "cannot open: %s", strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        FILE_ERROR(f, "not a regular file (%s)", file_kind(st.st_mode));
        return false;
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f->fd < 0) {
        FILE_ERROR(f, "cannot open: %s", strerror(errno));
        return false;
    }
    if (fstat(f->fd, &st) != 0) {
        FILE_ERROR(f, "cannot stat the open file: %s", strerror(errno));
        nbst_close(f);
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        FILE_ERROR(f, "not a regular file (%s)", file_kind(st.st_mode));
        nbst_close(f);
        return false;
    }
    /* O_NONBLOCK changes nothing for the reads of a regular file. */
    f->file_size = (uint64_t)st.st_size;
    unsigned char len_bytes[8];
    if (f->file_size < 8) {
        FILE_ERROR(f, "the file has %llu bytes, too few for the 8-byte header length",
                   (unsigned long long)f->file_size);
        nbst_close(f);
        return false;
    }
    if (!read_at(f, len_bytes, 8, 0)) {
        nbst_close(f);
        return false;
    }
    for (int i = 7; i >= 0; i--) f->header_len = f->header_len << 8 | len_bytes[i];
    if (f->header_len > f->file_size - 8) {
        FILE_ERROR(f, "the header length %llu is larger than the %llu bytes after it",
                   (unsigned long long)f->header_len, (unsigned long long)(f->file_size - 8));
        nbst_close(f);
        return false;
    }
    if (f->header_len > NBST_MAX_HEADER) {
        FILE_ERROR(f, "the header length %llu is over the %llu-byte limit",
                   (unsigned long long)f->header_len, (unsigned long long)NBST_MAX_HEADER);
        nbst_close(f);
        return false;
    }
    f->data_len = f->file_size - 8 - f->header_len;
    char *text = nbt_malloc((size_t)f->header_len + 1);
    if (!text) {
        FILE_ERROR(f, "%s", "out of memory for the header");
        nbst_close(f);
        return false;
    }
    bool ok = read_at(f, text, f->header_len, 8) && parse_header(f, text);
    nbt_free(text);
    if (!ok) nbst_close(f);
    return ok;
}

bool nbst_read_data(nbst_file *f) {
    f->data = nbt_malloc((size_t)(f->data_len ? f->data_len : 1));
    if (!f->data) {
        FILE_ERROR(f, "out of memory for %llu bytes of data", (unsigned long long)f->data_len);
        return false;
    }
    if (!read_at(f, f->data, f->data_len, 8 + f->header_len)) return false;
    if (f->crc_applies) {
        uint32_t crc = (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), f->data, (size_t)f->data_len);
        if (crc != f->crc) {
            FILE_ERROR(f,
                       "the data does not match its checksum (CRC-32 %08x in the header, %08x "
                       "computed): the file is corrupt%s",
                       (unsigned)f->crc, (unsigned)crc,
                       json_object_get(f->metadata, NB_SAFETENSORS_CRC_COVERS_KEY)
                           ? ""
                           : ", or its metadata was copied from another file");
            return false;
        }
    }
    for (int i = 0; i < f->count; i++) {
        const nbst_entry *e = &f->entries[i];
        if (e->dtype != NB_BOOL) continue;
        for (uint64_t k = e->begin; k < e->end; k++)
            if (f->data[k] > 1) {
                FILE_ERROR(f, "tensor '%s': BOOL element %llu is %u, not 0 or 1", e->name,
                           (unsigned long long)(k - e->begin), f->data[k]);
                return false;
            }
    }
    return true;
}

void nbst_close(nbst_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->header) json_decref(f->header);
    f->header = NULL;
    nbt_free(f->entries);
    f->entries = NULL;
    f->count = 0;
    nbt_free(f->data);
    f->data = NULL;
    f->metadata = NULL;
    f->has_crc = false;
    f->crc_applies = false;
}
