/* Saving named tensors as safetensors: header built with jansson (with the data's CRC-32 in
 * __metadata__), data written row-major, and the file replaced atomically (atomic_file.h). */
#include "safetensors_file.h"

#include "atomic_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static const char *const OP = "nb_safetensors_save";

static bool check_inputs(const char *path, int n, const nb_named_tensor *tensors) {
    if (!path) return nbt_error(OP, "path is NULL"), false;
    if (n < 0) return nbt_error(OP, "%s: n is %d, expected >= 0", path, n), false;
    if (n > 0 && !tensors) return nbt_error(OP, "%s: tensors is NULL for n = %d", path, n), false;
    for (int i = 0; i < n; i++) {
        const char *name = tensors[i].name, *problem = nbst_name_problem(name);
        if (problem) return nbt_error(OP, "%s: entry %d has %s", path, i, problem), false;
        if (!tensors[i].tensor)
            return nbt_error(OP, "%s: tensor '%s' (entry %d) is NULL", path, name, i), false;
        if (!nbt_check_live(OP, tensors[i].tensor)) return false;
        /* An expanded view can have more elements than bytes can be counted in a file. */
        const nb_tensor *t = tensors[i].tensor;
        uint64_t nbytes;
        if (__builtin_mul_overflow((uint64_t)nb_numel(t), (uint64_t)nb_dtype_size(t->dtype),
                                   &nbytes) ||
            nbytes > (uint64_t)INT64_MAX)
            return nbt_error(OP, "%s: tensor '%s' (%s %s) holds more than 2^63 bytes", path, name,
                             nb_dtype_name(t->dtype), nbt_shape(t)),
                   false;
    }
    return true;
}

static bool check_metadata_inputs(const char *path, int n_meta, const nb_metadata_entry *meta) {
    if (n_meta < 0) return nbt_error(OP, "%s: n_meta is %d, expected >= 0", path, n_meta), false;
    if (n_meta > 0 && !meta)
        return nbt_error(OP, "%s: meta is NULL for n_meta = %d", path, n_meta), false;
    for (int i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value)
            return nbt_error(OP, "%s: metadata entry %d has a NULL %s", path, i,
                             meta[i].key ? "value" : "key"),
                   false;
        if (strcmp(meta[i].key, NB_SAFETENSORS_CRC_KEY) == 0 ||
            strcmp(meta[i].key, NB_SAFETENSORS_CRC_COVERS_KEY) == 0)
            return nbt_error(OP, "%s: metadata entry %d: the key %s is reserved", path, i,
                             meta[i].key),
                   false;
    }
    return true;
}

/* Data goes in order of decreasing element size (stable), so every tensor starts aligned to
 * its element size, as the reference writer does; the header keeps the caller's order. */
static void data_order(int n, const nb_named_tensor *tensors, int *order) {
    static const size_t sizes[] = {8, 4, 2, 1};
    int k = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int i = 0; i < n; i++)
            if (nb_dtype_size(tensors[i].tensor->dtype) == sizes[s]) order[k++] = i;
}

/* Sets the metadata's NB_SAFETENSORS_CRC_COVERS_KEY: the index the tensors make at these
 * offsets, and the data length. */
