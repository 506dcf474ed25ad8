/* nabla's side of bench/time_to_loss: char_lm's model (a TransformerLM over the characters of
 * the fortunes, at char_lm's size) trained until its validation loss first reaches a target.
 * bench/char_lm_torch.py is its PyTorch twin, which takes everything it needs from the file
 * --export writes.
 *
 *   char_lm_nabla [--threads N] [--target NATS] [--max-steps N] [--eval-every N] [--seed S]
 *                 [--fortunes DIR] [--export FILE] [--quiet]
 *
 * The run. The corpus is the fortunes as examples/char_lm reads them (its corpus_fortunes),
 * tokenized by their characters. Each step draws BATCH windows of CONTEXT + 1 training tokens with
 * nb_corpus_batch from a generator seeded with seed + 1, and takes one AdamW step (PyTorch's
 * defaults, weight decay 0.01) on their mean cross-entropy, after clipping the gradient norm to
 * 1, at the learning rate nb_lr_warmup_cosine(step, max_steps / 20, max_steps, LR, LR / 10):
 * char_lm's recipe, with the schedule's horizon at max_steps. The model is built by
 * nb_model_new(NB_F32, seed) (PyTorch's default initialisation: linear layers uniform in
 * +-1/sqrt(in), embeddings N(0, 1), norms ones and zeros). The validation loss (nats per
 * character) is the mean cross-entropy over EVAL_WINDOWS fixed windows of the validation text
 * (nb_corpus_val_batch), taken before the first step and every eval_every steps; the run stops
 * at the first evaluation at or below the target, or after max_steps.
 *
 * Printed: one line per evaluation, then
 *   result side=nabla threads=2 reached=yes steps=2800 wall_s=41.234 val_loss=1.8492
 *          initial_val_loss=4.722462 peak_rss_mb=66.1 target=1.8540
 * (one line): wall_s is the time from the first step to the end of the evaluation that reached
 * the target (or of the last one), evaluations included, the first one before training and the
 * setup excluded; peak_rss_mb is the process's peak resident set (getrusage).
 *
 * --export FILE writes, instead of training, a safetensors file for the twin: the model's
 * initial parameters under their names, "data.train" and "data.val" (the token ids),
 * "data.order" (the start of every training window: [max_steps, BATCH], in the order
 * nb_corpus_batch draws them) and "data.val_starts" (the validation windows' starts), and the
 * run's settings in its metadata under "ttl." keys. Exit status: 0 when the target was
 * reached (or the file written), 1 when it was not or on an error, 2 on bad flags. */
#define _POSIX_C_SOURCE 200809L
#include "corpus.h"

#include <math.h>
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* char_lm's model and batch. */
#define CONTEXT 64
#define DIM 96
#define HEADS 4
#define LAYERS 2
#define BATCH 16
#define LR 3e-3
#define CLIP_NORM 1.0
/* Validation windows: a multiple of BATCH. */
#define EVAL_WINDOWS 128

/* The defaults of the flags. The target lies halfway between the validation losses after 2700
 * and 2800 steps (1.8584, 1.8492), so that the two sides' float32 rounding, which differs by
 * about 1e-6 nats, cannot move the step at which it is first reached. */
#define DEFAULT_TARGET 1.854
#define DEFAULT_MAX_STEPS 5000
#define DEFAULT_EVAL_EVERY 100

typedef struct {
    double target;
    int64_t max_steps, eval_every;
    uint64_t seed;
    int threads; /* 0: nabla's default */
    const char *fortunes, *export_path;
    bool quiet;
} options;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: char_lm_nabla [--threads N] [--target NATS] [--max-steps N] [--eval-every N] "
            "[--seed S] [--fortunes DIR] [--export FILE] [--quiet]\n"
            "  trains char_lm's model on the fortunes until the validation loss (nats per "
            "character)\n  is at most --target (default %.2f), at most --max-steps (default %d) "
            "steps\n",
            DEFAULT_TARGET, DEFAULT_MAX_STEPS);
}

