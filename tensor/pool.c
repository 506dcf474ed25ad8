/* The worker pool (pool.h): pthreads, C11 atomics, and a condition variable to sleep on.
 *
 * One job runs at a time, in one static record. Its claim word packs the job's generation
 * (high bits) with the counts of tasks claimed from the front and from the back (low bits):
 * the caller and most workers claim from the front, worker 1 from the back, so on two
 * threads each keeps the same pieces of a job from one job to the next (a decoded token's
 * products then find their weights in that core's cache). The caller fills in the job, publishes
 * it by storing a new generation with task 0 in the claim word, wakes sleeping workers if the
 * job is worth it, and claims tasks like everyone else. A worker claims a task by a
 * compare-and-swap from the claim word it read to the next task: that fails once anything has
 * changed, a claim or a new job, so a worker that read the fields of a job which has since
 * finished never runs any of it. The caller therefore waits only for the tasks claimed, not
 * for workers that are still looking (an earlier design counted them in and out of every job:
 * a generated token's handful of small jobs each paid that handshake's cache-line passes). */
#define _GNU_SOURCE
#include "nbt.h"
#include "pool.h"

#include <fcntl.h>
#include <stdalign.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The claim word: tasks claimed from the front (bits 0-19), from the back (bits 20-39), and
 * the job's generation (bits 40-63). */
#define BACK_SHIFT 20
#define GEN_SHIFT 40
#define COUNT_MASK ((UINT64_C(1) << BACK_SHIFT) - 1)
#define GEN_MASK ((UINT64_C(1) << (64 - GEN_SHIFT)) - 1)
#define FRONT_OF(c) ((int64_t)((c)&COUNT_MASK))
#define BACK_OF(c) ((int64_t)(((c) >> BACK_SHIFT) & COUNT_MASK))
/* Jobs of more tasks run on the calling thread: the front count, which the caller's last
 * failed claim takes one past the tasks, must not reach the back count's bits (no caller
 * comes near: jobs are a few pieces a thread). */
#define MAX_POOLED_TASKS (INT64_C(1) << (BACK_SHIFT - 1))

/* The fields are atomics only because a worker may read them while the caller fills them in
 * for the next job; it then fails its claim and drops what it read. */
static struct {
    alignas(64) atomic_uint_fast64_t claim; /* generation, back and front counts */
    atomic_int_fast64_t ntasks;
    atomic_int threads;
    _Atomic(nbt_task_fn) fn;
    _Atomic(void *) ctx;
    alignas(64) atomic_int_fast64_t done; /* tasks finished */
} job;
static uint64_t last_generation; /* under run_lock */

/* How long a waiting thread spins before it sleeps: longer than the serial gaps between two
 * parallel pieces of a training step (a wake-up from sleep costs tens of microseconds), short
 * enough that an idle pool soon stops taking CPU time from anyone else. */
#define SPIN_NS 200000

/* How often a spinning worker asks whether the machine has more runnable threads than CPUs
 * (oversubscribed()), the first time after CROWD_FIRST_NS: if so it sleeps at once, since its
 * spinning would then only take time from threads that have work (the caller between jobs,
 * or a neighbour's process). Gaps shorter than the first check (most gaps inside a training
 * step) never ask, so a passing process on a quiet machine seldom sends a worker to sleep. */
#define CROWD_FIRST_NS 10000
#define CROWD_CHECK_NS 25000

/* The caller, out of tasks, waits this long for other threads' tasks to finish (or
 * WAIT_TASKS times its own mean task time, if longer) before it sleeps. A task it waits on
 * longer than that is most likely held by a descheduled thread; sleeping frees this CPU, so
 * the OS can run that thread here. */
#define WAIT_MIN_NS 20000
#define WAIT_TASKS 3

/* Sleeping workers are woken for a job only once the caller has been at it this long with
 * tasks left: waking one costs the caller a system call and the worker tens of microseconds
 * to arrive, more than a short job takes (a generated token's matrix-vector products). */
#define WAKE_AFTER_NS 20000

/* Workers asleep while jobs are still planned for them (the machine not crowded when last
 * asked: nbt_threads_for) are woken at the start of a job at most this often, not for that
 * job but for those after it. Without this a worker that slept once (its spin ran out while it
 * was descheduled, or it saw one passing thread too many) stayed asleep through a whole
 * generation, whose jobs are all shorter than WAKE_AFTER_NS: decoding then ran on the caller
 * alone. A wake costs the caller one system call. */
#define ROUSE_EVERY_NS 1000000

