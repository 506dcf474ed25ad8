/* A transformer language model of characters, or of byte-level BPE tokens.
 *
 *   char_lm [--text FILE | --grammar] [--tokenizer char|bpe] [--vocab N]
 *           [--block gpt|llama|deepseek] [--dim D] [--heads H] [--layers L] [--steps N]
 *           [--seed S] [--threads N] [--out DIR] [--eval CHECKPOINT] [--sample N] [--prompt TEXT]
 *           [--temperature T] [--top-k K] [--top-p P] [--lr X] [--accum K]
 *           [--checkpoint-every N] [--resume]
 *
 * Trains on the English fortunes of Debian's `fortunes` package (or FILE, or sentences from a
 * small grammar), holding out one block in twenty for validation (nb_corpus, nabla/text.h);
 * tokens are the text's characters, or a BPE of N tokens trained on the training text. The
 * model is nabla's TransformerLM, the Llama-style LM or the DeepSeek-style LM of
 * <nabla/blocks.h> at about the same parameter count (char_lm_parts/model.h). Training runs
 * through nb_train (nabla/train.h): progress, train.csv, the validation loss in bits per
 * character every EVAL_EVERY steps in val.csv, curve.png, and with --checkpoint-every N resume
 * checkpoints in DIR from which --resume continues a killed run exactly. Then it saves
 * DIR/char_lm.safetensors with the model's block and shape and its tokenizer in its metadata,
 * and samples text through nb_generate with the model's cache, decoded by the tokenizer.
 * --eval CHECKPOINT rebuilds the model and the tokenizer from the checkpoint alone, reports its
 * validation loss on the text and samples. */
#define _POSIX_C_SOURCE 200809L
#include "char_lm_parts/corpus.h"
#include "char_lm_parts/model.h"
#include "common/dist_train.h"
#include "common/flag_values.h"
#include "common/example_train.h"
#include "common/train_flags.h"

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

/* The cross-entropy of m on EVAL_WINDOWS fixed windows of the validation tokens, in eval mode
 * without autograd: its total over the predicted tokens, divided by their number and by the
 * characters (bytes) they decode to. NANs if the text is too short. */
static val_loss validation_loss(const lm_model *m, const dataset *d) {
    const int64_t T = m->shape.context < CONTEXT ? m->shape.context : CONTEXT;
    if (d->c->val_tokens < T + 2) return (val_loss){NAN, NAN};
    const bool was_training = nb_module_is_training(m->module), grad = nb_set_grad_enabled(false);
    nb_module_train(m->module, false);
    double nats = 0, chars = 0;
    for (int w0 = 0; w0 < EVAL_WINDOWS; w0 += BATCH) {
        nb_scope_begin();
        nb_tensor *x, *y;
        if (nb_corpus_val_batch(d->c, w0, BATCH, EVAL_WINDOWS, T, &x, &y)) {
            nb_tensor *logits = lm_model_forward(m, x, NULL);
            nats += nb_item(nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, m->shape.vocab)),
                                             nb_view(y, NB_SHAPE(BATCH * T)), -100, NB_REDUCE_SUM));
            chars += (double)nb_tokenizer_decode(d->tok, nb_data(y), BATCH * T, NULL, 0);
        }
        nb_scope_end();
    }
    nb_module_train(m->module, was_training);
    nb_set_grad_enabled(grad);
    const double tokens = (double)EVAL_WINDOWS * (double)T;
    return (val_loss){nats / tokens, nats / chars};
}

static void print_token(void *ctx, int64_t token) {
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

/* Prints the prompt and nsample tokens generated after it through nb_generate with the model's
 * cache (characters of the prompt outside the vocabulary are skipped; warn_prompt said so). */
static bool sample(const lm_model *m, const nb_tokenizer *t, const sampling *s) {
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
    const nb_causal_lm model = lm_model_causal(m);
    ok = ok && nb_generate(&model, prompt, n, &o, out, NULL) >= 0;
    printf("\n");
    free(prompt);
    free(out);
    return ok;
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
    lm_shape shape;    /* vocab and context set later */
    sampling sample;
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: char_lm [--text FILE | --grammar] [--tokenizer char|bpe] [--vocab N] "
            "[--block gpt|llama|deepseek] [--dim D] [--heads H] [--layers L] " ARGS_TRAINER_USAGE
            " [--sample N] [--prompt TEXT] [--temperature T] [--top-k K] [--top-p P]\n"
            "  default text: the fortunes in " FORTUNES_DIR " (apt-get install fortunes)\n"
            "  every %dth block of %d bytes of the text is held out for validation\n"
            "  --tokenizer: the text's characters (default), or a byte-level BPE of --vocab "
            "tokens\n    (256 to 65536, default %d) trained on the training text; the "
            "checkpoint keeps it\n"
            "  --block: nabla's TransformerLM (gpt, default), the Llama-style LM or the "
            "DeepSeek-style LM,\n    sized to about the gpt model's parameters at the same "
            "--dim (default %d), --heads (%d)\n    and --layers (%d)\n"
            "  --eval: validation loss on the held-out text (an error if it is too short "
            "for one window),\n"
            "    then a sample; characters outside the checkpoint's vocabulary, in the text "
            "or the prompt,\n"
            "    are left out with a warning counting them\n",
            HOLD_OUT_EVERY, HOLD_OUT_BLOCK, DEFAULT_BPE_VOCAB, DIM, HEADS, LAYERS);
}

