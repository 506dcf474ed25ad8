/* A character-level transformer language model.
 *
 *   char_lm [--text FILE | --grammar] [--steps N] [--seed S] [--threads N] [--out DIR]
 *           [--eval CHECKPOINT] [--sample N] [--prompt TEXT] [--temperature T] [--top-k K]
 *           [--top-p P] [--lr X] [--checkpoint-every N] [--resume]
 *
 * Trains on the English fortunes of Debian's `fortunes` package (or FILE, or sentences from a
 * small grammar), holding out one block in twenty for validation; reports the training loss as
 * it goes and the validation loss in bits per character every EVAL_EVERY steps; saves
 * DIR/char_lm.safetensors with the model's configuration and character vocabulary in its
 * metadata; then samples text through nb_generate (KV cache). --eval CHECKPOINT rebuilds the
 * model from the checkpoint alone, reports its validation loss on the text and samples.
 * With --checkpoint-every N it also keeps a resume checkpoint in DIR (common/resume.h), from
 * which --resume continues a killed run exactly; training stops with a message when a loss
 * or gradient stops being finite (common/update.h). */
#define _POSIX_C_SOURCE 200809L
#include "char_lm_parts/corpus.h"
#include "common/args.h"
#include "common/files.h"
#include "common/plot.h"
#include "common/progress.h"
#include "common/resume.h"
#include "common/dist_train.h"
#include "common/update.h"

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
#define EVAL_EVERY 250
#define EVAL_WINDOWS 64 /* validation windows of CONTEXT characters, evenly spaced */
#define VOCAB_KEY "char_lm.vocabulary"

/* The texts as token ids. */
typedef struct {
    vocab v;
    int64_t *train, *val;
    size_t train_n, val_n;
    const char *name;
} dataset;

static bool encode(dataset *d, const corpus *c) {
    d->train = malloc(sizeof *d->train * (c->train_len + 1));
    d->val = malloc(sizeof *d->val * (c->val_len + 1));
    if (!d->train || !d->val) return false;
    vocab_encode(&d->v, c->train, c->train_len, d->train, &d->train_n);
    vocab_encode(&d->v, c->val, c->val_len, d->val, &d->val_n);
    d->name = c->name;
    return true;
}

/* Mean cross-entropy (nats per character) of lm on EVAL_WINDOWS fixed windows of the
 * validation text, in eval mode without autograd; NAN if the text is too short. */
static double validation_loss(nb_transformer_lm *lm, const dataset *d) {
    const int64_t T = lm->max_len < CONTEXT ? lm->max_len : CONTEXT;
    if (d->val_n < (size_t)T + 2) return NAN;
    const bool was_training = nb_module_is_training(&lm->base), grad = nb_set_grad_enabled(false);
    nb_module_train(&lm->base, false);
    const size_t stride = (d->val_n - (size_t)T - 1) / EVAL_WINDOWS;
    int64_t x[BATCH * CONTEXT], y[BATCH * CONTEXT];
    double total = 0;
    for (int w0 = 0; w0 < EVAL_WINDOWS; w0 += BATCH) {
        for (int b = 0; b < BATCH; b++)
            for (int64_t t = 0; t < T; t++) {
                size_t at = (size_t)(w0 + b) * stride + (size_t)t;
                x[b * T + t] = d->val[at];
                y[b * T + t] = d->val[at + 1];
            }
        nb_scope_begin();
        nb_tensor *logits = nb_transformer_lm_forward(
            lm, nb_from_array(NB_I64, NB_SHAPE(BATCH, T), x), true, NULL, NULL);
        total += nb_item(nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, lm->out_features)),
                                          nb_from_array(NB_I64, NB_SHAPE(BATCH * T), y), -100,
                                          NB_REDUCE_MEAN));
        nb_scope_end();
    }
    nb_module_train(&lm->base, was_training);
    nb_set_grad_enabled(grad);
    return total / (EVAL_WINDOWS / BATCH);
}

