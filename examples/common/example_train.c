#define _POSIX_C_SOURCE 200809L
#include "example_train.h"

#include <signal.h>
#include <stdlib.h>

/* The kill hook (example_train.h). */
static bool kill_hook(void *user, int64_t steps_done) {
    (void)user;
    static int64_t kill_after = -2; /* -2: not read yet, -1: no hook */
    if (kill_after == -2) {
        const char *v = getenv("NABLA_TEST_KILL_AFTER_STEP");
        kill_after = v ? strtoll(v, NULL, 10) : -1;
    }
    if (steps_done == kill_after) raise(SIGKILL);
    return true;
}

nb_train_opts example_train_opts(const char *prog, const trainer_flags *f, bool quiet) {
    nb_train_opts t = nb_train_defaults(f->steps);
    t.name = prog;
    t.accum = f->accum > 1 ? f->accum : 1;
    t.dist = nb_dist_train();
    t.clip_norm = 1.0;
    t.out_dir = f->out;
    t.checkpoint_every = f->checkpoint_every;
    t.resume = f->resume;
    t.after_step = kill_hook;
    t.quiet = quiet;
    return t;
}
