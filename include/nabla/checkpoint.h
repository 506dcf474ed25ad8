/* nabla checkpoints: lists of named tensors saved to and loaded from safetensors files.
 *
 * File format (readable by PyTorch's safetensors and other tools): an 8-byte little-endian
 * header length N, N bytes of JSON header
 *   {"<name>": {"dtype": "F32"|"F64"|"I64"|"BOOL", "shape": [...], "data_offsets": [b, e]}, ...}
 * (an optional "__metadata__" object of string values), padded with spaces, then the row-major
 * little-endian data; offsets are bytes into the data section, which the tensors cover exactly
 * once with no gaps or overlaps.
 *
 * nabla writes the CRC-32 (zlib's) of the data section into __metadata__ under
 * NB_SAFETENSORS_CRC_KEY as 8 lowercase hex digits, and every load checks it; files without
 * it (written by PyTorch and other tools) load unchecked. */
#ifndef NABLA_CHECKPOINT_H
#define NABLA_CHECKPOINT_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor and the name it is stored under. Neither is owned by this struct. */
typedef struct {
    const char *name;
    nb_tensor *tensor;
} nb_named_tensor;

/* One string entry of a file's __metadata__. Neither string is owned by this struct. */
typedef struct {
    const char *key;
    const char *value;
} nb_metadata_entry;

/* The __metadata__ key of the data checksum; reserved: callers cannot set it. */
#define NB_SAFETENSORS_CRC_KEY "nabla.data_crc32"

/* Writes the n tensors (any layout, f32/f64/i64/bool) to path. The file is written to a new
 * temporary file of a unique name in path's directory (path + ".tmp-" + 10 random characters
 * of [a-z0-9], created exclusively, so a file or symlink already there is never opened or
 * followed), flushed to disk, renamed over path, and the directory is flushed. So a crash or
 * failure mid-save leaves any previous file at path intact, a failed save removes its
 * temporary, and concurrent saves to one path leave one of them whole. A successful save then
 * removes the stale temporaries of path (see nb_safetensors_remove_stale_temporaries), so
 * saves killed midway do not pile up. Names must be non-empty, unique UTF-8 and not
 * "__metadata__". Returns false with an error naming the file on failure. */
bool nb_safetensors_save(const char *path, int n, const nb_named_tensor *tensors);

/* Removes the temporaries that saves to path killed midway left behind, and returns how many
 * (-1 with an error if path's directory cannot be read). The rule: a save holds an exclusive
 * flock(2) on its temporary from its creation until it is renamed over path, so a temporary
 * that can be locked belongs to no running save (on this host, or over NFS where locks reach
 * the server). Only regular files named exactly path + ".tmp-" + 10 characters of [a-z0-9]
 * are considered, symlinks are not followed, and each is unlinked only while locked and
 * still the file that was locked, so a running save never loses its file. On a file system
 * without flock nothing can be locked and nothing is removed. Loads never read temporaries. */
int nb_safetensors_remove_stale_temporaries(const char *path);

/* nb_safetensors_save, also writing n_meta string entries into __metadata__ (for example a
 * model's configuration). Keys must be non-NULL, unique, valid UTF-8 and not
 * NB_SAFETENSORS_CRC_KEY; values non-NULL valid UTF-8. Nothing is owned or kept. */
bool nb_safetensors_save_with_metadata(const char *path, int n, const nb_named_tensor *tensors,
                                       int n_meta, const nb_metadata_entry *meta);

/* Copies the tensors of path into the n existing tensors of `into`, all or nothing. The file
 * must hold exactly these names (no missing or extra ones), each with the destination's dtype
 * and shape. A path that is not a regular file (a directory, FIFO or device) is refused
 * without being opened, so it never blocks. Everything is validated before any destination is
 * written: on any problem (unreadable file, bad header length, invalid JSON, unknown dtype, offsets out of range,
 * overlapping or uncovered data, bool bytes other than 0/1, mismatches) it returns false with
 * an error naming the file, the tensor and what was wrong, and no destination changes.
 * Autograd does not see the copy (like PyTorch's load_state_dict). */
bool nb_safetensors_load(const char *path, int n, const nb_named_tensor *into);

/* Reads the __metadata__ entries of path, in file order, except NB_SAFETENSORS_CRC_KEY (a file
 * without __metadata__ has none). Only the header is read and validated (as above), not the
 * data. Returns an array of *count entries (NULL-free; a non-NULL pointer even for 0); the
 * array and its strings belong to the current scope and are released when it ends. NULL with
 * an error naming the file on failure. */
nb_metadata_entry *nb_safetensors_read_metadata(const char *path, int *count);

/* Reads every tensor of path (validated as above) into new contiguous tensors, in the order
 * the header lists them. Returns an array of *count entries; the array, the names and the
 * tensors belong to the current scope and are released when it ends. NULL with an error on
 * failure (then nothing is left in the scope). */
nb_named_tensor *nb_safetensors_read(const char *path, int *count);

#ifdef __cplusplus
}
#endif
#endif