enum {
    OPT_TEXT = 0x100,
    OPT_GRAMMAR,
    OPT_TOKENIZER,
    OPT_VOCAB,
    OPT_TEMPERATURE,
    OPT_TOP_P,
    OPT_TOP_K,
    OPT_SAMPLE,
    OPT_PROMPT,
    OPT_BLOCK,
    OPT_DIM,
    OPT_HEADS,
    OPT_LAYERS,
    N_OWN_OPTS = OPT_LAYERS - OPT_TEXT + 2 /* and --help */
};

/* The names of char_lm's own flags, in the order of their ids. */
static const char *const own_names[] = {"text",  "grammar", "tokenizer", "vocab",  "temperature",
                                        "top-p", "top-k",   "sample",    "prompt", "block",
                                        "dim",   "heads",   "layers"};

/* Parses char_lm's own flag c (value v) into o; false with a message. */
static bool own_flag(int c, const char *v, options *o) {
    switch (c) {
    case OPT_TEXT:
        return (o->text_path = v) != NULL;
    case OPT_GRAMMAR:
        return o->grammar = true;
    case OPT_TOKENIZER:
        o->bpe = !strcmp(v, "bpe");
        if (o->bpe || !strcmp(v, "char")) return true;
        fprintf(stderr, "char_lm: --tokenizer is 'char' or 'bpe', not '%s'\n", v);
        return false;
    case OPT_VOCAB:
        return flag_int("char_lm", "--vocab", v, 256, 65536, &o->bpe_vocab);
    case OPT_TEMPERATURE:
        return flag_double("char_lm", "--temperature", v, 0, 100, &o->sample.temperature);
    case OPT_TOP_P:
        return flag_double("char_lm", "--top-p", v, 0, 1, &o->sample.top_p);
    case OPT_TOP_K:
        return flag_int("char_lm", "--top-k", v, 0, 256, &o->sample.top_k);
    case OPT_SAMPLE:
        return flag_int("char_lm", "--sample", v, 0, 1000000, &o->sample.nsample);
    case OPT_PROMPT:
        return (o->sample.prompt = v) != NULL;
    case OPT_BLOCK:
        if (lm_block_parse(v, &o->shape.block)) return true;
        fprintf(stderr, "char_lm: unknown block '%s' (gpt, llama or deepseek)\n", v);
        return false;
    case OPT_DIM:
        return flag_int("char_lm", "--dim", v, 8, 4096, &o->shape.dim);
    case OPT_HEADS:
        return flag_int("char_lm", "--heads", v, 1, 64, &o->shape.heads);
    case OPT_LAYERS:
        return flag_int("char_lm", "--layers", v, 1, BLK_MAX_LAYERS, &o->shape.layers);
    }
    return false;
}

