/* Resumable training for the example trainers. Every few steps a trainer saves its model and
 * optimizer (nb_module_save_with) to DIR/resume-<step>.safetensors and then, replacing the
 * previous one atomically, DIR/resume.json: the step count, the generators' states, the
 * lengths of the logs (train.csv, ...) at that step and the flags that define the run. A run killed
 * at any moment and resumed from DIR therefore continues exactly where its last checkpoint left it:
 * the learning-rate schedule is a function of the step, and everything else is restored. */
#ifndef NABLA_EXAMPLES_RESUME_H
#define NABLA_EXAMPLES_RESUME_H

#include <nabla/nabla.h>
#include <stdio.h>

typedef struct {
    const char *prog; /* prefix of messages */
    const char *dir;
    const char *run; /* the flags a resumed run must share, e.g. "--task sort --steps 400" */
    /* The run's total steps: a checkpoint past it is refused (it would train nothing and
     * rewrite the outputs). 0 skips the check, for a caller that does not pass it yet. */
    int64_t steps;
    nb_module *model;
    nb_optimizer *opt;
} resume_target;

#define RESUME_MAX_LOGS 2

typedef struct {
    int64_t step;                       /* steps done */
    nb_rng data_rng;                    /* the data generator after those steps */
    int64_t log_bytes[RESUME_MAX_LOGS]; /* lengths of the logs (train.csv, ...) at that step */
} resume_state;

/* Saves a checkpoint of step st->step, then removes older ones. False with a message. */
bool resume_save(const resume_target *t, const resume_state *st);
/* After st->step steps: when every > 0 and st->step is a multiple of every or equals total,
 * flushes the nlogs logs, records their lengths in st and saves a checkpoint. False with a
 * message if that failed. */
bool resume_checkpoint_due(const resume_target *t, int64_t every, int64_t total, resume_state *st,
                           FILE *const *logs, int nlogs);
/* Restores the model, optimizer, model generator and *st from t->dir's last checkpoint. False
 * with a message, changing nothing in the model or optimizer, when there is none, it is
 * damaged, it belongs to another run (other flags) or its step is past t->steps. */
bool resume_load(const resume_target *t, resume_state *st);
/* Opens the training log: a new file with header, or (resuming) the old one cut back to
 * bytes and opened for appending. NULL with a message. Caller closes. */
FILE *resume_open_log(const char *prog, const char *path, const char *header, bool resuming,
                      int64_t bytes);
/* Test hook: when the environment variable NABLA_TEST_KILL_AFTER_STEP equals step, the
 * process kills itself with SIGKILL, as an interrupted run would die. */
void resume_kill_hook(int64_t step);

#endif