/* The value after flag argv[*i] as a number in [lo, hi]; false with a message. */
static bool number_arg(int argc, char **argv, int *i, double lo, double hi, double *out) {
    const char *flag = argv[*i];
    if (*i + 1 >= argc) return fprintf(stderr, "char_lm_nabla: %s needs a value\n", flag), false;
    char *end;
    const double v = strtod(argv[++*i], &end);
    if (*end || end == argv[*i] || !(v >= lo && v <= hi))
        return fprintf(stderr, "char_lm_nabla: %s wants a number in [%g, %g], not '%s'\n", flag, lo,
                       hi, argv[*i]),
               false;
    *out = v;
    return true;
}

static bool parse(int argc, char **argv, options *o) {
    *o = (options){.target = DEFAULT_TARGET,
                   .max_steps = DEFAULT_MAX_STEPS,
                   .eval_every = DEFAULT_EVAL_EVERY,
                   .seed = 1,
                   .fortunes = FORTUNES_DIR};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v = 0;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(stdout), exit(0);
        else if (!strcmp(a, "--quiet"))
            o->quiet = true;
        else if (!strcmp(a, "--fortunes") || !strcmp(a, "--export")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "char_lm_nabla: %s needs a value\n", a);
                ok = false;
            } else if (!strcmp(a, "--fortunes"))
                o->fortunes = argv[++i];
            else
                o->export_path = argv[++i];
        } else if (!strcmp(a, "--target"))
            ok = number_arg(argc, argv, &i, 0, 100, &o->target);
        else if (!strcmp(a, "--threads"))
            ok = number_arg(argc, argv, &i, 1, 1024, &v), o->threads = (int)v;
        else if (!strcmp(a, "--max-steps"))
            ok = number_arg(argc, argv, &i, 1, 1e9, &v), o->max_steps = (int64_t)v;
        else if (!strcmp(a, "--eval-every"))
            ok = number_arg(argc, argv, &i, 1, 1e9, &v), o->eval_every = (int64_t)v;
        else if (!strcmp(a, "--seed"))
            ok = number_arg(argc, argv, &i, 0, 1e15, &v), o->seed = (uint64_t)v;
        else {
            fprintf(stderr, "char_lm_nabla: unknown argument '%s'\n", a);
            ok = false;
        }
        if (!ok) return usage(stderr), false;
    }
    return true;
}

static int fail(const char *what) {
    fprintf(stderr, "char_lm_nabla: %s: %s\n", what, nb_last_error());
    return 1;
}

/* The mean cross-entropy, in nats per token, over the EVAL_WINDOWS validation windows; in eval
 * mode without a graph. NaN with nabla's error. */
static double validation_loss(nb_transformer_lm *lm, const nb_corpus *c) {
    const bool grad = nb_set_grad_enabled(false);
    nb_module_train(&lm->base, false);
    double nats = 0;
    for (int64_t w0 = 0; w0 < EVAL_WINDOWS && !isnan(nats); w0 += BATCH) {
        nb_scope_begin();
        nb_tensor *x, *y, *logits = NULL;
        if (nb_corpus_val_batch(c, w0, BATCH, EVAL_WINDOWS, CONTEXT, &x, &y))
            logits = nb_transformer_lm_forward(lm, x, true, NULL, NULL);
        nats = logits ? nats + nb_item(nb_cross_entropy(
                                   nb_view(logits, NB_SHAPE(-1, lm->out_features)),
                                   nb_reshape(y, NB_SHAPE(BATCH * CONTEXT)), -100, NB_REDUCE_SUM))
                      : NAN;
        nb_scope_end();
    }
    nb_module_train(&lm->base, true);
    nb_set_grad_enabled(grad);
    return nats / ((double)EVAL_WINDOWS * CONTEXT);
}

