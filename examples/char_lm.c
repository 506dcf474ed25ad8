/* A transformer language model of characters, or of byte-level BPE tokens.
 *
 *   char_lm [--text FILE | --grammar] [--tokenizer char|bpe] [--vocab N] [--steps N] [--seed S]
 *           [--threads N] [--out DIR] [--eval CHECKPOINT] [--sample N] [--prompt TEXT]
 *           [--temperature T] [--top-k K] [--top-p P] [--lr X] [--checkpoint-every N] [--resume]
 *
 * Trains on the English fortunes of Debian's `fortunes` package (or FILE, or sentences from a
 * small grammar), holding out one block in twenty for validation (nb_corpus, nabla/text.h);
 * tokens are the text's characters, or a BPE of N tokens trained on the training text; reports
 * the training loss as it goes and the validation loss in bits per character every EVAL_EVERY
 * steps; saves DIR/char_lm.safetensors with the model's configuration and its tokenizer in its
 * metadata; then samples text through nb_generate (KV cache), decoded by the tokenizer.
 * --eval CHECKPOINT rebuilds the model and the tokenizer from the checkpoint alone, reports its
 * validation loss on the text and samples.
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
#define EVAL_WINDOWS 64 /* validation windows of CONTEXT tokens, evenly spaced */
#define DEFAULT_BPE_VOCAB 512

/* The texts as token ids, and the tokenizer that made them. */
typedef struct {
    const nb_tokenizer *tok;
    nb_corpus *c;
    const char *name;
} dataset;

/* The validation loss: nats per token and per character (the tokens' bytes). */
typedef struct {
    double per_token, per_char;
} val_loss;

/* The cross-entropy of lm on EVAL_WINDOWS fixed windows of the validation tokens, in eval mode
 * without autograd: its total over the predicted tokens, divided by their number and by the
 * characters (bytes) they decode to. NANs if the text is too short. */
static val_loss validation_loss(nb_transformer_lm *lm, const dataset *d) {
    const int64_t T = lm->max_len < CONTEXT ? lm->max_len : CONTEXT;
    if (d->c->val_tokens < T + 2) return (val_loss){NAN, NAN};
    const bool was_training = nb_module_is_training(&lm->base), grad = nb_set_grad_enabled(false);
    nb_module_train(&lm->base, false);
    double nats = 0, chars = 0;
    for (int w0 = 0; w0 < EVAL_WINDOWS; w0 += BATCH) {
        nb_scope_begin();
        nb_tensor *x, *y;
        if (nb_corpus_val_batch(d->c, w0, BATCH, EVAL_WINDOWS, T, &x, &y)) {
            nb_tensor *logits = nb_transformer_lm_forward(lm, x, true, NULL, NULL);
            nats += nb_item(nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, lm->out_features)),
                                             nb_view(y, NB_SHAPE(BATCH * T)), -100, NB_REDUCE_SUM));
            chars += (double)nb_tokenizer_decode(d->tok, nb_data(y), BATCH * T, NULL, 0);
        }
        nb_scope_end();
    }
    nb_module_train(&lm->base, was_training);
    nb_set_grad_enabled(grad);
    const double tokens = (double)EVAL_WINDOWS * (double)T;
    return (val_loss){nats / tokens, nats / chars};
}