static void print_char(int64_t token, void *ctx) {
    putchar(((const vocab *)ctx)->chars[token]);
    fflush(stdout);
}

typedef struct {
    int64_t nsample, top_k;
    double temperature, top_p;
    const char *prompt;
    uint64_t seed;
} sampling;

/* Warns (rank 0) when characters of the prompt are outside the vocabulary: the sample skips
 * them. Called as soon as the vocabulary is known, well before the sample is printed, so the
 * warning on stderr never lands inside it (mpiexec forwards the two streams separately). */
static void warn_prompt(const vocab *v, const sampling *s) {
    size_t plen = strlen(s->prompt);
    char shown[64];
    size_t unknown = vocab_unknown(v, s->prompt, plen, shown, sizeof shown);
    if (unknown && nb_dist_rank() == 0)
        fprintf(stderr,
                "char_lm: warning: %zu of the prompt's %zu characters (%s) are not in the "
                "vocabulary; the sample skips them\n",
                unknown, plen, shown);
}

/* Prints the prompt and nsample characters generated after it (characters of the prompt
 * outside the vocabulary are skipped; warn_prompt said so). */
static bool sample(nb_transformer_lm *lm, const vocab *v, const sampling *s) {
    size_t plen = strlen(s->prompt), n;
    int64_t *prompt = malloc(sizeof *prompt * (plen + 1)),
            *out = malloc(sizeof *out * (size_t)(s->nsample + 1));
    bool ok = prompt && out;
    if (ok) vocab_encode(v, s->prompt, plen, prompt, &n);
    if (ok && n == 0) prompt[n++] = v->id['\n'] >= 0 ? v->id['\n'] : 0;
    nb_generate_opts o = nb_generate_defaults(s->nsample);
    o.temperature = s->temperature;
    o.top_k = s->top_k;
    o.top_p = s->top_p;
    o.seed = s->seed;
    o.on_token = print_char;
    o.ctx = (void *)v;
    if (ok) printf("%s", s->prompt);
    const nb_causal_lm model = nb_transformer_lm_causal(lm);
    ok = ok && nb_generate(&model, prompt, (int64_t)n, &o, out, NULL) >= 0;
    printf("\n");
    free(prompt);
    free(out);
    return ok;
}

/* A checkpoint with the model's configuration and the vocabulary in its metadata. */
static bool save_checkpoint(const nb_transformer_lm *lm, const vocab *v, const char *path) {
    char hex[2 * 256 + 1];
    vocab_to_hex(v, hex);
    const nb_metadata_entry extra = {VOCAB_KEY, hex};
    return nb_transformer_lm_save(lm, NULL, path, 1, &extra);
}

/* The vocabulary a checkpoint was trained with; false with a message. */
static bool checkpoint_vocab(const char *path, vocab *v) {
    nb_scope_begin();
    int n;
    nb_metadata_entry *meta = nb_safetensors_read_metadata(path, &n);
    bool ok = false;
    for (int i = 0; meta && i < n; i++)
        if (strcmp(meta[i].key, VOCAB_KEY) == 0) ok = vocab_from_hex(v, meta[i].value);
    if (meta && !ok)
        fprintf(stderr, "char_lm: %s has no valid %s in its metadata\n", path, VOCAB_KEY);
    else if (!meta)
        fprintf(stderr, "char_lm: %s: %s\n", path, nb_last_error());
    nb_scope_end();
    return ok;
}

typedef struct {
    trainer_flags run;
    const char *text_path;
    bool grammar;
    sampling sample;
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: char_lm [--text FILE | --grammar] [--steps N] [--seed S] [--threads N] "
            "[--out DIR] [--eval CHECKPOINT] [--sample N] [--prompt TEXT] [--temperature T] "
            "[--top-k K] [--top-p P] [--lr X] [--accum K] [--checkpoint-every N] [--resume]\n"
            "  default text: the fortunes in " FORTUNES_DIR " (apt-get install fortunes)\n"
            "  every %dth block of %d bytes of the text is held out for validation\n"
            "  --eval: validation loss on the held-out text (an error if it is too short "
            "for one window),\n"
            "    then a sample; characters outside the checkpoint's vocabulary, in the text "
            "or the prompt,\n"
            "    are left out with a warning counting them\n",
            HOLD_OUT_EVERY, HOLD_OUT_BLOCK);
}

