/* Trains a small transformer on a toy task and shows what its attention heads learned.
 *
 *   toy_tasks --task shift|reverse|sort|recall [--block gpt|llama|deepseek] [--steps N] [--seed S]
 *             [--threads N] [--lr X] [--out DIR] [--eval CHECKPOINT] [--checkpoint-every N]
 *             [--resume]
 *
 * Writes into DIR: train.csv (step, loss, accuracy), curve.png, one heatmap per layer and
 * head for a held-out example (attn_L<layer>_H<head>.png), and model.safetensors, which
 * --eval reloads to report the same held-out accuracy. A causal task's held-out answers are
 * then generated through nb_generate (greedy, KV cache), with either block, and one is also
 * sampled. Training runs through nb_train (nabla/train.h): with --checkpoint-every N it keeps
 * a resume checkpoint in DIR, from which --resume continues a killed run exactly, and it stops
 * with a message when a loss or gradient stops being finite. */
#define _POSIX_C_SOURCE 200809L
#include "common/dist_train.h"
#include "common/plot.h"
#include "common/example_train.h"
#include "common/train_flags.h"
#include "toy/model.h"
#include "toy/tasks.h"

#include <errno.h>
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HELDOUT 1024
/* Held-out data never shares the training stream. */
#define HELDOUT_SEED_MIX 0x9e3779b97f4a7c15ULL

typedef struct {
    const toy_task *task;
    trainer_flags run;
    toy_block block;
    bool quiet;
} options;

static void usage(FILE *f) {
    fprintf(f, "usage: toy_tasks --task NAME [--block gpt|llama|deepseek] " ARGS_TRAINER_USAGE
               " [--quiet]\ntasks:\n");
    for (int i = 0; toy_tasks[i]; i++)
        fprintf(f, "  %-8s %s; %lld steps by default\n", toy_tasks[i]->name, toy_tasks[i]->what,
                (long long)toy_tasks[i]->steps);
}

static bool parse_block(const char *name, toy_block *block) {
    if (toy_block_parse(name, block)) return true;
    fprintf(stderr, "toy_tasks: unknown block '%s' (gpt, llama or deepseek)\n", name);
    return false;
}

static bool parse_task(const char *name, const toy_task **task) {
    if (!(*task = toy_task_find(name))) fprintf(stderr, "toy_tasks: unknown task '%s'\n", name);
    return *task != NULL;
}

/* False after printing what is wrong and the usage: the caller exits with 2. */
static bool parse(int argc, char **argv, options *o) {
    *o = (options){.run = {.seed = 1, .out = "out", .steps = -1}};
    struct option opts[4 + TRAIN_FLAGS_MAX + 1] = {{"help", no_argument, NULL, 'h'},
                                                   {"quiet", no_argument, NULL, 'q'},
                                                   {"task", required_argument, NULL, 't'},
                                                   {"block", required_argument, NULL, 'b'}};
    train_flags_options(ARGS_ALL_TRAINER_FLAGS, opts + 4);
    for (int c; (c = flags_next("toy_tasks", argc, argv, opts)) != -1;) {
        bool ok = c != FLAGS_BAD;
        if (c == 'h')
            usage(stdout), exit(0);
        else if (c == 'q')
            o->quiet = true;
        else if (c == 't')
            ok = parse_task(optarg, &o->task);
        else if (c == 'b')
            ok = parse_block(optarg, &o->block);
        else if (is_train_flag(c))
            ok = train_flag_value("toy_tasks", c, optarg, &o->run);
        if (!ok) return usage(stderr), false;
    }
    if (!o->task) return fprintf(stderr, "toy_tasks: --task is required\n"), usage(stderr), false;
    if (o->run.steps < 0) o->run.steps = o->task->steps;
    if (o->run.lr == 0) o->run.lr = o->task->lr;
    return train_flags_check("toy_tasks", &o->run) || (usage(stderr), false);
}

/* Correct predictions and scored positions of logits [n, V] against targets [n]. */
static void count_correct(const nb_tensor *logits2d, const int64_t *targets, int64_t n,
                          int64_t *correct, int64_t *scored) {
    nb_tensor *pred;
    nb_max_dim(logits2d, -1, false, &pred);
    const int64_t *p = nb_data(pred);
    for (int64_t i = 0; i < n; i++) {
        if (targets[i] == TOY_IGNORE) continue;
        (*scored)++;
        *correct += p[i] == targets[i];
    }
}

static nb_tensor *tokens_tensor(const int64_t *data, int64_t n, int64_t T) {
    return nb_from_array(NB_I64, NB_SHAPE(n, T), data);
}

