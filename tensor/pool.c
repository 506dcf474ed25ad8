/* The worker pool (pool.h): pthreads, C11 atomics, and a condition variable to sleep on.
 *
 * One job runs at a time. The caller publishes it (job pointer, then a new generation),
 * wakes sleeping workers, and claims tasks like everyone else. A worker that sees the new
 * generation announces itself in `active`, then checks that the job is still published
 * before touching it; the caller withdraws the job and waits for `active` to drain before
 * returning, so no worker ever reads a job that has gone out of scope. All the atomics are
 * sequentially consistent: that is what makes the announce-then-check handshakes sound, and
 * their cost is small next to a task. */
#define _GNU_SOURCE
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int64_t ntasks;
    int threads;
    nbt_task_fn fn;
    void *ctx;
    atomic_int_fast64_t next; /* the next task to claim */
    atomic_int_fast64_t done; /* tasks finished */
    uint64_t generation;
} job_t;

/* How long a waiting thread spins before it sleeps: longer than the serial gaps between two
 * parallel pieces of a training step (a wake-up from sleep costs tens of microseconds), short
 * enough that an idle pool soon stops taking CPU time from anyone else. */
#define SPIN_NS 200000

static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_posted = PTHREAD_COND_INITIALIZER;
static pthread_cond_t work_done = PTHREAD_COND_INITIALIZER;

static _Atomic(job_t *) current_job;
static atomic_uint_fast64_t generation;
static atomic_int sleeping_workers;
static atomic_int caller_sleeping;
static atomic_int active; /* workers inside the published job */
static int started;       /* workers created (under run_lock) */
static _Thread_local bool in_task;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A bounded spin: call spin_on once per check; it pauses and returns false once SPIN_NS have
 * passed since the first call. */
typedef struct {
    int64_t calls, end;
} spin_timer;

static inline bool spin_on(spin_timer *t) {
    cpu_relax();
    if ((t->calls++ & 63) == 0) {
        int64_t n = now_ns();
        if (!t->end)
            t->end = n + SPIN_NS;
        else if (n > t->end)
            return false;
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

/* Claims and runs tasks of j until none are left; wakes the caller after the last one. */
static void claim_tasks(job_t *j, int worker) {
    for (;;) {
        int64_t task = atomic_fetch_add(&j->next, 1);
        if (task >= j->ntasks) return;
        j->fn(task, worker, j->ctx);
        if (atomic_fetch_add(&j->done, 1) + 1 == j->ntasks && atomic_load(&caller_sleeping)) {
            pthread_mutex_lock(&sleep_lock);
            pthread_cond_broadcast(&work_done);
            pthread_mutex_unlock(&sleep_lock);
        }
    }
}

/* Waits until the generation differs from seen, spinning first; returns the new one. */
static uint64_t wait_for_work(uint64_t seen) {
    spin_timer st = {0};
    for (uint64_t g; spin_on(&st);)
        if ((g = atomic_load(&generation)) != seen) return g;
    pthread_mutex_lock(&sleep_lock);
    atomic_fetch_add(&sleeping_workers, 1);
    uint64_t g;
    while ((g = atomic_load(&generation)) == seen) pthread_cond_wait(&work_posted, &sleep_lock);
    atomic_fetch_sub(&sleeping_workers, 1);
    pthread_mutex_unlock(&sleep_lock);
    return g;
}

static void *worker_main(void *arg) {
    const int worker = (int)(intptr_t)arg;
    in_task = true; /* everything a worker runs is inside a task */
    uint64_t seen = 0;
    for (;;) {
        seen = wait_for_work(seen);
        atomic_fetch_add(&active, 1);
        job_t *j = atomic_load(&current_job);
        if (j && j->generation == seen && worker < j->threads) claim_tasks(j, worker);
        atomic_fetch_sub(&active, 1);
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
    if (threads <= 1 || in_task || pthread_mutex_trylock(&run_lock) != 0) {
        run_serially(ntasks, fn, ctx);
        return;
    }
    threads = ensure_workers(threads);
    if (threads <= 1) {
        pthread_mutex_unlock(&run_lock);
        run_serially(ntasks, fn, ctx);
        return;
    }
    job_t j = {.ntasks = ntasks, .threads = threads, .fn = fn, .ctx = ctx};
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);
    j.generation = atomic_load(&generation) + 1;
    atomic_store(&current_job, &j);
    atomic_store(&generation, j.generation);
    if (atomic_load(&sleeping_workers) > 0) {
        pthread_mutex_lock(&sleep_lock);
        pthread_cond_broadcast(&work_posted);
        pthread_mutex_unlock(&sleep_lock);
    }
    in_task = true;
    claim_tasks(&j, 0);
    in_task = false;
    /* Tasks other threads claimed may still be running. */
    spin_timer st = {0};
    while (atomic_load(&j.done) < ntasks && spin_on(&st)) continue;
    if (atomic_load(&j.done) < ntasks) {
        pthread_mutex_lock(&sleep_lock);
        atomic_store(&caller_sleeping, 1);
        while (atomic_load(&j.done) < ntasks) pthread_cond_wait(&work_done, &sleep_lock);
        atomic_store(&caller_sleeping, 0);
        pthread_mutex_unlock(&sleep_lock);
    }
    /* Withdraw the job, then wait out workers that may still be looking at it. */
    atomic_store(&current_job, NULL);
    spin_timer idle = {0};
    while (atomic_load(&active) > 0)
        if (!spin_on(&idle)) sched_yield();
    pthread_mutex_unlock(&run_lock);
}
