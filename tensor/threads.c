/* The thread budget kernels may use, and the one way they split work: nabla's own pool
 * (pool.h). Kernels split work only above a size threshold and give each task whole outputs
 * (rows, tiles, batch entries), never parts of one sum, so results are bitwise identical for
 * any thread count. */
#include "nabla/parallel.h"
#include "nbt.h"
#include "pool.h"

#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>

static atomic_int thread_budget; /* 0 until first asked for or set */

/* n clamped to what the pool runs: 1 to NBT_POOL_MAX_THREADS. */
static int pool_sized(long n) {
    return n < 1 ? 1 : n < NBT_POOL_MAX_THREADS ? (int)n : NBT_POOL_MAX_THREADS;
}

/* NABLA_NUM_THREADS, else OMP_NUM_THREADS (what users of OpenMP-based libraries already
 * set), else every CPU this process may run on; read each time the default is asked for. */
static long default_threads(void) {
    const char *names[] = {"NABLA_NUM_THREADS", "OMP_NUM_THREADS"};
    for (int i = 0; i < 2; i++) {
        const char *s = getenv(names[i]);
        if (!s || !*s) continue;
        char *end;
        long n = strtol(s, &end, 10);
        if (n > 0 && (*end == '\0' || *end == ',')) return n;
    }
    return nbt_cpu_count();
}

void nb_set_num_threads(int n) {
    atomic_store(&thread_budget, pool_sized(n < 1 ? default_threads() : n));
}

int nb_get_num_threads(void) {
    int n = atomic_load(&thread_budget);
    if (n == 0) {
        int expected = 0;
        atomic_compare_exchange_strong(&thread_budget, &expected, pool_sized(default_threads()));
        n = atomic_load(&thread_budget);
    }
    return n;
}

static _Thread_local bool serial_here; /* nbt_set_serial: this thread's work stays on it */

bool nbt_set_serial(bool serial) {
    bool was = serial_here;
    serial_here = serial;
    return was;
}

int nbt_threads_for(int64_t work, int64_t min_work_per_thread) {
    int max = nbt_in_task() || serial_here ? 1 : nb_get_num_threads();
    int64_t by_work = min_work_per_thread > 0 ? work / min_work_per_thread : max;
    int n = by_work < 1 ? 1 : by_work < max ? (int)by_work : max;
    /* On a crowded machine a second thread costs more than it brings (pool.h); planning for
     * one keeps the work in the pieces a 1-thread run uses. Asked only when the answer would
     * be more than one: tiny work (most of a small step's calls) never reads the clock. */
    return n > 1 && nbt_pool_crowded() ? 1 : n;
}

typedef struct {
    int64_t n, slice;
    nbt_range_fn fn;
    void *ctx;
} ranges_job;

/* a / b rounded up, for a >= 0 and b > 0, without forming a + b - 1 (which overflows for a
 * near INT64_MAX: nb_parallel_for takes any n). */
static int64_t ceil_div(int64_t a, int64_t b) {
    return a / b + (a % b != 0);
}

static void run_range(int64_t task, int worker, void *arg) {
    (void)worker;
    const ranges_job *r = arg;
    /* task < ceil(n / slice), so begin < n; the last slice may end past n, and begin + slice
     * past INT64_MAX, so the end is compared as what is left. */
    int64_t begin = task * r->slice, end = r->n - begin > r->slice ? begin + r->slice : r->n;
    if (begin < end) r->fn(begin, end, r->ctx);
}

void nbt_parallel_ranges(int64_t n, int64_t grain, nbt_range_fn fn, void *ctx) {
    int nt = nbt_threads_for(n, grain);
    if (nt <= 1) {
        if (n > 0) fn(0, n, ctx);
        return;
    }
    /* Up to NBT_PIECES_PER_THREAD slices a thread, none under a grain, claimed in turn by
     * whichever thread is free. Slices are rounded to 16 elements so that no two threads
     * share a cache line of floats; indices coarser than that (a grain under 16: rows,
     * chunks) are not rounded, or a few of them would all land in the first slice. */
    int64_t unit = grain >= 16 ? 16 : 1, by_grain = grain > 0 ? n / grain : n;
    int64_t pieces = (int64_t)nt * NBT_PIECES_PER_THREAD;
    if (pieces > by_grain) pieces = by_grain > nt ? by_grain : nt;
    /* pieces >= nt >= 2, so ceil(n / pieces) <= INT64_MAX / 2 + 1 leaves room to round up. */
    int64_t slice = ceil_div(ceil_div(n, pieces), unit) * unit;
    ranges_job r = {n, slice, fn, ctx};
    nbt_run_tasks(ceil_div(n, slice), nt, run_range, &r);
}

/* nb_parallel_for's fn and ctx, passed through nbt_parallel_ranges' argument order. */
typedef struct {
    nb_range_fn fn;
    void *ctx;
} user_loop;

static void run_user_range(int64_t begin, int64_t end, void *arg) {
    const user_loop *loop = arg;
    loop->fn(loop->ctx, begin, end);
}

bool nb_parallel_for(int64_t n, int64_t grain, nb_range_fn fn, void *ctx) {
    if (!fn || n < 0 || grain < 1) {
        nb_error("nb_parallel_for",
                 "needs n >= 0, grain >= 1 and a function, got n %lld, grain %lld%s", (long long)n,
                 (long long)grain, fn ? "" : " and a NULL function");
        return false;
    }
    user_loop loop = {fn, ctx};
    nbt_parallel_ranges(n, grain, run_user_range, &loop);
    return true;
}

