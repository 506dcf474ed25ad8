/* Reading a file's metadata and tensors into new arrays and tensors of the current scope. */
#include "safetensors_file.h"

#include "tensor/scope.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The arrays returned by nb_safetensors_read(_metadata) and their strings, released with the
 * scope. */
typedef struct {
    nbt_owned owned; /* first: the scope releases it */
    _Alignas(max_align_t) unsigned char entries[];
} read_result;

/* The keys nabla keeps for itself: the checksum and what it covers. */
static bool is_checksum_key(const char *key) {
    return strcmp(key, NB_SAFETENSORS_CRC_KEY) == 0 ||
           strcmp(key, NB_SAFETENSORS_CRC_COVERS_KEY) == 0;
}

static void release_result(nbt_owned *o) {
    nbt_free(o);
}

/* A block of `size` bytes owned by the current scope (released when it ends). */
static void *scope_block(size_t size) {
    read_result *res = nbt_malloc(sizeof *res + size);
    if (!res) return NULL;
    res->owned.release = release_result;
    nbt_scope_own(&res->owned);
    return res->entries;
}

nb_metadata_entry *nb_safetensors_read_metadata(const char *path, int *count) {
    const char *op = "nb_safetensors_read_metadata";
    if (!count) return nbt_error(op, "%s: count is NULL", path ? path : "(null)");
    *count = 0;
    nbst_file f;
    if (!nbst_open(&f, op, path)) return NULL;
    /* One block: the entries, then the keys and values back to back. */
    size_t n = 0, strings_len = 0;
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)f.metadata, key, value) {
        if (is_checksum_key(key)) continue;
        n++;
        strings_len += strlen(key) + 1 + strlen(json_string_value(value)) + 1;
    }
    nb_metadata_entry *entries = scope_block(sizeof *entries * n + strings_len);
    if (!entries) {
        nbst_close(&f);
        return nbt_error(op, "%s: out of memory", path);
    }
    char *strings = (char *)(entries + n);
    int i = 0;
    json_object_foreach((json_t *)f.metadata, key, value) {
        if (is_checksum_key(key)) continue;
        const char *parts[2] = {key, json_string_value(value)}, *copies[2];
        for (int k = 0; k < 2; k++) {
            size_t len = strlen(parts[k]) + 1;
            copies[k] = memcpy(strings, parts[k], len);
            strings += len;
        }
        entries[i++] = (nb_metadata_entry){copies[0], copies[1]};
    }
    nbst_close(&f);
    *count = i;
    return entries;
}

nb_named_tensor *nb_safetensors_read(const char *path, int *count) {
    const char *op = "nb_safetensors_read";
    if (!count) return nbt_error(op, "%s: count is NULL", path ? path : "(null)");
    *count = 0;
    nbst_file f;
    if (!nbst_open(&f, op, path)) return NULL;
    if (!nbst_read_data(&f)) {
        nbst_close(&f);
        return NULL;
    }
    /* One block: the header, the entries, then the names back to back. */
    size_t names_len = 0;
    for (int i = 0; i < f.count; i++) names_len += strlen(f.entries[i].name) + 1;
    size_t entries_size = sizeof(nb_named_tensor) * (size_t)f.count;
    read_result *res = nbt_malloc(sizeof *res + entries_size + names_len);
    if (!res) {
        nbst_close(&f);
        return nbt_error(op, "%s: out of memory", path);
    }
    nb_named_tensor *entries = (nb_named_tensor *)res->entries;
    char *names = (char *)res->entries + entries_size;
    /* Tensors are made in a scope of their own and kept only if all of them could be made. */
    nb_scope_begin();
    bool ok = true;
    for (int i = 0; ok && i < f.count; i++) {
        const nbst_entry *e = &f.entries[i];
        nb_tensor *t = nbt_new(op, e->dtype, e->ndim, e->shape);
        if (!t) {
            ok = false;
            break;
        }
        memcpy(nbt_ptr(t), f.data + e->begin, (size_t)(e->end - e->begin));
        size_t len = strlen(e->name) + 1;
        memcpy(names, e->name, len);
        entries[i] = (nb_named_tensor){names, t};
        names += len;
    }
    for (int i = 0; ok && i < f.count; i++) nb_keep(entries[i].tensor);
    nb_scope_end();
    int n = f.count;
    nbst_close(&f);
    if (!ok) {
        nbt_free(res);
        return NULL;
    }
    res->owned.release = release_result;
    nbt_scope_own(&res->owned);
    *count = n;
    return entries;
}
