/* Loading safetensors into existing tensors (all or nothing) and reading them into new ones. */
#include "safetensors_file.h"

#include "tensor/scope.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* True if some dim with more than one element has stride 0: writing it would hit one element
 * several times. */
static bool is_expanded(const nb_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1 && t->strides[d] == 0) return true;
    return false;
}

static bool check_destinations(const char *op, const char *path, int n, const nb_named_tensor *into,
                               json_t *index) {
    if (n < 0) return nbt_error(op, "%s: n is %d, expected >= 0", path, n), false;
    if (n > 0 && !into) return nbt_error(op, "%s: into is NULL for n = %d", path, n), false;
    for (int i = 0; i < n; i++) {
        const char *name = into[i].name;
        if (!name) return nbt_error(op, "%s: entry %d has a NULL name", path, i), false;
        if (!into[i].tensor)
            return nbt_error(op, "%s: tensor '%s': the destination is NULL", path, name), false;
        if (!nbt_check_live(op, into[i].tensor)) return false;
        if (is_expanded(into[i].tensor))
            return nbt_error(op, "%s: tensor '%s': the destination (shape %s) is an expanded view",
                             path, name, nbt_shape(into[i].tensor)),
                   false;
        if (json_object_get(index, name))
            return nbt_error(op, "%s: the name '%s' is listed twice", path, name), false;
        if (json_object_set_new(index, name, json_integer(i)) != 0)
            return nbt_error(op, "%s: cannot index the name of entry %d (is it valid UTF-8?)", path,
                             i),
                   false;
    }
    return true;
}

/* Every file entry is expected, with the destination's dtype and shape; counts then match
 * because names are unique on both sides. Fills slot[i] with the entry for into[i]. */
static bool match_entries(const nbst_file *f, int n, const nb_named_tensor *into, json_t *index,
                          const nbst_entry **slot) {
    for (int k = 0; k < f->count; k++) {
        const nbst_entry *e = &f->entries[k];
        json_t *pos = json_object_get(index, e->name);
        if (!pos)
            return nbt_error(f->op,
                             "%s: tensor '%s' is in the file but not expected (extra tensor)",
                             f->path, e->name),
                   false;
        int i = (int)json_integer_value(pos);
        const nb_tensor *t = into[i].tensor;
        if (e->dtype != t->dtype)
            return nbt_error(f->op, "%s: tensor '%s': dtype %s in the file, expected %s", f->path,
                             e->name, nbst_dtype_name(e->dtype), nbst_dtype_name(t->dtype)),
                   false;
        if (e->ndim != t->ndim ||
            memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)e->ndim) != 0)
            return nbt_error(f->op, "%s: tensor '%s': shape %s in the file, expected %s", f->path,
                             e->name, nbt_dims(e->ndim, e->shape), nbt_shape(t)),
                   false;
        slot[i] = e;
    }
    for (int i = 0; i < n; i++)
        if (!slot[i])
            return nbt_error(f->op, "%s: tensor '%s' is missing from the file", f->path,
                             into[i].name),
                   false;
    return true;
}

/* The check's verdict on every destination; false with an error naming the first refused. */
static bool check_values(const nbst_file *f, int n, const nb_named_tensor *into,
                         const nbst_entry **slot, nbst_check_fn check, void *ctx) {
    for (int i = 0; check && i < n; i++) {
        const char *why = check(into[i].tensor, f->data + slot[i]->begin, ctx);
        if (why) return nbt_error(f->op, "%s: tensor '%s': %s", f->path, into[i].name, why), false;
    }
    return true;
}

bool nb_safetensors_load(const char *path, int n, const nb_named_tensor *into) {
    return nbst_load_checked("nb_safetensors_load", path, n, into, NULL, NULL);
}

bool nbst_load_checked(const char *op, const char *path, int n, const nb_named_tensor *into,
                       nbst_check_fn check, void *ctx) {
    json_t *index = json_object(); /* expected name -> its position in into */
    if (!index) return nbt_error(op, "out of memory"), false;
    if (!check_destinations(op, path ? path : "(null)", n, into, index)) {
        json_decref(index);
        return false;
    }
    nbst_file f;
    const nbst_entry **slot = NULL;
    bool ok = nbst_open(&f, op, path);
    if (ok) {
        slot = nbt_malloc(sizeof *slot * (size_t)(n ? n : 1));
        if (!slot)
            ok = false, nbt_error(op, "%s: out of memory", path);
        else
            memset(slot, 0, sizeof *slot * (size_t)(n ? n : 1));
    }
    ok = ok && match_entries(&f, n, into, index, slot) && nbst_read_data(&f) &&
         check_values(&f, n, into, slot, check, ctx);
    /* Only now, with everything checked and in memory, are destinations written. */
    for (int i = 0; ok && i < n; i++) nbst_scatter(into[i].tensor, f.data + slot[i]->begin);
    nbst_close(&f);
    nbt_free(slot);
    json_decref(index);
    return ok;
}

/* The arrays returned by nb_safetensors_read(_metadata) and their strings, released with the
 * scope. */
typedef struct {
    nbt_owned owned; /* first: the scope releases it */
    _Alignas(max_align_t) unsigned char entries[];
} read_result;

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
        if (strcmp(key, NB_SAFETENSORS_CRC_KEY) == 0) continue;
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
        if (strcmp(key, NB_SAFETENSORS_CRC_KEY) == 0) continue;
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
