/* nabla train: a training loop any program can use.
 *
 * nb_train runs the user's step (a callback that returns a micro-batch's loss) for a number of
 * optimizer steps and does what is around it:
 *   - zeroes the gradients, backpropagates, accumulates `accum` micro-batches per step (and,
 *     under MPI, averages over ranks: nabla/dist.h), stops with an error naming the step and
 *     the parameter when a loss or gradient is not finite, clips the gradient norm, sets the
 *     learning rate of the step (an nb_lr_schedule or a callback) and steps the optimizer;
 *   - a live progress line (step, loss, metrics, steps/s, ETA) redrawn on a terminal, one
 *     plain line per report otherwise;
 *   - evaluation every N steps (a callback returning a validation metric), keep-the-best
 *     checkpoint and early stopping after `patience` evaluations without improvement;
 *   - in out_dir: train.csv (step, loss, metrics, lr), val.csv (step, metric) and, through
 *     gnuplot, curve.png (a missing gnuplot is a message, not a failure);
 *   - checkpoints every N steps and exact resume: model, optimizer state, the step (so any
 *     schedule that is a function of the step), the model's generator, the user's data
 *     position and generator (data_state bytes), the logs' lengths and the best-metric and
 *     patience counters. A run killed at any moment and resumed continues bit for bit as the
 *     uninterrupted run would have.
 * Under MPI every rank runs nb_train with opts.dist = nb_dist_train() (nabla/dist.h, in
 * libnabla_dist: libnabla itself never loads MPI); rank 0 alone prints and writes files, every
 * rank reads a checkpoint to resume.
 *
 * Checkpoint files in out_dir: resume-<step>.safetensors (model and optimizer,
 * nb_module_save_with), then resume.json (the rest, replaced atomically: written to a temporary,
 * flushed, renamed); older resume-*.safetensors are removed only after resume.json names the new
 * one, so a crash at any point leaves a complete checkpoint. best.safetensors holds the model at
 * its best evaluation (nb_module_save, atomic too). */
#ifndef NABLA_TRAIN_H
#define NABLA_TRAIN_H

#include "nabla/module.h"
#include "nabla/optim.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a micro-batch stands, for the step callback. */
typedef struct {
    int64_t step; /* 0-based optimizer step */
    int micro;    /* this rank's micro-batch of the step: 0 .. accum - 1 */
    int index; /* its index among the step's micro-batches over all ranks: rank * accum + micro */
    int count; /* the step's micro-batches over all ranks: ranks * accum */
} nb_train_micro;

/* Computes micro-batch m's loss and returns it: a scalar float tensor made in the current
 * scope (nb_train opens a scope around each call and backpropagates the loss), or NULL with
 * nabla's error to stop training. metrics[0 .. n_metrics) start at 0 for each call: write the
 * micro-batch's values of the extra metrics (e.g. accuracy); the step's value of each is their
 * mean over the micro-batches of every rank, like the loss. */
typedef nb_tensor *(*nb_train_step_fn)(void *user, const nb_train_micro *m, double *metrics);

/* Evaluates the model after `steps_done` steps (in eval mode and without a graph: nb_train sets
 * both around the call) and writes the validation metric to *metric. False with nabla's error
 * stops training. Under MPI every rank evaluates; rank 0's metric is the one used. */
typedef bool (*nb_train_eval_fn)(void *user, int64_t steps_done, double *metric);

/* The learning rate of 0-based step `step` of `total`, e.g. nb_lr_warmup_cosine(step,
 * total / 20, total, lr, lr / 20). Negative or NaN stops training with an error. */
typedef double (*nb_train_lr_fn)(void *user, int64_t step, int64_t total);

/* How nb_train averages over micro-batches and processes: nb_dist_train() (nabla/dist.h) gives
 * the MPI one. Every function returns false (NULL for start) with nabla's error. */
typedef struct {
    /* Before the first step: checks that every rank built the same model, copies rank 0's
     * parameters to all and prepares to average the n params' gradients over `count`
     * micro-batches (accum on each rank). Returns the state passed to the others. */
    void *(*start)(nb_module *model, int n, nb_tensor *const *params, int accum);
    bool (*micro_done)(void *state); /* after each micro-batch's backward */
    bool (*step_done)(
        void *state); /* the gradients become their mean over the step's micro-batches */
    bool (*sum)(void *state, int n, double *v); /* v summed over ranks, in rank order */
    bool (*all_ok)(void *state, bool ok);       /* true on every rank when ok on every rank */
    void (*end)(void *state);                   /* frees the state */
} nb_train_dist;

