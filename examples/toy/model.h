/* The model toy_tasks trains: nabla's built-in GPT-style TransformerLM (--block gpt), the
 * Llama-style LM of nn/blocks (--block llama) or its DeepSeek-style LM (--block deepseek: MLA
 * and mixture-of-experts blocks), sized from the task. */
#ifndef NABLA_TOY_MODEL_H
#define NABLA_TOY_MODEL_H

#include <nabla/blocks.h>
#include "tasks.h"

typedef enum { TOY_BLOCK_GPT, TOY_BLOCK_LLAMA, TOY_BLOCK_DEEPSEEK } toy_block;

typedef struct {
    toy_block block;
    nb_transformer_lm *gpt;    /* set for TOY_BLOCK_GPT */
    blk_llama_lm *llama;       /* set for TOY_BLOCK_LLAMA */
    blk_deepseek_lm *deepseek; /* set for TOY_BLOCK_DEEPSEEK */
    nb_module *module;         /* whichever of the three, as a module */
    int64_t bos; /* llama, deepseek: the beginning-of-sequence token (the task's vocab) */
    int layers;
    int64_t heads;
} toy_model;

/* "gpt", "llama" or "deepseek"; false for anything else. */
bool toy_block_parse(const char *name, toy_block *out);
/* The name toy_block_parse reads for block. */
const char *toy_block_name(toy_block block);
/* Builds the task's model under root (owned by root). False with nb_last_error() set. */
bool toy_model_init(toy_model *m, nb_module *root, toy_block block, const toy_task *task);
/* tokens NB_I64 [B, T] -> logits [B, T, vocab], in the current scope. */
nb_tensor *toy_model_forward(const toy_model *m, const nb_tensor *tokens, bool causal);
/* Runs the model and fills attn_weights (room for layers tensors) with each layer's
 * [B, heads, T, T] attention weights (llama, deepseek: among the task's tokens, without the BOS
 * column, so a row sums to what the BOS token leaves). False with an error. */
bool toy_model_attention(const toy_model *m, const nb_tensor *tokens, bool causal,
                         nb_tensor **attn_weights);

/* The model as an nb_causal_lm for nb_generate (nabla/generate.h), with a context of the
 * task's seq_len tokens. gpt: the TransformerLM's own. llama, deepseek: the LM through its
 * KV cache (deepseek: the latent cache), reading prompts that start with the BOS token
 * (toy_model_prompt); its vocabulary includes that token, but its logit is -inf (training never
 * scores it), so it is never generated. Borrows m. */
nb_causal_lm toy_model_causal(const toy_model *m, const toy_task *task);
/* The prompt the model reads for tokens[0..n): after the BOS token for llama and deepseek. Writes
 * it to prompt (room for n + 1) and returns its length. */
int64_t toy_model_prompt(const toy_model *m, const int64_t *tokens, int64_t n, int64_t *prompt);

#endif
