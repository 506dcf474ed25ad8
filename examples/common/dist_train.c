#include "dist_train.h"

#include <stdio.h>
#include <stdlib.h>

void dist_train_start(const char *prog, int *argc, char ***argv) {
    if (!nb_dist_init(argc, argv)) {
        fprintf(stderr, "%s: %s\n", prog, nb_last_error());
        exit(1);
    }
    /* Rank 0 speaks for the job; the others keep stderr for their errors. */
    if (nb_dist_rank() > 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "%s: rank %d: cannot silence stdout\n", prog, nb_dist_rank());
        exit(1);
    }
}

bool dist_train_init(dist_train *dt, const char *prog, nb_module *model, const param_list *pl,
                     int accum) {
    *dt = (dist_train){.prog = prog,
                       .rank = nb_dist_rank(),
                       .ranks = nb_dist_world_size(),
                       .accum = accum > 1 ? accum : 1};
    if (dt->ranks > 1 && !nb_dist_broadcast_module(model)) {
        fprintf(stderr, "%s: rank %d: %s\n", prog, dt->rank, nb_last_error());
        return false;
    }
    if (dt->ranks * dt->accum > 1 && !(dt->reducer = nb_grad_reducer_new(pl->tensors, pl->n, 0))) {
        fprintf(stderr, "%s: %s\n", prog, nb_last_error());
        return false;
    }
    return true;
}

void dist_train_free(dist_train *dt) {
    nb_grad_reducer_free(dt->reducer);
    dt->reducer = NULL;
}

int dist_train_micro_batches(const dist_train *dt) {
    return dt->ranks * dt->accum;
}
int dist_train_micro_index(const dist_train *dt, int k) {
    return dt->rank * dt->accum + k;
}
bool dist_train_is_main(const dist_train *dt) {
    return dt->rank == 0;
}

bool dist_train_backward(dist_train *dt, nb_optimizer *opt, nb_tensor *loss, int k, int64_t step) {
    if (k == 0) nb_optimizer_zero_grad(opt);
    if (!loss || !nb_backward(loss, NULL) || (dt->reducer && !nb_grad_reducer_add(dt->reducer))) {
        fprintf(stderr, "%s: step %lld: %s\n", dt->prog, (long long)step + 1, nb_last_error());
        return false;
    }
    return true;
}

bool dist_train_update(dist_train *dt, nb_optimizer *opt, const param_list *pl, double *stats,
                       int n, int64_t step, int64_t total, double lr, double min_lr) {
    if ((dt->reducer && !nb_grad_reducer_finish(dt->reducer)) || !nb_dist_sum_doubles(stats, n)) {
        fprintf(stderr, "%s: step %lld: %s\n", dt->prog, (long long)step + 1, nb_last_error());
        return false;
    }
    /* The step's loss for the health check: the mean of the micro-batches' losses. */
    nb_scope_begin();
    nb_tensor *loss = nb_scalar(NB_F64, stats[0] / dist_train_micro_batches(dt));
    bool healthy = training_healthy(dt->prog, step + 1, loss, pl);
    nb_scope_end();
    return healthy && train_apply(dt->prog, opt, pl, step, total, lr, min_lr);
}

bool dist_train_finish(const dist_train *dt, const nb_module *model) {
    uint64_t hash;
    if (!nb_dist_state_agrees(model, &hash)) {
        fprintf(stderr, "%s: comparing the ranks' parameters: %s\n", dt->prog, nb_last_error());
        return false;
    }
    printf("parameter hash %016llx (the same on all %d rank(s))\n", (unsigned long long)hash,
           dt->ranks);
    return true;
}

int dist_train_fail(const dist_train *dt, int code) {
    if (dt->ranks > 1) nb_dist_abort(code, "stopping every rank after the error above");
    return code;
}