static void print_token(int64_t token, void *ctx) {
    size_t len;
    const char *bytes = nb_tokenizer_token(ctx, token, &len);
    if (bytes) fwrite(bytes, 1, len, stdout);
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
static void warn_prompt(const nb_tokenizer *t, const sampling *s) {
    size_t plen = strlen(s->prompt);
    char shown[64];
    size_t unknown = corpus_unknown(t, s->prompt, plen, shown, sizeof shown);
    if (unknown && nb_dist_rank() == 0)
        fprintf(stderr,
                "char_lm: warning: %zu of the prompt's %zu characters (%s) are not in the "
                "vocabulary; the sample skips them\n",
                unknown, plen, shown);
}

/* Prints the prompt and nsample tokens generated after it (characters of the prompt outside
 * the vocabulary are skipped; warn_prompt said so). */
static bool sample(nb_transformer_lm *lm, const nb_tokenizer *t, const sampling *s) {
    size_t plen = strlen(s->prompt);
    int64_t n = 0;
    int64_t *prompt = malloc(sizeof *prompt * (plen + 1)),
            *out = malloc(sizeof *out * (size_t)(s->nsample + 1));
    bool ok = prompt && out;
    if (ok) n = nb_tokenizer_encode(t, s->prompt, plen, prompt, NULL);
    if (ok && n <= 0) n = nb_tokenizer_encode(t, "\n", 1, prompt, NULL);
    if (ok && n <= 0) prompt[0] = 0, n = 1;
    nb_generate_opts o = nb_generate_defaults(s->nsample);
    o.temperature = s->temperature;
    o.top_k = s->top_k;
    o.top_p = s->top_p;
    o.seed = s->seed;
    o.on_token = print_token;
    o.ctx = (void *)t;
    if (ok) printf("%s", s->prompt);
    const nb_causal_lm model = nb_transformer_lm_causal(lm);
    ok = ok && nb_generate(&model, prompt, n, &o, out, NULL) >= 0;
    printf("\n");
    free(prompt);
    free(out);
    return ok;
}

/* A checkpoint with the model's configuration and its tokenizer in its metadata. */
static bool save_checkpoint(const nb_transformer_lm *lm, const nb_tokenizer *t, const char *path) {
    nb_metadata_entry meta[NB_TOKENIZER_METADATA_MAX];
    return nb_transformer_lm_save(lm, NULL, path, nb_tokenizer_metadata(t, meta), meta);
}

/* The tokenizer a checkpoint carries; for a checkpoint of char_lm from before the library had
 * tokenizers, its character vocabulary (the same hex as the library's "chars"). NULL with an
 * error. */
static nb_tokenizer *checkpoint_tokenizer(const char *path) {
    nb_tokenizer *t = nb_tokenizer_read(path);
    if (t) return t;
    nb_scope_begin();
    int n = 0;
    const nb_metadata_entry *meta = nb_safetensors_read_metadata(path, &n);
    for (int i = 0; meta && i < n; i++)
        if (strcmp(meta[i].key, "char_lm.vocabulary") == 0) {
            const nb_metadata_entry chars[2] = {{NB_TOKENIZER_KEY, "chars"},
                                                {NB_TOKENIZER_KEY ".chars", meta[i].value}};
            t = nb_tokenizer_from_metadata(2, chars);
        }
    nb_scope_end();
    return t ? t : nb_tokenizer_read(path); /* the error of the file's own tokenizer */
}

typedef struct {
    trainer_flags run;
    const char *text_path;
    bool grammar, bpe;
    int64_t bpe_vocab; /* 0: not given */
    sampling sample;
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: char_lm [--text FILE | --grammar] [--tokenizer char|bpe] [--vocab N] "
            "[--steps N] [--seed S] [--threads N] "
            "[--out DIR] [--eval CHECKPOINT] [--sample N] [--prompt TEXT] [--temperature T] "
            "[--top-k K] [--top-p P] [--lr X] [--accum K] [--checkpoint-every N] [--resume]\n"
            "  default text: the fortunes in " FORTUNES_DIR " (apt-get install fortunes)\n"
            "  every %dth block of %d bytes of the text is held out for validation\n"
            "  --tokenizer: the text's characters (default), or a byte-level BPE of --vocab "
            "tokens\n    (256 to 65536, default %d) trained on the training text; the "
            "checkpoint keeps it\n"
            "  --eval: validation loss on the held-out text (an error if it is too short "
            "for one window),\n"
            "    then a sample; characters outside the checkpoint's vocabulary, in the text "
            "or the prompt,\n"
            "    are left out with a warning counting them\n",
            HOLD_OUT_EVERY, HOLD_OUT_BLOCK, DEFAULT_BPE_VOCAB);
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
        else if (args_is(&a, "--tokenizer")) {
            const char *kind = args_string(&a);
            ok = kind && (!strcmp(kind, "char") || !strcmp(kind, "bpe"));
            if (kind && !ok)
                fprintf(stderr, "char_lm: --tokenizer is 'char' or 'bpe', not '%s'\n", kind);
            o->bpe = ok && !strcmp(kind, "bpe");
        } else if (args_is(&a, "--vocab"))
            ok = args_int(&a, 256, 65536, &o->bpe_vocab);
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
    if (o->bpe_vocab && !o->bpe) {
        fprintf(stderr, "char_lm: --vocab is the size of a BPE: it needs --tokenizer bpe\n");
        return usage(stderr), false;
    }
    if (!o->bpe_vocab) o->bpe_vocab = DEFAULT_BPE_VOCAB;
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
    val_loss loss = validation_loss(lm, d);
    if (isnan(loss.per_token)) return false;
    const double bpc = loss.per_char / log(2.0);
    if (step >= 0) printf("step %lld: ", (long long)step);
    printf("validation loss %.4f nats per token, %.3f bits per character\n", loss.per_token, bpc);
    if (val_csv) fprintf(val_csv, "%lld,%.6f,%.6f\n", (long long)step, loss.per_token, bpc);
    return true;
}

