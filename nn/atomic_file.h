/* Internal to nn/: writing a file so that readers only ever see the old file or the whole new
 * one (safetensors checkpoints, GGUF exports): the data goes to a temporary of a unique name
 * beside it, is fsynced and renamed over the target, and the directory is fsynced. */
#ifndef NABLA_NN_ATOMIC_FILE_H
#define NABLA_NN_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>

/* Writes all len bytes to fd (retrying short writes and EINTR); false with errno set. */
bool nbn_write_all(int fd, const void *buf, size_t len);

/* Replaces path with what write(fd, ctx) puts in a fresh temporary (write returns false with
 * errno set on failure). On any failure the temporary is removed, any previous file at path
 * is unchanged, and false comes back with an error "op: path: STEP of the temporary file ...
 * failed: REASON". On success the temporaries of earlier saves of path that were killed
 * midway are removed too. */
bool nbn_replace_file(const char *op, const char *path, bool (*write)(int fd, void *ctx),
                      void *ctx);

/* Removes the temporaries of path that no running save holds; how many, or -1 with errno set
 * when the directory cannot be read. */
int nbn_remove_stale_temporaries(const char *path);

#endif
