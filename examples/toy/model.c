#include "model.h"

#include <math.h>
#include <string.h>

bool toy_block_parse(const char *name, toy_block *out) {
    if (strcmp(name, "gpt") == 0)
        *out = TOY_BLOCK_GPT;
    else if (strcmp(name, "llama") == 0)
        *out = TOY_BLOCK_LLAMA;
    else
        return false;
    return true;
}

/* The Llama-style model of a task: the task's width and heads; half as many kv heads as
 * query heads when there are more than two (grouped-query; with two heads sharing one, shift
 * learned more slowly); RoPE base 100, since at 8 to 13 positions base 10000 leaves most
 * pairs of a 16-wide head barely turning (shift learned more slowly); and a SwiGLU hidden
 * size of 8 dim / 3 rounded up to a multiple of 8, so its three matrices hold about the
 * parameters of the GPT block's two 4 dim ones. */
static blk_llama_config llama_config(const toy_task *task) {
    int64_t hidden = (8 * task->dim / 3 + 7) / 8 * 8;
    return (blk_llama_config){.dim = task->dim,
                              .n_heads = task->heads,
                              .n_kv_heads = task->heads > 2 ? task->heads / 2 : task->heads,
                              .hidden = hidden,
                              .norm_eps = 1e-5,
                              .rope_base = 100};
}

bool toy_model_init(toy_model *m, nb_module *root, toy_block block, const toy_task *task) {
    *m = (toy_model){.block = block, .heads = task->heads};
    if (block == TOY_BLOCK_GPT) {
        m->gpt = nb_transformer_lm_new(root, "", task->vocab, task->seq_len, task->dim, task->heads,
                                       task->layers, 0.0);
        m->module = m->gpt ? &m->gpt->base : NULL;
        m->layers = task->layers;
    } else {
        blk_llama_config cfg = llama_config(task);
        /* With positions only relative (RoPE), a bidirectional layer's query cannot know where
         * it stands: reverse needs a first layer that reads its distance to the BOS token and
         * a second that looks up the mirrored position, so the llama model has 2 or more. */
        m->layers = task->causal || task->layers > 1 ? task->layers : 2;
        m->llama = blk_llama_lm_new(root, "", task->vocab + 1, m->layers, &cfg);
        m->bos = task->vocab;
        m->module = m->llama ? &m->llama->base : NULL;
    }
    return m->module != NULL;
}

/* The llama model reads a beginning-of-sequence token before the task's tokens, as Llama's
 * tokenizer prepends <s>. With RoPE alone, scores depend only on the distance between query
 * and key, so a bidirectional layer cannot tell where in the sequence a token sits; the BOS
 * token is the fixed point a layer can measure its distance to. Its logits row and the BOS
 * column are dropped from the result, so the caller sees the task's [B, T, vocab]. */
/* The logits, and each layer's attention weights if attn_weights is not NULL. */
static nb_tensor *run(const toy_model *m, const nb_tensor *tokens, bool causal,
                      nb_tensor **attn_weights) {
    if (m->gpt) return nb_transformer_lm_forward(m->gpt, tokens, causal, NULL, attn_weights);
    if (!tokens) return NULL;
    int64_t B = tokens->shape[0], T = tokens->shape[1];
    nb_tensor *seq[2] = {nb_full(NB_I64, NB_SHAPE(B, 1), (double)m->bos), (nb_tensor *)tokens};
    nb_tensor *logits =
        blk_llama_lm_forward(m->llama, nb_concat(2, seq, 1),
                             &(blk_attn_opts){.causal = causal, .attn_weights = attn_weights});
    for (int l = 0; attn_weights && l < m->layers; l++) /* the task's tokens only */
        attn_weights[l] = nb_narrow(nb_narrow(attn_weights[l], 2, 1, T), 3, 1, T);
    return nb_contiguous(nb_narrow(nb_narrow(logits, 1, 1, T), 2, 0, m->bos));
}

nb_tensor *toy_model_forward(const toy_model *m, const nb_tensor *tokens, bool causal) {
    return run(m, tokens, causal, NULL);
}

bool toy_model_attention(const toy_model *m, const nb_tensor *tokens, bool causal,
                         nb_tensor **attn_weights) {
    return run(m, tokens, causal, attn_weights) != NULL;
}

/* The llama model's cached forward for nb_generate: its logits with the BOS column at -inf. */
static nb_tensor *llama_causal_forward(void *model, const nb_tensor *tokens, nb_kv_cache *c) {
    const toy_model *m = model;
    nb_tensor *logits =
        blk_llama_lm_forward(m->llama, tokens, &(blk_attn_opts){.causal = true, .cache = c});
    if (!logits) return NULL;
    nb_tensor *parts[2] = {
        nb_narrow(logits, 2, 0, m->bos),
        nb_full(logits->dtype, NB_SHAPE(logits->shape[0], logits->shape[1], 1), -INFINITY)};
    return nb_concat(2, parts, 2);
}

static nb_kv_cache *llama_causal_cache(void *model, int64_t batch, int64_t max_len) {
    return blk_llama_lm_cache_new(((const toy_model *)model)->llama, batch, max_len);
}

nb_causal_lm toy_model_causal(const toy_model *m, const toy_task *task) {
    if (m->gpt) return nb_transformer_lm_causal(m->gpt);
    /* the forward only reads m; nb_causal_lm holds any model as a plain pointer */
    return (nb_causal_lm){.model = (void *)m,
                          .module = m->module,
                          .vocab = task->vocab + 1,
                          .max_len = task->seq_len + 1, /* the BOS token and the task's */
                          .forward = llama_causal_forward,
                          .new_cache = llama_causal_cache};
}

int64_t toy_model_prompt(const toy_model *m, const int64_t *tokens, int64_t n, int64_t *prompt) {
    int64_t at = 0;
    if (m->llama) prompt[at++] = m->bos;
    memcpy(prompt + at, tokens, sizeof *prompt * (size_t)n);
    return at + n;
}
