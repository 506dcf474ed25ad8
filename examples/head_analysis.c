/* Which attention heads does a trained model need? Head importance as in Michel, Levy and
 * Neubig 2019, "Are Sixteen Heads Really Better than One?".
 *
 *   head_analysis [--task NAME] [--steps N] [--seed S] [--threads N] [--out DIR]
 *                 [--heldout N] [--quiet]
 *
 * Trains a TransformerLM on a toy task (examples/toy/), then gives every layer l and head h a
 * multiplier head_mask[l, h] = 1 (nb_lm_forward_opts.head_mask) and scores the head by its
 * importance: |d loss / d head_mask[l, h]| summed over held-out batches. Then it removes heads
 * one at a time, least important first (their multiplier set to 0), and measures held-out
 * accuracy after each removal on a second held-out set. Writes DIR/heads.csv (one row per
 * number of heads removed) and DIR/heads.png: accuracy against heads removed beside the
 * attention heatmaps of the heads that remain at the last point within one percentage point
 * of the full model. Training runs through nb_train (nabla/train.h), which also writes
 * DIR/train.csv and DIR/curve.png. */
#define _POSIX_C_SOURCE 200809L
#include "common/flag_values.h"
#include "common/plot.h"
#include "common/train_flags.h"
#include "toy/model.h"
#include "toy/tasks.h"

#include <errno.h>
#include <math.h>
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADS 64
#define BATCH 128                            /* held-out sequences per forward */
#define IMPORTANCE_MIX 0x5851f42d4c957f2dULL /* held-out streams never share training's */
#define EVAL_MIX 0x2545f4914f6cdd1dULL

typedef struct {
    const toy_task *task;
    trainer_flags run;
    int64_t heldout;
    bool quiet;
} options;

/* Sequences and their targets, [n, T] each. */
typedef struct {
    int64_t n, T;
    int64_t *x, *y;
} dataset;

static void usage(FILE *f) {
    fprintf(f, "usage: head_analysis [--task NAME] [--steps N] [--seed S] [--threads N] "
               "[--out DIR] [--heldout N] [--quiet]\n  --task    one of");
    for (int i = 0; toy_tasks[i]; i++) fprintf(f, " %s", toy_tasks[i]->name);
    fprintf(f, " (default recall)\n  --heldout sequences in each held-out set (default 1024)\n");
}

static bool parse(int argc, char **argv, options *o) {
    *o = (options){.run = {.seed = 1, .out = "out/heads", .steps = -1},
                   .heldout = 1024,
                   .task = toy_task_find("recall")};
    struct option opts[4 + TRAIN_FLAGS_MAX + 1] = {{"help", no_argument, NULL, 'h'},
                                                   {"quiet", no_argument, NULL, 'q'},
                                                   {"task", required_argument, NULL, 't'},
                                                   {"heldout", required_argument, NULL, 'H'}};
    /* Not --lr, --resume, --checkpoint-every, --accum or --eval: training here is a fixed
     * recipe (the task's learning rate, one batch a step), run to the end. */
    train_flags_options(ARGS_STEPS | ARGS_SEED | ARGS_THREADS | ARGS_OUT, opts + 4);
    for (int c; (c = flags_next("head_analysis", argc, argv, opts)) != -1;) {
        bool ok = c != FLAGS_BAD;
        if (c == 'h') {
            usage(stdout);
            exit(0);
        } else if (c == 'q') {
            o->quiet = true;
        } else if (c == 't') {
            ok = (o->task = toy_task_find(optarg)) != NULL;
            if (!ok) fprintf(stderr, "head_analysis: unknown task '%s'\n", optarg);
        } else if (c == 'H') {
            ok = flag_int("head_analysis", "--heldout", optarg, 1, 1 << 20, &o->heldout);
        } else if (is_train_flag(c)) {
            ok = train_flag_value("head_analysis", c, optarg, &o->run);
        }
        if (!ok) return usage(stderr), false;
    }
    if (o->run.steps < 0) o->run.steps = o->task->steps;
    return true;
}

