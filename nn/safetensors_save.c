/* Saving named tensors as safetensors: header built with jansson, data written row-major,
 * and the file replaced atomically (write path.tmp, fsync, rename). */
#include "safetensors_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const OP = "nb_safetensors_save";

static bool check_inputs(const char *path, int n, const nb_named_tensor *tensors) {
    if (!path) return nbt_error(OP, "path is NULL"), false;
    if (n < 0) return nbt_error(OP, "%s: n is %d, expected >= 0", path, n), false;
    if (n > 0 && !tensors) return nbt_error(OP, "%s: tensors is NULL for n = %d", path, n), false;
    for (int i = 0; i < n; i++) {
        const char *name = tensors[i].name;
        if (!name || !name[0])
            return nbt_error(OP, "%s: entry %d has %s name", path, i, name ? "an empty" : "a NULL"),
                   false;
        if (strcmp(name, "__metadata__") == 0)
            return nbt_error(OP, "%s: entry %d: the name __metadata__ is reserved", path, i), false;
        if (!tensors[i].tensor)
            return nbt_error(OP, "%s: tensor '%s' (entry %d) is NULL", path, name, i), false;
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

/* {"name": {"dtype", "shape", "data_offsets"}, ...} in the given order. */
static json_t *build_header(const char *path, int n, const nb_named_tensor *tensors,
                            const int *order) {
    json_t *root = json_object();
    if (!root) return nbt_error(OP, "%s: out of memory building the header", path);
    uint64_t *begin = nbt_malloc(sizeof *begin * (size_t)(n ? n : 1));
    if (!begin) {
        json_decref(root);
        return nbt_error(OP, "%s: out of memory building the header", path);
    }
    uint64_t offset = 0;
    for (int k = 0; k < n; k++) {
        begin[order[k]] = offset;
        offset += nbst_nbytes(tensors[order[k]].tensor);
    }
    for (int i = 0; root && i < n; i++) {
        const nb_tensor *t = tensors[i].tensor;
        if (json_object_get(root, tensors[i].name)) {
            nbt_error(OP, "%s: the name '%s' appears twice", path, tensors[i].name);
            json_decref(root);
            root = NULL;
            break;
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
            json_decref(root);
            root = NULL;
        }
    }
    nbt_free(begin);
    return root;
}

static bool write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len > ((size_t)1 << 30) ? (size_t)1 << 30 : len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return false;
        }
        p += w;
        len -= (size_t)w;
    }
    return true;
}

/* Writes one tensor's data; non-contiguous tensors are packed into a temporary buffer. */
static bool write_tensor(int fd, const nb_tensor *t) {
    size_t nbytes = (size_t)nbst_nbytes(t);
    if (nbytes == 0) return true;
    if (nb_is_contiguous(t)) return write_all(fd, nbt_ptr(t), nbytes);
    void *packed = nbt_malloc(nbytes);
    if (!packed) return errno = ENOMEM, false;
    nbst_gather(packed, t);
    bool ok = write_all(fd, packed, nbytes);
    int saved = errno;
    nbt_free(packed);
    errno = saved;
    return ok;
}

/* Writes the length, the space-padded header (so the data starts 8-byte aligned) and data. */
static bool write_file(int fd, const char *text, int n, const nb_named_tensor *tensors,
                       const int *order) {
    size_t text_len = strlen(text);
    size_t header_len = (text_len + 7) / 8 * 8;
    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++) len_bytes[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    static const char spaces[8] = "        ";
    if (!write_all(fd, len_bytes, 8) || !write_all(fd, text, text_len) ||
        !write_all(fd, spaces, header_len - text_len))
        return false;
    for (int k = 0; k < n; k++)
        if (!write_tensor(fd, tensors[order[k]].tensor)) return false;
    return true;
}

/* Makes the rename durable. Some file systems refuse fsync on a directory; the file itself is
 * already complete on disk then, so that is not treated as a failure. */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

bool nb_safetensors_save(const char *path, int n, const nb_named_tensor *tensors) {
    if (!check_inputs(path, n, tensors)) return false;
    int *order = nbt_malloc(sizeof *order * (size_t)(n ? n : 1));
    if (!order) return nbt_error(OP, "%s: out of memory", path), false;
    data_order(n, tensors, order);
    json_t *header = build_header(path, n, tensors, order);
    if (!header) {
        nbt_free(order);
        return false;
    }
    char *text = json_dumps(header, JSON_COMPACT);
    json_decref(header);
    if (!text) {
        nbt_free(order);
        return nbt_error(OP, "%s: out of memory writing the header", path), false;
    }

    size_t path_len = strlen(path);
    char *tmp = nbt_malloc(path_len + 5);
    if (!tmp) {
        nbt_free(order);
        free(text);
        return nbt_error(OP, "%s: out of memory", path), false;
    }
    memcpy(tmp, path, path_len);
    memcpy(tmp + path_len, ".tmp", 5);

    bool ok = false;
    const char *failed = "open";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (!write_file(fd, text, n, tensors, order))
            failed = "write";
        else if (fsync(fd) != 0)
            failed = "fsync";
        else
            ok = true;
        int saved = errno;
        if (close(fd) != 0 && ok)
            ok = false, failed = "close";
        else
            errno = saved;
        if (ok && rename(tmp, path) != 0) ok = false, failed = "rename";
        if (!ok) {
            saved = errno;
            unlink(tmp);
            errno = saved;
        }
    }
    if (ok)
        sync_parent_dir(path);
    else
        nbt_error(OP, "%s: %s of %s failed: %s; any previous file is unchanged", path, failed, tmp,
                  strerror(errno));
    nbt_free(order);
    nbt_free(tmp);
    free(text);
    return ok;
}
