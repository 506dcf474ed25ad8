/* A model for llama.cpp: trains a small LM with a byte-level BPE tokenizer on a text, exports
 * it to GGUF (float32 and float16) with its vocabulary, and writes what nabla says the model
 * does (for tests/llama_cpp_check.sh): greedy tokens from a prompt through nb_generate, their
 * text, and the next-token probabilities (softmax of the full forward) at every step of that
 * path. The model is the Llama-style LM (llama.cpp's "llama"), the DeepSeek-style LM
 * ("deepseek2"; deepseek_lite is one without the low-rank query, dense blocks and shared
 * expert) or the built-in TransformerLM in GPT-2's form ("gpt2").
 * Usage: gguf_export llama|deepseek|deepseek_lite|gpt2 OUT_DIR NEW_TOKENS
 * writes OUT_DIR/tiny_MODEL_f32.gguf, tiny_MODEL_f16.gguf and tiny_MODEL.json. */
#include <nabla/nabla.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { VOCAB = 320, T = 24, B = 8 };

static const char text[] =
    "the quick brown fox jumps over the lazy dog. a small model reads every byte of it, "
    "learns which letter follows which, and writes the sentence again from a few letters. "
    "the lazy dog sleeps while the quick brown fox runs over the hill and far away. ";

static int fail(const char *what) {
    fprintf(stderr, "gguf_export: %s: %s\n", what, nb_last_error());
    return 1;
}

/* A model of a kind llama.cpp runs: its logits for training and for the probabilities, its
 * cached form for nb_generate (its export: save_gguf). */
typedef struct {
    const char *kind; /* "llama", "deepseek", "deepseek_lite" or "gpt2" */
    void *model;
    int64_t vocab;
    /* causal logits [B, T, vocab]; *aux (if not NULL) receives a loss to add, or NULL */
    nb_tensor *(*logits)(void *model, const nb_tensor *tokens, nb_tensor **aux);
    nb_causal_lm (*causal)(void *model);
} lm_kind;

static nb_tensor *llama_logits(void *m, const nb_tensor *tokens, nb_tensor **aux) {
    if (aux) *aux = NULL;
    return blk_llama_lm_forward(m, tokens, &(blk_attn_opts){.causal = true});
}
static nb_causal_lm llama_causal(void *m) {
    return blk_llama_lm_causal(m, 256);
}

static nb_tensor *deepseek_logits(void *m, const nb_tensor *tokens, nb_tensor **aux) {
    return blk_deepseek_lm_forward(m, tokens, &(blk_attn_opts){.causal = true}, aux);
}
static nb_causal_lm deepseek_causal(void *m) {
    return blk_deepseek_lm_causal(m, 256);
}

static nb_tensor *gpt2_logits(void *m, const nb_tensor *tokens, nb_tensor **aux) {
    if (aux) *aux = NULL;
    return nb_transformer_lm_forward(m, tokens, true, NULL, NULL);
}
static nb_causal_lm gpt2_causal(void *m) {
    return nb_transformer_lm_causal(m);
}

