/* The MPI world, the small collectives, and checking and broadcasting a module's parameters.
 * Without MPI (or without mpirun) the world is one rank and every collective is the identity. */
#define _POSIX_C_SOURCE 200809L
#include "dist_impl.h"
#include "nn/dist_world.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double timeout_s = 300;
static bool finalized; /* nb_dist_finalize ended a running MPI world */
#ifdef NABLA_HAVE_MPI
static bool mpi_started; /* by nb_dist_init, so nb_dist_finalize ends it */
static bool mpi_active;
bool nbd_mpi_active(void) {
    return mpi_active;
}
#endif

bool nb_dist_built_with_mpi(void) {
#ifdef NABLA_HAVE_MPI
    return true;
#else
    return false;
#endif
}

/* mpirun (Open MPI, or any PMI/PMIx launcher) tells its processes so in the environment; a
 * program started on its own stays a world of one without paying MPI's start-up. */
static bool launched_by_mpirun(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

bool nb_dist_init(int *argc, char ***argv) {
    const char *env = getenv("NABLA_DIST_TIMEOUT");
    if (env) {
        char *end;
        double s = strtod(env, &end);
        if (*end || !(s > 0) || s > 1e9)
            return nbt_error("dist", "NABLA_DIST_TIMEOUT='%s' is not a number of seconds > 0",
                             env) != NULL;
        timeout_s = s;
    }
#ifdef NABLA_HAVE_MPI
    if (mpi_active) return true;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        if (!launched_by_mpirun()) return true;
        int provided, rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return nbd_mpi_error("MPI_Init_thread", rc);
        mpi_started = true;
    }
    /* Errors come back as codes (turned into nabla errors), never as aborts inside MPI. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    nbn_set_dist_world(rank, size);
    mpi_active = true;
#else
    (void)argc, (void)argv;
#endif
    return true;
}

/* The rank and size stay: the process is still that rank of the job mpirun started, and code
 * after the last collective ("print on rank 0 only") must still tell the ranks apart. */
void nb_dist_finalize(void) {
#ifdef NABLA_HAVE_MPI
    if (mpi_started) MPI_Finalize();
    finalized |= mpi_active;
    mpi_started = mpi_active = false;
#endif
}

bool nbd_world_reachable(const char *op) {
    if (!finalized || nb_dist_world_size() == 1) return true;
    nbt_error(op, "called after nb_dist_finalize: rank %d can no longer reach the other %d ranks",
              nb_dist_rank(), nb_dist_world_size() - 1);
    return false;
}

bool nb_dist_set_timeout(double seconds) {
    if (!(seconds > 0) || seconds > 1e9)
        return nbt_error("dist", "timeout must be a number of seconds > 0, got %g", seconds) !=
               NULL;
    timeout_s = seconds;
    return true;
}

_Noreturn void nb_dist_abort(int code, const char *msg) {
    fprintf(stderr, "rank %d: %s\n", nb_dist_rank(), msg ? msg : "aborted");
    fflush(stderr);
#ifdef NABLA_HAVE_MPI
    if (mpi_active) {
        /* When every rank fails at once (a model mismatch, a missing checkpoint), simultaneous
         * MPI_Abort calls sometimes crashed Open MPI 4.1's mpirun (exit 139): the other ranks
         * give rank 0 a second to end the job first, then end it themselves. */
        if (nb_dist_rank() > 0) nanosleep(&(struct timespec){1, 0}, NULL);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
#endif
    exit(code);
}

#ifdef NABLA_HAVE_MPI
bool nbd_mpi_error(const char *what, int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    nbt_error("dist", "rank %d: %s failed: %s", nb_dist_rank(), what, text);
    return false;
}

MPI_Datatype nbd_mpi_type(nb_dtype dt) {
    return dt == NB_F32 ? MPI_FLOAT : dt == NB_F64 ? MPI_DOUBLE : MPI_BYTE;
}

/* Polls instead of blocking so a peer that died or hangs costs at most the timeout. MPI moves a
 * large message in fragments only while it is being polled, so the first 20 ms spin (yielding
 * now and then, for a rank sharing the core); after that a turn sleeps 20 us. */
bool nbd_wait(int n, MPI_Request *reqs, const char *what) {
    double start = MPI_Wtime(), deadline = start + timeout_s;
    for (long turn = 0;; turn++) {
        int done = 0, rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return nbd_mpi_error(what, rc);
        if (done) return true;
        if (turn % 64 != 63) continue;
        double t = MPI_Wtime();
        if (t > deadline) {
            nbt_error("dist",
                      "rank %d: %s timed out after %g s waiting for the other ranks (a rank "
                      "died, failed or hangs)",
                      nb_dist_rank(), what, timeout_s);
            return false;
        }
        if (t - start < 0.02)
            sched_yield();
        else
            nanosleep(&(struct timespec){0, 20000}, NULL);
    }
}
#endif

bool nb_dist_all_ok(bool ok) {
    if (!nbd_world_reachable("nb_dist_all_ok")) return false;
#ifdef NABLA_HAVE_MPI
    if (mpi_active) {
        int mine = ok ? 1 : 0, all = 0;
        MPI_Request req;
        int rc = MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return nbd_mpi_error("agreeing on success", rc);
        if (!nbd_wait(1, &req, "agreeing on success")) return false;
        return all == 1;
    }
#endif
    return ok;
}

bool nb_dist_sum_doubles(int n, double *v) {
    if (n < 0) return nbt_error("nb_dist_sum_doubles", "n is %d, expected >= 0", n) != NULL;
    if (n > 0 && !v) return nbt_error("nb_dist_sum_doubles", "v is NULL (n = %d)", n) != NULL;
    if (!nbd_world_reachable("nb_dist_sum_doubles")) return false;
#ifdef NABLA_HAVE_MPI
    if (mpi_active && nb_dist_world_size() > 1 && n > 0) {
        /* Gathered, then added in rank order on every rank: MPI's own sum may add in any order,
         * which would make ranks disagree in the last bit. */
        double local[256],
            *all = (int64_t)n * nb_dist_world_size() <= 256
                       ? local
                       : malloc(sizeof *all * (size_t)n * (size_t)nb_dist_world_size());
        if (!all) return nbt_error("dist", "out of memory gathering %d doubles", n);
        MPI_Request req;
        int rc = MPI_Iallgather(v, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD, &req);
        bool ok = rc == MPI_SUCCESS ? nbd_wait(1, &req, "summing over ranks")
                                    : nbd_mpi_error("summing over ranks", rc);
        if (ok)
            for (int i = 0; i < n; i++) {
                double s = 0;
                for (int r = 0; r < nb_dist_world_size(); r++)
                    s += all[(size_t)r * (size_t)n + (size_t)i];
                v[i] = s;
            }
        if (all != local) free(all);
        return ok;
    }
#endif
    return true;
}

/* FNV-1a, to compare what each rank has without sending all of it. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t layout_hash(const nb_tensor *t) {
    uint64_t h = fnv1a(0xcbf29ce484222325ULL, &t->dtype, sizeof t->dtype);
    h = fnv1a(h, &t->ndim, sizeof t->ndim);
    return fnv1a(h, t->shape, sizeof t->shape[0] * (size_t)t->ndim);
}

#ifdef NABLA_HAVE_MPI
/* The first index where this rank's hashes differ from rank 0's, agreed on by every rank
 * together with the lowest rank that differs there: *index = -1 when all agree. */
static bool first_difference(int n, const uint64_t *hashes, int *index, int *rank) {
    uint64_t count = (uint64_t)n;
    MPI_Request req;
    uint64_t root_count = count;
    int rc = MPI_Ibcast(&root_count, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS || !nbd_wait(1, &req, "comparing models"))
        return rc == MPI_SUCCESS ? false : nbd_mpi_error("comparing models", rc);
    uint64_t *root = malloc(sizeof *root * (size_t)(root_count + 1));
    if (!root) return nbt_error("dist", "out of memory comparing models") != NULL;
    if (nb_dist_rank() == 0) memcpy(root, hashes, sizeof *root * (size_t)n);
    rc = MPI_Ibcast(root, (int)root_count, MPI_UINT64_T, 0, MPI_COMM_WORLD, &req);
    bool ok = rc == MPI_SUCCESS ? nbd_wait(1, &req, "comparing models")
                                : nbd_mpi_error("comparing models", rc);
    int mine = INT_MAX;
    if (ok) {
        uint64_t common = count < root_count ? count : root_count;
        for (uint64_t i = 0; i < common && mine == INT_MAX; i++)
            if (hashes[i] != root[i]) mine = (int)i;
        if (mine == INT_MAX && count != root_count) mine = (int)common;
    }
    free(root);
    if (!ok) return false;
    struct {
        int index, rank;
    } in = {mine, nb_dist_rank()}, out;
    rc = MPI_Iallreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return nbd_mpi_error("comparing models", rc);
    if (!nbd_wait(1, &req, "comparing models")) return false;
    *index = out.index == INT_MAX ? -1 : out.index;
    *rank = out.rank;
    return true;
}

/* Sends `text` (at most len bytes) from rank `from` to every rank. */
static bool share_text(int from, char *text, int len) {
    MPI_Request req;
    int rc = MPI_Ibcast(text, len, MPI_CHAR, from, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return nbd_mpi_error("comparing models", rc);
    return nbd_wait(1, &req, "comparing models");
}
#endif

static void describe_param(const nb_param *p, int count, int i, char *buf, size_t len) {
    if (i >= count) {
        snprintf(buf, len, "no tensor #%d (%d in all)", i, count);
        return;
    }
    char shape[128];
    nb_shape_str(p[i].tensor, shape, sizeof shape);
    snprintf(buf, len, "'%s' %s %s", p[i].name, nb_dtype_name(p[i].tensor->dtype), shape);
}

/* m's parameters then its buffers (what a checkpoint holds), malloc'd; NULL with an error. */
static nb_param *module_state(const nb_module *m, int *count) {
    int np = nb_module_param_count(m), nbuf = nb_module_buffer_count(m);
    nb_param *all = np >= 0 && nbuf >= 0 ? malloc(sizeof *all * (size_t)(np + nbuf + 1)) : NULL;
    if (!all) return nbt_error("dist", "out of memory listing a model of %d tensors", np + nbuf);
    if (nb_module_named_params(m, all, np) != np ||
        nb_module_named_buffers(m, all + np, nbuf) != nbuf) {
        free(all);
        return NULL;
    }
    *count = np + nbuf;
    return all;
}

bool nb_dist_check_module(const nb_module *m) {
    if (!m) return nbt_error("dist", "check_module: NULL module") != NULL;
    int n = 0;
    nb_param *params = module_state(m, &n);
    uint64_t *hashes = params ? malloc(sizeof *hashes * (size_t)(n + 1)) : NULL;
    bool ok = params && hashes;
    if (params && !hashes) nbt_error("dist", "out of memory checking a model of %d tensors", n);
    for (int i = 0; ok && i < n; i++)
        hashes[i] = fnv1a(layout_hash(params[i].tensor), params[i].name, strlen(params[i].name));
#ifdef NABLA_HAVE_MPI
    ok = nb_dist_all_ok(ok);
    int index = -1, rank = 0;
    if (ok && mpi_active && nb_dist_world_size() > 1)
        ok = first_difference(n, hashes, &index, &rank);
    if (ok && index >= 0) {
        char theirs[512] = "", root[512] = "";
        describe_param(params, n, index, theirs, sizeof theirs);
        describe_param(params, n, index, root, sizeof root);
        ok = share_text(rank, theirs, sizeof theirs) && share_text(0, root, sizeof root);
        if (ok) {
            nbt_error("dist",
                      "rank %d's model differs from rank 0's at tensor #%d: rank 0 has %s, "
                      "rank %d has %s",
                      rank, index, root, rank, theirs);
            ok = false;
        }
    }
#endif
    free(params);
    free(hashes);
    return ok;
}

bool nb_dist_broadcast(int n, nb_tensor *const *tensors) {
    const char *op = "nb_dist_broadcast";
    if (n < 0) return nbt_error(op, "n is %d, expected >= 0", n) != NULL;
    if (n > 0 && !tensors) return nbt_error(op, "tensors is NULL (n = %d)", n) != NULL;
    for (int i = 0; i < n; i++) {
        if (!tensors[i]) return nbt_error(op, "tensor %d is NULL", i) != NULL;
        if (!nb_is_contiguous(tensors[i]))
            return nbt_error(op, "tensor %d (shape %s) is not contiguous", i,
                             nbt_shape(tensors[i])) != NULL;
    }
#ifdef NABLA_HAVE_MPI
    if (!mpi_active || nb_dist_world_size() == 1) return nb_dist_all_ok(true);
    uint64_t *hashes = malloc(sizeof *hashes * (size_t)(n + 1));
    if (!nb_dist_all_ok(hashes != NULL)) {
        free(hashes);
        return nbt_error("dist", "out of memory broadcasting %d tensors", n) != NULL;
    }
    for (int i = 0; i < n; i++) hashes[i] = layout_hash(tensors[i]);
    int index = -1, rank = 0;
    bool ok = first_difference(n, hashes, &index, &rank);
    free(hashes);
    if (!ok) return false;
    if (index >= 0)
        return nbt_error("dist",
                         "broadcast: tensor #%d has another dtype or shape on rank %d "
                         "than on rank 0",
                         index, rank) != NULL;
    for (int i = 0; i < n; i++) {
        /* MPI counts are ints: large tensors go in pieces of at most 1 GiB. */
        char *p = nb_data(tensors[i]);
        size_t left = (size_t)nb_numel(tensors[i]) * nb_dtype_size(tensors[i]->dtype);
        while (left > 0) {
            int piece = left > (1u << 30) ? (1 << 30) : (int)left;
            MPI_Request req;
            int rc = MPI_Ibcast(p, piece, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
            if (rc != MPI_SUCCESS) return nbd_mpi_error("broadcasting tensors", rc);
            if (!nbd_wait(1, &req, "broadcasting tensors")) return false;
            p += piece;
            left -= (size_t)piece;
        }
    }
#endif
    return true;
}

bool nb_dist_broadcast_module(nb_module *m) {
    if (!nb_dist_check_module(m)) return false;
    int n = 0;
    nb_param *params = module_state(m, &n);
    nb_tensor **ts = params ? malloc(sizeof *ts * (size_t)(n + 1)) : NULL;
    bool ok = params && ts;
    for (int i = 0; ok && i < n; i++) ts[i] = params[i].tensor;
    if (!nb_dist_all_ok(ok)) {
        free(params);
        free(ts);
        return ok ? false : nbt_error("dist", "out of memory broadcasting a model") != NULL;
    }
    ok = nb_dist_broadcast(n, ts);
    free(params);
    free(ts);
    return ok;
}

bool nb_dist_state_agrees(const nb_module *m, uint64_t *hash) {
    if (!m || !hash)
        return nbt_error("dist", "state_agrees: NULL %s", m ? "hash" : "module") != NULL;
    int n = 0;
    nb_param *state = module_state(m, &n);
    if (!nb_dist_all_ok(state != NULL)) {
        free(state);
        return false;
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = state[i].tensor;
        h = fnv1a(h, state[i].name, strlen(state[i].name));
        if (nb_is_contiguous(t))
            h = fnv1a(h, nb_data(t), (size_t)nb_numel(t) * nb_dtype_size(t->dtype));
    }
    free(state);
    *hash = h;
    bool same = true;
#ifdef NABLA_HAVE_MPI
    if (mpi_active &&
        nb_dist_world_size() > 1) { /* min of h and of ~h: the lowest and highest hash */
        uint64_t in[2] = {h, ~h}, out[2];
        MPI_Request req;
        int rc = MPI_Iallreduce(in, out, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return nbd_mpi_error("comparing parameters", rc);
        if (!nbd_wait(1, &req, "comparing parameters")) return false;
        same = out[0] == ~out[1];
    }
#endif
    if (!nb_dist_all_ok(same))
        return nbt_error("dist", "the ranks' parameters differ (rank %d's hash %016llx)",
                         nb_dist_rank(), (unsigned long long)h) != NULL;
    return true;
}
