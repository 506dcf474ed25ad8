/* Trains a small transformer on a toy task and shows what its attention heads learned.
 *
 *   toy_tasks --task shift|reverse|sort|recall [--block gpt|llama] [--steps N] [--seed S]
 *             [--threads N] [--out DIR] [--eval CHECKPOINT]
 *
 * Writes into DIR: train.csv (step, loss, accuracy), curve.png, one heatmap per layer and
 * head for a held-out example (attn_L<layer>_H<head>.png), and model.safetensors, which
 * --eval reloads to report the same held-out accuracy. */
#define _POSIX_C_SOURCE 200809L
#include "common/args.h"
#include "common/files.h"
#include "common/plot.h"
#include "common/progress.h"
#include "toy/model.h"
#include "toy/tasks.h"

#include <errno.h>
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HELDOUT 1024
#define HELDOUT_SEED_MIX                                                                           \
    0x9e3779b97f4a7c15ULL /* held-out data never shares the training stream                        \
                           */

typedef struct {
    const toy_task *task;
    toy_block block;
    trainer_flags run;
    bool quiet;
} options;

static void usage(FILE *f) {
    fprintf(f, "usage: toy_tasks --task NAME [--block gpt|llama] [--steps N] [--seed S] "
               "[--threads N] [--out DIR] [--eval CHECKPOINT] [--quiet]\ntasks:\n");
    for (int i = 0; toy_tasks[i]; i++)
        fprintf(f, "  %-8s %s; %lld steps by default\n", toy_tasks[i]->name, toy_tasks[i]->what,
                (long long)toy_tasks[i]->steps);
}

static bool parse_task(args *a, const toy_task **task) {
    const char *name = args_string(a);
    if (!name) return false;
    if (!(*task = toy_task_find(name))) fprintf(stderr, "toy_tasks: unknown task '%s'\n", name);
    return *task != NULL;
}

static bool parse_block(args *a, toy_block *block) {
    const char *name = args_string(a);
    if (!name) return false;
    if (toy_block_parse(name, block)) return true;
    fprintf(stderr, "toy_tasks: unknown block '%s' (gpt or llama)\n", name);
    return false;
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
    return true;
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
    if (!nb_module_load(nb_module_root(lm->module), o->run.eval)) return fail("loading the checkpoint");
    double acc = evaluate(lm, o->task, o->run.seed);
    printf("%s: held-out token accuracy %.2f%% (%d sequences, checkpoint %s)\n", o->task->name,
           100 * acc, HELDOUT, o->run.eval);
    return 0;
}

/* One optimizer step on a fresh batch; appends its row to csv. False with nabla's error. */
static bool train_step(const toy_model *lm, nb_optimizer *opt, nb_tensor **ptensors, int nparams,
                       const options *o, int64_t step, nb_rng *data_rng, int64_t *x, int64_t *y,
                       FILE *csv, double *loss_avg, double *acc_avg) {
    const toy_task *task = o->task;
    int64_t B = task->batch, T = task->seq_len;
    nb_scope_begin();
    task->make(data_rng, B, x, y);
    nb_tensor *logits = nb_view(toy_model_forward(lm, tokens_tensor(x, B, T), task->causal),
                                NB_SHAPE(B * T, task->vocab));
    nb_tensor *loss = nb_cross_entropy(logits, nb_from_array(NB_I64, NB_SHAPE(B * T), y),
                                       TOY_IGNORE, NB_REDUCE_MEAN);
    nb_optimizer_zero_grad(opt);
    bool ok = loss && nb_backward(loss, NULL);
    if (ok) {
        nb_clip_grad_norm(ptensors, nparams, 1.0);
        nb_optimizer_set_lr(opt, nb_lr_warmup_cosine(step, o->run.steps / 20, o->run.steps,
                                                     task->lr, task->lr / 20));
        nb_optimizer_step(opt);
        int64_t correct = 0, scored = 0;
        count_correct(logits, y, B * T, &correct, &scored);
        double l = nb_item(loss), acc = (double)correct / (double)scored;
        *loss_avg = step ? 0.9 * *loss_avg + 0.1 * l : l;
        *acc_avg = step ? 0.9 * *acc_avg + 0.1 * acc : acc;
        fprintf(csv, "%lld,%.6f,%.4f\n", (long long)step + 1, l, acc);
    }
    nb_scope_end();
    return ok;
}