/* One step (0-based): BATCH windows from rng, forward, backward, clip, schedule, AdamW. */
static bool train_step(nb_transformer_lm *lm, nb_optimizer *opt, nb_tensor *const *params,
                       int n_params, const nb_corpus *c, nb_rng *rng, int64_t step,
                       int64_t max_steps) {
    nb_scope_begin();
    nb_tensor *x, *y, *loss = NULL;
    if (nb_corpus_batch(c, rng, BATCH, CONTEXT, &x, &y)) {
        nb_tensor *logits = nb_transformer_lm_forward(lm, x, true, NULL, NULL);
        loss = nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, lm->out_features)),
                                nb_reshape(y, NB_SHAPE(BATCH * CONTEXT)), -100, NB_REDUCE_MEAN);
    }
    nb_optimizer_zero_grad(opt);
    bool ok =
        loss && nb_backward(loss, NULL) && !isnan(nb_clip_grad_norm(n_params, params, CLIP_NORM)) &&
        nb_optimizer_set_lr(opt,
                            nb_lr_warmup_cosine(step, max_steps / 20, max_steps, LR, LR / 10)) &&
        nb_optimizer_step(opt);
    nb_scope_end();
    return ok;
}

/* The file bench/char_lm_torch.py reads (see the top of this file). */
static bool export_twin(const char *path, const nb_module *model, const nb_corpus *c,
                        const options *o, int64_t vocab) {
    nb_param params[64];
    const int n = nb_module_named_params(model, params, 64);
    if (n < 0) return false;
    nb_scope_begin();
    nb_named_tensor all[64 + 4];
    memcpy(all, params, sizeof *params * (size_t)n);
    nb_tensor *order = nb_empty(NB_I64, NB_SHAPE(o->max_steps, BATCH)),
              *val_starts = nb_empty(NB_I64, NB_SHAPE(EVAL_WINDOWS));
    if (!order || !val_starts) {
        nb_scope_end();
        return false;
    }
    nb_rng rng;
    nb_rng_seed(&rng, o->seed + 1); /* as the run seeds it; nb_corpus_batch's draws */
    int64_t *starts = nb_data(order), *val = nb_data(val_starts);
    for (int64_t i = 0; i < o->max_steps * BATCH; i++)
        starts[i] = (int64_t)(nb_rng_next(&rng) % (uint64_t)(c->train_tokens - CONTEXT));
    for (int64_t w = 0; w < EVAL_WINDOWS; w++) /* nb_corpus_val_batch's windows */
        val[w] = w * ((c->val_tokens - CONTEXT - 1) / EVAL_WINDOWS);
    all[n] =
        (nb_named_tensor){"data.train", nb_from_array(NB_I64, NB_SHAPE(c->train_tokens), c->train)};
    all[n + 1] =
        (nb_named_tensor){"data.val", nb_from_array(NB_I64, NB_SHAPE(c->val_tokens), c->val)};
    all[n + 2] = (nb_named_tensor){"data.order", order};
    all[n + 3] = (nb_named_tensor){"data.val_starts", val_starts};
    char v[12][32];
    const double numbers[12] = {(double)vocab,
                                CONTEXT,
                                DIM,
                                HEADS,
                                LAYERS,
                                BATCH,
                                LR,
                                CLIP_NORM,
                                (double)o->target,
                                (double)o->max_steps,
                                (double)o->eval_every,
                                (double)o->seed};
    static const char *const keys[12] = {
        "ttl.vocab", "ttl.context", "ttl.dim",    "ttl.heads",     "ttl.layers",     "ttl.batch",
        "ttl.lr",    "ttl.clip",    "ttl.target", "ttl.max_steps", "ttl.eval_every", "ttl.seed"};
    nb_metadata_entry meta[12];
    for (int i = 0; i < 12; i++) {
        snprintf(v[i], sizeof v[i], "%.17g", numbers[i]);
        meta[i] = (nb_metadata_entry){keys[i], v[i]};
    }
    bool ok = all[n].tensor && all[n + 1].tensor &&
              nb_safetensors_save_with_metadata(path, n + 4, all, 12, meta);
    nb_scope_end();
    return ok;
}

