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
 * sampled. With --checkpoint-every N it also
 * keeps a resume checkpoint there (common/resume.h), from which --resume continues a killed
 * run exactly. Training stops with a message when a loss or gradient stops being finite. */
#define _POSIX_C_SOURCE 200809L
#include "common/args.h"
#include "common/files.h"
#include "common/plot.h"
#include "common/progress.h"
#include "common/resume.h"
#include "common/dist_train.h"
#include "common/update.h"
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

static bool parse_block(args *a, toy_block *block) {
    const char *name = args_string(a);
    if (!name) return false;
    if (toy_block_parse(name, block)) return true;
    fprintf(stderr, "toy_tasks: unknown block '%s' (gpt, llama or deepseek)\n", name);
    return false;
}

static bool parse_task(args *a, const toy_task **task) {
    const char *name = args_string(a);
    if (!name) return false;
    if (!(*task = toy_task_find(name))) fprintf(stderr, "toy_tasks: unknown task '%s'\n", name);
    return *task != NULL;
}

/* False after printing what is wrong and the usage: the caller exits with 2. */
static bool parse(int argc, char **argv, options *o) {
    *o = (options){.run = {.seed = 1, .out = "out", .steps = -1}};
    args a;
    args_start(&a, "toy_tasks", argc, argv);
    while (args_next(&a)) {
        bool ok = true;
        if (args_is_help(&a))
            usage(stdout), exit(0);
        else if (args_is(&a, "--quiet"))
            o->quiet = true;
        else if (args_is(&a, "--task"))
            ok = parse_task(&a, &o->task);
        else if (args_is(&a, "--block"))
            ok = parse_block(&a, &o->block);
        else if (!args_trainer_flag(&a, &o->run, &ok))
            ok = args_unknown(&a);
        if (!ok) return usage(stderr), false;
    }
    if (!o->task) return fprintf(stderr, "toy_tasks: --task is required\n"), usage(stderr), false;
    if (o->run.steps < 0) o->run.steps = o->task->steps;
    if (o->run.lr == 0) o->run.lr = o->task->lr;
    return args_trainer_check(&a, &o->run) || (usage(stderr), false);
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
    nb_optimizer *opt;
    param_list params;
    int64_t *x, *y; /* the step's global batch of tokens and targets (every rank's) */
    FILE *csv;      /* rank 0's log; NULL on the other ranks */
    dist_train dist;
    double loss_avg, acc_avg; /* for the progress line */
    bool averaging;           /* false until the first step's values are in */
} trainer;

/* Forward and backward of micro-batch k of this rank (x and y point at its batch), adding its
 * loss, correct predictions and scored positions to stats. */
static bool micro_step(trainer *tr, const options *o, int64_t step, int k, const int64_t *x,
                       const int64_t *y, double *stats) {
    const toy_task *task = o->task;
    int64_t B = task->batch, T = task->seq_len;
    nb_scope_begin();
    nb_tensor *logits = nb_view(toy_model_forward(tr->lm, tokens_tensor(x, B, T), task->causal),
                                NB_SHAPE(B * T, task->vocab));
    nb_tensor *loss = nb_cross_entropy(logits, nb_from_array(NB_I64, NB_SHAPE(B * T), y),
                                       TOY_IGNORE, NB_REDUCE_MEAN);
    bool ok = dist_train_backward(&tr->dist, tr->opt, loss, k, step);
    if (ok) {
        int64_t correct = 0, scored = 0;
        count_correct(logits, y, B * T, &correct, &scored);
        stats[0] += nb_item(loss), stats[1] += (double)correct, stats[2] += (double)scored;
    }
    nb_scope_end();
    return ok;
}

/* Step step (0-based): one optimizer update on the global batch drawn from data_rng (this
 * rank's micro-batches of it); appends its row to the log. False with a message on an error or
 * a non-finite loss or gradient. */
static bool train_step(trainer *tr, const options *o, int64_t step, nb_rng *data_rng) {
    const toy_task *task = o->task;
    int64_t B = task->batch, T = task->seq_len;
    task->make(data_rng, B * dist_train_micro_batches(&tr->dist), tr->x, tr->y);
    double stats[3] = {0, 0, 0}; /* loss sum, correct, scored */
    for (int k = 0; k < tr->dist.accum; k++) {
        int64_t first = dist_train_micro_index(&tr->dist, k) * B * T;
        if (!micro_step(tr, o, step, k, tr->x + first, tr->y + first, stats)) return false;
    }
    bool ok = dist_train_update(&tr->dist, tr->opt, &tr->params, stats, 3, step, o->run.steps,
                                o->run.lr, o->run.lr / 20);
    if (ok) {
        double l = stats[0] / dist_train_micro_batches(&tr->dist), acc = stats[1] / stats[2];
        tr->loss_avg = tr->averaging ? 0.9 * tr->loss_avg + 0.1 * l : l;
        tr->acc_avg = tr->averaging ? 0.9 * tr->acc_avg + 0.1 * acc : acc;
        tr->averaging = true;
        if (tr->csv) fprintf(tr->csv, "%lld,%.6f,%.4f\n", (long long)step + 1, l, acc);
    }
    return ok;
}

/* Trains (from the last resume checkpoint with --resume), evaluates, saves and plots into
 * o->run.out. Frees what it allocates on every path. */
