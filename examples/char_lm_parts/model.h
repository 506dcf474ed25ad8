/* The model char_lm trains (--block): nabla's GPT-style TransformerLM, the Llama-style LM or the
 * DeepSeek-style LM of <nabla/blocks.h>, at about the same parameter count for the same width,
 * heads and layers; its forward, its nb_causal_lm for nb_generate, and its checkpoint, whose
 * metadata names the block and the shape so that --eval and resume rebuild it from the file. */
#ifndef NABLA_EXAMPLES_CHAR_LM_MODEL_H
#define NABLA_EXAMPLES_CHAR_LM_MODEL_H

#include <nabla/blocks.h>
#include <nabla/nabla.h>

typedef enum { LM_BLOCK_GPT, LM_BLOCK_LLAMA, LM_BLOCK_DEEPSEEK } lm_block;

/* What defines a char_lm model: the rest is derived (lm_model_init). */
typedef struct {
    lm_block block;
    int64_t vocab, context, dim, heads, layers;
} lm_shape;

typedef struct {
    lm_shape shape;
    nb_transformer_lm *gpt;    /* LM_BLOCK_GPT */
    blk_llama_lm *llama;       /* LM_BLOCK_LLAMA */
    blk_deepseek_lm *deepseek; /* LM_BLOCK_DEEPSEEK */
    nb_module *module;         /* whichever of the three, as a module */
} lm_model;

/* "gpt", "llama" or "deepseek"; false for anything else. */
bool lm_block_parse(const char *name, lm_block *out);
const char *lm_block_name(lm_block block);

/* Builds the model of shape s under root (owned by root). gpt: TransformerLM (learned
 * positions, context s->context). llama: grouped-query attention (half as many key/value heads
 * as heads when there are more than two), RoPE base 10000, and the SwiGLU hidden size, a
 * multiple of 8, that brings the model's parameters closest to gpt's. deepseek: MLA with a
 * latent as wide as the model (queries and keys of head size dim / heads, half of it rotated;
 * values dim / heads), and a mixture of 4 routed SwiGLU experts, 2 per token, plus one shared,
 * of the hidden size (a multiple of 8) that brings all parameters closest to gpt's; its
 * load-balancing loss weighs 0.01. False with nabla's error. */
bool lm_model_init(lm_model *m, nb_module *root, const lm_shape *s);

/* tokens NB_I64 [B, T] (T <= context) -> logits [B, T, vocab] (causal), in the current scope.
 * aux_loss (may be NULL) receives deepseek's load-balancing loss, 0-d, and NULL for the other
 * blocks. */
nb_tensor *lm_model_forward(const lm_model *m, const nb_tensor *tokens, nb_tensor **aux_loss);

/* The model as an nb_causal_lm for nb_generate, with a context of s.context tokens and the
 * model's own cache (deepseek: the latent cache). Borrows m. */
nb_causal_lm lm_model_causal(const lm_model *m);

/* Parameters a token uses (deepseek: less the routed experts it is not sent to; the others:
 * all of them). */
int64_t lm_model_active_params(const lm_model *m);

/* Saves the model with its shape and the n_meta entries meta (the tokenizer) in the file's
 * metadata: gpt through nb_transformer_lm_save (its configuration under nabla.*), the others
 * with "char_lm.block" and "char_lm.vocab", ".context", ".dim", ".heads", ".layers". */
bool lm_model_save(const lm_model *m, const char *path, int n_meta, const nb_metadata_entry *meta);
/* The shape a checkpoint of lm_model_save (or of char_lm before --block: a TransformerLM with
 * its configuration) records. False with an error naming the file and the key. */
bool lm_shape_read(const char *path, lm_shape *s);
/* Loads path into m (built from the file's lm_shape_read). False with nabla's error. */
bool lm_model_load(lm_model *m, const char *path);

#endif
