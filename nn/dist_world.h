/* Internal to nabla (nn/dist_world.c, nn/dist/): the process's place in the data-parallel
 * world, which nb_dist_init sets and nb_dist_rank / nb_dist_world_size read. */
#ifndef NABLA_NN_DIST_WORLD_H
#define NABLA_NN_DIST_WORLD_H

#include "nabla/dist.h"

/* Records this process as rank of size processes (kept after nb_dist_finalize). */
void nbn_set_dist_world(int rank, int size);

#endif
