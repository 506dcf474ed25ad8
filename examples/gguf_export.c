/* Export a model for llama.cpp (and the model side of tests/llama_cpp_check.sh): trains a small
 * byte-level Llama-style LM on a text, exports it to GGUF (float32 and float16) with
 * blk_llama_lm_save_gguf, and writes what nabla says the model does: greedy tokens from a prompt
 * through nb_generate, and the next-token probabilities (softmax of the full forward) at every step
 * of that path. Usage: gguf_export OUT_DIR NEW_TOKENS */
#include <nabla/nabla.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V = 256, T = 32, B = 8 };

static const char text[] =
    "the quick brown fox jumps over the lazy dog. a small model reads every byte of it, "
    "learns which letter follows which, and writes the sentence again from a few letters. "
    "the lazy dog sleeps while the quick brown fox runs over the hill and far away. ";

static int fail(const char *what) {
    fprintf(stderr, "gguf_export: %s: %s\n", what, nb_last_error());
    return 1;
}

/* Trains lm on windows of text (next byte prediction) for a fixed number of AdamW steps. */
static bool train(blk_llama_lm *lm, nb_module *root) {
    int n = 0;
    nb_tensor **params = nb_module_parameters(root, &n);
    nb_optimizer *opt = params ? nb_adamw_new(params, n, nb_adamw_defaults(3e-3)) : NULL;
    free(params);
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    const int64_t len = (int64_t)strlen(text);
    bool ok = opt != NULL;
    for (int step = 0; ok && step < 400; step++) {
        nb_scope_begin();
        int64_t in[B * T], target[B * T];
        for (int b = 0; b < B; b++) {
            int64_t start = (int64_t)(nb_rng_next(&rng) % (uint64_t)(len - T - 1));
            for (int t = 0; t < T; t++) {
                in[b * T + t] = (unsigned char)text[start + t];
                target[b * T + t] = (unsigned char)text[start + t + 1];
            }
        }
        nb_tensor *logits = blk_llama_lm_forward(lm, nb_from_array(NB_I64, NB_SHAPE(B, T), in),
                                                 &(blk_attn_opts){.causal = true});
        nb_tensor *loss =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(B * T, V)),
                             nb_from_array(NB_I64, NB_SHAPE(B * T), target), -1, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        ok = loss && nb_backward(loss, NULL) && nb_optimizer_step(opt);
        if (ok && step % 100 == 99) printf("step %d loss %.4f\n", step + 1, nb_item(loss));
        nb_scope_end();
    }
    nb_optimizer_free(opt);
    return ok;
}

/* The next-token probabilities after each prefix seq[0 .. plen + i), i < n, as JSON rows. */
static bool write_probs(FILE *f, blk_llama_lm *lm, const int64_t *seq, int64_t plen, int64_t n) {
    nb_scope_begin();
    nb_set_grad_enabled(false);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, plen + n), seq);
    nb_tensor *p = nb_softmax(
        nb_to_dtype(blk_llama_lm_forward(lm, tokens, &(blk_attn_opts){.causal = true}), NB_F64),
        -1);
    double *v = p ? malloc(sizeof *v * (size_t)nb_numel(p)) : NULL;
    bool ok = v && nb_to_doubles(p, v);
    for (int64_t i = 0; ok && i < n; i++) {
        fprintf(f, "%s[", i ? ",\n" : "");
        for (int64_t j = 0; j < V; j++)
            fprintf(f, "%s%.9g", j ? "," : "", v[(plen - 1 + i) * V + j]);
        fprintf(f, "]");
    }
    free(v);
    nb_set_grad_enabled(true);
    nb_scope_end();
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: gguf_export OUT_DIR NEW_TOKENS\n"), 2;
    const char *dir = argv[1];
    const int64_t n_new = atoll(argv[2]);
    nb_module *root = nb_model_new(NB_F32, 11);
    const blk_llama_config cfg = {.dim = 64,
                                  .n_heads = 4,
                                  .n_kv_heads = 2,
                                  .hidden = 128,
                                  .norm_eps = 1e-5,
                                  .rope_base = 10000};
    blk_llama_lm *lm = blk_llama_lm_new(root, "tiny_llama", V, 2, &cfg);
    if (!lm || !train(lm, root)) return fail("training");

    /* The vocabulary: token i is byte i; token 0 (NUL, absent from the text) ends sequences. */
    char bytes[V];
    const char *tokens[V];
    int64_t lens[V];
    for (int i = 0; i < V; i++) bytes[i] = (char)i, tokens[i] = &bytes[i], lens[i] = 1;
    const nb_gguf_vocab vocab = {.n_tokens = V, .tokens = tokens, .lens = lens, .bos = 0, .eos = 0};
    char path[4096];
    snprintf(path, sizeof path, "%s/tiny_llama_f32.gguf", dir);
    if (!blk_llama_lm_save_gguf(lm, path, 256, &vocab, NB_GGUF_F32)) return fail("export f32");
    snprintf(path, sizeof path, "%s/tiny_llama_f16.gguf", dir);
    if (!blk_llama_lm_save_gguf(lm, path, 256, &vocab, NB_GGUF_F16)) return fail("export f16");

    const char *prompt = "the quick";
    const int64_t plen = (int64_t)strlen(prompt);
    int64_t *seq = malloc(sizeof *seq * (size_t)(plen + n_new));
    for (int64_t i = 0; i < plen; i++) seq[i] = (unsigned char)prompt[i];
    const nb_causal_lm causal = blk_llama_lm_causal(lm, 256);
    const nb_generate_opts opts = nb_generate_defaults(n_new);
    if (nb_generate(&causal, seq, plen, &opts, seq + plen, NULL) != n_new)
        return fail("nb_generate");

    snprintf(path, sizeof path, "%s/expected.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return perror(path), 1;
    fprintf(f, "{\"prompt\": [");
    for (int64_t i = 0; i < plen; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)seq[i]);
    fprintf(f, "],\n\"tokens\": [");
    for (int64_t i = 0; i < n_new; i++)
        fprintf(f, "%s%lld", i ? "," : "", (long long)seq[plen + i]);
    fprintf(f, "],\n\"probs\": [");
    bool ok = write_probs(f, lm, seq, plen, n_new);
    fprintf(f, "]}\n");
    if (fclose(f) != 0 || !ok) return fail("writing expected.json");
    printf("nabla greedy: \"%s", prompt);
    for (int64_t i = 0; i < n_new; i++) putchar((int)seq[plen + i]);
    printf("\"\n");
    free(seq);
    nb_module_free(root);
    nb_shutdown();
    return 0;
}