/* FNV-1a of the training tokens: a resumed run must train on the same text and tokens. */
static uint64_t text_hash(const int64_t *ids, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint64_t)ids[i]) * 0x100000001b3ULL;
    return h;
}

/* Step step (0-based): one optimizer update on BATCH windows of the training text drawn from
 * rng; appends its row to csv and adds its loss to *avg. False with a message on an error or
 * a non-finite loss or gradient. */
static bool train_step(nb_transformer_lm *lm, nb_optimizer *opt, const param_list *pl,
                       const dataset *d, const options *o, int64_t step, nb_rng *rng, FILE *csv,
                       double *avg, dist_train *dt) {
    /* The global batch's windows, drawn on every rank; this rank keeps its micro-batches'. */
    const int64_t first = dist_train_micro_index(dt, 0);
    nb_scope_begin();
    nb_tensor *x, *y;
    bool ok = nb_corpus_batch(d->c, rng, BATCH * dist_train_micro_batches(dt), CONTEXT, &x, &y);
    if (!ok) fprintf(stderr, "char_lm: %s\n", nb_last_error());
    double stats[1] = {0}; /* the micro-batches' losses, summed */
    for (int k = 0; ok && k < dt->accum; k++) {
        nb_scope_begin();
        nb_tensor *logits = nb_transformer_lm_forward(
            lm, nb_narrow(x, 0, (first + k) * BATCH, BATCH), true, NULL, NULL);
        nb_tensor *loss = nb_cross_entropy(
            nb_view(logits, NB_SHAPE(-1, lm->out_features)),
            nb_reshape(nb_narrow(y, 0, (first + k) * BATCH, BATCH), NB_SHAPE(BATCH * CONTEXT)),
            -100, NB_REDUCE_MEAN);
        ok = dist_train_backward(dt, opt, loss, k, step);
        if (ok) stats[0] += nb_item(loss);
        nb_scope_end();
    }
    nb_scope_end();
    if (!ok) return false;
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
    int rc = 1;
    if (d->c->train_tokens < CONTEXT + 2) {
        fprintf(stderr, "char_lm: %s has fewer than %d training tokens\n", d->name, CONTEXT + 2);
        return 1;
    }
    if (nb_dist_rank() == 0 && !make_dirs(o->run.out)) {
        perror(o->run.out);
        goto done;
    }
    if (nb_dist_rank() == 0 && d->c->val_tokens < CONTEXT + 2)
        fprintf(stderr,
                "char_lm: note: no validation loss: the held-out text (every %dth block of %d "
                "bytes) has %lld tokens, fewer than one window's %d\n",
                HOLD_OUT_EVERY, HOLD_OUT_BLOCK, (long long)d->c->val_tokens, CONTEXT + 2);
    printf("model: %lld parameters; %lld steps of %d x %d tokens\n",
           (long long)nb_module_numel(model), (long long)o->run.steps, BATCH, CONTEXT);
    param_list pl;
    if (!param_list_of(&pl, model)) {
        rc = fail("listing the parameters");
        goto done;
    }
    if (!dist_train_init(&dt, "char_lm", model, &pl, o->run.accum)) goto done;
    bool main_rank = dist_train_is_main(&dt);
    if (!(opt = nb_adamw_new(pl.tensors, pl.n, nb_adamw_defaults(o->run.lr)))) {
        rc = fail("creating the optimizer");
        goto done;
    }
    char csv_path[512], val_path[512], run[768];
    snprintf(csv_path, sizeof csv_path, "%s/train.csv", o->run.out);
    snprintf(val_path, sizeof val_path, "%s/val.csv", o->run.out);
    /* A resumed run must draw the same batches: its micro-batch count is part of it. */
    int len = snprintf(run, sizeof run,
                       "char_lm --steps %lld --seed %llu --lr %.17g, %s (%lld tokens of a %s "
                       "tokenizer of %lld, hash %016llx)",
                       (long long)o->run.steps, (unsigned long long)o->run.seed, o->run.lr, d->name,
                       (long long)d->c->train_tokens, nb_tokenizer_kind_name(d->tok),
                       (long long)nb_tokenizer_vocab_size(d->tok),
                       (unsigned long long)text_hash(d->c->train, d->c->train_tokens));
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
        if (!train_step(lm, opt, &pl, d, o, st.step, &st.data_rng, logs[0], &avg, &dt)) goto done;
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
    if (!save_checkpoint(lm, d->tok, path)) {
        rc = fail("saving the checkpoint");
        goto done;
    }
    printf("checkpoint: %s\n", path);
    snprintf(path, sizeof path, "%s/curve.png", o->run.out);
    if (plot_train_val(csv_path, val_path, path, "char_lm: training and validation loss"))
        printf("curve: %s\n", path);
    printf("sample (temperature %.2f):\n", o->sample.temperature);
    rc = sample(lm, d->tok, &o->sample) ? 0 : fail("sampling");
done:
    if (rc != 0) rc = dist_train_fail(&dt, rc);
    dist_train_free(&dt);
    for (int i = 0; i < 2; i++)
        if (logs[i]) fclose(logs[i]);
    nb_optimizer_free(opt);
    return rc;
}