/* False after printing what is wrong and the usage: the caller exits with 2. */
static bool parse(int argc, char **argv, options *o) {
    *o = (options){.run = {.out = "out/char_lm", .steps = 1500, .seed = 1, .lr = 3e-3},
                   .shape = {.block = LM_BLOCK_GPT, .dim = DIM, .heads = HEADS, .layers = LAYERS},
                   .sample = {.nsample = 300, .temperature = 0.8, .prompt = "The "}};
    struct option opts[N_OWN_OPTS + TRAIN_FLAGS_MAX + 1] = {{"help", no_argument, NULL, 'h'}};
    for (int c = OPT_TEXT; c <= OPT_LAYERS; c++)
        opts[1 + c - OPT_TEXT] = (struct option){
            own_names[c - OPT_TEXT], c == OPT_GRAMMAR ? no_argument : required_argument, NULL, c};
    train_flags_options(ARGS_ALL_TRAINER_FLAGS, opts + N_OWN_OPTS);
    for (int c; (c = flags_next("char_lm", argc, argv, opts)) != -1;) {
        bool ok = c != FLAGS_BAD;
        if (c == 'h')
            usage(stdout), exit(0);
        else if (is_train_flag(c))
            ok = train_flag_value("char_lm", c, optarg, &o->run);
        else if (ok)
            ok = own_flag(c, optarg, o);
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
    if (o->shape.dim % o->shape.heads || (o->shape.dim / o->shape.heads) % 2) {
        fprintf(stderr, "char_lm: --dim must be --heads times an even head size\n");
        return usage(stderr), false;
    }
    if (!o->bpe_vocab) o->bpe_vocab = DEFAULT_BPE_VOCAB;
    o->sample.seed = o->run.seed;
    return train_flags_check("char_lm", &o->run) || (usage(stderr), false);
}

static int fail(const char *what) {
    fprintf(stderr, "char_lm: %s: %s\n", what, nb_last_error());
    return 1;
}

/* Prints the validation loss in nats and bits per character. False (nothing printed) when the
 * validation text is too short for one window. */
static bool report_validation(const lm_model *m, const dataset *d) {
    val_loss loss = validation_loss(m, d);
    if (isnan(loss.per_token)) return false;
    printf("validation loss %.4f nats per token, %.3f bits per character\n", loss.per_token,
           loss.per_char / log(2.0));
    return true;
}

/* FNV-1a of the training tokens: a resumed run must train on the same text and tokens. */
static uint64_t text_hash(const int64_t *ids, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint64_t)ids[i]) * 0x100000001b3ULL;
    return h;
}

/* The training data's state, and what the steps read. */
typedef struct {
    nb_rng data_rng;  /* where the data stream is: saved in checkpoints (nb_train data_state) */
    int64_t *windows; /* the step's global batch: its inputs [count * BATCH, T], then targets */
    const lm_model *m;
    const dataset *d;
    const options *o;
} lm_trainer;

/* Micro-batch m of a step: the step's global batch of BATCH x count windows is drawn at its
 * first micro-batch (every rank draws all of it, so the stream stays in step everywhere); this
 * one is part m->index. deepseek adds its load-balancing loss (metric aux_loss). */
static nb_tensor *lm_step(void *user, const nb_train_micro *m, double *metrics) {
    lm_trainer *tr = user;
    const int64_t T = CONTEXT, first = (int64_t)m->index * BATCH * T;
    if (m->micro == 0) {
        nb_tensor *x, *y;
        if (!nb_corpus_batch(tr->d->c, &tr->data_rng, BATCH * m->count, T, &x, &y)) return NULL;
        const size_t n = (size_t)(BATCH * m->count * T);
        memcpy(tr->windows, nb_data(x), sizeof *tr->windows * n);
        memcpy(tr->windows + n, nb_data(y), sizeof *tr->windows * n);
    }
    const int64_t *x = tr->windows + first,
                  *y = tr->windows + (int64_t)m->count * BATCH * T + first;
    nb_tensor *aux;
    nb_tensor *logits = lm_model_forward(tr->m, nb_from_array(NB_I64, NB_SHAPE(BATCH, T), x), &aux);
    nb_tensor *loss =
        nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, tr->m->shape.vocab)),
                         nb_from_array(NB_I64, NB_SHAPE(BATCH * T), y), -100, NB_REDUCE_MEAN);
    if (!aux) return loss;
    metrics[0] = nb_item(aux);
    return nb_add(loss, aux);
}

/* Warmup over the first 20th, then cosine down to a tenth of --lr. */
static double lm_lr(void *user, int64_t step, int64_t total) {
    const lm_trainer *tr = user;
    return nb_lr_warmup_cosine(step, total / 20, total, tr->o->run.lr, tr->o->run.lr / 10);
}

/* The validation loss in bits per character (NaN when the held-out text is too short). */
static bool lm_eval(void *user, int64_t done, double *metric) {
    (void)done;
    const lm_trainer *tr = user;
    *metric = validation_loss(tr->m, tr->d).per_char / log(2.0);
    return true;
}

/* The flags a resumed run must share: its batches depend on the micro-batch count too. */
static void run_name(char *run, size_t cap, const options *o, const dataset *d, int micro) {
    const lm_shape *s = &o->shape;
    int len =
        snprintf(run, cap,
                 "char_lm --block %s --dim %lld --heads %lld --layers %lld --steps %lld "
                 "--seed %llu --lr %.17g, %s (%lld tokens of a %s tokenizer of %lld, hash "
                 "%016llx)",
                 lm_block_name(s->block), (long long)s->dim, (long long)s->heads,
                 (long long)s->layers, (long long)o->run.steps, (unsigned long long)o->run.seed,
                 o->run.lr, d->name, (long long)d->c->train_tokens, nb_tokenizer_kind_name(d->tok),
                 (long long)nb_tokenizer_vocab_size(d->tok),
                 (unsigned long long)text_hash(d->c->train, d->c->train_tokens));
    if (micro > 1 && len > 0 && (size_t)len < cap)
        snprintf(run + len, cap - (size_t)len, " micro-batches %d", micro);
}