static bool dataset_make(dataset *d, const toy_task *task, int64_t n, uint64_t seed) {
    *d = (dataset){.n = n, .T = task->seq_len};
    d->x = malloc(sizeof *d->x * (size_t)(n * d->T));
    d->y = malloc(sizeof *d->y * (size_t)(n * d->T));
    if (!d->x || !d->y) return false;
    nb_rng rng;
    nb_rng_seed(&rng, seed);
    task->make(&rng, n, d->x, d->y);
    return true;
}

static void dataset_free(dataset *d) {
    free(d->x);
    free(d->y);
}

/* Sequences [start, start + count) of d as tokens and flattened targets (current scope). */
static nb_tensor *batch_tokens(const dataset *d, int64_t start, int64_t count) {
    return nb_from_array(NB_I64, NB_SHAPE(count, d->T), d->x + start * d->T);
}
static nb_tensor *batch_targets(const dataset *d, int64_t start, int64_t count) {
    return nb_from_array(NB_I64, NB_SHAPE(count * d->T), d->y + start * d->T);
}

static nb_tensor *logits_of(nb_transformer_lm *lm, const toy_task *task, nb_tensor *tokens,
                            const nb_tensor *head_mask) {
    nb_lm_forward_opts o = {.causal = task->causal, .head_mask = head_mask};
    return nb_view(nb_transformer_lm_forward_opts(lm, tokens, &o), NB_SHAPE(-1, task->vocab));
}

/* What a training step needs. */
typedef struct {
    nb_transformer_lm *lm;
    const options *o;
} head_trainer;

/* Step m->step's loss on a fresh batch, drawn from a seed of its own. */
static nb_tensor *head_step(void *user, const nb_train_micro *m, double *metrics) {
    const head_trainer *tr = user;
    const toy_task *task = tr->o->task;
    (void)metrics;
    dataset d;
    nb_tensor *loss = NULL;
    if (dataset_make(&d, task, task->batch, tr->o->run.seed + (uint64_t)m->step))
        loss = nb_cross_entropy(logits_of(tr->lm, task, batch_tokens(&d, 0, d.n), NULL),
                                batch_targets(&d, 0, d.n), TOY_IGNORE, NB_REDUCE_MEAN);
    else
        nb_error("head_analysis", "out of memory");
    dataset_free(&d);
    return loss;
}

static double head_lr(void *user, int64_t step, int64_t total) {
    const head_trainer *tr = user;
    return nb_lr_warmup_cosine(step, total / 20, total, tr->o->task->lr, tr->o->task->lr / 20);
}

/* Trains lm for o->run.steps AdamW steps on fresh batches. False with nabla's error. */
static bool train(nb_transformer_lm *lm, const options *o) {
    int nparams;
    nb_tensor **params = nb_module_param_tensors(&lm->base, &nparams);
    nb_optimizer *opt =
        params ? nb_adamw_new(nparams, params, nb_adamw_defaults(o->task->lr)) : NULL;
    head_trainer tr = {.lm = lm, .o = o};
    nb_train_opts t = nb_train_defaults(o->run.steps);
    t.name = "head_analysis";
    t.step = head_step;
    t.user = &tr;
    t.clip_norm = 1.0;
    t.lr = head_lr;
    t.out_dir = o->run.out;
    t.quiet = o->quiet;
    bool ok = opt && nb_train(&lm->base, opt, &t, NULL);
    nb_optimizer_free(opt);
    free(params);
    return ok;
}

/* Held-out token accuracy of lm on d with head_mask (NULL: no mask), without a graph. */
static double accuracy(nb_transformer_lm *lm, const toy_task *task, const dataset *d,
                       const nb_tensor *head_mask) {
    bool prev = nb_set_grad_enabled(false);
    int64_t correct = 0, scored = 0;
    for (int64_t start = 0; start < d->n; start += BATCH) {
        int64_t count = d->n - start < BATCH ? d->n - start : BATCH;
        nb_scope_begin();
        nb_tensor *target = batch_targets(d, start, count);
        nb_tensor *pred =
            nb_argmax(logits_of(lm, task, batch_tokens(d, start, count), head_mask), -1, false);
        correct += nb_count_nonzero(nb_eq(pred, target)); /* TOY_IGNORE never equals a class */
        scored += nb_count_nonzero(nb_ne(target, nb_scalar(NB_I64, TOY_IGNORE)));
        nb_scope_end();
    }
    nb_set_grad_enabled(prev);
    return scored ? (double)correct / (double)scored : 0;
}