/* False after printing what is wrong and the usage: the caller exits with 2. */
static bool parse(int argc, char **argv, options *o) {
    *o = (options){.run = {.out = "out/char_lm", .steps = 1500, .seed = 1, .lr = 3e-3},
                   .sample = {.nsample = 300, .temperature = 0.8, .prompt = "The "}};
    args a;
    args_start(&a, "char_lm", argc, argv);
    while (args_next(&a)) {
        bool ok = true;
        if (args_is_help(&a))
            usage(stdout), exit(0);
        else if (args_is(&a, "--text"))
            ok = (o->text_path = args_string(&a)) != NULL;
        else if (args_is(&a, "--grammar"))
            o->grammar = true;
        else if (args_is(&a, "--temperature"))
            ok = args_double(&a, 0, 100, &o->sample.temperature);
        else if (args_is(&a, "--top-p"))
            ok = args_double(&a, 0, 1, &o->sample.top_p);
        else if (args_is(&a, "--top-k"))
            ok = args_int(&a, 0, 256, &o->sample.top_k);
        else if (args_is(&a, "--sample"))
            ok = args_int(&a, 0, 1000000, &o->sample.nsample);
        else if (args_is(&a, "--prompt"))
            ok = (o->sample.prompt = args_string(&a)) != NULL;
        else if (!args_trainer_flag(&a, &o->run, &ok))
            ok = args_unknown(&a);
        if (!ok) return usage(stderr), false;
    }
    if (o->grammar && o->text_path) {
        fprintf(stderr, "char_lm: --text and --grammar exclude each other\n");
        return usage(stderr), false;
    }
    o->sample.seed = o->run.seed;
    return args_trainer_check(&a, &o->run) || (usage(stderr), false);
}

static int fail(const char *what) {
    fprintf(stderr, "char_lm: %s: %s\n", what, nb_last_error());
    return 1;
}

/* Reports the validation loss in nats and bits per character, appending it to val_csv. False
 * (nothing reported) when the validation text is too short for one window. */
static bool report_validation(nb_transformer_lm *lm, const dataset *d, int64_t step,
                              FILE *val_csv) {
    double loss = validation_loss(lm, d);
    if (isnan(loss)) return false;
    if (step >= 0) printf("step %lld: ", (long long)step);
    printf("validation loss %.4f nats, %.3f bits per character\n", loss, loss / log(2.0));
    if (val_csv) fprintf(val_csv, "%lld,%.6f,%.6f\n", (long long)step, loss, loss / log(2.0));
    return true;
}

/* FNV-1a of the training text: a resumed run must train on the same text. */
static uint64_t text_hash(const int64_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint64_t)ids[i]) * 0x100000001b3ULL;
    return h;
}

/* Step step (0-based): one optimizer update on BATCH windows of the training text drawn from
 * rng; appends its row to csv and adds its loss to *avg. False with a message on an error or
 * a non-finite loss or gradient. */
