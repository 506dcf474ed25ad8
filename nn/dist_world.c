/* Which process of a data-parallel job this is. It lives in libnabla, not in libnabla_dist
 * (nn/dist/), so that any code (a training loop printing on rank 0 only) can ask without
 * linking MPI: a program that never calls nb_dist_init is rank 0 of a world of one. */
#include "dist_world.h"

static int world_rank = 0, world_size = 1;

int nb_dist_rank(void) {
    return world_rank;
}

int nb_dist_world_size(void) {
    return world_size;
}

void nbn_set_dist_world(int rank, int size) {
    world_rank = rank;
    world_size = size;
}