/* Held-out token accuracy, in eval mode with no graph recorded. */
static double evaluate(const toy_model *lm, const toy_task *task, uint64_t seed) {
    nb_rng rng;
    nb_rng_seed(&rng, seed ^ HELDOUT_SEED_MIX);
    int64_t T = task->seq_len, correct = 0, scored = 0;
    int64_t *x = malloc(sizeof *x * HELDOUT * (size_t)T),
            *y = malloc(sizeof *y * HELDOUT * (size_t)T);
    task->make(&rng, HELDOUT, x, y);
    bool prev = nb_set_grad_enabled(false);
    nb_module_train(lm->module, false);
    for (int64_t b = 0; b < HELDOUT; b += 256) {
        nb_scope_begin();
        nb_tensor *logits = toy_model_forward(lm, tokens_tensor(x + b * T, 256, T), task->causal);
        count_correct(nb_view(logits, NB_SHAPE(-1, task->vocab)), y + b * T, 256 * T, &correct,
                      &scored);
        nb_scope_end();
    }
    nb_module_train(lm->module, true);
    nb_set_grad_enabled(prev);
    free(x);
    free(y);
    return scored ? (double)correct / (double)scored : 0;
}

/* Token v's label followed by a space, appended to buf. */
static void append_label(const toy_task *task, int64_t v, char *buf, size_t len) {
    char label[16];
    task->label(v, label, sizeof label);
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s ", label);
}

/* The full forward's prediction at the last position of each of the n sequences x [n, T],
 * into pred (eval mode, no graph). */
static void last_predictions(const toy_model *lm, const toy_task *task, const int64_t *x, int64_t n,
                             int64_t *pred) {
    const int64_t T = task->seq_len;
    bool prev = nb_set_grad_enabled(false);
    nb_module_train(lm->module, false);
    for (int64_t b = 0; b < n; b += 256) {
        nb_scope_begin();
        nb_tensor *logits = toy_model_forward(lm, tokens_tensor(x + b * T, 256, T), true);
        nb_tensor *idx;
        nb_max_dim(nb_select(logits, 1, T - 1), -1, false, &idx);
        if (idx) memcpy(pred + b, nb_data(idx), sizeof *pred * 256);
        nb_scope_end();
    }
    nb_module_train(lm->module, true);
    nb_set_grad_enabled(prev);
}

/* A causal task's held-out sequences (evaluate's) as prompts, their last answer generated
 * through nb_generate (greedy, the model reading its KV cache); prints how many are right,
 * how many equal the full forward's prediction there (all of them, or the cache is wrong), and
 * example 0's answer, greedy and sampled at temperature 1. Nothing for a bidirectional task:
 * its model reads the whole input at once. */
static bool generate_answers(const toy_model *lm, const toy_task *task, uint64_t seed) {
    if (!task->causal) return true;
    nb_rng rng;
    nb_rng_seed(&rng, seed ^ HELDOUT_SEED_MIX);
    const int64_t T = task->seq_len;
    int64_t *x = malloc(sizeof *x * HELDOUT * (size_t)T),
            *y = malloc(sizeof *y * HELDOUT * (size_t)T), *full = malloc(sizeof *full * HELDOUT),
            prompt[65], greedy = -1, sampled = -1;
    bool ok = x && y && full;
    if (ok) task->make(&rng, HELDOUT, x, y);
    if (ok) last_predictions(lm, task, x, HELDOUT, full);
    const nb_causal_lm model = toy_model_causal(lm, task);
    nb_kv_cache *cache = ok ? model.new_cache(model.model, 1, model.max_len) : NULL;
    nb_generate_opts o = nb_generate_defaults(1);
    int64_t right = 0, same = 0;
    for (int64_t b = 0; cache && b < HELDOUT && ok; b++) {
        int64_t n = toy_model_prompt(lm, x + b * T, T, prompt), answer;
        ok = nb_generate(&model, prompt, n, &o, &answer, cache) == 1;
        right += ok && answer == y[b * T + T - 1];
        same += ok && answer == full[b];
        if (b == 0) greedy = answer;
    }
    if (ok && cache) { /* example 0 again, sampled */
        o.temperature = 1.0;
        o.seed = seed;
        ok = nb_generate(&model, prompt, toy_model_prompt(lm, x, T, prompt), &o, &sampled, cache) ==
             1;
    }
    if (ok && cache) {
        char seq[512] = "";
        for (int64_t t = 0; t < T; t++) append_label(task, x[t], seq, sizeof seq);
        char g[16], s[16];
        task->label(greedy, g, sizeof g);
        task->label(sampled, s, sizeof s);
        printf("%s: generated answers (nb_generate, greedy, KV cache) %.2f%% right (%d "
               "sequences), %lld of them the full forward's prediction; e.g. %s-> %s (sampled "
               "at temperature 1: %s)\n",
               task->name, 100.0 * (double)right / HELDOUT, HELDOUT, (long long)same, seq, g, s);
    }
    nb_kv_cache_free(cache);
    free(x);
    free(y);
    free(full);
    return ok && cache;
}

