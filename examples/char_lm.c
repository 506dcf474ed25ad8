/* A character-level transformer language model.
 *
 *   char_lm [--text FILE] [--steps N] [--seed S] [--threads N] [--out DIR]
 *           [--temperature T] [--sample N] [--eval CHECKPOINT]
 *
 * Trains on FILE, or by default on sentences it generates from a small grammar, reports the
 * loss as it goes, saves DIR/char_lm.safetensors and prints text sampled with temperature. */
#define _POSIX_C_SOURCE 200809L
#include "common/args.h"
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
static const char *const subjects[] = {"the cat",     "a dog",   "the small bird", "my friend",
                                       "the old man", "a child", "the teacher",    "our neighbour"};
static const char *const verbs[] = {"sees",    "likes", "follows", "finds",
                                    "watches", "helps", "calls",   "meets"};
static const char *const objects[] = {"the river",  "a red ball",  "the garden", "a quiet house",
                                      "the market", "a tall tree", "the moon",   "a letter"};
static const char *const endings[] = {" today", " at night", " again",
                                      "",       " slowly",   " in the rain"};
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
        nb_tensor *logits = nb_transformer_lm_forward(
            lm, nb_from_array(NB_I64, NB_SHAPE(1, len), ctx), true, NULL, NULL);
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

typedef struct {
    trainer_flags run;
    const char *text_path;
    int nsample;
    double temperature;
} options;

static void usage(FILE *f) {
    fprintf(f, "usage: char_lm [--text FILE] [--steps N] [--seed S] [--threads N] [--out DIR] "
               "[--temperature T] [--sample N] [--eval CHECKPOINT]\n");
}

/* False after printing what is wrong and the usage: the caller exits with 2. */
static bool parse(int argc, char **argv, options *o) {
    *o = (options){.run = {.out = "out/char_lm", .steps = 1500, .seed = 1},
                   .nsample = 300,
                   .temperature = 0.8};
    args a;
    args_start(&a, "char_lm", argc, argv);
    while (args_next(&a)) {
        bool ok = true;
        if (args_is_help(&a))
            usage(stdout), exit(0);
        else if (args_is(&a, "--text"))
            ok = (o->text_path = args_string(&a)) != NULL;
        else if (args_is(&a, "--temperature"))
            ok = args_double(&a, 0, 100, &o->temperature);
        else if (args_is(&a, "--sample"))
            ok = args_int32(&a, 0, 1000000, &o->nsample);
        else if (!args_trainer_flag(&a, &o->run, &ok))
            ok = args_unknown(&a);
        if (!ok) return usage(stderr), false;
    }
    return true;
}

static int fail(const char *what) {
    fprintf(stderr, "char_lm: %s: %s\n", what, nb_last_error());
    return 1;
}

/* Trains on text, saves the checkpoint and the curve into o->run.out, then samples. Frees what
 * it allocates on every path. */