/* A run of rounds of phases of two halves (nbt_parallel_phase_rounds). The caller owns half 0
 * of every phase; half 1 goes to the first pool worker that joins before the caller has
 * finished its first half (helper JOINED), or else to the caller too (helper SHUT_OUT), decided
 * once per run with one compare-and-swap. Then each thread only stores its own count of
 * finished halves and reads the other's, each count on a cache line of its own: one line
 * passes between the cores at a phase boundary. (Claiming every half with a compare-and-swap on
 * the other's line, so either thread could take either half, passed three lines per boundary:
 * 1,900 ticks between phases where the halves take 14,000-18,000.) Between rounds the caller
 * alone runs `again` and posts the next round on a third line, which the helper waits on: a
 * generated token is a round, and a new pool job per token cost about 2,000 ticks of its
 * 46,000 in the job's start and end handshakes. */
enum { HELPER_AWAITED, HELPER_JOINED, HELPER_SHUT_OUT };
typedef struct {
    nbt_phase_fn fn;
    nbt_round_fn again; /* NULL: one round */
    void *ctx;
    int phases;
    atomic_int helper;
    atomic_bool caller_started;
    struct {
        alignas(64) atomic_int finished; /* phases whose half h is done, over all rounds */
    } half[2];
    alignas(64) atomic_int posted; /* rounds the caller has let start; ROUNDS_OVER at the end */
} phases_job;

#define ROUNDS_OVER (-1)

/* How long a thread spins on the other half before yielding its CPU: a half is a few
 * microseconds, so a longer wait means the other thread is not running, and yielding lets the
 * OS run it here. */
#define PHASE_SPIN 4096

/* Waits until counter reaches at least `until` (or, with stop_at_over, is ROUNDS_OVER); returns
 * its value. */
static int wait_count(atomic_int *counter, int until, bool stop_at_over) {
    for (int spins = 0;; spins++) {
        const int n = atomic_load_explicit(counter, memory_order_acquire);
        if (n >= until || (stop_at_over && n == ROUNDS_OVER)) return n;
        if (spins % PHASE_SPIN == PHASE_SPIN - 1)
            sched_yield();
        else
            nbt_cpu_relax();
    }
}

static void run_half(phases_job *j, int round, int p, int h) {
    j->fn(p, h, h + 1, j->ctx);
    atomic_store_explicit(&j->half[h].finished, round * j->phases + p + 1, memory_order_release);
}

/* The caller's task: half 0 of every phase, each once half 1 of the phase before is done; both
 * halves from the first phase on if no worker has joined by the end of its first half. After
 * each round, `again` says whether another follows (told whether a helper took part). */
static void run_caller(phases_job *j) {
    bool alone = false;
    for (int r = 0;; r++) {
        for (int p = 0; p < j->phases; p++) {
            if (p > 0 && !alone) wait_count(&j->half[1].finished, r * j->phases + p, false);
            run_half(j, r, p, 0);
            if (r == 0 && p == 0) {
                int awaited = HELPER_AWAITED;
                alone = atomic_compare_exchange_strong(&j->helper, &awaited, HELPER_SHUT_OUT);
            }
            if (alone) run_half(j, r, p, 1);
        }
        if (!alone) wait_count(&j->half[1].finished, (r + 1) * j->phases, false);
        if (!j->again || !j->again(!alone, j->ctx)) break;
        atomic_store_explicit(&j->posted, r + 2, memory_order_release);
    }
    atomic_store_explicit(&j->posted, ROUNDS_OVER, memory_order_release);
}

/* A worker's task: half 1 of every phase, each once half 0 of the phase before is done (and
 * each round once the caller has posted it), if it joins in time. */
static void run_helper(phases_job *j) {
    int awaited = HELPER_AWAITED;
    if (!atomic_compare_exchange_strong(&j->helper, &awaited, HELPER_JOINED)) return;
    for (int r = 0;; r++) {
        if (r > 0 && wait_count(&j->posted, r + 1, true) == ROUNDS_OVER) return;
        for (int p = 0; p < j->phases; p++) {
            if (p > 0) wait_count(&j->half[0].finished, r * j->phases + p, false);
            run_half(j, r, p, 1);
        }
        if (!j->again) return;
    }
}

/* The two pool tasks: the calling thread (worker 0) is the caller whichever task it claims
 * first, and finds nothing left to do if it claims the other one too. */
static void run_phases(int64_t task, int worker, void *arg) {
    (void)task;
    phases_job *j = arg;
    if (worker != 0)
        run_helper(j);
    else if (!atomic_exchange(&j->caller_started, true))
        run_caller(j);
}

void nbt_parallel_phase_rounds(int phases, nbt_phase_fn fn, nbt_round_fn again, void *ctx) {
    if (nbt_threads_for(2, 1) < 2) {
        do
            for (int p = 0; p < phases; p++) fn(p, 0, 2, ctx);
        while (again && again(false, ctx));
        return;
    }
    phases_job j = {.fn = fn, .again = again, .ctx = ctx, .phases = phases};
    atomic_init(&j.helper, HELPER_AWAITED);
    atomic_init(&j.caller_started, false);
    atomic_init(&j.posted, 1);
    for (int h = 0; h < 2; h++) atomic_init(&j.half[h].finished, 0);
    nbt_run_tasks(2, 2, run_phases, &j);
    /* In a one-phase, one-round run the worker's half waits on nothing, so the worker can claim
     * both tasks before the caller claims one: the caller then runs its half now. */
    if (!atomic_exchange(&j.caller_started, true)) run_caller(&j);
}