/* One heatmap per layer and head for held-out example 0. */
static void plot_heads(const toy_model *lm, const toy_task *task, uint64_t seed, const char *dir) {
    if (!plot_available()) return;
    nb_rng rng;
    nb_rng_seed(&rng, seed ^ HELDOUT_SEED_MIX);
    int64_t T = task->seq_len, x[64], y[64];
    task->make(&rng, 1, x, y);
    nb_scope_begin();
    bool prev = nb_set_grad_enabled(false);
    nb_module_train(lm->module, false);
    nb_tensor *weights[16];
    toy_model_attention(lm, tokens_tensor(x, 1, T), task->causal, weights);
    char labels[64][16], outs[64][16];
    const char *rows[64], *cols[64];
    for (int64_t t = 0; t < T; t++) {
        task->label(x[t], labels[t], sizeof labels[t]);
        char ans[8] = "-";
        if (y[t] != TOY_IGNORE) task->label(y[t], ans, sizeof ans);
        snprintf(outs[t], sizeof outs[t], "%s→%s", labels[t], ans);
        cols[t] = labels[t];
        rows[t] = outs[t];
    }
    double w[64 * 64];
    for (int l = 0; l < lm->layers; l++)
        for (int64_t h = 0; h < lm->heads; h++) {
            nb_tensor *head = nb_select(nb_select(weights[l], 0, 0), 0, h);
            nb_to_doubles(head, w);
            char path[512], title[256];
            snprintf(path, sizeof path, "%s/attn_L%d_H%lld.png", dir, l, (long long)h);
            snprintf(title, sizeof title, "%s: layer %d head %lld (rows: token→answer)", task->name,
                     l, (long long)h);
            plot_heatmap(path, title, w, T, T, rows, cols);
        }
    nb_module_train(lm->module, true);
    nb_set_grad_enabled(prev);
    nb_scope_end();
    printf("heatmaps: %s/attn_L*_H*.png (%s)\n", dir, task->shows);
}

static int fail(const char *what) {
    fprintf(stderr, "toy_tasks: %s: %s\n", what, nb_last_error());
    return 1;
}

/* --eval: reloads a checkpoint and reports its held-out accuracy. */
static int run_eval(const toy_model *lm, const options *o) {
    if (!nb_module_load(nb_module_root(lm->module), o->run.eval))
        return fail("loading the checkpoint");
    double acc = evaluate(lm, o->task, o->run.seed);
    printf("%s: held-out token accuracy %.2f%% (%d sequences, checkpoint %s)\n", o->task->name,
           100 * acc, HELDOUT, o->run.eval);
    return generate_answers(lm, o->task, o->run.seed) ? 0 : fail("generating");
}

/* What the training steps share. */
typedef struct {
    const toy_model *lm;
    const options *o;
    int64_t *x, *y;  /* the step's global batch of tokens and targets (every rank's) */
    nb_rng data_rng; /* where the data stream is: saved in checkpoints (nb_train data_state) */
} toy_trainer;

/* Micro-batch m of a step: the step's global batch is drawn at its first micro-batch (every
 * rank draws all of it, so the stream stays in step everywhere); this one is part m->index. */
static nb_tensor *toy_step(void *user, const nb_train_micro *m, double *metrics) {
    toy_trainer *tr = user;
    const toy_task *task = tr->o->task;
    int64_t B = task->batch, T = task->seq_len, first = m->index * B * T;
    if (m->micro == 0) task->make(&tr->data_rng, B * m->count, tr->x, tr->y);
    nb_tensor *logits =
        nb_view(toy_model_forward(tr->lm, tokens_tensor(tr->x + first, B, T), task->causal),
                NB_SHAPE(B * T, task->vocab));
    int64_t correct = 0, scored = 0;
    if (logits) count_correct(logits, tr->y + first, B * T, &correct, &scored);
    metrics[0] = scored ? (double)correct / (double)scored : 0;
    return nb_cross_entropy(logits, nb_from_array(NB_I64, NB_SHAPE(B * T), tr->y + first),
                            TOY_IGNORE, NB_REDUCE_MEAN);
}

/* Warmup over the first 20th, then cosine down to a 20th of --lr. */
static double toy_lr(void *user, int64_t step, int64_t total) {
    const toy_trainer *tr = user;
    return nb_lr_warmup_cosine(step, total / 20, total, tr->o->run.lr, tr->o->run.lr / 20);
}

/* Trains (from the last resume checkpoint with --resume) on every rank; then rank 0
 * evaluates, saves and plots into o->run.out. Frees what it allocates on every path. */
