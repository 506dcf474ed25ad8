/* nb_train: the loop around a user's step (nabla/train.h). One step: micro-batches (scope,
 * callback, backward, opts.dist's hook), the average over micro-batches and ranks, the
 * health check, clipping, the learning rate, the optimizer step; then the CSV row, evaluation,
 * best checkpoint, early stopping, resume checkpoint and the progress line. */
#include "nabla/dist.h" /* nb_dist_rank, nb_dist_world_size: in libnabla */
#include "tensor/nbt.h"
#include "train_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const OP = "nb_train";

nb_train_opts nb_train_defaults(int64_t steps) {
    return (nb_train_opts){.name = "train", .steps = steps, .accum = 1, .eval_name = "val_loss"};
}

typedef struct {
    nb_train_opts o; /* the caller's, with defaults filled in */
    nb_module *model;
    nb_optimizer *opt;
    nb_param *params;      /* model's parameters that require grad, with names */
    nb_tensor **trainable; /* the same tensors, for clipping and averaging */
    int n_trainable;
    const nb_train_dist *dist; /* NULL: one process */
    void *dist_state;
    int rank, ranks, count;
    bool main_rank; /* prints and writes */
    FILE *logs[NBTR_LOGS];
    nbtr_progress progress;
    nbtr_state st;
    double loss, metrics[NB_TRAIN_MAX_METRICS];
} trainer;

/* "<name>: step N: <the error that stopped it>" (N 1-based). */
static bool step_failed(const trainer *t, int64_t step, const char *fallback) {
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", *nb_last_error() ? nb_last_error() : fallback);
    nbt_error(t->o.name, "step %lld: %s", (long long)step + 1, cause);
    return false;
}

static bool check_options(const nb_train_opts *o, const nb_module *model, const nb_optimizer *opt) {
    if (!o || !model || !opt)
        return nbt_error(OP, "%s is NULL", !o ? "opts" : !model ? "model" : "opt"), false;
    if (o->steps <= 0)
        return nbt_error(OP, "steps is %lld, expected > 0", (long long)o->steps), false;
    if (!o->step) return nbt_error(OP, "no step callback"), false;
    if (o->accum < 0 || o->accum > 1 << 20)
        return nbt_error(OP, "accum is %d, expected 1 to 2^20 (0 for 1)", o->accum), false;
    if (!(o->clip_norm >= 0))
        return nbt_error(OP, "clip_norm is %g, expected >= 0", o->clip_norm), false;
    if (o->n_metrics < 0 || o->n_metrics > NB_TRAIN_MAX_METRICS ||
        (o->n_metrics && !o->metric_names))
        return nbt_error(OP, "n_metrics is %d, expected 0 to %d with metric_names", o->n_metrics,
                         NB_TRAIN_MAX_METRICS),
               false;
    for (int i = 0; i < o->n_metrics; i++)
        if (!o->metric_names[i]) return nbt_error(OP, "metric_names[%d] is NULL", i), false;
    if (o->eval_every < 0 || o->checkpoint_every < 0 || o->report_every < 0 || o->patience < 0)
        return nbt_error(OP,
                         "eval_every, checkpoint_every, report_every and patience must be >= 0, "
                         "got %lld, %lld, %lld, %d",
                         (long long)o->eval_every, (long long)o->checkpoint_every,
                         (long long)o->report_every, o->patience),
               false;
    if ((o->eval_every > 0) != (o->eval != NULL))
        return nbt_error(OP, "an eval callback needs eval_every > 0 and eval_every needs one"),
               false;
    if (o->schedule && o->lr) return nbt_error(OP, "both a schedule and an lr callback"), false;
    if (o->patience > 0 && !o->eval) return nbt_error(OP, "patience needs an eval callback"), false;
    if ((o->checkpoint_every || o->resume) && !o->out_dir)
        return nbt_error(OP, "checkpoints and resume need out_dir"), false;
    if (o->data_state_bytes && !o->data_state)
        return nbt_error(OP, "data_state is NULL for %zu bytes", o->data_state_bytes), false;
    return true;
}

