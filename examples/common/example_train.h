/* The nb_train options the example trainers share, from their trainer flags (train_flags.h):
 * data parallel through nb_dist_train() with --accum K micro-batches per rank, gradients
 * clipped to norm 1, outputs and resume checkpoints in --out, and a test hook: when the
 * environment variable NABLA_TEST_KILL_AFTER_STEP equals the steps done, the process kills
 * itself with SIGKILL after that step, as an interrupted run would die
 * (tests/resume_check.sh). */
#ifndef NABLA_EXAMPLES_EXAMPLE_TRAIN_H
#define NABLA_EXAMPLES_EXAMPLE_TRAIN_H

#include "train_flags.h"

#include <nabla/nabla.h>

/* Options named prog for f's --steps, --accum, --out, --checkpoint-every and --resume; quiet
 * silences the progress lines (give it true on every rank but 0). The caller sets the step,
 * its user pointer, the learning rate, evaluation, the run and the data state. */
nb_train_opts example_train_opts(const char *prog, const trainer_flags *f, bool quiet);

#endif