static int run_training(const toy_model *lm, const options *o) {
    const toy_task *task = o->task;
    nb_module *model = nb_module_root(lm->module);
    const int ranks = nb_dist_world_size(), accum = o->run.accum > 1 ? o->run.accum : 1;
    const bool main_rank = nb_dist_rank() == 0, quiet = o->quiet || !main_rank;
    char ckpt_path[512], run[256];
    snprintf(ckpt_path, sizeof ckpt_path, "%s/model.safetensors", o->run.out);
    /* A resumed run must draw the same batches: its micro-batch count is part of it. */
    int len =
        snprintf(run, sizeof run, "toy_tasks --task %s --steps %lld --seed %llu --lr %.17g",
                 task->name, (long long)o->run.steps, (unsigned long long)o->run.seed, o->run.lr);
    if (ranks * accum > 1)
        snprintf(run + len, sizeof run - (size_t)len, " micro-batches %d", ranks * accum);
    size_t batch_tokens = (size_t)(task->batch * task->seq_len * ranks * accum);
    toy_trainer tr = {.lm = lm,
                      .o = o,
                      .x = malloc(sizeof *tr.x * batch_tokens),
                      .y = malloc(sizeof *tr.y * batch_tokens)};
    nb_rng_seed(&tr.data_rng, o->run.seed);
    int nparams = 0;
    nb_tensor **params = nb_module_param_tensors(model, &nparams);
    nb_optimizer *opt = params ? nb_adamw_new(nparams, params, nb_adamw_defaults(o->run.lr)) : NULL;
    int rc = 1;
    if (!tr.x || !tr.y || !opt) {
        rc = fail("creating the optimizer");
        goto done;
    }
    if (!quiet)
        printf("%s: %s\nmodel: %s block, %lld parameters, %d layer(s), %lld heads, d %lld; %lld "
               "steps of batch %lld%s\n",
               task->name, task->what, toy_block_name(o->block),
               (long long)nb_module_param_numel(model), lm->layers, (long long)task->heads,
               (long long)task->dim, (long long)o->run.steps, (long long)task->batch,
               o->run.resume ? " (resumed)" : "");
    if (!quiet && ranks * accum > 1)
        printf("data parallel: %d rank(s) x %d micro-batch(es) of %lld per step\n", ranks, accum,
               (long long)task->batch);
    nb_train_opts t = example_train_opts("toy_tasks", &o->run, quiet);
    t.step = toy_step;
    t.user = &tr;
    t.lr = toy_lr;
    t.n_metrics = 1;
    t.metric_names = (const char *const[]){"accuracy"};
    t.run = run;
    t.data_state = &tr.data_rng;
    t.data_state_bytes = sizeof tr.data_rng;
    if (!nb_train(model, opt, &t, NULL)) {
        fprintf(stderr, "%s\n", nb_last_error());
        goto done;
    }
    if (!dist_train_finish(&(dist_train){.prog = "toy_tasks", .ranks = ranks}, model)) goto done;
    rc = 0;
    if (!main_rank) goto done;
    double acc = evaluate(lm, task, o->run.seed);
    printf("%s: held-out token accuracy %.2f%% (%d sequences)\n", task->name, 100 * acc, HELDOUT);
    if (!generate_answers(lm, task, o->run.seed)) {
        rc = fail("generating");
    } else if (!nb_module_save(model, ckpt_path)) {
        rc = fail("saving the checkpoint");
    } else {
        printf("checkpoint: %s (reload with --eval)\nlog: %s/train.csv\n", ckpt_path, o->run.out);
        plot_heads(lm, task, o->run.seed, o->run.out);
    }
done:
    /* A failure on one rank stops them all (the others would wait for it). */
    if (rc != 0 && ranks > 1) nb_dist_abort(rc, "stopping every rank after the error above");
    nb_optimizer_free(opt);
    free(params);
    free(tr.x);
    free(tr.y);
    return rc;
}

int main(int argc, char **argv) {
    dist_train_start("toy_tasks", &argc, &argv);
    options o;
    if (!parse(argc, argv, &o)) {
        nb_dist_finalize(); /* every rank read the same flags: all stop here */
        return 2;
    }
    if (o.run.threads > 0) nb_set_num_threads(o.run.threads);
    const toy_task *task = o.task;
    nb_module *model = nb_model_new(NB_F32, o.run.seed);
    toy_model lm;
    /* --eval is rank 0's alone: the others have nothing to evaluate. */
    int rc = !toy_model_init(&lm, model, o.block, task) ? fail("building the model")
             : o.run.eval ? (nb_dist_rank() == 0 ? run_eval(&lm, &o) : 0)
                          : run_training(&lm, &o);
    nb_module_free(model);
    nb_dist_finalize();
    nb_shutdown();
    return rc;
}