static int run_training(nb_transformer_lm *lm, const vocab *v, const char *text, size_t len,
                        const options *o, nb_rng *rng) {
    nb_module *model = lm->base.root;
    nb_optimizer *opt = NULL;
    FILE *csv = NULL;
    int rc = 1;
    if (!make_dirs(o->run.out)) {
        perror(o->run.out);
        goto done;
    }
    printf("model: %lld parameters; %lld steps of %d x %d characters\n",
           (long long)nb_module_numel(model), (long long)o->run.steps, BATCH, CONTEXT);

    nb_param params[256];
    int np = nb_module_params(model, params, 256);
    nb_tensor *pt[256];
    for (int i = 0; i < np; i++) pt[i] = params[i].tensor;
    if (!(opt = nb_adamw_new(pt, np, nb_adamw_defaults(3e-3)))) {
        rc = fail("creating the optimizer");
        goto done;
    }
    char csv_path[512];
    snprintf(csv_path, sizeof csv_path, "%s/train.csv", o->run.out);
    if (!(csv = fopen(csv_path, "w"))) {
        perror(csv_path);
        goto done;
    }
    fprintf(csv, "step,loss,accuracy\n");
    int64_t x[BATCH * CONTEXT], y[BATCH * CONTEXT];
    progress prog;
    progress_start(&prog, o->run.steps);
    double avg = 0;
    for (int64_t step = 0; step < o->run.steps; step++) {
        for (int b = 0; b < BATCH; b++) {
            size_t start = (size_t)(nb_rng_next(rng) % (len - CONTEXT - 1));
            for (int t = 0; t < CONTEXT; t++) {
                x[b * CONTEXT + t] = v->id[(unsigned char)text[start + (size_t)t]];
                y[b * CONTEXT + t] = v->id[(unsigned char)text[start + (size_t)t + 1]];
            }
        }
        nb_scope_begin();
        nb_tensor *logits = nb_transformer_lm_forward(
            lm, nb_from_array(NB_I64, NB_SHAPE(BATCH, CONTEXT), x), true, NULL, NULL);
        nb_tensor *loss = nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, v->size)),
                                           nb_from_array(NB_I64, NB_SHAPE(BATCH * CONTEXT), y),
                                           -100, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        if (!loss || !nb_backward(loss, NULL)) {
            rc = fail("training step");
            nb_scope_end();
            goto done;
        }
        nb_clip_grad_norm(pt, np, 1.0);
        nb_optimizer_set_lr(opt,
                            nb_lr_warmup_cosine(step, o->run.steps / 20, o->run.steps, 3e-3, 3e-4));
        nb_optimizer_step(opt);
        double l = nb_item(loss);
        avg = step ? 0.95 * avg + 0.05 * l : l;
        fprintf(csv, "%lld,%.6f,%.4f\n", (long long)step + 1, l, exp(-l));
        progress_update(&prog, step + 1, avg, -1);
        nb_scope_end();
    }
    fclose(csv);
    csv = NULL;
    progress_finish(&prog, "trained");
    char path[512];
    snprintf(path, sizeof path, "%s/char_lm.safetensors", o->run.out);
    if (!nb_module_save(model, path)) {
        rc = fail("saving the checkpoint");
        goto done;
    }
    printf("checkpoint: %s\n", path);
    snprintf(path, sizeof path, "%s/curve.png", o->run.out);
    if (plot_curve(csv_path, path, "char_lm (right axis: exp(-loss))")) printf("curve: %s\n", path);
    printf("sample (temperature %.2f):\n", o->temperature);
    sample(lm, v, "the ", o->nsample, o->temperature, rng);
    rc = 0;
done:
    if (csv) fclose(csv);
    nb_optimizer_free(opt);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    if (!parse(argc, argv, &o)) return 2;
    if (o.run.threads > 0) nb_set_num_threads(o.run.threads);
    size_t len;
    char *text = o.text_path ? read_file(o.text_path, &len) : grammar_text(o.run.seed, &len);
    if (!text || len < CONTEXT + 2) {
        fprintf(stderr, "char_lm: %s is missing or shorter than %d bytes\n",
                o.text_path ? o.text_path : "the text", CONTEXT + 2);
        free(text);
        return 1;
    }
    vocab v;
    build_vocab(&v, text, len);
    printf("text: %zu bytes from %s, %lld distinct characters\n", len,
           o.text_path ? o.text_path : "the built-in grammar", (long long)v.size);

    nb_module *model = nb_model_new(NB_F32, o.run.seed);
    nb_transformer_lm *lm =
        nb_transformer_lm_new(model, "", v.size, CONTEXT, DIM, HEADS, LAYERS, 0.0);
    nb_rng rng;
    nb_rng_seed(&rng, o.run.seed + 1);
    int rc;
    if (!lm)
        rc = fail("building the model");
    else if (!o.run.eval)
        rc = run_training(lm, &v, text, len, &o, &rng);
    else if (!nb_module_load(model, o.run.eval))
        rc = fail("loading the checkpoint");
    else
        rc = (sample(lm, &v, "the ", o.nsample, o.temperature, &rng), 0);
    nb_module_free(model);
    free(text);
    nb_shutdown();
    return rc;
}