static bool train_step(nb_transformer_lm *lm, nb_optimizer *opt, const param_list *pl,
                       const dataset *d, const options *o, int64_t step, nb_rng *rng, FILE *csv,
                       double *avg, dist_train *dt, int64_t *x, int64_t *y) {
    /* The global batch's windows, drawn on every rank; this rank keeps its micro-batches'. */
    int first = dist_train_micro_index(dt, 0);
    for (int b = 0; b < BATCH * dist_train_micro_batches(dt); b++) {
        size_t start = (size_t)(nb_rng_next(rng) % (d->train_n - CONTEXT - 1));
        int mine = b - first * BATCH;
        if (mine < 0 || mine >= BATCH * dt->accum) continue;
        memcpy(x + mine * CONTEXT, d->train + start, sizeof x[0] * CONTEXT);
        memcpy(y + mine * CONTEXT, d->train + start + 1, sizeof y[0] * CONTEXT);
    }
    double stats[1] = {0}; /* the micro-batches' losses, summed */
    for (int k = 0; k < dt->accum; k++) {
        nb_scope_begin();
        nb_tensor *logits = nb_transformer_lm_forward(
            lm, nb_from_array(NB_I64, NB_SHAPE(BATCH, CONTEXT), x + k * BATCH * CONTEXT), true,
            NULL, NULL);
        nb_tensor *loss = nb_cross_entropy(
            nb_view(logits, NB_SHAPE(-1, lm->out_features)),
            nb_from_array(NB_I64, NB_SHAPE(BATCH * CONTEXT), y + k * BATCH * CONTEXT), -100,
            NB_REDUCE_MEAN);
        bool ok = dist_train_backward(dt, opt, loss, k, step);
        if (ok) stats[0] += nb_item(loss);
        nb_scope_end();
        if (!ok) return false;
    }
    if (!dist_train_update(dt, opt, pl, stats, 1, step, o->run.steps, o->run.lr, o->run.lr / 10))
        return false;
    double l = stats[0] / dist_train_micro_batches(dt);
    *avg = *avg > 0 ? 0.95 * *avg + 0.05 * l : l;
    if (csv) fprintf(csv, "%lld,%.6f,%.4f\n", (long long)step + 1, l, exp(-l));
    return true;
}

/* Trains on d (from the last resume checkpoint with --resume), saves the checkpoint and the
 * curves into o->run.out, then samples. Frees what it allocates on every path. */