/* --eval: the model and tokenizer from the checkpoint alone; validation loss on the text's
 * held-out split, then a sample. Characters outside a characters vocabulary are left out with a
 * warning counting them; a held-out split too short for one window is an error. */
static int run_eval(const options *o, corpus *c) {
    nb_lm_config cfg;
    if (!nb_lm_config_read(o->run.eval, &cfg)) return fail("reading the checkpoint");
    nb_tokenizer *tok = checkpoint_tokenizer(o->run.eval);
    if (!tok) return fail("reading the tokenizer");
    dataset d = {.tok = tok, .c = &c->text, .name = c->name};
    int rc = 1;
    nb_module *model = NULL;
    if (nb_tokenizer_vocab_size(tok) != cfg.vocab) {
        fprintf(stderr, "char_lm: %s: its tokenizer has %lld tokens but the model %lld\n",
                o->run.eval, (long long)nb_tokenizer_vocab_size(tok), (long long)cfg.vocab);
        goto done;
    }
    warn_prompt(tok, &o->sample);
    model = nb_model_new(NB_F32, o->run.seed);
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "", &cfg, 0.0);
    if (!lm)
        rc = fail("building the model");
    else if (!nb_transformer_lm_load(lm, NULL, o->run.eval))
        rc = fail("loading the checkpoint");
    else if (!nb_corpus_encode(&c->text, tok))
        rc = fail("tokenizing the text");
    else {
        printf("model: %lld parameters, d_model %lld, %lld heads, %d layers, context %lld, "
               "%lld tokens (%s)\n",
               (long long)nb_module_numel(model), (long long)cfg.dim, (long long)cfg.num_heads,
               cfg.layers, (long long)cfg.max_len, (long long)cfg.vocab,
               nb_tokenizer_kind_name(tok));
        char shown[64];
        size_t unknown =
            corpus_unknown(tok, c->text.val_text, c->text.val_bytes, shown, sizeof shown);
        if (unknown)
            fprintf(stderr,
                    "char_lm: warning: %zu of the %zu held-out characters (%s) are not in %s's "
                    "vocabulary; the validation loss leaves them out\n",
                    unknown, c->text.val_bytes, shown, o->run.eval);
        if (report_validation(lm, &d, -1, NULL))
            rc = sample(lm, tok, &o->sample) ? 0 : fail("sampling");
        else
            fprintf(stderr,
                    "char_lm: %s: no validation loss: the held-out text (every %dth block of %d "
                    "bytes) has %lld tokens in the vocabulary, and one window needs %lld; "
                    "pass a longer --text (at least %d bytes)\n",
                    c->name, HOLD_OUT_EVERY, HOLD_OUT_BLOCK, (long long)c->text.val_tokens,
                    (long long)(cfg.max_len < CONTEXT ? cfg.max_len : CONTEXT) + 2,
                    HOLD_OUT_EVERY * HOLD_OUT_BLOCK);
    }