/* Prints the model's block, parameters (deepseek: and those a token uses) and shape. */
static void describe(const lm_model *m, const char *tokenizer) {
    const lm_shape *s = &m->shape;
    printf("model: %s block, %lld parameters", lm_block_name(s->block),
           (long long)nb_module_param_numel(m->module));
    if (s->block == LM_BLOCK_DEEPSEEK)
        printf(" (%lld active per token)", (long long)lm_model_active_params(m));
    printf(", d_model %lld, %lld heads, %lld layers, context %lld, %lld tokens (%s)\n",
           (long long)s->dim, (long long)s->heads, (long long)s->layers, (long long)s->context,
           (long long)s->vocab, tokenizer);
}

/* Trains on d (from the last resume checkpoint with --resume) on every rank; then rank 0
 * reports, saves the checkpoint and samples. Frees what it allocates on every path. */
static int run_training(const lm_model *m, const dataset *d, const options *o) {
    nb_module *model = nb_module_root(m->module);
    const int ranks = nb_dist_world_size(), accum = o->run.accum > 1 ? o->run.accum : 1;
    const bool main_rank = nb_dist_rank() == 0;
    if (d->c->train_tokens < CONTEXT + 2) {
        fprintf(stderr, "char_lm: %s has fewer than %d training tokens\n", d->name, CONTEXT + 2);
        return 1;
    }
    if (main_rank && d->c->val_tokens < CONTEXT + 2)
        fprintf(stderr,
                "char_lm: note: no validation loss: the held-out text (every %dth block of %d "
                "bytes) has %lld tokens, fewer than one window's %d\n",
                HOLD_OUT_EVERY, HOLD_OUT_BLOCK, (long long)d->c->val_tokens, CONTEXT + 2);
    describe(m, nb_tokenizer_kind_name(d->tok));
    printf("%lld steps of %d x %d tokens\n", (long long)o->run.steps, BATCH, CONTEXT);
    char run[1024];
    run_name(run, sizeof run, o, d, ranks * accum);
    size_t batch_tokens = (size_t)(BATCH * CONTEXT * ranks * accum);
    lm_trainer tr = {
        .windows = malloc(sizeof *tr.windows * 2 * batch_tokens), .m = m, .d = d, .o = o};
    nb_rng_seed(&tr.data_rng, o->run.seed + 1);
    int nparams = 0;
    nb_tensor **params = nb_module_param_tensors(model, &nparams);
    nb_optimizer *opt = params ? nb_adamw_new(nparams, params, nb_adamw_defaults(o->run.lr)) : NULL;
    int rc = 1;
    if (!tr.windows || !opt) {
        rc = fail("creating the optimizer");
        goto done;
    }
    nb_train_opts t = example_train_opts("char_lm", &o->run, !main_rank);
    t.step = lm_step;
    t.user = &tr;
    t.lr = lm_lr;
    static const char *const aux_metric[] = {"aux_loss"};
    if (m->deepseek) {
        t.n_metrics = 1;
        t.metric_names = aux_metric;
    }
    t.eval = lm_eval;
    t.eval_every = EVAL_EVERY;
    t.eval_name = "bits_per_char";
    t.run = run;
    t.data_state = &tr.data_rng;
    t.data_state_bytes = sizeof tr.data_rng;
    nb_train_result result;
    if (!nb_train(model, opt, &t, &result)) {
        fprintf(stderr, "%s\n", nb_last_error());
        goto done;
    }
    if (!dist_train_finish(&(dist_train){.prog = "char_lm", .ranks = ranks}, model)) goto done;
    rc = 0;
    if (!main_rank) goto done;
    report_validation(m, d);
    char path[512];
    nb_metadata_entry meta[NB_TOKENIZER_METADATA_MAX];
    snprintf(path, sizeof path, "%s/char_lm.safetensors", o->run.out);
    if (!lm_model_save(m, path, nb_tokenizer_metadata(d->tok, meta), meta)) {
        rc = fail("saving the checkpoint");
        goto done;
    }
    printf("checkpoint: %s\n", path);
    if (result.curve_written) printf("curve: %s/curve.png\n", o->run.out);
    printf("sample (temperature %.2f):\n", o->sample.temperature);
    rc = sample(m, d->tok, &o->sample) ? 0 : fail("sampling");
done:
    /* A failure on one rank stops them all (the others would wait for it). */
    if (rc != 0 && ranks > 1) nb_dist_abort(rc, "stopping every rank after the error above");
    nb_optimizer_free(opt);
    free(params);
    free(tr.windows);
    return rc;
}