/* At most every CROWD_POLL_NS, planning work (nbt_threads_for) asks whether the machine is
 * oversubscribed, counting this pool's sleeping workers as if they ran (nbt_pool_crowded());
 * while it is, work is planned for one thread (every caller of nbt_run_tasks sizes its job
 * with nbt_threads_for, so the job itself does not ask again). With a
 * neighbour keeping a core busy, a second thread gets a third of the machine in slices of
 * milliseconds, and a job waits for whichever piece a descheduled thread holds: the toy step at 2
 * threads took 1.24-1.34x its 1-thread time there in two of three rounds. Which thread runs a task
 * never changes results, so neither does this. */
#define CROWD_POLL_NS 5000000

static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_posted = PTHREAD_COND_INITIALIZER;
static pthread_cond_t work_done = PTHREAD_COND_INITIALIZER;

static atomic_int sleeping_workers;
static atomic_int_fast64_t worker_wakeups; /* sleeps ended by a job (a test hook reads it) */
static atomic_int caller_sleeping;
static atomic_int_fast64_t next_crowd_poll; /* nbt_now_ns() of crowded()'s next look */
static int64_t next_rouse; /* nbt_now_ns() after which a job may wake sleepers (run_lock) */
static atomic_bool crowded_at_poll, crowd_seen_last;
static int started; /* workers created (under run_lock) */
static _Thread_local bool in_task;

/* True when more threads are runnable on the machine than this process had CPUs when first
 * asked (the running count of /proc/loadavg, which includes the asking thread); false if that
 * cannot be read. */
static int loadavg_fd = -1, cpus_at_open = 1;
static pthread_once_t loadavg_once = PTHREAD_ONCE_INIT;

static atomic_bool crowd_check = true; /* NABLA_CROWD_CHECK=0, nbt_pool_set_crowd_check */

static void open_loadavg(void) {
    loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    cpus_at_open = nbt_cpu_count();
    const char *env = getenv("NABLA_CROWD_CHECK");
    if (env && strcmp(env, "0") == 0) atomic_store(&crowd_check, false);
}