/* The model of kind under root, or false with an error. */
static bool make_model(const char *kind, nb_module *root, int64_t vocab, lm_kind *out) {
    *out = (lm_kind){.kind = kind, .vocab = vocab};
    if (strcmp(kind, "llama") == 0) {
        const blk_llama_config cfg = {.dim = 64,
                                      .n_heads = 4,
                                      .n_kv_heads = 2,
                                      .hidden = 128,
                                      .norm_eps = 1e-5,
                                      .rope_base = 10000};
        out->model = blk_llama_lm_new(root, "tiny_llama", vocab, 2, &cfg);
        out->logits = llama_logits, out->causal = llama_causal;
    } else if (strcmp(kind, "deepseek") == 0) {
        /* MLA with the low-rank query path, a dense first block, then a mixture of 4 experts
         * (2 a token) with a shared one */
        const blk_deepseek_config cfg = {.attn = {.dim = 64,
                                                  .n_heads = 4,
                                                  .q_rank = 32,
                                                  .kv_rank = 32,
                                                  .nope_dim = 16,
                                                  .rope_dim = 8,
                                                  .v_dim = 16,
                                                  .norm_eps = 1e-5,
                                                  .rope_base = 10000},
                                         .moe = {.dim = 64,
                                                 .hidden = 32,
                                                 .n_experts = 4,
                                                 .top_k = 2,
                                                 .n_shared = 1,
                                                 .aux_alpha = 0.01},
                                         .n_dense_layers = 1,
                                         .dense_hidden = 128,
                                         .norm_eps = 1e-5};
        out->model = blk_deepseek_lm_new(root, "tiny_deepseek", vocab, 2, &cfg);
        out->logits = deepseek_logits, out->causal = deepseek_causal;
    } else if (strcmp(kind, "deepseek_lite") == 0) {
        /* the other paths: one query projection wq, every block a mixture of experts, no
         * shared expert */
        const blk_deepseek_config cfg = {
            .attn = {.dim = 64,
                     .n_heads = 4,
                     .kv_rank = 32,
                     .nope_dim = 16,
                     .rope_dim = 8,
                     .v_dim = 24,
                     .norm_eps = 1e-5,
                     .rope_base = 10000},
            .moe = {.dim = 64, .hidden = 48, .n_experts = 4, .top_k = 2, .aux_alpha = 0.01},
            .norm_eps = 1e-5};
        out->model = blk_deepseek_lm_new(root, "tiny_deepseek_lite", vocab, 2, &cfg);
        out->logits = deepseek_logits, out->causal = deepseek_causal;
    } else if (strcmp(kind, "gpt2") == 0) {
        /* GPT-2's form of the TransformerLM: q/k/v biases, the tanh GELU, a head without
         * bias tied to the token embedding; learned positions for the 256 tokens llama.cpp's
         * context holds */
        const nb_lm_config cfg = {.vocab = vocab,
                                  .max_len = 256,
                                  .dim = 64,
                                  .num_heads = 4,
                                  .layers = 2,
                                  .qkv_bias = true,
                                  .tie_weights = true,
                                  .gelu_tanh = true,
                                  .no_head_bias = true};
        out->model = nb_transformer_lm_new_config(root, "tiny_gpt2", &cfg, 0.0);
        out->logits = gpt2_logits, out->causal = gpt2_causal;
    } else {
        nb_error("gguf_export", "unknown model '%s' (llama, deepseek, deepseek_lite or gpt2)",
                 kind);
    }
    return out->model != NULL;
}

/* Writes lm to path as a GGUF file of the weights' type, with the vocabulary v. */
static bool save_gguf(const lm_kind *lm, const char *path, const nb_gguf_vocab *v,
                      nb_gguf_type type) {
    if (strcmp(lm->kind, "llama") == 0) /* llama.cpp's "llama" */
        return blk_llama_lm_save_gguf(lm->model, path, 256, v, type);
    if (strncmp(lm->kind, "deepseek", 8) == 0) /* "deepseek2" */
        return blk_deepseek_lm_save_gguf(lm->model, path, 256, v, type);
    return nb_transformer_lm_save_gguf(lm->model, path, v, type); /* "gpt2" */
}

/* Trains lm on windows of the encoded text (next token prediction), AdamW. */
static bool train(const lm_kind *lm, nb_module *root, const int64_t *ids, int64_t n_ids) {
    int n = 0;
    nb_tensor **params = nb_module_param_tensors(root, &n);
    nb_optimizer *opt = params ? nb_adamw_new(n, params, nb_adamw_defaults(3e-3)) : NULL;
    free(params);
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    bool ok = opt != NULL;
    for (int step = 0; ok && step < 400; step++) {
        nb_scope_begin();
        int64_t in[B * T], target[B * T];
        for (int b = 0; b < B; b++) {
            int64_t start = (int64_t)(nb_rng_next(&rng) % (uint64_t)(n_ids - T - 1));
            memcpy(in + b * T, ids + start, sizeof *in * T);
            memcpy(target + b * T, ids + start + 1, sizeof *target * T);
        }
        nb_tensor *aux = NULL;
        nb_tensor *logits = lm->logits(lm->model, nb_from_array(NB_I64, NB_SHAPE(B, T), in), &aux);
        nb_tensor *loss =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(B * T, lm->vocab)),
                             nb_from_array(NB_I64, NB_SHAPE(B * T), target), -1, NB_REDUCE_MEAN);
        if (aux) loss = nb_add(loss, aux);
        nb_optimizer_zero_grad(opt);
        ok = loss && nb_backward(loss, NULL) && nb_optimizer_step(opt);
        if (ok && step % 100 == 99) printf("step %d loss %.4f\n", step + 1, nb_item(loss));
        nb_scope_end();
    }
    nb_optimizer_free(opt);
    return ok;
}