static int run_training(nb_transformer_lm *lm, const dataset *d, const options *o, nb_rng *rng) {
    nb_module *model = nb_module_root(&lm->base);
    nb_optimizer *opt = NULL;
    FILE *logs[2] = {NULL, NULL}; /* train.csv, val.csv: rank 0's */
    dist_train dt = {0};
    int64_t *x = NULL, *y = NULL; /* this rank's micro-batches of a step */
    int rc = 1;
    if (d->train_n < CONTEXT + 2) {
        fprintf(stderr, "char_lm: %s has fewer than %d training characters\n", d->name,
                CONTEXT + 2);
        return 1;
    }
    if (nb_dist_rank() == 0 && !make_dirs(o->run.out)) {
        perror(o->run.out);
        goto done;
    }
    if (nb_dist_rank() == 0 && d->val_n < CONTEXT + 2)
        fprintf(stderr,
                "char_lm: note: no validation loss: the held-out text (every %dth block of %d "
                "bytes) has %zu characters, fewer than one window's %d\n",
                HOLD_OUT_EVERY, HOLD_OUT_BLOCK, d->val_n, CONTEXT + 2);
    printf("model: %lld parameters; %lld steps of %d x %d characters\n",
           (long long)nb_module_numel(model), (long long)o->run.steps, BATCH, CONTEXT);
    param_list pl;
    if (!param_list_of(&pl, model)) {
        rc = fail("listing the parameters");
        goto done;
    }
    if (!dist_train_init(&dt, "char_lm", model, &pl, o->run.accum)) goto done;
    bool main_rank = dist_train_is_main(&dt);
    size_t tokens = (size_t)BATCH * CONTEXT * (size_t)dt.accum;
    if (!(x = malloc(sizeof *x * tokens)) || !(y = malloc(sizeof *y * tokens))) {
        fprintf(stderr, "char_lm: out of memory\n");
        goto done;
    }
    if (!(opt = nb_adamw_new(pl.tensors, pl.n, nb_adamw_defaults(o->run.lr)))) {
        rc = fail("creating the optimizer");
        goto done;
    }
    char csv_path[512], val_path[512], run[768];
    snprintf(csv_path, sizeof csv_path, "%s/train.csv", o->run.out);
    snprintf(val_path, sizeof val_path, "%s/val.csv", o->run.out);
    /* A resumed run must draw the same batches: its micro-batch count is part of it. */
    int len = snprintf(run, sizeof run,
                       "char_lm --steps %lld --seed %llu --lr %.17g, %s (%zu characters, "
                       "hash %016llx)",
                       (long long)o->run.steps, (unsigned long long)o->run.seed, o->run.lr, d->name,
                       d->train_n, (unsigned long long)text_hash(d->train, d->train_n));
    if (dist_train_micro_batches(&dt) > 1)
        snprintf(run + len, sizeof run - (size_t)len, " micro-batches %d",
                 dist_train_micro_batches(&dt));
    resume_target target = {.prog = "char_lm",
                            .dir = o->run.out,
                            .run = run,
                            .steps = o->run.steps,
                            .model = model,
                            .opt = opt};
    resume_state st = {.step = 0, .data_rng = *rng};
    /* Every rank reads the checkpoint; all go on only if all could. */
    if (o->run.resume && !nb_dist_all_ok(resume_load(&target, &st))) goto done;
    if (main_rank &&
        (!(logs[0] = resume_open_log("char_lm", csv_path, "step,loss,accuracy\n", o->run.resume,
                                     st.log_bytes[0])) ||
         !(logs[1] = resume_open_log("char_lm", val_path, "step,val_loss,bits_per_char\n",
                                     o->run.resume, st.log_bytes[1]))))
        goto done;
    progress prog;
    progress_start(&prog, o->run.steps);
    double avg = 0;
    while (st.step < o->run.steps) {
        if (!train_step(lm, opt, &pl, d, o, st.step, &st.data_rng, logs[0], &avg, &dt, x, y))
            goto done;
        st.step++;
        if (main_rank) progress_update(&prog, st.step, avg, -1);
        if (main_rank && st.step % EVAL_EVERY == 0 && st.step < o->run.steps)
            report_validation(lm, d, st.step, logs[1]);
        if (main_rank &&
            !resume_checkpoint_due(&target, o->run.checkpoint_every, o->run.steps, &st, logs, 2))
            goto done;
        resume_kill_hook(st.step);
    }
    progress_finish(&prog, "trained"); /* stdout: rank 0's alone */
    if (!dist_train_finish(&dt, model)) goto done;
    if (!main_rank) {
        rc = 0;
        goto done;
    }
    report_validation(lm, d, o->run.steps, logs[1]);
    fclose(logs[0]);
    fclose(logs[1]);
    logs[0] = logs[1] = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/char_lm.safetensors", o->run.out);
    if (!save_checkpoint(lm, &d->v, path)) {
        rc = fail("saving the checkpoint");
        goto done;
    }
    printf("checkpoint: %s\n", path);
    snprintf(path, sizeof path, "%s/curve.png", o->run.out);
    if (plot_train_val(csv_path, val_path, path, "char_lm: training and validation loss"))
        printf("curve: %s\n", path);
    printf("sample (temperature %.2f):\n", o->sample.temperature);
    rc = sample(lm, &d->v, &o->sample) ? 0 : fail("sampling");
done:
    if (rc != 0) rc = dist_train_fail(&dt, rc);
    dist_train_free(&dt);
    free(x);
    free(y);
    for (int i = 0; i < 2; i++)
        if (logs[i]) fclose(logs[i]);
    nb_optimizer_free(opt);
    return rc;
}

/* --eval: the model and vocabulary from the checkpoint alone; validation loss on the text's
 * held-out split, then a sample. Characters outside the vocabulary are left out with a warning
 * counting them; a held-out split too short for one window is an error. */