/* --eval: the model and tokenizer from the checkpoint alone; validation loss on the text's
 * held-out split, then a sample. Characters outside a characters vocabulary are left out with a
 * warning counting them; a held-out split too short for one window is an error. */
static int run_eval(const options *o, corpus *c) {
    lm_shape shape;
    if (!lm_shape_read(o->run.eval, &shape)) return fail("reading the checkpoint");
    nb_tokenizer *tok = checkpoint_tokenizer(o->run.eval);
    if (!tok) return fail("reading the tokenizer");
    dataset d = {.tok = tok, .c = &c->text, .name = c->name};
    int rc = 1;
    nb_module *root = NULL;
    lm_model m;
    if (nb_tokenizer_vocab_size(tok) != shape.vocab) {
        fprintf(stderr, "char_lm: %s: its tokenizer has %lld tokens but the model %lld\n",
                o->run.eval, (long long)nb_tokenizer_vocab_size(tok), (long long)shape.vocab);
        goto done;
    }
    warn_prompt(tok, &o->sample);
    root = nb_model_new(NB_F32, o->run.seed);
    if (!lm_model_init(&m, root, &shape))
        rc = fail("building the model");
    else if (!lm_model_load(&m, o->run.eval))
        rc = fail("loading the checkpoint");
    else if (!nb_corpus_encode(&c->text, tok))
        rc = fail("tokenizing the text");
    else {
        describe(&m, nb_tokenizer_kind_name(tok));
        char shown[64];
        size_t unknown =
            corpus_unknown(tok, c->text.val_text, c->text.val_bytes, shown, sizeof shown);
        if (unknown)
            fprintf(stderr,
                    "char_lm: warning: %zu of the %zu held-out characters (%s) are not in %s's "
                    "vocabulary; the validation loss leaves them out\n",
                    unknown, c->text.val_bytes, shown, o->run.eval);
        if (report_validation(&m, &d))
            rc = sample(&m, tok, &o->sample) ? 0 : fail("sampling");
        else
            fprintf(stderr,
                    "char_lm: %s: no validation loss: the held-out text (every %dth block of %d "
                    "bytes) has %lld tokens in the vocabulary, and one window needs %lld; "
                    "pass a longer --text (at least %d bytes)\n",
                    c->name, HOLD_OUT_EVERY, HOLD_OUT_BLOCK, (long long)c->text.val_tokens,
                    (long long)(shape.context < CONTEXT ? shape.context : CONTEXT) + 2,
                    HOLD_OUT_EVERY * HOLD_OUT_BLOCK);
    }
done:
    nb_module_free(root);
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

/* Tokenizes the corpus, builds the model and trains it. */
static int train(options *o, corpus *c) {
    nb_tokenizer *tok = make_tokenizer(o, &c->text);
    if (!tok) return 1;
    if (!nb_corpus_encode(&c->text, tok)) {
        nb_tokenizer_free(tok);
        return fail("tokenizing the text");
    }
    if (o->bpe)
        printf("vocabulary: a BPE of %lld tokens, %.2f characters per token on the training "
               "text\n",
               (long long)nb_tokenizer_vocab_size(tok),
               (double)c->text.train_bytes /
                   (double)(c->text.train_tokens ? c->text.train_tokens : 1));
    else
        printf("vocabulary: %lld distinct characters\n", (long long)nb_tokenizer_vocab_size(tok));
    warn_prompt(tok, &o->sample);
    o->shape.vocab = nb_tokenizer_vocab_size(tok);
    o->shape.context = CONTEXT;
    nb_module *root = nb_model_new(NB_F32, o->run.seed);
    lm_model m;
    const dataset d = {.tok = tok, .c = &c->text, .name = c->name};
    int rc =
        lm_model_init(&m, root, &o->shape) ? run_training(&m, &d, o) : fail("building the model");
    nb_module_free(root);
    nb_tokenizer_free(tok);
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
    printf("text: %zu training and %zu validation bytes from %s\n", c.text.train_bytes,
           c.text.val_bytes, c.name);
    /* --eval is rank 0's alone. */
    int rc = o.run.eval ? (nb_dist_rank() == 0 ? run_eval(&o, &c) : 0) : train(&o, &c);
    corpus_free(&c);
    nb_dist_finalize();
    nb_shutdown();
    return rc;
}
