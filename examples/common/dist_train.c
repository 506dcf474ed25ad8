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