/* Trains until the target; prints the evaluations and the result line. */
static int run(nb_module *model, nb_transformer_lm *lm, const nb_corpus *c, const options *o) {
    int n_params = 0;
    nb_tensor **params = nb_module_param_tensors(model, &n_params);
    nb_adam_opts adamw = nb_adamw_defaults(LR);
    nb_optimizer *opt = params ? nb_adamw_new(n_params, params, adamw) : NULL;
    if (!opt) {
        free(params);
        return fail("creating the optimizer");
    }
    nb_rng rng;
    nb_rng_seed(&rng, o->seed + 1);
    const double initial = validation_loss(lm, c);
    if (!o->quiet) printf("step 0 val_loss %.6f\n", initial);
    double loss = initial, t0 = now();
    int64_t step = 0;
    bool ok = !isnan(initial);
    while (ok && step < o->max_steps && !(loss <= o->target)) {
        ok = train_step(lm, opt, params, n_params, c, &rng, step, o->max_steps);
        step++;
        if (ok && (step % o->eval_every == 0 || step == o->max_steps)) {
            loss = validation_loss(lm, c);
            ok = isfinite(loss);
            if (!o->quiet)
                printf("step %lld val_loss %.6f time %.3f\n", (long long)step, loss, now() - t0),
                    fflush(stdout);
        }
    }
    const double wall = now() - t0;
    nb_optimizer_free(opt);
    free(params);
    if (!ok) return fail(isnan(loss) ? "evaluating" : "training");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("result side=nabla threads=%d reached=%s steps=%lld wall_s=%.3f val_loss=%.4f "
           "initial_val_loss=%.6f peak_rss_mb=%.1f target=%.4f\n",
           nb_get_num_threads(), loss <= o->target ? "yes" : "no", (long long)step, wall, loss,
           initial, (double)ru.ru_maxrss / 1024.0, o->target);
    return loss <= o->target ? 0 : 1;
}

/* The characters tokenizer of the whole text (training and validation), as char_lm's. */
static nb_tokenizer *characters_of(const nb_corpus *c) {
    char *all = malloc(c->train_bytes + c->val_bytes + 1);
    if (!all) return NULL;
    memcpy(all, c->train_text, c->train_bytes);
    memcpy(all + c->train_bytes, c->val_text, c->val_bytes);
    nb_tokenizer *t = nb_tokenizer_chars(all, c->train_bytes + c->val_bytes);
    free(all);
    return t;
}

int main(int argc, char **argv) {
    options o;
    if (!parse(argc, argv, &o)) return 2;
    if (o.threads > 0) nb_set_num_threads(o.threads);
    corpus fortunes;
    if (!corpus_fortunes(&fortunes, o.fortunes)) {
        corpus_free(&fortunes);
        return 1;
    }
    nb_corpus *c = &fortunes.text;
    nb_tokenizer *tok = characters_of(c);
    nb_module *model = NULL;
    nb_transformer_lm *lm = NULL;
    int rc = 1;
    if (!tok || !nb_corpus_encode(c, tok))
        rc = fail("tokenizing the fortunes");
    else if (!(model = nb_model_new(NB_F32, o.seed)) ||
             !(lm = nb_transformer_lm_new(model, "", nb_tokenizer_vocab_size(tok), CONTEXT, DIM,
                                          HEADS, LAYERS, 0.0)))
        rc = fail("building the model");
    else if (!o.quiet && !o.export_path)
        printf("text: %lld training and %lld validation characters, %lld distinct; model: %lld "
               "parameters; target %.4f nats per character\n",
               (long long)c->train_tokens, (long long)c->val_tokens,
               (long long)nb_tokenizer_vocab_size(tok), (long long)nb_module_param_numel(model),
               o.target);
    if (lm && o.export_path)
        rc = export_twin(o.export_path, model, c, &o, nb_tokenizer_vocab_size(tok))
                 ? 0
                 : fail("writing the twin's file");
    else if (lm)
        rc = run(model, lm, c, &o);
    nb_module_free(model);
    nb_tokenizer_free(tok);
    corpus_free(&fortunes);
    nb_shutdown();
    return rc;
}