/* The next-token probabilities after each prefix seq[0 .. plen + i), i < n, as JSON rows. */
static bool write_probs(FILE *f, const lm_kind *lm, const int64_t *seq, int64_t plen, int64_t n) {
    nb_scope_begin();
    nb_set_grad_enabled(false);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, plen + n), seq);
    nb_tensor *logits = lm->logits(lm->model, tokens, NULL);
    nb_tensor *p = nb_softmax(nb_to_dtype(logits, NB_F64), -1);
    double *v = p ? malloc(sizeof *v * (size_t)nb_numel(p)) : NULL;
    bool ok = v && nb_to_doubles(p, v);
    for (int64_t i = 0; ok && i < n; i++) {
        fprintf(f, "%s[", i ? ",\n" : "");
        for (int64_t j = 0; j < lm->vocab; j++)
            fprintf(f, "%s%.9g", j ? "," : "", v[(plen - 1 + i) * lm->vocab + j]);
        fprintf(f, "]");
    }
    free(v);
    nb_set_grad_enabled(true);
    nb_scope_end();
    return ok;
}

static void write_ids(FILE *f, const char *key, const int64_t *ids, int64_t n) {
    fprintf(f, "\"%s\": [", key);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)ids[i]);
    fprintf(f, "],\n");
}

int main(int argc, char **argv) {
    if (argc != 4)
        return fprintf(stderr,
                       "usage: gguf_export llama|deepseek|deepseek_lite|gpt2 OUT_DIR NEW_TOKENS\n"),
               2;
    const char *kind = argv[1], *dir = argv[2];
    const int64_t n_new = atoll(argv[3]);
    nb_tokenizer *tok = nb_tokenizer_bpe_train(text, strlen(text), VOCAB);
    int64_t *ids = malloc(sizeof *ids * strlen(text));
    const int64_t n_ids = tok && ids ? nb_tokenizer_encode(tok, text, strlen(text), ids, NULL) : -1;
    if (n_ids < 0) return fail("tokenizer");
    nb_module *root = nb_model_new(NB_F32, 11);
    lm_kind lm;
    if (!make_model(kind, root, nb_tokenizer_vocab_size(tok), &lm)) return fail("model");
    if (!train(&lm, root, ids, n_ids)) return fail("training");

    /* The model's tokenizer goes into the file: llama.cpp reads it as a byte-level BPE. */
    nb_gguf_vocab vocab = nb_tokenizer_gguf_vocab(tok);
    vocab.eos = 0; /* byte 0, never in the text: a token llama.cpp may stop at */
    char path[4096];
    snprintf(path, sizeof path, "%s/tiny_%s_f32.gguf", dir, kind);
    if (!save_gguf(&lm, path, &vocab, NB_GGUF_F32)) return fail("export f32");
    snprintf(path, sizeof path, "%s/tiny_%s_f16.gguf", dir, kind);
    if (!save_gguf(&lm, path, &vocab, NB_GGUF_F16)) return fail("export f16");

    const char *prompt = "the quick";
    int64_t *seq = malloc(sizeof *seq * (strlen(prompt) + (size_t)n_new));
    const int64_t plen = nb_tokenizer_encode(tok, prompt, strlen(prompt), seq, NULL);
    const nb_causal_lm causal = lm.causal(lm.model);
    const nb_generate_opts opts = nb_generate_defaults(n_new);
    if (nb_generate(&causal, seq, plen, &opts, seq + plen, NULL) != n_new)
        return fail("nb_generate");
    char out[4096];
    const int64_t out_len = nb_tokenizer_decode(tok, seq, plen + n_new, out, sizeof out);
    if (out_len < 0 || out_len >= (int64_t)sizeof out) return fail("decode");

    snprintf(path, sizeof path, "%s/tiny_%s.json", dir, kind);
    FILE *f = fopen(path, "w");
    if (!f) return perror(path), 1;
    fprintf(f, "{");
    write_ids(f, "prompt", seq, plen);
    write_ids(f, "tokens", seq + plen, n_new);
    int64_t text_bytes[4096];
    for (int64_t i = 0; i < out_len; i++) text_bytes[i] = (unsigned char)out[i];
    write_ids(f, "text", text_bytes, out_len);
    fprintf(f, "\"probs\": [");
    bool ok = write_probs(f, &lm, seq, plen, n_new);
    fprintf(f, "]}\n");
    if (fclose(f) != 0 || !ok) return fail("writing the expected results");
    printf("nabla greedy: \"%.*s\"\n", (int)out_len, out);
    free(seq);
    free(ids);
    nb_tokenizer_free(tok);
    nb_module_free(root);
    nb_shutdown();
    return 0;
}
