/* A character-level transformer language model.
 *
 *   char_lm [--text FILE] [--steps N] [--seed S] [--threads N] [--out DIR]
 *           [--temperature T] [--sample N] [--eval CHECKPOINT]
 *
 * Trains on FILE, or by default on sentences it generates from a small grammar, reports the
 * loss as it goes, saves DIR/char_lm.safetensors and prints text sampled with temperature. */
#define _POSIX_C_SOURCE 200809L
#include "common/files.h"
#include "common/plot.h"
#include "common/progress.h"

#include <math.h>
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONTEXT 64
#define DIM 96
#define HEADS 4
#define LAYERS 2
#define BATCH 16

/* ---- the default corpus: sentences from a tiny grammar ---- */
static const char *const subjects[] = {"the cat", "a dog", "the small bird", "my friend",
                                       "the old man", "a child", "the teacher", "our neighbour"};
static const char *const verbs[] = {"sees", "likes", "follows", "finds", "watches", "helps",
                                    "calls", "meets"};
static const char *const objects[] = {"the river", "a red ball", "the garden", "a quiet house",
                                      "the market", "a tall tree", "the moon", "a letter"};
static const char *const endings[] = {" today", " at night", " again", "", " slowly",
                                      " in the rain"};
#define PICK(rng, arr) arr[nb_rng_next(rng) % (sizeof arr / sizeof arr[0])]

static char *grammar_text(uint64_t seed, size_t *len) {
    nb_rng rng;
    nb_rng_seed(&rng, seed);
    size_t cap = 200000, n = 0;
    char *text = malloc(cap);
    while (n + 200 < cap) {
        n += (size_t)snprintf(text + n, cap - n, "%s %s %s%s.\n", PICK(&rng, subjects),
                              PICK(&rng, verbs), PICK(&rng, objects), PICK(&rng, endings));
    }
    *len = n;
    return text;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = size > 0 ? malloc((size_t)size) : NULL;
    *len = buf ? fread(buf, 1, (size_t)size, f) : 0;
    fclose(f);
    return buf;
}

/* ---- vocabulary: the distinct bytes of the text, sorted ---- */
typedef struct {
    int64_t size;
    unsigned char chars[256];
    int64_t id[256];
} vocab;

static void build_vocab(vocab *v, const char *text, size_t len) {
    bool seen[256] = {false};
    for (size_t i = 0; i < len; i++) seen[(unsigned char)text[i]] = true;
    v->size = 0;
    for (int c = 0; c < 256; c++) {
        v->id[c] = -1;
        if (seen[c]) {
            v->id[c] = v->size;
            v->chars[v->size++] = (unsigned char)c;
        }
    }
}

/* Samples n characters after a prompt, with temperature (0 = greedy). */
static void sample(nb_transformer_lm *lm, const vocab *v, const char *prompt, int n,
                   double temperature, nb_rng *rng) {
    int64_t ctx[CONTEXT];
    int len = 0;
    for (const char *p = prompt; *p && len < CONTEXT; p++)
        if (v->id[(unsigned char)*p] >= 0) ctx[len++] = v->id[(unsigned char)*p];
    printf("%s", prompt);
    bool prev = nb_set_grad_enabled(false);
    nb_module_train(&lm->base, false);
    for (int i = 0; i < n; i++) {
        nb_scope_begin();
        nb_tensor *logits =
            nb_transformer_lm_forward(lm, nb_from_array(NB_I64, NB_SHAPE(1, len), ctx), true, NULL, NULL);
        nb_tensor *last = nb_select(nb_select(logits, 0, 0), 0, len - 1);
        int64_t next = 0;
        if (temperature <= 0) {
            nb_tensor *idx;
            nb_max_dim(last, 0, false, &idx);
            next = (int64_t)nb_item(idx);
        } else {
            nb_tensor *probs = nb_softmax(nb_mul_scalar(last, 1.0 / temperature), 0);
            double u = nb_rng_uniform(rng), acc = 0;
            for (next = 0; next < v->size - 1; next++) {
                acc += nb_get(probs, &next);
                if (u < acc) break;
            }
        }
        nb_scope_end();
        putchar(v->chars[next]);
        if (len == CONTEXT) {
            memmove(ctx, ctx + 1, sizeof ctx[0] * (CONTEXT - 1));
            len--;
        }
        ctx[len++] = next;
    }
    printf("\n");
    nb_module_train(&lm->base, true);
    nb_set_grad_enabled(prev);
}

