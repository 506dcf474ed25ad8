/* nb_dist_train: nb_train's averaging over micro-batches and MPI ranks (nabla/dist.h), from
 * the collectives and gradient reducer of this library. */
#include "nabla/dist.h"

#include <stdlib.h>

typedef struct {
    nb_grad_reducer *reducer; /* NULL alone with one micro-batch: the step is the plain one */
} dist_state;

static void *start(nb_module *model, int n, nb_tensor *const *params, int accum) {
    dist_state *s = calloc(1, sizeof *s);
    if (!s) return nb_error("nb_dist_train", "out of memory");
    if ((nb_dist_world_size() > 1 && !nb_dist_broadcast_module(model)) ||
        (nb_dist_world_size() * accum > 1 && !(s->reducer = nb_grad_reducer_new(n, params, 0)))) {
        free(s);
        return NULL;
    }
    return s;
}

static bool micro_done(void *state) {
    dist_state *s = state;
    return !s->reducer || nb_grad_reducer_add(s->reducer);
}

static bool step_done(void *state) {
    dist_state *s = state;
    return !s->reducer || nb_grad_reducer_finish(s->reducer);
}

static bool sum(void *state, int n, double *v) {
    (void)state;
    return nb_dist_sum_doubles(n, v);
}

static bool all_ok(void *state, bool ok) {
    (void)state;
    return nb_dist_all_ok(ok);
}

static void end(void *state) {
    dist_state *s = state;
    if (s) nb_grad_reducer_free(s->reducer);
    free(s);
}

const nb_train_dist *nb_dist_train(void) {
    static const nb_train_dist hooks = {start, micro_done, step_done, sum, all_ok, end};
    return &hooks;
}
