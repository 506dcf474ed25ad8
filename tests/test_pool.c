/* The worker pool (tensor/pool.h): every task runs exactly once, worker ids are private while
 * a task runs, nested calls stay on their thread, two callers at once both finish, and
 * thousands of back-to-back jobs neither lose a wake-up nor hang; a crowded machine gets work
 * planned for one thread. */
#include "harness.h"
#include "tensor/nbt.h"
#include "tensor/pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TASKS 20000

typedef struct {
    atomic_int runs[MAX_TASKS];
    atomic_int busy[NBT_POOL_MAX_THREADS]; /* a task is running on this worker */
    atomic_int clashes;                    /* a worker id in use by two tasks at once */
    atomic_int bad_worker;                 /* a worker id outside [0, threads) */
    int threads;
} tally;

static void count_task(int64_t task, int worker, void *ctx) {
    tally *t = ctx;
    if (worker < 0 || worker >= t->threads) {
        atomic_fetch_add(&t->bad_worker, 1);
        return;
    }
    if (atomic_exchange(&t->busy[worker], 1)) atomic_fetch_add(&t->clashes, 1);
    atomic_fetch_add(&t->runs[task], 1);
    for (volatile int spin = 0; spin < (int)(task % 7) * 50; spin++) continue; /* uneven tasks */
    atomic_store(&t->busy[worker], 0);
}

/* Runs ntasks on threads and checks the tally; returns false on any fault. */
static bool run_and_check(tally *t, int64_t ntasks, int threads) {
    memset(t, 0, sizeof *t);
    t->threads = threads;
    nbt_run_tasks(ntasks, threads, count_task, t);
    bool ok = atomic_load(&t->clashes) == 0 && atomic_load(&t->bad_worker) == 0;
    for (int64_t i = 0; i < ntasks; i++) ok = ok && atomic_load(&t->runs[i]) == 1;
    return ok;
}

static void test_every_task_once(void) {
    tally *t = malloc(sizeof *t);
    const int64_t sizes[] = {1, 2, 3, 17, 1000, MAX_TASKS};
    const int threads[] = {1, 2, 3, 8};
    for (int s = 0; s < 6; s++)
        for (int h = 0; h < 4; h++) CU_ASSERT_TRUE(run_and_check(t, sizes[s], threads[h]));
    nbt_run_tasks(0, 2, count_task, t); /* nothing to do: returns at once */
    free(t);
}

static void test_back_to_back_jobs(void) {
    tally *t = malloc(sizeof *t);
    int failures = 0;
    for (int round = 0; round < 5000; round++) failures += !run_and_check(t, 1 + round % 5, 2);
    CU_ASSERT_EQUAL(failures, 0);
    free(t);
}

/* A task that runs a nested job: it must run on the same thread, in order, as worker 0. */
typedef struct {
    atomic_int order_faults, outside;
} nested_ctx;

static _Thread_local int64_t nested_last;

static void inner_task(int64_t task, int worker, void *ctx) {
    nested_ctx *n = ctx;
    if (worker != 0 || task != nested_last + 1 || !nbt_in_task())
        atomic_fetch_add(&n->order_faults, 1);
    nested_last = task;
}

static void outer_task(int64_t task, int worker, void *ctx) {
    (void)task, (void)worker;
    nested_last = -1;
    nbt_run_tasks(10, 4, inner_task, ctx);
    if (nested_last != 9) atomic_fetch_add(&((nested_ctx *)ctx)->order_faults, 1);
}

static void test_nested_calls_stay_on_their_thread(void) {
    nested_ctx n = {0};
    CU_ASSERT_FALSE(nbt_in_task());
    nbt_run_tasks(8, 2, outer_task, &n);
    CU_ASSERT_EQUAL(atomic_load(&n.order_faults), 0);
    CU_ASSERT_FALSE(nbt_in_task());
}

/* A task that takes about a millisecond and notes whether a worker other than the caller ran
 * it. */
static void slow_task(int64_t task, int worker, void *ctx) {
    (void)task;
    int64_t end = nbt_now_ns() + 1000000;
    while (nbt_now_ns() < end) continue;
    if (worker != 0) atomic_fetch_add((atomic_int *)ctx, 1);
}

