#include "model.h"

#include <math.h>
#include <string.h>

bool toy_block_parse(const char *name, toy_block *out) {
    if (strcmp(name, "gpt") == 0)
        *out = TOY_BLOCK_GPT;
    else if (strcmp(name, "llama") == 0)
        *out = TOY_BLOCK_LLAMA;
    else if (strcmp(name, "deepseek") == 0)
        *out = TOY_BLOCK_DEEPSEEK;
    else
        return false;
    return true;
}

const char *toy_block_name(toy_block block) {
    return block == TOY_BLOCK_LLAMA ? "llama" : block == TOY_BLOCK_DEEPSEEK ? "deepseek" : "gpt";
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

/* The DeepSeek-style model of a task, sized like the Llama one: MLA with the task's heads of
 * 16 (queries and keys 8 numbers without rotation and 8 rotated, values 16), RoPE base 100 as
 * above, and a latent as wide as the model (at dim / 2, shift needed about twice the steps); every block's feed-forward four routed SwiGLU experts, two per token, and
 * one shared, each of a third of the Llama hidden size (rounded up to 8), so a token uses about
 * the Llama block's feed-forward parameters. No load-balancing loss (aux_alpha 0): toy_tasks
 * trains on the cross-entropy alone, and the shared expert and top-2 routing learn the tasks
 * without it. */
static blk_deepseek_config deepseek_config(const toy_task *task) {
    const int64_t hd = task->dim / task->heads;
    const int64_t hidden = (llama_config(task).hidden / 3 + 7) / 8 * 8;
    return (blk_deepseek_config){
        .attn = {.dim = task->dim,
                 .n_heads = task->heads,
                 .kv_rank = task->dim,
                 .nope_dim = hd / 2,
                 .rope_dim = hd / 2,
                 .v_dim = hd,
                 .norm_eps = 1e-5,
                 .rope_base = 100},
        .moe = {.dim = task->dim, .hidden = hidden, .n_experts = 4, .top_k = 2, .n_shared = 1},
        .norm_eps = 1e-5};
}

bool toy_model_init(toy_model *m, nb_module *root, toy_block block, const toy_task *task) {
    *m = (toy_model){.block = block, .heads = task->heads};
    if (block == TOY_BLOCK_GPT) {
        m->gpt = nb_transformer_lm_new(root, "", task->vocab, task->seq_len, task->dim, task->heads,
                                       task->layers, 0.0);
        m->module = m->gpt ? &m->gpt->base : NULL;
        m->layers = task->layers;
    } else {
        /* With positions only relative (RoPE), a bidirectional layer's query cannot know where
         * it stands: reverse needs a first layer that reads its distance to the BOS token and
         * a second that looks up the mirrored position, so these models have 2 or more. */
        m->layers = task->causal || task->layers > 1 ? task->layers : 2;
        m->bos = task->vocab;
        if (block == TOY_BLOCK_LLAMA) {
            blk_llama_config cfg = llama_config(task);
            m->llama = blk_llama_lm_new(root, "", task->vocab + 1, m->layers, &cfg);
            m->module = m->llama ? &m->llama->base : NULL;
        } else {
            blk_deepseek_config cfg = deepseek_config(task);
            m->deepseek = blk_deepseek_lm_new(root, "", task->vocab + 1, m->layers, &cfg);
            m->module = m->deepseek ? &m->deepseek->base : NULL;
        }
    }
    return m->module != NULL;
}

/* The llama or deepseek model's forward. */
static nb_tensor *blocks_forward(const toy_model *m, const nb_tensor *tokens,
                                 const blk_attn_opts *opts) {
    return m->llama ? blk_llama_lm_forward(m->llama, tokens, opts)
                    : blk_deepseek_lm_forward(m->deepseek, tokens, opts, NULL);
}

/* The llama and deepseek models read a beginning-of-sequence token before the task's tokens, as
 * Llama's tokenizer prepends <s>. With RoPE alone, scores depend only on the distance between query
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
    nb_tensor *logits = blocks_forward(
        m, nb_concat(2, seq, 1), &(blk_attn_opts){.causal = causal, .attn_weights = attn_weights});
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

/* The llama or deepseek model's cached forward for nb_generate: its logits with the BOS
 * column at -inf. */
static nb_tensor *blocks_causal_forward(void *model, const nb_tensor *tokens, nb_kv_cache *c) {
    const toy_model *m = model;
    nb_tensor *logits = blocks_forward(m, tokens, &(blk_attn_opts){.causal = true, .cache = c});
    if (!logits) return NULL;
    nb_tensor *parts[2] = {
        nb_narrow(logits, 2, 0, m->bos),
        nb_full(logits->dtype, NB_SHAPE(logits->shape[0], logits->shape[1], 1), -INFINITY)};
    return nb_concat(2, parts, 2);
}

static nb_kv_cache *blocks_causal_cache(void *model, int64_t batch, int64_t max_len) {
    const toy_model *m = model;
    return m->llama ? blk_llama_lm_cache_new(m->llama, batch, max_len)
                    : blk_deepseek_lm_cache_new(m->deepseek, batch, max_len);
}

nb_causal_lm toy_model_causal(const toy_model *m, const toy_task *task) {
    if (m->gpt) return nb_transformer_lm_causal(m->gpt);
    /* the forward only reads m; nb_causal_lm holds any model as a plain pointer */
    return (nb_causal_lm){.model = (void *)m,
                          .module = m->module,
                          .vocab = task->vocab + 1,
                          .max_len = task->seq_len + 1, /* the BOS token and the task's */
                          .forward = blocks_causal_forward,
                          .new_cache = blocks_causal_cache};
}

int64_t toy_model_prompt(const toy_model *m, const int64_t *tokens, int64_t n, int64_t *prompt) {
    int64_t at = 0;
    if (!m->gpt) prompt[at++] = m->bos;
    memcpy(prompt + at, tokens, sizeof *prompt * (size_t)n);
    return at + n;
}