/* The model's parameters that require grad. */
static bool list_trainable(trainer *t) {
    int n = nb_module_param_count(t->model);
    t->params = malloc(sizeof *t->params * (size_t)(n > 0 ? n : 1));
    t->trainable = malloc(sizeof *t->trainable * (size_t)(n > 0 ? n : 1));
    if (!t->params || !t->trainable) return nbt_error(OP, "out of memory"), false;
    if (nb_module_named_params(t->model, t->params, n) != n) return false;
    for (int i = 0; i < n; i++)
        if (t->params[i].tensor->requires_grad) {
            t->params[t->n_trainable] = t->params[i];
            t->trainable[t->n_trainable++] = t->params[i].tensor;
        }
    if (t->n_trainable == 0) return nbt_error(OP, "no parameter of the model requires grad"), false;
    return true;
}

/* Every rank goes on only if every rank resumed (a rank that failed keeps its own error). */
static bool resume_everywhere(trainer *t) {
    bool ok = nbtr_checkpoint_load(t->o.name, t->model, t->opt, &t->o, &t->st);
    if (!t->dist ? ok : t->dist->all_ok(t->dist_state, ok)) return true;
    return ok && (nbt_error(t->o.name, "another rank could not resume"), false);
}

/* The health check before an update: the step's loss and every gradient finite. */
static bool healthy(const trainer *t, int64_t step) {
    for (int i = 0; i < t->n_trainable; i++) {
        const nb_tensor *grad = nb_grad(t->trainable[i]);
        if (!grad || nb_all_finite(grad)) continue;
        return nbt_error(t->o.name,
                         "step %lld: the gradient of %s is not finite (loss %g); stopping before "
                         "the update",
                         (long long)step + 1, t->params[i].name, t->loss),
               false;
    }
    if (isfinite(t->loss)) return true;
    return nbt_error(t->o.name,
                     "step %lld: the loss is not finite (%g); stopping before the update",
                     (long long)step + 1, t->loss),
           false;
}

/* One micro-batch: the callback in a scope of its own, backward, opts.dist's hook. */
static bool micro_batch(trainer *t, int64_t step, int k, double *sums) {
    const nb_train_opts *o = &t->o;
    nb_train_micro m = {
        .step = step, .micro = k, .index = t->rank * o->accum + k, .count = t->count};
    double metrics[NB_TRAIN_MAX_METRICS] = {0};
    nb_clear_error();
    nb_scope_begin();
    nb_tensor *loss = o->step(o->user, &m, metrics);
    bool ok = loss && nb_numel(loss) == 1;
    if (loss && !ok)
        nbt_error(OP, "the step callback's loss has %lld elements, not 1",
                  (long long)nb_numel(loss));
    if (ok) sums[0] += nb_item(loss);
    ok = ok && nb_backward(loss, NULL) && (!t->dist || t->dist->micro_done(t->dist_state));
    nb_scope_end();
    for (int i = 0; i < o->n_metrics; i++) sums[1 + i] += metrics[i];
    return ok || step_failed(t, step, "the step callback returned no loss");
}

/* One process: backward added the micro-batches' gradients; their mean is the step's. */
static bool mean_of_accumulated(const trainer *t) {
    if (t->o.accum == 1) return true;
    bool ok = true;
    for (int i = 0; ok && i < t->n_trainable; i++) {
        nb_tensor *grad = (nb_tensor *)nb_grad(t->trainable[i]);
        if (!grad) continue;
        nb_scope_begin();
        ok = nb_copy_(grad, nb_mul_scalar(grad, 1.0 / t->o.accum));
        nb_scope_end();
    }
    return ok;
}