/* Idle workers sleep after a while; a long job must wake them (they are woken only once the
 * caller has worked on it for a moment). Tried up to 100 times, as a loaded machine may not
 * run the woken worker within one job. */
static void test_sleeping_workers_join_long_jobs(void) {
    atomic_int helped = 0;
    for (int round = 0; round < 100 && atomic_load(&helped) == 0; round++) {
        struct timespec pause = {0, 2000000}; /* longer than the workers' spin */
        nanosleep(&pause, NULL);
        nbt_run_tasks(8, 2, slow_task, &helped);
    }
    CU_ASSERT_TRUE(atomic_load(&helped) > 0);
}

/* A task of about a microsecond, counting those a worker ran. */
static void quick_task(int64_t task, int worker, void *ctx) {
    (void)task;
    for (volatile int spin = 0; spin < 300; spin++) continue;
    if (worker != 0) atomic_fetch_add((atomic_int *)ctx, 1);
}

/* Polls cond for up to a second; returns its last value. */
static bool within_a_second(bool (*cond)(int64_t), int64_t arg) {
    const int64_t until = nbt_now_ns() + 1000000000;
    struct timespec ms = {0, 1000000};
    while (!cond(arg) && nbt_now_ns() < until) nanosleep(&ms, NULL);
    return cond(arg);
}
static bool a_worker_sleeps(int64_t unused) {
    (void)unused;
    return nbt_pool_sleeping_workers() > 0;
}
static bool woken_since(int64_t wakeups) {
    return nbt_pool_worker_wakeups() > wakeups;
}

/* A job shorter than the caller's wait before it wakes sleepers still wakes them, once a
 * millisecond, for the jobs after it: otherwise a worker that slept once stayed asleep through
 * a whole generation, whose jobs are all that short, and the caller decoded alone. One job of
 * two one-microsecond tasks after the worker has gone to sleep must wake it. */
static void test_short_job_wakes_sleepers(void) {
    atomic_int helped = 0;
    nbt_run_tasks(2, 2, quick_task, &helped); /* the worker exists */
    CU_ASSERT_TRUE_FATAL(within_a_second(a_worker_sleeps, 0));
    struct timespec pause = {0, 2000000}; /* past the last wake's millisecond */
    nanosleep(&pause, NULL);
    const int64_t before = nbt_pool_worker_wakeups();
    nbt_run_tasks(2, 2, quick_task, &helped);
    CU_ASSERT_TRUE(within_a_second(woken_since, before));
}

static void *caller_thread(void *arg) {
    tally *t = arg;
    intptr_t failures = 0;
    for (int round = 0; round < 300; round++) failures += !run_and_check(t, 50, 2);
    return (void *)failures;
}

static void test_two_callers_at_once(void) {
    tally *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    pthread_t ta, tb;
    void *fa, *fb;
    CU_ASSERT_EQUAL(pthread_create(&ta, NULL, caller_thread, a), 0);
    CU_ASSERT_EQUAL(pthread_create(&tb, NULL, caller_thread, b), 0);
    pthread_join(ta, &fa);
    pthread_join(tb, &fb);
    CU_ASSERT_EQUAL((intptr_t)fa, 0);
    CU_ASSERT_EQUAL((intptr_t)fb, 0);
    free(a), free(b);
}

/* nbt_set_serial keeps this thread's work on it, returns the previous setting, and leaves
 * other threads' budget alone. */
static void *budget_elsewhere(void *arg) {
    (void)arg;
    return (void *)(intptr_t)nbt_threads_for(100, 1);
}

static void test_serial_here(void) {
    const int before = nb_get_num_threads();
    nb_set_num_threads(2);
    CU_ASSERT_EQUAL(nbt_threads_for(100, 1), 2);
    CU_ASSERT_FALSE(nbt_set_serial(true));
    CU_ASSERT_EQUAL(nbt_threads_for(100, 1), 1);
    pthread_t other;
    void *other_budget;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&other, NULL, budget_elsewhere, NULL), 0);
    pthread_join(other, &other_budget);
    CU_ASSERT_EQUAL((intptr_t)other_budget, 2);
    CU_ASSERT_TRUE(nbt_set_serial(false));
    CU_ASSERT_EQUAL(nbt_threads_for(100, 1), 2);
    nb_set_num_threads(before);
}