/* importance[l * heads + h] = sum over d's batches of |d loss / d head_mask[l, h]| at ones. */
static bool head_importance(nb_transformer_lm *lm, const toy_task *task, const dataset *d,
                            double *importance) {
    const int64_t n = lm->num_layers * lm->num_heads;
    nb_tensor *mask = nb_requires_grad_(
        nb_ones(lm->base.root->dtype, NB_SHAPE(lm->num_layers, lm->num_heads)), true);
    if (!mask) return false;
    for (int64_t i = 0; i < n; i++) importance[i] = 0;
    bool ok = true;
    double g[MAX_HEADS];
    for (int64_t start = 0; ok && start < d->n; start += BATCH) {
        int64_t count = d->n - start < BATCH ? d->n - start : BATCH;
        nb_scope_begin();
        nb_tensor *loss =
            nb_cross_entropy(logits_of(lm, task, batch_tokens(d, start, count), mask),
                             batch_targets(d, start, count), TOY_IGNORE, NB_REDUCE_MEAN);
        nb_zero_grad(mask);
        ok = loss && nb_backward(loss, NULL) && nb_to_doubles(nb_grad(mask), g);
        for (int64_t i = 0; ok && i < n; i++) importance[i] += fabs(g[i]);
        nb_scope_end();
    }
    nb_module_zero_grad(&lm->base); /* the parameters' gradients were a by-product */
    return ok;
}