/* Trains, evaluates, saves and plots into o->run.out. Frees what it allocates on every path. */
static int run_training(const toy_model *lm, const options *o) {
    const toy_task *task = o->task;
    nb_module *model = nb_module_root(lm->module);
    char csv_path[512], png_path[512], ckpt_path[512];
    snprintf(csv_path, sizeof csv_path, "%s/train.csv", o->run.out);
    snprintf(png_path, sizeof png_path, "%s/curve.png", o->run.out);
    snprintf(ckpt_path, sizeof ckpt_path, "%s/model.safetensors", o->run.out);
    FILE *csv = NULL;
    nb_optimizer *opt = NULL;
    int64_t *x = NULL, *y = NULL;
    int rc = 1;
    if (!make_dirs(o->run.out)) {
        fprintf(stderr, "toy_tasks: cannot create %s: %s\n", o->run.out, strerror(errno));
        goto done;
    }
    if (!(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "toy_tasks: cannot write %s: %s\n", csv_path, strerror(errno));
        goto done;
    }
    fprintf(csv, "step,loss,accuracy\n");

    int nparams = nb_module_param_count(model);
    nb_param params[256];
    nb_module_params(model, params, 256);
    nb_tensor *ptensors[256];
    for (int i = 0; i < nparams; i++) ptensors[i] = params[i].tensor;
    if (!(opt = nb_adamw_new(ptensors, nparams, nb_adamw_defaults(task->lr)))) {
        rc = fail("creating the optimizer");
        goto done;
    }
    if (!o->quiet)
        printf("%s: %s\nmodel: %s block, %lld parameters, %d layer(s), %lld heads, d %lld; %lld "
               "steps of batch %lld\n",
               task->name, task->what, o->block == TOY_BLOCK_LLAMA ? "llama" : "gpt",
               (long long)nb_module_numel(model), lm->layers,
               (long long)task->heads, (long long)task->dim, (long long)o->run.steps,
               (long long)task->batch);
    nb_rng data_rng;
    nb_rng_seed(&data_rng, o->run.seed);
    size_t batch_tokens = (size_t)(task->batch * task->seq_len);
    x = malloc(sizeof *x * batch_tokens);
    y = malloc(sizeof *y * batch_tokens);
    if (!x || !y) {
        fprintf(stderr, "toy_tasks: out of memory\n");
        goto done;
    }
    progress prog;
    progress_start(&prog, o->run.steps);
    double loss_avg = 0, acc_avg = 0;
    for (int64_t step = 0; step < o->run.steps; step++) {
        if (!train_step(lm, opt, ptensors, nparams, o, step, &data_rng, x, y, csv, &loss_avg,
                        &acc_avg)) {
            rc = fail("training step");
            goto done;
        }
        if (!o->quiet) progress_update(&prog, step + 1, loss_avg, acc_avg);
    }
    fclose(csv);
    csv = NULL;
    if (!o->quiet) progress_finish(&prog, "trained");

    double acc = evaluate(lm, task, o->run.seed);
    printf("%s: held-out token accuracy %.2f%% (%d sequences)\n", task->name, 100 * acc, HELDOUT);
    if (!nb_module_save(model, ckpt_path)) {
        rc = fail("saving the checkpoint");
        goto done;
    }
    printf("checkpoint: %s (reload with --eval)\nlog: %s\n", ckpt_path, csv_path);
    if (plot_curve(csv_path, png_path, task->name)) printf("curve: %s\n", png_path);
    plot_heads(lm, task, o->run.seed, o->run.out);
    rc = 0;
done:
    if (csv) fclose(csv);
    free(x);
    free(y);
    nb_optimizer_free(opt);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    if (!parse(argc, argv, &o)) return 2;
    if (o.run.threads > 0) nb_set_num_threads(o.run.threads);
    const toy_task *task = o.task;
    nb_module *model = nb_model_new(NB_F32, o.run.seed);
    toy_model lm;
    int rc = !toy_model_init(&lm, model, o.block, task) ? fail("building the model")
             : o.run.eval                               ? run_eval(&lm, &o)
                                                        : run_training(&lm, &o);
    nb_module_free(model);
    nb_shutdown();
    return rc;
}