/* With more spinning processes than CPUs the pool sees a crowd within a few of its looks and
 * plans work for one thread; with the look off it plans for two again. (Processes, not
 * threads: valgrind runs one thread of a process at a time.) */
static void test_crowded_machine_plans_one_thread(void) {
    const int before = nb_get_num_threads();
    nb_set_num_threads(2);
    nbt_pool_set_crowd_check(true);
    int spinners = nbt_cpu_count() + 1;
    if (spinners > 64) spinners = 64;
    pid_t pid[64];
    int started = 0;
    for (; started < spinners; started++) {
        pid[started] = fork();
        if (pid[started] < 0) break;
        if (pid[started] == 0)
            for (;;) continue; /* killed by the parent */
    }
    CU_ASSERT_EQUAL(started, spinners);
    bool one = false;
    const struct timespec ms = {0, 1000000};
    for (int i = 0; i < 3000 && !one; i++) {
        one = nbt_threads_for(100, 1) == 1;
        if (!one) nanosleep(&ms, NULL);
    }
    CU_ASSERT_TRUE(one);
    CU_ASSERT_TRUE(nbt_pool_crowded());
    nbt_pool_set_crowd_check(false);
    CU_ASSERT_FALSE(nbt_pool_crowded());
    CU_ASSERT_EQUAL(nbt_threads_for(100, 1), 2);
    for (int i = 0; i < started; i++) {
        kill(pid[i], SIGKILL);
        waitpid(pid[i], NULL, 0);
    }
    nb_set_num_threads(before);
}

static void test_cpu_count(void) {
    CU_ASSERT(nbt_cpu_count() >= 1);
}

/* The default thread budget: NABLA_NUM_THREADS first, then OMP_NUM_THREADS, then the CPUs;
 * values that are not a positive number are skipped; an explicit count wins. */
static void test_thread_budget_defaults(void) {
    unsetenv("NABLA_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    nb_set_num_threads(0);
    CU_ASSERT_EQUAL(nb_get_num_threads(), nbt_cpu_count());
    setenv("OMP_NUM_THREADS", "5", 1);
    nb_set_num_threads(0);
    CU_ASSERT_EQUAL(nb_get_num_threads(), 5);
    setenv("NABLA_NUM_THREADS", "3", 1);
    nb_set_num_threads(0);
    CU_ASSERT_EQUAL(nb_get_num_threads(), 3);
    setenv("NABLA_NUM_THREADS", "lots", 1);
    nb_set_num_threads(0);
    CU_ASSERT_EQUAL(nb_get_num_threads(), 5);
    setenv("OMP_NUM_THREADS", "-2", 1);
    nb_set_num_threads(0);
    CU_ASSERT_EQUAL(nb_get_num_threads(), nbt_cpu_count());
    nb_set_num_threads(7);
    CU_ASSERT_EQUAL(nb_get_num_threads(), 7);
    nb_set_num_threads(1000);
    CU_ASSERT_EQUAL(nb_get_num_threads(), NBT_POOL_MAX_THREADS);
    unsetenv("NABLA_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    nb_set_num_threads(0);
}

int main(void) {
    const nbtest_case cases[] = {
        {"every task runs once, worker ids private and in range", test_every_task_once},
        {"5000 small jobs back to back", test_back_to_back_jobs},
        {"a nested call runs on its thread, in order", test_nested_calls_stay_on_their_thread},
        {"two callers at once both finish", test_two_callers_at_once},
        {"sleeping workers join a long job", test_sleeping_workers_join_long_jobs},
        {"a short job wakes sleeping workers for the next", test_short_job_wakes_sleepers},
        {"serial on this thread only", test_serial_here},
        {"a crowded machine gets one thread", test_crowded_machine_plans_one_thread},
        {"cpu count", test_cpu_count},
        {"thread budget from the environment, or set", test_thread_budget_defaults},
    };
    return nbtest_run("pool", cases, sizeof cases / sizeof cases[0]);
}
