/* nabla dist: data-parallel training across processes with MPI (Open MPI).
 *
 * Every rank holds the whole model, draws its own micro-batch, and after backward the ranks
 * average their gradients, so every rank takes the same optimizer step and keeps
 * bitwise-identical parameters. Without MPI (nabla built with -Dmpi=disabled, or a program
 * started without mpirun) the world is one process and every call below behaves as the
 * one-rank case: the same program runs unchanged.
 *
 * Determinism: gradients are summed in rank order, each element starting from zero
 * (0 + g_0 + g_1 + ...), then scaled by 1 / (ranks * micro-batches). A gradient reducer that
 * accumulates K micro-batches in one process does exactly the same arithmetic, so N ranks
 * with one micro-batch each give bit for bit the result of one process accumulating N
 * micro-batches of the same size, in the same order.
 *
 * Faults: MPI errors are returned as nabla errors (MPI_ERRORS_RETURN), never aborts inside
 * MPI; every collective waits at most the timeout (nb_dist_set_timeout) for the other ranks,
 * so a rank that died or hangs makes the others fail with a message instead of hanging.
 * Programs stop the whole job with nb_dist_abort.
 *
 * Linking: these functions are in libnabla_dist (`pkg-config --cflags --libs nabla-dist`), the
 * only part of nabla that loads Open MPI; nb_dist_rank and nb_dist_world_size are in libnabla
 * itself (0 and 1 in a program that never calls nb_dist_init). */
#ifndef NABLA_DIST_H
#define NABLA_DIST_H

#include "nabla/nn.h"
#include "nabla/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when nabla was built with MPI support. */
bool nb_dist_built_with_mpi(void);
/* Starts MPI (once; later calls do nothing) and reads NABLA_DIST_TIMEOUT (seconds). argc and
 * argv may be NULL. Without MPI support this only sets up a world of one. Returns false with
 * an error if MPI fails to start. */
bool nb_dist_init(int *argc, char ***argv);
/* Shuts MPI down after the last collective; a no-op without MPI or before nb_dist_init. The
 * process keeps its rank and world size; a collective among several ranks then fails. */
void nb_dist_finalize(void);
/* This process's rank in [0, world size) and the number of ranks (0 and 1 before init, kept by
 * finalize); in libnabla, so any code may ask without linking libnabla_dist. */
int nb_dist_rank(void);
int nb_dist_world_size(void);
/* How long a collective waits for the other ranks before failing (default 300 s, or the
 * NABLA_DIST_TIMEOUT environment variable). False with an error unless seconds > 0. */
bool nb_dist_set_timeout(double seconds);
/* Prints "rank R: msg" to stderr and ends every rank of the job with exit code `code`
 * (MPI_Abort under MPI, exit otherwise). */
_Noreturn void nb_dist_abort(int code, const char *msg);

/* ---- Collectives (every rank must call them in the same order) ------------------------- */
/* True on every rank exactly when ok is true on every rank. On a communication failure
 * returns false with an error. */
bool nb_dist_all_ok(bool ok);
/* Replaces v[0..n) on every rank by the sum over ranks, added in rank order starting from 0.
 * False with an error for n < 0, a NULL v with n > 0, or a failed exchange. */
bool nb_dist_sum_doubles(int n, double *v);
/* Copies rank 0's values of the n tensors into every rank's (contiguous float, int or bool
 * tensors of the same dtype and shape on every rank; checked first: a mismatch is an error on
 * every rank, naming the tensor's index). */
bool nb_dist_broadcast(int n, nb_tensor *const *tensors);

/* ---- Modules --------------------------------------------------------------------------- */
/* Checks that every rank built the same model: the names, dtypes and shapes of m's
 * parameters and buffers (what a checkpoint holds) are hashed and compared; on a difference
 * every rank returns false with an error naming the first differing tensor and both ranks'
 * versions of it. */
bool nb_dist_check_module(const nb_module *m);
/* nb_dist_check_module, then copies rank 0's parameters and buffers into every rank's model
 * (at start, and after rank 0 loaded a checkpoint). */
bool nb_dist_broadcast_module(nb_module *m);

/* A hash (FNV-1a, 64 bits) of the bytes of m's parameters and buffers, into *hash, and whether
 * every rank has the same one (false with an error naming the ranks' hashes otherwise). Cheap
 * enough for the end of a run: it proves the ranks stayed bitwise identical. */
bool nb_dist_state_agrees(const nb_module *m, uint64_t *hash);

/* ---- Gradient averaging -------------------------------------------------------------- */
/* Averages the gradients of a fixed list of parameters over micro-batches and ranks, through
 * preallocated buckets of about bucket_bytes (one exchange per bucket, not per tensor; <= 0
 * for 4 MiB). Parameters are bucketed in reverse order, the order backward finishes them.
 * Owns its buffers; no allocation after creation. */
typedef struct nb_grad_reducer nb_grad_reducer;
/* params: distinct float leaves of one dtype that require grad (copied array; they must
 * outlive the reducer). Gives every parameter a zeroed gradient if it has none yet. Caller frees
 * with nb_grad_reducer_free; NULL with an error on bad input. */
nb_grad_reducer *nb_grad_reducer_new(int n, nb_tensor *const *params, double bucket_bytes);
void nb_grad_reducer_free(nb_grad_reducer *r);
/* Adds the parameters' current gradients into the reducer's running sum (elementwise, in call
 * order, starting from zero) and zeroes the gradients: call it after each micro-batch's
 * backward. */
bool nb_grad_reducer_add(nb_grad_reducer *r);
/* Sums the running sums over ranks in rank order, writes sum / (ranks * micro-batches) into
 * every parameter's gradient on every rank, and resets the running sum. With one rank and one
 * micro-batch the gradients come back unchanged. False with an error (gradients unchanged on
 * this rank) if no micro-batch was added or the exchange fails or times out. */
bool nb_grad_reducer_finish(nb_grad_reducer *r);
/* Number of buckets, and the bytes exchanged per rank per finish (for benchmarks). */
int nb_grad_reducer_bucket_count(const nb_grad_reducer *r);
int64_t nb_grad_reducer_bytes(const nb_grad_reducer *r);

/* ---- The training loop ------------------------------------------------------------------ */
/* Data parallelism for nb_train (nabla/train.h): set opts.dist to this. It broadcasts rank 0's
 * model, averages the gradients through an nb_grad_reducer (so N ranks equal one process with
 * accum N, bit for bit) and sums the step's loss and metrics over ranks. Static; not freed. */
const nb_train_dist *nb_dist_train(void);

#ifdef __cplusplus
}
#endif
#endif
