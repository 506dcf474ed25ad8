/* Data-parallel training for the example trainers: the same program runs alone, with
 * --accum K micro-batches per step, or under mpirun with one micro-batch (or K) per rank.
 *
 * A step draws its global batch of ranks x K micro-batches from the shared data generator
 * (every rank draws all of it, so the generator stays in step everywhere) and each rank trains
 * on its own K: micro-batch index rank * K + k. Gradients are averaged through an
 * nb_grad_reducer, which adds in a fixed order, so N ranks x 1 micro-batch equal 1 process x N
 * micro-batches bit for bit. Alone with K = 1 there is no reducer: the step is exactly the
 * plain one. Rank 0 alone prints progress and writes files. */
#ifndef NABLA_EXAMPLES_DIST_TRAIN_H
#define NABLA_EXAMPLES_DIST_TRAIN_H

#include "update.h"

#include <nabla/nabla.h>

typedef struct {
    const char *prog;
    int rank, ranks, accum;
    nb_grad_reducer *reducer; /* NULL alone with one micro-batch */
} dist_train;

/* Starts MPI when run under mpirun (nb_dist_init), before anything else in main, and sends the
 * standard output of every rank but 0 to /dev/null (errors still reach stderr). Exits with a
 * message if MPI fails to start. */
void dist_train_start(const char *prog, int *argc, char ***argv);
/* Prepares data-parallel steps over pl with accum micro-batches per rank (0 means 1): checks
 * that every rank built the same model and copies rank 0's parameters to all. False with a
 * message (prefixed prog) on failure. */
bool dist_train_init(dist_train *dt, const char *prog, nb_module *model, const param_list *pl,
                     int accum);
void dist_train_free(dist_train *dt);
/* Micro-batches per step over all ranks, and the global index of this rank's k-th. */
int dist_train_micro_batches(const dist_train *dt);
int dist_train_micro_index(const dist_train *dt, int k);
/* True on the rank that prints and writes files. */
bool dist_train_is_main(const dist_train *dt);

/* Backpropagates micro-batch k's loss (k = 0 zeroes the gradients first) and adds its
 * gradients to the step's sum. False with a message on an error. */
bool dist_train_backward(dist_train *dt, nb_optimizer *opt, nb_tensor *loss, int k, int64_t step);
/* Ends a step: averages the gradients over micro-batches and ranks, adds the n statistics in
 * stats over ranks (in rank order; each rank passes its own sums), checks the training's
 * health (loss_sum / micro-batches is the step's loss), clips, sets the warmup-cosine rate and
 * steps opt. False with a message (prefixed prog) when any of that fails; on every rank alike,
 * since every rank sees the same averaged gradients. */
bool dist_train_update(dist_train *dt, nb_optimizer *opt, const param_list *pl, double *stats,
                       int n, int64_t step, int64_t total, double lr, double min_lr);
/* After the last step: checks that every rank holds the same parameters (a hash of their
 * bytes) and prints that hash (on rank 0's stdout; the others' goes to /dev/null). False with
 * a message (prefixed prog) when the ranks differ or cannot compare. */
bool dist_train_finish(const dist_train *dt, const nb_module *model);
/* Stops every rank after a failure on this one: prints "prog: what" (rank-tagged under MPI)
 * and ends the job with exit code code. Alone, returns code for main to return. */
int dist_train_fail(const dist_train *dt, int code);

#endif
