/* The thread budget kernels may use, and the one way they split work: nabla's own pool
 * (pool.h). Kernels split work only above a size threshold and give each task whole outputs
 * (rows, tiles, batch entries), never parts of one sum, so results are bitwise identical for
 * any thread count. */
#include "nabla/parallel.h"
#include "nbt.h"
#include "pool.h"

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

#ifdef NABLA_TESTS                     /* a test hook: in the test build only (tests/meson.build) */
static _Thread_local bool serial_here; /* nbt_set_serial: this thread's work stays on it */

bool nbt_set_serial(bool serial) {
    bool was = serial_here;
    serial_here = serial;
    return was;
}

static bool kept_serial(void) {
    return serial_here;
}
#else
static bool kept_serial(void) {
    return false;
}
#endif

int nbt_threads_for(int64_t work, int64_t min_work_per_thread) {
    int max = nbt_in_task() || kept_serial() ? 1 : nb_get_num_threads();
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