static int run_training(const toy_model *lm, const options *o) {
    const toy_task *task = o->task;
    nb_module *model = nb_module_root(lm->module);
    char csv_path[512], png_path[512], ckpt_path[512], run[256];
    snprintf(csv_path, sizeof csv_path, "%s/train.csv", o->run.out);
    snprintf(png_path, sizeof png_path, "%s/curve.png", o->run.out);
    snprintf(ckpt_path, sizeof ckpt_path, "%s/model.safetensors", o->run.out);
    trainer tr = {.lm = lm};
    int rc = 1;
    if (!param_list_of(&tr.params, model)) {
        rc = fail("listing the parameters");
        goto done;
    }
    if (!dist_train_init(&tr.dist, "toy_tasks", model, &tr.params, o->run.accum)) goto done;
    bool main_rank = dist_train_is_main(&tr.dist), quiet = o->quiet || !main_rank;
    int micro_batches = dist_train_micro_batches(&tr.dist);
    /* A resumed run must draw the same batches: its micro-batch count is part of it. */
    int len =
        snprintf(run, sizeof run, "toy_tasks --task %s --steps %lld --seed %llu --lr %.17g",
                 task->name, (long long)o->run.steps, (unsigned long long)o->run.seed, o->run.lr);
    if (micro_batches > 1)
        snprintf(run + len, sizeof run - (size_t)len, " micro-batches %d", micro_batches);
    if (main_rank && !make_dirs(o->run.out)) {
        fprintf(stderr, "toy_tasks: cannot create %s: %s\n", o->run.out, strerror(errno));
        goto done;
    }
    if (!(tr.opt = nb_adamw_new(tr.params.tensors, tr.params.n, nb_adamw_defaults(o->run.lr)))) {
        rc = fail("creating the optimizer");
        goto done;
    }
    resume_target target = {.prog = "toy_tasks",
                            .dir = o->run.out,
                            .run = run,
                            .steps = o->run.steps,
                            .model = model,
                            .opt = tr.opt};
    resume_state st = {.step = 0};
    nb_rng_seed(&st.data_rng, o->run.seed);
    /* Every rank reads the checkpoint; all go on only if all could. */
    if (o->run.resume && !nb_dist_all_ok(resume_load(&target, &st))) goto done;
    if (main_rank && !(tr.csv = resume_open_log("toy_tasks", csv_path, "step,loss,accuracy\n",
                                                o->run.resume, st.log_bytes[0])))
        goto done;
    size_t batch_tokens = (size_t)(task->batch * task->seq_len * micro_batches);
    tr.x = malloc(sizeof *tr.x * batch_tokens);
    tr.y = malloc(sizeof *tr.y * batch_tokens);
    if (!tr.x || !tr.y) {
        fprintf(stderr, "toy_tasks: out of memory\n");
        goto done;
    }
    if (!quiet)
        printf("%s: %s\nmodel: %s block, %lld parameters, %d layer(s), %lld heads, d %lld; %lld "
               "steps of batch %lld%s\n",
               task->name, task->what, toy_block_name(o->block), (long long)nb_module_numel(model),
               lm->layers, (long long)task->heads, (long long)task->dim, (long long)o->run.steps,
               (long long)task->batch, o->run.resume ? " (resumed)" : "");
    if (!quiet && micro_batches > 1)
        printf("data parallel: %d rank(s) x %d micro-batch(es) of %lld per step\n", tr.dist.ranks,
               tr.dist.accum, (long long)task->batch);
    progress prog;
    progress_start(&prog, o->run.steps);
    while (st.step < o->run.steps) {
        if (!train_step(&tr, o, st.step, &st.data_rng)) goto done;
        st.step++;
        if (!quiet) progress_update(&prog, st.step, tr.loss_avg, tr.acc_avg);
        if (main_rank &&
            !resume_checkpoint_due(&target, o->run.checkpoint_every, o->run.steps, &st, &tr.csv, 1))
            goto done;
        resume_kill_hook(st.step);
    }
    if (tr.csv) fclose(tr.csv);
    tr.csv = NULL;
    if (!quiet) progress_finish(&prog, "trained");
    if (!dist_train_finish(&tr.dist, model)) goto done;
    if (!main_rank) {
        rc = 0;
        goto done;
    }

    double acc = evaluate(lm, task, o->run.seed);
    printf("%s: held-out token accuracy %.2f%% (%d sequences)\n", task->name, 100 * acc, HELDOUT);
    if (!generate_answers(lm, task, o->run.seed)) {
        rc = fail("generating");
        goto done;
    }
    if (!nb_module_save(model, ckpt_path)) {
        rc = fail("saving the checkpoint");
        goto done;
    }
    printf("checkpoint: %s (reload with --eval)\nlog: %s\n", ckpt_path, csv_path);
    if (plot_curve(csv_path, png_path, task->name)) printf("curve: %s\n", png_path);
    plot_heads(lm, task, o->run.seed, o->run.out);
    rc = 0;
done:
    if (rc != 0) rc = dist_train_fail(&tr.dist, rc);
    dist_train_free(&tr.dist);
    if (tr.csv) fclose(tr.csv);
    free(tr.x);
    free(tr.y);
    nb_optimizer_free(tr.opt);
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
