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

/* The tensors of a blocks LM around its layers: token_embd (embed), each layer i through
 * add_layer(g, model, i, type), output_norm (norm) and output (head). */
bool blk_gguf_add_lm(nb_gguf *g, nb_gguf_type type, const nb_tensor *embed, const nb_tensor *norm,
                     const nb_tensor *head, int n_layers,
                     bool (*add_layer)(nb_gguf *g, const void *model, int i, nb_gguf_type type),
                     const void *model);

/* nb_gguf_save_model for the blocks LM model, whose module is base (its path names the
 * model in the file), of n_vocab tokens. */
bool blk_gguf_save_lm(const char *op, const char *arch, const nb_module *base, int64_t n_vocab,
                      const char *path, int64_t max_len, const nb_gguf_vocab *vocab,
                      nb_gguf_type type,
                      bool (*fill)(nb_gguf *g, const void *model, nb_gguf_type type),
                      const void *model);

#endif
