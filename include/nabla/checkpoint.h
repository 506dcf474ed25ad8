/* nabla checkpoints: lists of named tensors saved to and loaded from safetensors files.
 *
 * File format (readable by PyTorch's safetensors and other tools): an 8-byte little-endian
 * header length N, N bytes of JSON header
 *   {"<name>": {"dtype": "F32"|"F64"|"I64"|"BOOL", "shape": [...], "data_offsets": [b, e]}, ...}
 * (an optional "__metadata__" object of string values is allowed and ignored), padded with
 * spaces, then the row-major little-endian data; offsets are bytes into the data section,
 * which the tensors cover exactly once with no gaps or overlaps. */
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

/* Writes the n tensors (any layout, f32/f64/i64/bool) to path. The file is written as
 * path + ".tmp", flushed to disk and renamed over path, so a crash or failure mid-save
 * leaves any previous file at path intact. Names must be non-empty, unique UTF-8 and not
 * "__metadata__". Returns false with an error naming the file on failure. */
bool nb_safetensors_save(const char *path, int n, const nb_named_tensor *tensors);

/* Copies the tensors of path into the n existing tensors of `into`, all or nothing. The file
 * must hold exactly these names (no missing or extra ones), each with the destination's dtype
 * and shape. Everything is validated before any destination is written: on any problem
 * (unreadable file, bad header length, invalid JSON, unknown dtype, offsets out of range,
 * overlapping or uncovered data, bool bytes other than 0/1, mismatches) it returns false with
 * an error naming the file, the tensor and what was wrong, and no destination changes.
 * Autograd does not see the copy (like PyTorch's load_state_dict). */
bool nb_safetensors_load(const char *path, int n, const nb_named_tensor *into);

/* Reads every tensor of path (validated as above) into new contiguous tensors, in the order
 * the header lists them. Returns an array of *count entries; the array, the names and the
 * tensors belong to the current scope and are released when it ends. NULL with an error on
 * failure (then nothing is left in the scope). */
nb_named_tensor *nb_safetensors_read(const char *path, int *count);

#ifdef __cplusplus
}
#endif
#endif