static bool optimizer_step(trainer *t, int64_t step) {
    const nb_train_opts *o = &t->o;
    double sums[1 + NB_TRAIN_MAX_METRICS] = {0};
    nb_module_zero_grad(t->model);
    for (int k = 0; k < o->accum; k++)
        if (!micro_batch(t, step, k, sums)) return false;
    if (!(t->dist ? t->dist->step_done(t->dist_state) &&
                        t->dist->sum(t->dist_state, 1 + o->n_metrics, sums)
                  : mean_of_accumulated(t)))
        return step_failed(t, step, "averaging the gradients");
    t->loss = sums[0] / t->count;
    for (int i = 0; i < o->n_metrics; i++) t->metrics[i] = sums[1 + i] / t->count;
    if (!healthy(t, step)) return false;
    if (o->clip_norm > 0 && isnan(nb_clip_grad_norm(t->n_trainable, t->trainable, o->clip_norm)))
        return step_failed(t, step, "clipping");
    if (o->schedule && !nb_lr_schedule_apply(*o->schedule, t->opt, step))
        return step_failed(t, step, "the schedule");
    if (o->lr) {
        double lr = o->lr(o->user, step, o->steps);
        if (!(lr >= 0))
            return nbt_error(o->name, "step %lld: the learning rate callback gave %g",
                             (long long)step + 1, lr),
                   false;
        if (!nb_optimizer_set_lr(t->opt, lr)) return step_failed(t, step, "setting the rate");
    }
    if (!nb_optimizer_step(t->opt)) return step_failed(t, step, "the optimizer step");
    if (t->logs[NBTR_TRAIN_LOG]) {
        FILE *f = t->logs[NBTR_TRAIN_LOG];
        fprintf(f, "%lld,%.9g", (long long)step + 1, t->loss);
        for (int i = 0; i < o->n_metrics; i++) fprintf(f, ",%.9g", t->metrics[i]);
        fprintf(f, ",%.9g\n", nb_optimizer_lr(t->opt));
    }
    return true;
}

/* Evaluation after `done` steps: rank 0's metric everywhere, the best checkpoint, patience. */
static bool evaluate(trainer *t, int64_t done) {
    const nb_train_opts *o = &t->o;
    double metric = NAN;
    bool was_training = t->model->training, grad = nb_set_grad_enabled(false);
    nb_module_train(t->model, false);
    nb_clear_error();
    nb_scope_begin();
    bool ok = o->eval(o->user, done, &metric);
    nb_scope_end();
    nb_module_train(t->model, was_training);
    nb_set_grad_enabled(grad);
    if (!ok) return step_failed(t, done - 1, "the eval callback failed");
    double shared = t->rank == 0 ? metric : 0;
    if (t->dist && !t->dist->sum(t->dist_state, 1, &shared))
        return step_failed(t, done - 1, "sharing the metric");
    metric = shared;
    nbtr_state *st = &t->st;
    bool improved = !isnan(metric) &&
                    (st->best_step < 0 || (o->maximize ? metric > st->best : metric < st->best));
    if (improved) {
        st->best = metric;
        st->best_step = done;
        st->bad_evals = 0;
        char path[4096];
        snprintf(path, sizeof path, "%s/best.safetensors", o->out_dir ? o->out_dir : "");
        if (t->main_rank && o->out_dir && !nb_module_save(t->model, path))
            return step_failed(t, done - 1, "saving the best model");
    } else {
        st->bad_evals++;
    }
    if (t->logs[NBTR_VAL_LOG])
        fprintf(t->logs[NBTR_VAL_LOG], "%lld,%.9g\n", (long long)done, metric);
    if (improved)
        nbtr_progress_line(&t->progress, "%s: step %lld: %s %.6g (best so far)", o->name,
                           (long long)done, o->eval_name, metric);
    else
        nbtr_progress_line(&t->progress, "%s: step %lld: %s %.6g (best %.6g at step %lld)", o->name,
                           (long long)done, o->eval_name, metric, st->best,
                           (long long)st->best_step);
    if (o->patience > 0 && st->bad_evals >= o->patience) {
        st->stopped = true;
        nbtr_progress_line(&t->progress, "%s: no improvement in %d evaluations: stopping early",
                           o->name, o->patience);
    }
    return true;
}

static bool checkpoint(trainer *t) {
    for (int i = 0; i < NBTR_LOGS; i++)
        if (t->logs[i] && !nbtr_log_flush(t->o.name, t->logs[i], &t->st.log_bytes[i])) return false;
    return nbtr_checkpoint_save(t->o.name, t->model, t->opt, &t->o, &t->st);
}

/* What follows step `done`: evaluation, resume checkpoint, the caller's hook, progress. */
static bool after_step(trainer *t, int64_t done) {
    const nb_train_opts *o = &t->o;
    bool last = done == o->steps;
    if (o->eval && (done % o->eval_every == 0 || last) && !evaluate(t, done)) return false;
    if (t->main_rank && o->checkpoint_every > 0 &&
        (done % o->checkpoint_every == 0 || last || t->st.stopped) && !checkpoint(t))
        return false;
    nb_clear_error();
    if (o->after_step && !o->after_step(o->user, done))
        return step_failed(t, done - 1, "the after_step callback failed");
    nbtr_progress_step(&t->progress, done, t->loss, t->metrics);
    return true;
}

