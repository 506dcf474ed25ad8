/* What the blocks' GGUF exports share (internal to this folder: llama_gguf.c, deepseek_gguf.c). */
#ifndef NABLA_BLOCKS_GGUF_PARTS_H
#define NABLA_BLOCKS_GGUF_PARTS_H

#include <nabla/blocks.h>

/* nabla's RoPE rotates halves (element i with i + d/2, blk_rope); llama.cpp's "llama" and
 * "deepseek2" rotate adjacent pairs (2i with 2i + 1). w [groups * group_rows, cols] projects
 * to groups (heads) of group_rows outputs, of which rows [offset, offset + rope_dim) of each
 * group are rotated: these rows are reordered so that row offset + 2i + j takes row
 * offset + i + j rope_dim/2; the others stay. The result computes, in llama.cpp's RoPE, what
 * w computes in nabla's. A new [groups * group_rows, cols] tensor in the current scope. */
nb_tensor *blk_gguf_pair_rope_rows(const nb_tensor *w, int64_t groups, int64_t offset,
                                   int64_t rope_dim);

/* "blk.{layer}.{what}.weight" in buf (64 bytes: a GGUF tensor name's limit and its NUL). */
const char *blk_gguf_name(char buf[64], int layer, const char *what);

#endif