static bool set_covers(const char *path, int n, const nb_named_tensor *tensors,
                       const uint64_t *begin, uint64_t data_len, json_t *meta_obj) {
    nbst_entry *entries = nbt_malloc(sizeof *entries * (size_t)(n ? n : 1));
    const nbst_entry **sorted = nbt_malloc(sizeof *sorted * (size_t)(n ? n : 1));
    bool ok = entries && sorted;
    for (int i = 0; ok && i < n; i++) {
        const nb_tensor *t = tensors[i].tensor;
        entries[i] = (nbst_entry){.name = tensors[i].name,
                                  .dtype = t->dtype,
                                  .ndim = t->ndim,
                                  .begin = begin[i],
                                  .end = begin[i] + nbst_nbytes(t)};
        memcpy(entries[i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        sorted[i] = &entries[i];
    }
    if (ok) {
        qsort(sorted, (size_t)n, sizeof *sorted, nbst_by_offsets);
        char covers[NBST_COVERS_LEN];
        nbst_covers_text(covers, nbst_index_crc(n, sorted), data_len);
        ok = json_object_set_new(meta_obj, NB_SAFETENSORS_CRC_COVERS_KEY, json_string(covers)) == 0;
    }
    if (!ok) nbt_error(OP, "%s: out of memory building the header", path);
    nbt_free(entries);
    nbt_free(sorted);
    return ok;
}

/* {"__metadata__": {...}, "name": {"dtype", "shape", "data_offsets"}, ...}, tensors in the
 * given order, the metadata's CRC-32 entry set to `crc`. */
static json_t *build_header(const char *path, int n, const nb_named_tensor *tensors,
                            const int *order, int n_meta, const nb_metadata_entry *meta,
                            uint32_t crc) {
    json_t *root = json_object(), *meta_obj = json_object();
    uint64_t *begin = nbt_malloc(sizeof *begin * (size_t)(n ? n : 1));
    char crc_text[9];
    snprintf(crc_text, sizeof crc_text, "%08x", (unsigned)crc);
    if (!root || !meta_obj || !begin || json_object_set(root, "__metadata__", meta_obj) != 0 ||
        json_object_set_new(meta_obj, NB_SAFETENSORS_CRC_KEY, json_string(crc_text)) != 0) {
        nbt_error(OP, "%s: out of memory building the header", path);
        goto fail;
    }
    for (int i = 0; i < n_meta; i++) {
        if (json_object_get(meta_obj, meta[i].key)) {
            nbt_error(OP, "%s: the metadata key '%s' appears twice", path, meta[i].key);
            goto fail;
        }
        /* json_string and json_object_set_new refuse strings that are not valid UTF-8. */
        if (json_object_set_new(meta_obj, meta[i].key, json_string(meta[i].value)) != 0) {
            nbt_error(OP, "%s: cannot store metadata entry %d in the header (is it valid UTF-8?)",
                      path, i);
            goto fail;
        }
    }
    /* An expanded view's bytes count in full: huge ones must not wrap the offsets. */
    uint64_t offset = 0;
    for (int k = 0; k < n; k++) {
        begin[order[k]] = offset;
        if (__builtin_add_overflow(offset, nbst_nbytes(tensors[order[k]].tensor), &offset) ||
            offset > (uint64_t)INT64_MAX) {
            nbt_error(OP, "%s: the tensors hold more than 2^63 bytes together", path);
            goto fail;
        }
    }
    if (!set_covers(path, n, tensors, begin, offset, meta_obj)) goto fail;
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = tensors[i].tensor;
        if (json_object_get(root, tensors[i].name)) {
            nbt_error(OP, "%s: the name '%s' appears twice", path, tensors[i].name);
            goto fail;
        }
        json_t *shape = json_array();
        for (int d = 0; shape && d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_t *desc = json_pack("{s:s, s:o, s:[I, I]}", "dtype", nbst_dtype_name(t->dtype),
                                 "shape", shape, "data_offsets", (json_int_t)begin[i],
                                 (json_int_t)(begin[i] + nbst_nbytes(t)));
        /* json_object_set_new fails on a name that is not valid UTF-8 (and frees desc). */
        if (!desc || json_object_set_new(root, tensors[i].name, desc) != 0) {
            nbt_error(OP,
                      "%s: cannot store the name of entry %d in the header (is it valid "
                      "UTF-8?)",
                      path, i);
            goto fail;
        }
    }
    json_decref(meta_obj);
    nbt_free(begin);
    return root;
fail:
    json_decref(meta_obj);
    json_decref(root);
    nbt_free(begin);
    return NULL;
}

/* t's data row-major: t's own memory when contiguous, else packed into *packed (which the
 * caller frees). Bools are always packed, as 0/1 whatever bytes were written through nb_data
 * (the loader accepts nothing else). NULL with errno ENOMEM when packing fails. */
static const void *row_major_bytes(const nb_tensor *t, void **packed) {
    *packed = NULL;
    if (nb_is_contiguous(t) && t->dtype != NB_BOOL) return nbt_ptr(t);
    size_t nbytes = (size_t)nbst_nbytes(t);
    unsigned char *bytes = *packed = nbt_malloc(nbytes ? nbytes : 1);
    if (!bytes) return errno = ENOMEM, NULL;
    nbst_gather(bytes, t);
    if (t->dtype == NB_BOOL)
        for (size_t i = 0; i < nbytes; i++) bytes[i] = bytes[i] != 0;
    return bytes;
}

/* Writes one tensor's data. */
static bool write_tensor(int fd, const nb_tensor *t) {
    size_t nbytes = (size_t)nbst_nbytes(t);
    if (nbytes == 0) return true;
    void *packed;
    const void *bytes = row_major_bytes(t, &packed);
    bool ok = bytes && nbn_write_all(fd, bytes, nbytes);
    int saved = errno;
    nbt_free(packed);
    errno = saved;
    return ok;
}

/* The CRC-32 of the data section the tensors make in this order; false when out of memory. */
static bool data_crc(const char *path, int n, const nb_named_tensor *tensors, const int *order,
                     uint32_t *crc) {
    uLong c = crc32_z(0, Z_NULL, 0);
    for (int k = 0; k < n; k++) {
        const nb_tensor *t = tensors[order[k]].tensor;
        size_t nbytes = (size_t)nbst_nbytes(t);
        if (nbytes == 0) continue;
        void *packed;
        const void *bytes = row_major_bytes(t, &packed);
        if (!bytes)
            return nbt_error(OP, "%s: out of memory packing tensor '%s' (%s)", path,
                             tensors[order[k]].name, nbt_shape(t)),
                   false;
        c = crc32_z(c, bytes, nbytes);
        nbt_free(packed);
    }
    *crc = (uint32_t)c;
    return true;
}

/* Writes the length, the space-padded header (so the data starts 8-byte aligned) and data. */
static bool write_file(int fd, const char *text, int n, const nb_named_tensor *tensors,
                       const int *order) {
    size_t text_len = strlen(text);
    size_t header_len = (text_len + 7) / 8 * 8;
    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++) len_bytes[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    static const char spaces[8] = "        ";
    if (!nbn_write_all(fd, len_bytes, 8) || !nbn_write_all(fd, text, text_len) ||
        !nbn_write_all(fd, spaces, header_len - text_len))
        return false;
    for (int k = 0; k < n; k++)
        if (!write_tensor(fd, tensors[order[k]].tensor)) return false;
    return true;
}

/* What nbn_replace_file writes: the header text, then the tensors' data in order. */
typedef struct {
    const char *text;
    int n;
    const nb_named_tensor *tensors;
    const int *order;
} file_contents;

static bool write_contents(int fd, void *ctx) {
    const file_contents *f = ctx;
    return write_file(fd, f->text, f->n, f->tensors, f->order);
}

int nb_safetensors_remove_stale_temporaries(const char *path) {
    const char *op = "nb_safetensors_remove_stale_temporaries";
    if (!path) return nbt_error(op, "path is NULL"), -1;
    int removed = nbn_remove_stale_temporaries(path);
    if (removed < 0) nbt_error(op, "%s: cannot read its directory: %s", path, strerror(errno));
    return removed;
}

bool nb_safetensors_save(const char *path, int n, const nb_named_tensor *tensors) {
    return nb_safetensors_save_with_metadata(path, n, tensors, 0, NULL);
}

bool nb_safetensors_save_with_metadata(const char *path, int n, const nb_named_tensor *tensors,
                                       int n_meta, const nb_metadata_entry *meta) {
    if (!check_inputs(path, n, tensors) || !check_metadata_inputs(path, n_meta, meta)) return false;
    int *order = nbt_malloc(sizeof *order * (size_t)(n ? n : 1));
    if (!order) return nbt_error(OP, "%s: out of memory", path), false;
    data_order(n, tensors, order);
    uint32_t crc = 0;
    json_t *header = data_crc(path, n, tensors, order, &crc)
                         ? build_header(path, n, tensors, order, n_meta, meta, crc)
                         : NULL;
    char *text = header ? json_dumps(header, JSON_COMPACT) : NULL;
    if (header && !text) nbt_error(OP, "%s: out of memory writing the header", path);
    json_decref(header);
    if (!text) {
        nbt_free(order);
        return false;
    }

    file_contents contents = {text, n, tensors, order};
    bool ok = nbn_replace_file(OP, path, write_contents, &contents);
    nbt_free(order);
    free(text);
    return ok;
}