/* The running count of /proc/loadavg (it includes the asking thread), or -1. */
static long running_threads(void) {
    pthread_once(&loadavg_once, open_loadavg);
    char buf[128];
    ssize_t n = loadavg_fd < 0 ? -1 : pread(loadavg_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    /* "0.52 0.58 0.59 3/123 4567": the fourth field's running count */
    const char *p = buf;
    for (int field = 0; field < 3; field++) {
        while (*p && *p != ' ') p++;
        while (*p == ' ') p++;
    }
    char *end;
    long running = strtol(p, &end, 10);
    return end != p && *end == '/' ? running : -1;
}

static bool oversubscribed(void) {
    return running_threads() > cpus_at_open;
}

/* A bounded spin: call spin_on once per check; it pauses and returns false once limit_ns
 * have passed since the first call, or (when crowd_check is set) when the machine is found
 * oversubscribed (CROWD_FIRST_NS, CROWD_CHECK_NS). */
typedef struct {
    int64_t calls, end, limit_ns, next_crowd_check;
    bool crowd_check;
} spin_timer;

static inline bool spin_on(spin_timer *t) {
    nbt_cpu_relax();
    if ((t->calls++ & 63) == 0) {
        int64_t n = nbt_now_ns();
        if (!t->end) {
            t->end = n + t->limit_ns;
            t->next_crowd_check = n + CROWD_FIRST_NS;
        } else if (n > t->end) {
            return false;
        }
        if (t->crowd_check && n >= t->next_crowd_check) {
            if (oversubscribed()) return false;
            t->next_crowd_check = n + CROWD_CHECK_NS;
        }
    }
    return true;
}

bool nbt_in_task(void) {
    return in_task;
}

int nbt_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Wakes every sleeping worker (they then look for the current generation's job). */
static void wake_workers(void) {
    pthread_mutex_lock(&sleep_lock);
    pthread_cond_broadcast(&work_posted);
    pthread_mutex_unlock(&sleep_lock);
}

/* Runs one claimed task and counts it done; the thread finishing the last task wakes the caller
 * if it sleeps. */
static void run_task(int64_t task, int worker, nbt_task_fn fn, void *ctx, int64_t ntasks) {
    fn(task, worker, ctx);
    if (atomic_fetch_add(&job.done, 1) + 1 == ntasks && atomic_load(&caller_sleeping)) {
        pthread_mutex_lock(&sleep_lock);
        pthread_cond_broadcast(&work_done);
        pthread_mutex_unlock(&sleep_lock);
    }
}

/* The caller's share (worker 0): tasks from the front until none are left. Once the job has
 * run WAKE_AFTER_NS with tasks left, it wakes sleeping workers. Returns how many tasks it ran.
 * A front claim at counts (f, b) gets task f if f + b < ntasks; one that fails leaves the
 * front one past, which fails every later claim too. */
static int64_t claim_as_caller(int64_t ntasks, nbt_task_fn fn, void *ctx) {
    const int64_t start = nbt_now_ns();
    bool woken = false;
    for (int64_t ran = 0;; ran++) {
        const uint64_t c = atomic_fetch_add(&job.claim, 1);
        if (FRONT_OF(c) + BACK_OF(c) >= ntasks) return ran;
        run_task(FRONT_OF(c), 0, fn, ctx, ntasks);
        if (!woken && atomic_load(&sleeping_workers) > 0 && nbt_now_ns() - start > WAKE_AFTER_NS) {
            const uint64_t now = atomic_load(&job.claim);
            if (FRONT_OF(now) + BACK_OF(now) < ntasks) {
                wake_workers();
                woken = true;
            }
        }
    }
}

/* A worker's share of the job whose claim word it read as c: one task at a time while that
 * job has tasks left. Worker 1 claims from the back (task ntasks - 1 - b at counts (f, b)),
 * the others from the front as the caller does: on two threads the caller then takes the
 * first pieces of a job and the worker the last ones, the same pieces job after job when
 * both keep pace, so a product split by output features reads the same part of its weights
 * on the same core token after token (and finds it in that core's cache). The fields read
 * before a claim belong to the job claimed from: the caller rewrites them only after every
 * task is done, and the claimed one was not. */
static void claim_as_worker(uint64_t c, int worker) {
    const uint64_t generation = c >> GEN_SHIFT;
    const bool from_back = worker == 1;
    for (;;) {
        const int64_t ntasks = atomic_load_explicit(&job.ntasks, memory_order_relaxed);
        const int threads = atomic_load_explicit(&job.threads, memory_order_relaxed);
        const nbt_task_fn fn = atomic_load_explicit(&job.fn, memory_order_relaxed);
        void *const ctx = atomic_load_explicit(&job.ctx, memory_order_relaxed);
        if (worker >= threads || FRONT_OF(c) + BACK_OF(c) >= ntasks) return;
        const int64_t task = from_back ? ntasks - 1 - BACK_OF(c) : FRONT_OF(c);
        if (atomic_compare_exchange_weak(&job.claim, &c,
                                         c + (from_back ? UINT64_C(1) << BACK_SHIFT : 1))) {
            run_task(task, worker, fn, ctx, ntasks);
            c = atomic_load(&job.claim);
        }
        if (c >> GEN_SHIFT != generation) return;
    }
}

/* Waits until the claim word's generation differs from seen, spinning first (asking whether
 * the machine is crowded unless nbt_pool_set_crowd_check has turned that off); returns the
 * claim word. */
static uint64_t wait_for_work(uint64_t seen) {
    spin_timer st = {.limit_ns = SPIN_NS, .crowd_check = atomic_load(&crowd_check)};
    for (uint64_t c; spin_on(&st);)
        if ((c = atomic_load(&job.claim)) >> GEN_SHIFT != seen) return c;
    pthread_mutex_lock(&sleep_lock);
    atomic_fetch_add(&sleeping_workers, 1);
    uint64_t c;
    while ((c = atomic_load(&job.claim)) >> GEN_SHIFT == seen)
        pthread_cond_wait(&work_posted, &sleep_lock);
    atomic_fetch_sub(&sleeping_workers, 1);
    atomic_fetch_add(&worker_wakeups, 1);
    pthread_mutex_unlock(&sleep_lock);
    return c;
}

static void *worker_main(void *arg) {
    const int worker = (int)(intptr_t)arg;
    in_task = true; /* everything a worker runs is inside a task */
    for (uint64_t seen = 0;;) {
        const uint64_t c = wait_for_work(seen);
        seen = c >> GEN_SHIFT;
        claim_as_worker(c, worker);
    }
    return NULL;
}

/* Makes sure workers 1 .. want-1 exist; returns how many threads can take part. */
static int ensure_workers(int want) {
    while (started + 1 < want) {
        pthread_t t;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0) break;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(started + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        started++;
    }
    return started + 1 < want ? started + 1 : want;
}

/* Sleeping workers count as running: they would, given a job, and with them asleep a machine
 * with a neighbour would look uncrowded at every other look. */
bool nbt_pool_crowded(void) {
    pthread_once(&loadavg_once, open_loadavg);
    if (!atomic_load(&crowd_check)) return false;
    int64_t n = nbt_now_ns();
    if (n >= atomic_load(&next_crowd_poll)) {
        atomic_store(&next_crowd_poll, n + CROWD_POLL_NS);
        long running = running_threads();
        bool crowd = running >= 0 && running + atomic_load(&sleeping_workers) > cpus_at_open;
        /* Two looks in a row: a kernel thread or a worker on its way into or out of sleep
         * (counted both as running and as sleeping) made 3-4% of single looks on a quiet
         * machine see a crowd; a neighbour is still there at the next look. */
        atomic_store(&crowded_at_poll, crowd && atomic_load(&crowd_seen_last));
        atomic_store(&crowd_seen_last, crowd);
    }
    return atomic_load(&crowded_at_poll);
}

#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
void nbt_pool_set_crowd_check(bool on) {
    pthread_once(&loadavg_once, open_loadavg);
    atomic_store(&crowd_check, on);
    atomic_store(&next_crowd_poll, 0);
    atomic_store(&crowded_at_poll, false);
    atomic_store(&crowd_seen_last, false);
}

int nbt_pool_sleeping_workers(void) {
    return atomic_load(&sleeping_workers);
}

int64_t nbt_pool_worker_wakeups(void) {
    return atomic_load(&worker_wakeups);
}
#endif

static void run_serially(int64_t ntasks, nbt_task_fn fn, void *ctx) {
    bool was = in_task;
    in_task = true;
    for (int64_t t = 0; t < ntasks; t++) fn(t, 0, ctx);
    in_task = was;
}

void nbt_run_tasks(int64_t ntasks, int threads, nbt_task_fn fn, void *ctx) {
    if (ntasks <= 0) return;
    if (threads > NBT_POOL_MAX_THREADS) threads = NBT_POOL_MAX_THREADS;
    if (threads > ntasks) threads = (int)ntasks;
    if (threads <= 1 || in_task || ntasks > MAX_POOLED_TASKS ||
        pthread_mutex_trylock(&run_lock) != 0) {
        run_serially(ntasks, fn, ctx);
        return;
    }
    threads = ensure_workers(threads);
    if (threads <= 1) {
        pthread_mutex_unlock(&run_lock);
        run_serially(ntasks, fn, ctx);
        return;
    }
    last_generation = (last_generation + 1) & GEN_MASK;
    if (last_generation == 0) last_generation = 1; /* workers start having seen 0 */
    atomic_store_explicit(&job.done, 0, memory_order_relaxed);
    atomic_store_explicit(&job.ntasks, ntasks, memory_order_relaxed);
    atomic_store_explicit(&job.threads, threads, memory_order_relaxed);
    atomic_store_explicit(&job.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&job.ctx, ctx, memory_order_relaxed);
    atomic_store(&job.claim, last_generation << GEN_SHIFT);
    /* Workers still spinning take tasks at once; sleeping ones are woken here at most every
     * ROUSE_EVERY_NS (for the jobs after this one), and in claim_as_caller if this job runs
     * long enough to be worth their arriving late to it. */
    in_task = true;
    int64_t started_ns = nbt_now_ns();
    if (atomic_load(&sleeping_workers) > 0 && started_ns >= next_rouse) {
        next_rouse = started_ns + ROUSE_EVERY_NS;
        wake_workers();
    }
    int64_t ran = claim_as_caller(ntasks, fn, ctx);
    in_task = false;
    /* Tasks other threads claimed may still be running. */
    int64_t per_task = ran > 0 ? (nbt_now_ns() - started_ns) / ran : 0;
    spin_timer st = {.limit_ns =
                         per_task * WAIT_TASKS > WAIT_MIN_NS ? per_task * WAIT_TASKS : WAIT_MIN_NS};
    while (atomic_load(&job.done) < ntasks && spin_on(&st)) continue;
    if (atomic_load(&job.done) < ntasks) {
        pthread_mutex_lock(&sleep_lock);
        atomic_store(&caller_sleeping, 1);
        while (atomic_load(&job.done) < ntasks) pthread_cond_wait(&work_done, &sleep_lock);
        atomic_store(&caller_sleeping, 0);
        pthread_mutex_unlock(&sleep_lock);
    }
    pthread_mutex_unlock(&run_lock);
}