static bool open_logs(trainer *t) {
    const nb_train_opts *o = &t->o;
    char header[1024];
    int len = snprintf(header, sizeof header, "step,loss");
    for (int i = 0; i < o->n_metrics && len < (int)sizeof header; i++)
        len += snprintf(header + len, sizeof header - (size_t)len, ",%s", o->metric_names[i]);
    if (len < (int)sizeof header) snprintf(header + len, sizeof header - (size_t)len, ",lr\n");
    if (!(t->logs[NBTR_TRAIN_LOG] = nbtr_log_open(o->name, o->out_dir, "train.csv", header,
                                                  o->resume, t->st.log_bytes[NBTR_TRAIN_LOG])))
        return false;
    if (!o->eval) return true;
    snprintf(header, sizeof header, "step,%s\n", o->eval_name);
    return (t->logs[NBTR_VAL_LOG] = nbtr_log_open(o->name, o->out_dir, "val.csv", header, o->resume,
                                                  t->st.log_bytes[NBTR_VAL_LOG])) != NULL;
}

static bool setup(trainer *t) {
    const nb_train_opts *o = &t->o;
    if (!list_trainable(t)) return false;
    if (t->ranks > 1 && !t->dist)
        return nbt_error(OP, "%d ranks: set opts.dist to nb_dist_train() (nabla/dist.h)", t->ranks),
               false;
    if (t->dist &&
        !(t->dist_state = t->dist->start(t->model, t->n_trainable, t->trainable, t->o.accum)))
        return false;
    if (t->main_rank && o->out_dir && !nbtr_make_dirs(o->name, o->out_dir)) return false;
    if (o->resume && !resume_everywhere(t)) return false;
    return !t->main_rank || !o->out_dir || open_logs(t);
}

bool nb_train(nb_module *model, nb_optimizer *opt, const nb_train_opts *opts,
              nb_train_result *result) {
    if (result) *result = (nb_train_result){.loss = NAN, .best_metric = NAN, .best_step = -1};
    if (!check_options(opts, model, opt)) return false;
    trainer t = {.o = *opts, .model = model, .opt = opt, .loss = NAN};
    if (!t.o.name) t.o.name = "train";
    if (!t.o.eval_name) t.o.eval_name = "val_loss";
    if (t.o.accum == 0) t.o.accum = 1;
    t.dist = t.o.dist;
    t.rank = nb_dist_rank();
    t.ranks = nb_dist_world_size() > 0 ? nb_dist_world_size() : 1;
    t.count = t.ranks * t.o.accum;
    t.main_rank = t.rank == 0;
    t.st = (nbtr_state){.best = NAN, .best_step = -1};
    bool ok = setup(&t);
    FILE *shown = t.o.quiet || !t.main_rank ? NULL : t.o.progress ? t.o.progress : stdout;
    nbtr_progress_start(&t.progress, &t.o, shown, t.st.step);
    while (ok && t.st.step < t.o.steps && !t.st.stopped) {
        ok = optimizer_step(&t, t.st.step);
        if (ok) ok = after_step(&t, ++t.st.step);
    }
    for (int i = 0; i < NBTR_LOGS; i++)
        if (t.logs[i] && fclose(t.logs[i]) != 0 && ok)
            ok = (nbt_error(t.o.name, "cannot write a training log"), false);
    if (ok) nbtr_progress_finish(&t.progress, t.st.step, t.st.stopped);
    bool curve =
        ok && t.main_rank && t.o.out_dir && !t.o.no_plot && nbtr_plot(&t.o, t.o.eval, &t.progress);
    if (result)
        *result = (nb_train_result){.steps_done = t.st.step,
                                    .loss = t.loss,
                                    .best_metric = t.st.best,
                                    .best_step = t.st.best_step,
                                    .stopped_early = t.st.stopped,
                                    .curve_written = curve};
    if (t.dist && t.dist_state) t.dist->end(t.dist_state);
    free(t.params);
    free(t.trainable);
    return ok;
}