static int run_eval(const options *o, const corpus *c) {
    nb_lm_config cfg;
    dataset d = {0};
    if (!nb_lm_config_read(o->run.eval, &cfg)) return fail("reading the checkpoint");
    if (!checkpoint_vocab(o->run.eval, &d.v)) return 1;
    if (d.v.size != cfg.vocab) {
        fprintf(stderr, "char_lm: %s: its vocabulary has %lld characters but the model %lld\n",
                o->run.eval, (long long)d.v.size, (long long)cfg.vocab);
        return 1;
    }
    warn_prompt(&d.v, &o->sample);
    nb_module *model = nb_model_new(NB_F32, o->run.seed);
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "", &cfg, 0.0);
    int rc = 1;
    if (!lm)
        rc = fail("building the model");
    else if (!nb_transformer_lm_load(lm, NULL, o->run.eval))
        rc = fail("loading the checkpoint");
    else if (!encode(&d, c))
        fprintf(stderr, "char_lm: out of memory\n");
    else {
        printf("model: %lld parameters, d_model %lld, %lld heads, %d layers, context %lld, "
               "%lld characters\n",
               (long long)nb_module_numel(model), (long long)cfg.dim, (long long)cfg.num_heads,
               cfg.layers, (long long)cfg.max_len, (long long)cfg.vocab);
        char shown[64];
        size_t unknown = vocab_unknown(&d.v, c->val, c->val_len, shown, sizeof shown);
        if (unknown)
            fprintf(stderr,
                    "char_lm: warning: %zu of the %zu held-out characters (%s) are not in %s's "
                    "vocabulary; the validation loss leaves them out\n",
                    unknown, c->val_len, shown, o->run.eval);
        if (report_validation(lm, &d, -1, NULL))
            rc = sample(lm, &d.v, &o->sample) ? 0 : fail("sampling");
        else
            fprintf(stderr,
                    "char_lm: %s: no validation loss: the held-out text (every %dth block of %d "
                    "bytes) has %zu characters in the vocabulary, and one window needs %lld; "
                    "pass a longer --text (at least %d bytes)\n",
                    c->name, HOLD_OUT_EVERY, HOLD_OUT_BLOCK, d.val_n,
                    (long long)(cfg.max_len < CONTEXT ? cfg.max_len : CONTEXT) + 2,
                    HOLD_OUT_EVERY * HOLD_OUT_BLOCK);
    }
    free(d.train);
    free(d.val);
    nb_module_free(model);
    return rc;
}

int main(int argc, char **argv) {
    dist_train_start("char_lm", &argc, &argv);
    options o;
    if (!parse(argc, argv, &o)) {
        nb_dist_finalize(); /* every rank read the same flags: all stop here */
        return 2;
    }
    if (o.run.threads > 0) nb_set_num_threads(o.run.threads);
    corpus c;
    bool read = o.text_path ? corpus_file(&c, o.text_path)
                : o.grammar ? corpus_grammar(&c, o.run.seed)
                            : corpus_fortunes(&c, FORTUNES_DIR);
    if (!read) return 1;
    printf("text: %zu training and %zu validation bytes from %s\n", c.train_len, c.val_len, c.name);
    int rc;
    if (o.run.eval) {
        rc = nb_dist_rank() == 0 ? run_eval(&o, &c) : 0; /* rank 0's alone */
    } else {
        dataset d = {0};
        vocab_build(&d.v, c.train, c.train_len, c.val, c.val_len);
        printf("vocabulary: %lld distinct characters\n", (long long)d.v.size);
        warn_prompt(&d.v, &o.sample);
        nb_module *model = nb_model_new(NB_F32, o.run.seed);
        nb_transformer_lm *lm =
            nb_transformer_lm_new(model, "", d.v.size, CONTEXT, DIM, HEADS, LAYERS, 0.0);
        nb_rng rng;
        nb_rng_seed(&rng, o.run.seed + 1);
        if (!lm)
            rc = fail("building the model");
        else if (!encode(&d, &c))
            rc = (fprintf(stderr, "char_lm: out of memory\n"), 1);
        else
            rc = run_training(lm, &d, &o, &rng);
        free(d.train);
        free(d.val);
        nb_module_free(model);
    }
    corpus_free(&c);
    nb_dist_finalize();
    nb_shutdown();
    return rc;
}
