/* Data-parallel training for the example trainers, around nb_train (which averages the
 * gradients over micro-batches and ranks through nb_dist_train()): the same program runs alone,
 * with --accum K micro-batches per step, or under mpirun with one micro-batch (or K) per rank.
 * Rank 0 alone prints progress and writes files. */
#ifndef NABLA_EXAMPLES_DIST_TRAIN_H
#define NABLA_EXAMPLES_DIST_TRAIN_H

#include <nabla/nabla.h>

typedef struct {
    const char *prog;
    int ranks;
} dist_train;

/* Starts MPI when run under mpirun (nb_dist_init), before anything else in main, and sends the
 * standard output of every rank but 0 to /dev/null (errors still reach stderr). Exits with a
 * message if MPI fails to start. */
void dist_train_start(const char *prog, int *argc, char ***argv);
/* After the last step: checks that every rank holds the same parameters (a hash of their
 * bytes) and prints that hash (on rank 0's stdout; the others' goes to /dev/null). False with
 * a message (prefixed prog) when the ranks differ or cannot compare. */
bool dist_train_finish(const dist_train *dt, const nb_module *model);

#endif
