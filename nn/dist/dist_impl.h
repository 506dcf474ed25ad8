/* Internal to nn/dist*.c: the MPI world as nabla sees it, and the bounded wait every
 * collective goes through. */
#ifndef NABLA_DIST_IMPL_H
#define NABLA_DIST_IMPL_H

#include "nabla/dist.h"
#include "tensor/nbt.h"

/* False, with an error naming op, when this process is one of several ranks and
 * nb_dist_finalize has run: the others can no longer be reached (a world of one always can). */
bool nbd_world_reachable(const char *op);

#ifdef NABLA_HAVE_MPI
#include <mpi.h>

/* True when MPI was started (the program runs under mpirun with more than nothing to say). */
bool nbd_mpi_active(void);
/* Waits for n requests until the timeout; false with an error naming `what` on an MPI error or
 * when the other ranks did not answer in time. */
bool nbd_wait(int n, MPI_Request *reqs, const char *what);
/* Records an MPI error code as a nabla error naming `what`. Returns false. */
bool nbd_mpi_error(const char *what, int rc);
/* The MPI datatype of a float dtype (MPI_BYTE for the others, counted in bytes). */
MPI_Datatype nbd_mpi_type(nb_dtype dt);
#endif

#endif