int main(int argc, char **argv) {
    const char *text_path = NULL, *out = "out/char_lm", *eval = NULL;
    int64_t steps = 1500;
    uint64_t seed = 1;
    int threads = 0, nsample = 300;
    double temperature = 0.8;
    for (int i = 1; i < argc;) {
        const char *a = argv[i++], *val = i < argc ? argv[i] : NULL;
        if (strcmp(a, "--help") == 0) {
            printf("usage: char_lm [--text FILE] [--steps N] [--seed S] [--threads N] "
                   "[--out DIR] [--temperature T] [--sample N] [--eval CHECKPOINT]\n");
            return 0;
        }
        if (!val) return fprintf(stderr, "char_lm: %s needs a value\n", a), 2;
        if (strcmp(a, "--text") == 0) text_path = val;
        else if (strcmp(a, "--steps") == 0) steps = atoll(val);
        else if (strcmp(a, "--seed") == 0) seed = strtoull(val, NULL, 10);
        else if (strcmp(a, "--threads") == 0) threads = atoi(val);
        else if (strcmp(a, "--out") == 0) out = val;
        else if (strcmp(a, "--temperature") == 0) temperature = atof(val);
        else if (strcmp(a, "--sample") == 0) nsample = atoi(val);
        else if (strcmp(a, "--eval") == 0) eval = val;
        else return fprintf(stderr, "char_lm: unknown option %s\n", a), 2;
        i++;
    }
    if (threads > 0) nb_set_num_threads(threads);
    size_t len;
    char *text = text_path ? read_file(text_path, &len) : grammar_text(seed, &len);
    if (!text || len < CONTEXT + 2) {
        fprintf(stderr, "char_lm: %s is missing or shorter than %d bytes\n",
                text_path ? text_path : "the text", CONTEXT + 2);
        return 1;
    }
    vocab v;
    build_vocab(&v, text, len);
    printf("text: %zu bytes from %s, %lld distinct characters\n", len,
           text_path ? text_path : "the built-in grammar", (long long)v.size);

    nb_module *model = nb_model_new(NB_F32, seed);
    nb_transformer_lm *lm = nb_transformer_lm_new(model, "", v.size, CONTEXT, DIM, HEADS, LAYERS, 0.0);
    if (!lm) return fprintf(stderr, "char_lm: %s\n", nb_last_error()), 1;
    nb_rng rng;
    nb_rng_seed(&rng, seed + 1);
    if (eval) {
        if (!nb_module_load(model, eval)) return fprintf(stderr, "char_lm: %s\n", nb_last_error()), 1;
        sample(lm, &v, "the ", nsample, temperature, &rng);
        nb_module_free(model);
        free(text);
        return 0;
    }
    if (!make_dirs(out)) return perror(out), 1;
    printf("model: %lld parameters; %lld steps of %d x %d characters\n",
           (long long)nb_module_numel(model), (long long)steps, BATCH, CONTEXT);

    nb_param params[256];
    int np = nb_module_params(model, params, 256);
    nb_tensor *pt[256];
    for (int i = 0; i < np; i++) pt[i] = params[i].tensor;
    nb_optimizer *opt = nb_adamw_new(pt, np, nb_adamw_defaults(3e-3));
    char csv_path[512];
    snprintf(csv_path, sizeof csv_path, "%s/train.csv", out);
    FILE *csv = fopen(csv_path, "w");
    if (!csv) return perror(csv_path), 1;
    fprintf(csv, "step,loss,accuracy\n");
    int64_t x[BATCH * CONTEXT], y[BATCH * CONTEXT];
    progress prog;
    progress_start(&prog, steps);
    double avg = 0;
    for (int64_t step = 0; step < steps; step++) {
        for (int b = 0; b < BATCH; b++) {
            size_t start = (size_t)(nb_rng_next(&rng) % (len - CONTEXT - 1));
            for (int t = 0; t < CONTEXT; t++) {
                x[b * CONTEXT + t] = v.id[(unsigned char)text[start + (size_t)t]];
                y[b * CONTEXT + t] = v.id[(unsigned char)text[start + (size_t)t + 1]];
            }
        }
        nb_scope_begin();
        nb_tensor *logits = nb_transformer_lm_forward(
            lm, nb_from_array(NB_I64, NB_SHAPE(BATCH, CONTEXT), x), true, NULL, NULL);
        nb_tensor *loss = nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, v.size)),
                                           nb_from_array(NB_I64, NB_SHAPE(BATCH * CONTEXT), y),
                                           -100, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        if (!nb_backward(loss, NULL)) return fprintf(stderr, "char_lm: %s\n", nb_last_error()), 1;
        nb_clip_grad_norm(pt, np, 1.0);
        nb_optimizer_set_lr(opt, nb_lr_warmup_cosine(step, steps / 20, steps, 3e-3, 3e-4));
        nb_optimizer_step(opt);
        double l = nb_item(loss);
        avg = step ? 0.95 * avg + 0.05 * l : l;
        fprintf(csv, "%lld,%.6f,%.4f\n", (long long)step + 1, l, exp(-l));
        progress_update(&prog, step + 1, avg, -1);
        nb_scope_end();
    }
    fclose(csv);
    progress_finish(&prog, "trained");
    char path[512];
    snprintf(path, sizeof path, "%s/char_lm.safetensors", out);
    if (nb_module_save(model, path)) printf("checkpoint: %s\n", path);
    snprintf(path, sizeof path, "%s/curve.png", out);
    if (plot_curve(csv_path, path, "char_lm (right axis: exp(-loss))")) printf("curve: %s\n", path);
    printf("sample (temperature %.2f):\n", temperature);
    sample(lm, &v, "the ", nsample, temperature, &rng);
    nb_optimizer_free(opt);
    nb_module_free(model);
    free(text);
    nb_shutdown();
    return 0;
}