done:
    nb_module_free(model);
    nb_tokenizer_free(tok);
    return rc;
}

/* The tokenizer --tokenizer asks for: the characters of the whole text, or a BPE trained on
 * its training split. NULL with a message. */
static nb_tokenizer *make_tokenizer(const options *o, const nb_corpus *c) {
    nb_tokenizer *t = NULL;
    if (o->bpe) {
        t = nb_tokenizer_bpe_train(c->train_text, c->train_bytes, o->bpe_vocab);
    } else {
        char *all = malloc(c->train_bytes + c->val_bytes + 1);
        if (all) {
            memcpy(all, c->train_text, c->train_bytes);
            memcpy(all + c->train_bytes, c->val_text, c->val_bytes);
            t = nb_tokenizer_chars(all, c->train_bytes + c->val_bytes);
        }
        free(all);
    }
    if (!t) fprintf(stderr, "char_lm: making the tokenizer: %s\n", nb_last_error());
    return t;
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
    printf("text: %zu training and %zu validation bytes from %s\n", c.text.train_bytes,
           c.text.val_bytes, c.name);
    int rc = 1;
    if (o.run.eval) {
        rc = nb_dist_rank() == 0 ? run_eval(&o, &c) : 0; /* rank 0's alone */
    } else {
        nb_tokenizer *tok = make_tokenizer(&o, &c.text);
        nb_module *model = NULL;
        if (tok && nb_corpus_encode(&c.text, tok)) {
            if (o.bpe)
                printf("vocabulary: a BPE of %lld tokens, %.2f characters per token on the "
                       "training text\n",
                       (long long)nb_tokenizer_vocab_size(tok),
                       (double)c.text.train_bytes /
                           (double)(c.text.train_tokens ? c.text.train_tokens : 1));
            else
                printf("vocabulary: %lld distinct characters\n",
                       (long long)nb_tokenizer_vocab_size(tok));
            warn_prompt(tok, &o.sample);
            model = nb_model_new(NB_F32, o.run.seed);
            nb_transformer_lm *lm = nb_transformer_lm_new(model, "", nb_tokenizer_vocab_size(tok),
                                                          CONTEXT, DIM, HEADS, LAYERS, 0.0);
            nb_rng rng;
            nb_rng_seed(&rng, o.run.seed + 1);
            const dataset d = {.tok = tok, .c = &c.text, .name = c.name};
            rc = lm ? run_training(lm, &d, &o, &rng) : fail("building the model");
        } else if (tok) {
            rc = fail("tokenizing the text");
        }
        nb_module_free(model);
        nb_tokenizer_free(tok);
    }
    corpus_free(&c);
    nb_dist_finalize();
    nb_shutdown();
    return rc;
}