/* Indices 0..n-1 by increasing importance (ties by index: a stable insertion sort). */
static void rank_heads(const double *importance, int64_t n, int64_t *order) {
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i;
        while (j > 0 && importance[order[j - 1]] > importance[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
}

/* heads.png: the accuracy curve and held-out example 0's heatmaps with the heads of `mask`. */
static void plot(nb_transformer_lm *lm, const options *o, const dataset *eval, const double *acc,
                 const double *importance, const nb_tensor *mask, int64_t marked) {
    const int64_t n = lm->num_layers * lm->num_heads, T = eval->T;
    nb_scope_begin();
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *w[16];
    nb_lm_forward_opts fo = {.causal = o->task->causal, .head_mask = mask, .attn_weights = w};
    nb_transformer_lm_forward_opts(lm, batch_tokens(eval, 0, 1), &fo);
    double *maps = malloc(sizeof *maps * (size_t)(n * T * T)), m[MAX_HEADS];
    char titles[MAX_HEADS][48];
    const char *title_ptrs[MAX_HEADS];
    bool removed[MAX_HEADS];
    nb_to_doubles(mask, m);
    for (int64_t i = 0; maps && i < n; i++) {
        int l = (int)(i / lm->num_heads);
        int64_t h = i % lm->num_heads;
        nb_to_doubles(nb_select(nb_select(w[l], 0, 0), 0, h), maps + i * T * T);
        removed[i] = m[i] == 0;
        snprintf(titles[i], sizeof titles[i], "L%d H%lld %s %.3g", l, (long long)h,
                 removed[i] ? "removed, importance" : "importance", importance[i]);
        title_ptrs[i] = titles[i];
    }
    char path[512], title[256];
    snprintf(path, sizeof path, "%s/heads.png", o->run.out);
    snprintf(title, sizeof title,
             "%s: held-out accuracy as heads go, least important first; heatmaps with %lld of "
             "%lld heads removed",
             o->task->name, (long long)marked, (long long)n);
    if (maps && plot_head_analysis(path, title, acc, lm->num_layers, lm->num_heads, maps, T,
                                   removed, title_ptrs, marked))
        printf("plot: %s\n", path);
    free(maps);
    nb_set_grad_enabled(prev);
    nb_scope_end();
}

/* Removes heads least important first; writes heads.csv and the plot. */
static bool prune(nb_transformer_lm *lm, const options *o, const dataset *eval,
                  const double *importance) {
    const int64_t n = lm->num_layers * lm->num_heads;
    int64_t order[MAX_HEADS], marked = 0;
    double acc[MAX_HEADS + 1];
    rank_heads(importance, n, order);
    char path[512];
    snprintf(path, sizeof path, "%s/heads.csv", o->run.out);
    FILE *csv = fopen(path, "w");
    if (!csv)
        return fprintf(stderr, "head_analysis: cannot write %s: %s\n", path, strerror(errno)),
               false;
    fprintf(csv, "removed,layer,head,importance,accuracy\n");
    nb_tensor *mask = nb_ones(lm->base.root->dtype, NB_SHAPE(lm->num_layers, lm->num_heads));
    nb_tensor *marked_mask = nb_clone(mask);
    for (int64_t k = 0; k <= n; k++) {
        if (k > 0)
            nb_set(mask, NB_IDX(order[k - 1] / lm->num_heads, order[k - 1] % lm->num_heads), 0);
        acc[k] = accuracy(lm, o->task, eval, mask);
        if (k == 0) {
            printf("all %lld heads (head mask of ones): held-out token accuracy %.2f%%\n",
                   (long long)n, 100 * acc[0]);
            fprintf(csv, "0,,,,%.4f\n", acc[0]);
            continue;
        }
        int64_t i = order[k - 1];
        printf("removed %2lld: layer %lld head %lld (importance %.4g) -> %.2f%%\n", (long long)k,
               (long long)(i / lm->num_heads), (long long)(i % lm->num_heads), importance[i],
               100 * acc[k]);
        fprintf(csv, "%lld,%lld,%lld,%.6g,%.4f\n", (long long)k, (long long)(i / lm->num_heads),
                (long long)(i % lm->num_heads), importance[i], acc[k]);
        if (acc[k] >= acc[0] - 0.01 && marked == k - 1) {
            marked = k;
            nb_copy_(marked_mask, mask);
        }
    }
    fclose(csv);
    printf("all heads removed: held-out token accuracy %.2f%%\n", 100 * acc[n]);
    printf("the %lld least important heads can go with accuracy within 1 point of all heads'\n"
           "log: %s\n",
           (long long)marked, path);
    plot(lm, o, eval, acc, importance, marked_mask, marked);
    return true;
}

int main(int argc, char **argv) {
    options o;
    if (!parse(argc, argv, &o)) return 2;
    if (o.run.threads > 0) nb_set_num_threads(o.run.threads);
    const toy_task *task = o.task;
    nb_module *model = nb_model_new(NB_F32, o.run.seed);
    toy_model tm; /* the built-in GPT-style TransformerLM, sized from the task */
    nb_transformer_lm *lm = toy_model_init(&tm, model, TOY_BLOCK_GPT, task) ? tm.gpt : NULL;
    dataset imp = {0}, eval = {0};
    int rc = 1;
    if (!lm || lm->num_layers * lm->num_heads > MAX_HEADS) {
        fprintf(stderr, "head_analysis: building the model: %s\n", nb_last_error());
        goto done;
    }
    if (!dataset_make(&imp, task, o.heldout, o.run.seed ^ IMPORTANCE_MIX) ||
        !dataset_make(&eval, task, o.heldout, o.run.seed ^ EVAL_MIX)) {
        fprintf(stderr, "head_analysis: out of memory\n");
        goto done;
    }
    if (!o.quiet)
        printf("%s: %s; %d layer(s) of %lld heads, %lld steps\n", task->name, task->what,
               task->layers, (long long)task->heads, (long long)o.run.steps);
    if (!train(lm, &o)) {
        fprintf(stderr, "head_analysis: training: %s\n", nb_last_error());
        goto done;
    }
    nb_module_train(&lm->base, false);
    printf("%s: trained model: held-out token accuracy %.2f%% (%lld sequences)\n", task->name,
           100 * accuracy(lm, task, &eval, NULL), (long long)eval.n);
    double importance[MAX_HEADS];
    if (!head_importance(lm, task, &imp, importance)) {
        fprintf(stderr, "head_analysis: importance: %s\n", nb_last_error());
        goto done;
    }
    rc = prune(lm, &o, &eval, importance) ? 0 : 1;
done:
    dataset_free(&imp);
    dataset_free(&eval);
    nb_module_free(model);
    nb_shutdown();
    return rc;
}