/* Called after each step with the steps done so far (after its evaluation and checkpoint);
 * false with nabla's error stops training. For the caller's own logging or tests. */
typedef bool (*nb_train_after_step_fn)(void *user, int64_t steps_done);

typedef struct {
    const char *name; /* prefix of messages and errors; "train" by default */
    int64_t steps;    /* optimizer steps in all, > 0 */
    nb_train_step_fn step;
    void *user; /* passed to every callback */
    int accum;  /* micro-batches per step on each rank; default 1 */
    /* Averaging over micro-batches and ranks. NULL: one process; the micro-batches' gradients
     * add up in backward and are then divided by accum. Required when nb_dist_world_size() > 1. */
    const nb_train_dist *dist;
    double clip_norm; /* > 0: clip the gradients' global norm to it; 0: no clipping */
    /* The learning rate of each step: a schedule (nabla/optim.h: each group's rate times its
     * factor, nb_lr_schedule_apply), or a callback giving the rate (nb_optimizer_set_lr, so
     * groups of one rate only). At most one; neither: the optimizer's rates are left alone. */
    const nb_lr_schedule *schedule;
    nb_train_lr_fn lr;
    /* Extra per-step metrics reported by the step callback: column names for train.csv and
     * the progress line. At most NB_TRAIN_MAX_METRICS. */
    int n_metrics;
    const char *const *metric_names;
    /* Evaluation every eval_every steps and after the last one (0: never). */
    nb_train_eval_fn eval;
    int64_t eval_every;
    const char *eval_name; /* the metric's name; "val_loss" by default */
    bool maximize;         /* true when a larger metric is better (accuracy); false for a loss */
    /* Early stopping: stop after `patience` evaluations in a row without improving on the best
     * (0: never stop early). */
    int patience;
    /* Output directory (made if missing) for train.csv, val.csv, curve.png, the checkpoints
     * and best.safetensors. NULL: no files, no checkpoints. */
    const char *out_dir;
    bool no_plot; /* true: no curve.png */
    /* Checkpoint after every checkpoint_every steps and after the last step (0: none). */
    int64_t checkpoint_every;
    bool resume; /* continue from out_dir's checkpoint (an error if there is none) */
    /* What a resumed run must share with the one that saved the checkpoint (e.g. the
     * command-line flags that define it): a checkpoint of another run is refused. May be NULL. */
    const char *run;
    /* The caller's data position and generator as plain bytes (e.g. a struct holding an nb_rng
     * and an index): saved into every checkpoint and restored on resume. May be NULL. */
    void *data_state;
    size_t data_state_bytes;
    nb_train_after_step_fn after_step;
    /* Progress: a line every report_every steps when `progress` is not a terminal (0: every
     * steps / 10), redrawn at most 10 times a second when it is. progress NULL: stdout. */
    FILE *progress;
    int64_t report_every;
    bool quiet; /* no progress lines at all */
} nb_train_opts;

#define NB_TRAIN_MAX_METRICS 8

/* Options with steps set and everything else at its default. */
nb_train_opts nb_train_defaults(int64_t steps);

/* What a run did (filled by nb_train when result is not NULL, also after a failure). */
typedef struct {
    int64_t steps_done; /* including those before a resume */
    double loss;        /* the last step's loss (NaN before any) */
    double best_metric; /* the best evaluation's metric (NaN with no evaluation) */
    int64_t best_step;  /* the steps done at that evaluation (-1 with none) */
    bool stopped_early; /* patience ran out */
    bool curve_written; /* out_dir/curve.png was drawn */
} nb_train_result;

/* Trains model with opt as o says. model's parameters that require grad are the ones whose
 * gradients are accumulated, checked and clipped; opt updates the ones it holds. Neither is
 * kept. Returns true when every step (or every step until early stopping) ran; false with
 * nabla's error otherwise: "<name>: step N: ..." for a failure during training (N 1-based),
 * e.g. "<name>: step 7: the gradient of fc.weight is not finite (loss nan); stopping before
 * the update", or naming the bad option or checkpoint. Under MPI a failure on one rank is not
 * seen by the others: stop the job (nb_dist_abort). */
bool nb_train(nb_module *model, nb_optimizer *opt, const nb_train_opts *o, nb_train_result *result);

#ifdef __cplusplus
}
#endif
#endif
