/* A two-rank job in which the last rank fails, for tests/dist_fault_check.sh:
 *   dist_fault die     the last rank exits at step 3 without a word (a crash)
 *   dist_fault hang    the last rank stops answering at step 3 (a hang); the timeout is 2 s
 *   dist_fault error   the last rank hits an error at step 3 and stops the job
 * Every other rank keeps averaging gradients and must be stopped, not hang. */
#define _POSIX_C_SOURCE 200809L
#include <nabla/nabla.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (!nb_dist_init(&argc, &argv) || argc != 2) return 2;
    const char *mode = argv[1];
    nb_dist_set_timeout(2);
    bool last = nb_dist_rank() == nb_dist_world_size() - 1;
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_linear *fc = nb_linear_new(model, "fc", 8, 8, true);
    nb_tensor *params[2] = {fc->weight, fc->bias};
    nb_grad_reducer *r = nb_grad_reducer_new(2, params, 0);
    for (int step = 0; step < 1000; step++) {
        if (last && step == 3) {
            if (strcmp(mode, "die") == 0) _exit(3);
            if (strcmp(mode, "hang") == 0) sleep(60);
            if (strcmp(mode, "error") == 0) nb_dist_abort(4, "step 3: gradient is not finite");
        }
        if (!nb_grad_reducer_add(r) || !nb_grad_reducer_finish(r)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "step %d: %s", step, nb_last_error());
            nb_dist_abort(5, msg);
        }
        usleep(1000);
    }
    fprintf(stderr, "rank %d: finished 1000 steps: the failure was not noticed\n", nb_dist_rank());
    return 0;
}
