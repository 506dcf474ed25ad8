/* The worker pool (tensor/pool.h): every task runs exactly once, worker ids are private while
 * a task runs, nested calls stay on their thread, two callers at once both finish, and
 * thousands of back-to-back jobs neither lose a wake-up nor hang; a crowded machine gets work
 * planned for one thread. */
#include "harness.h"
#include "tensor/nbt.h"
#include "tensor/pool.h"

#include <pthread.h>
#include <sched.h>
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

/* nbt_parallel_phase_rounds (one round) calls each half of each phase exactly once with [half, half
 * + 1) (or both in one [0, 2) call when one thread is allowed), whatever the budget, back to back
 * and nested; and a phase's halves start only after both halves of the phase before have ended. */
#define MAX_PHASES 6
typedef struct {
    atomic_int calls[MAX_PHASES][2], ended[MAX_PHASES], bad;
    pthread_t thread[MAX_PHASES][2]; /* which thread ran each half */
} phases_tally;

static void count_phase(int phase, int begin, int end, void *ctx) {
    phases_tally *t = ctx;
    if (phase < 0 || phase >= MAX_PHASES || begin < 0 || end > 2 || begin >= end) {
        atomic_fetch_add(&t->bad, 1);
        return;
    }
    if (phase > 0 && atomic_load(&t->ended[phase - 1]) != 2) atomic_fetch_add(&t->bad, 1);
    for (int h = begin; h < end; h++) {
        atomic_fetch_add(&t->calls[phase][h], 1);
        t->thread[phase][h] = pthread_self();
    }
    /* halves of unequal length, the longer one alternating, so a thread that did not wait for
     * the other half would start the next phase while that half still runs */
    for (volatile int spin = 0; spin < ((phase + begin) % 2 ? 4000 : 40); spin++) continue;
    /* the caller's first half gives up its CPU a few times: a worker joins only before that
     * half ends, and under valgrind, which runs one thread at a time, it otherwise never does */
    for (int i = 0; phase == 0 && begin == 0 && i < 3; i++) sched_yield();
    atomic_fetch_add(&t->ended[phase], end - begin);
}

/* True when every half ran once, in phase order; *split counts phases whose halves ran on two
 * threads. */
static bool phases_once(int phases, int *split) {
    phases_tally t = {0};
    nbt_parallel_phase_rounds(phases, count_phase, NULL, &t);
    bool ok = atomic_load(&t.bad) == 0;
    for (int p = 0; p < MAX_PHASES; p++)
        for (int h = 0; h < 2; h++) ok = ok && atomic_load(&t.calls[p][h]) == (p < phases);
    for (int p = 0; ok && p < phases; p++) *split += !pthread_equal(t.thread[p][0], t.thread[p][1]);
    return ok;
}

static void nested_phases(int64_t task, int worker, void *ctx) {
    (void)task, (void)worker;
    int split = 0;
    if (!phases_once(3, &split) || split) atomic_fetch_add((atomic_int *)ctx, 1);
}

/* Runs once(i, &split) for i = 0, 1, ... at a budget of one thread, then of two: `runs` times,
 * and with two threads until some run was split across them (on a busy machine a descheduled
 * worker can miss many short runs), for at most 10 s. Every run must pass, and runs are split
 * with two threads only. */
static void at_one_and_two_threads(int runs, bool (*once)(int i, int *split)) {
    const int before = nb_get_num_threads();
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        int failures = 0, split = 0;
        const time_t give_up = time(NULL) + 10;
        for (int i = 0; i < runs || (threads == 2 && !split && time(NULL) < give_up); i++) {
            nbt_pool_wake();
            failures += !once(i, &split);
        }
        CU_ASSERT_EQUAL(failures, 0);
        if (threads == 1) CU_ASSERT_EQUAL(split, 0);
        if (threads == 2) CU_ASSERT_TRUE(split > 0); /* the two-thread path was taken */
    }
    nb_set_num_threads(before);
}

static bool phases_run(int i, int *split) {
    return phases_once(1 + i % MAX_PHASES, split);
}

static void test_parallel_phases(void) {
    at_one_and_two_threads(3000, phases_run);
    const int before = nb_get_num_threads();
    nb_set_num_threads(2);
    atomic_int nested = 0;
    nbt_run_tasks(4, 2, nested_phases, &nested);
    CU_ASSERT_EQUAL(atomic_load(&nested), 0);
    nb_set_num_threads(before);
}

/* nbt_parallel_phase_rounds: every half of every phase of every round once, in order: a half
 * starts only after both halves of the phase before it (the last phase of the round before,
 * for a round's first) have ended, and after the calling thread's `again` for the round before
 * has returned; `again` runs once per round on the calling thread, after the round's last
 * halves, and says helped exactly when the round's halves ran on two threads, the worker's half
 * always on the same one. */
#define MAX_ROUNDS 5
typedef struct {
    int phases, rounds, rounds_done;
    atomic_int calls[MAX_ROUNDS][MAX_PHASES][2], bad, clock;
    int started[MAX_ROUNDS][MAX_PHASES][2], ended[MAX_ROUNDS][MAX_PHASES][2], again_at[MAX_ROUNDS];
    pthread_t thread[MAX_ROUNDS][MAX_PHASES][2], caller;
    bool helped[MAX_ROUNDS];
} rounds_tally;

static void round_phase(int phase, int begin, int end, void *ctx) {
    rounds_tally *t = ctx;
    const int r = t->rounds_done;
    if (r >= MAX_ROUNDS || phase < 0 || phase >= t->phases || begin < 0 || end > 2 ||
        begin >= end) {
        atomic_fetch_add(&t->bad, 1);
        return;
    }
    for (int h = begin; h < end; h++) {
        atomic_fetch_add(&t->calls[r][phase][h], 1);
        t->started[r][phase][h] = atomic_fetch_add(&t->clock, 1);
        t->thread[r][phase][h] = pthread_self();
    }
    for (volatile int spin = 0; spin < ((phase + begin + r) % 2 ? 4000 : 40); spin++) continue;
    for (int i = 0; r == 0 && phase == 0 && begin == 0 && i < 3; i++) sched_yield();
    for (int h = begin; h < end; h++) t->ended[r][phase][h] = atomic_fetch_add(&t->clock, 1);
}

static bool next_round(bool helped, void *ctx) {
    rounds_tally *t = ctx;
    const int r = t->rounds_done;
    if (r >= MAX_ROUNDS || !pthread_equal(pthread_self(), t->caller)) {
        atomic_fetch_add(&t->bad, 1);
        return false;
    }
    t->helped[r] = helped;
    t->again_at[r] = atomic_fetch_add(&t->clock, 1);
    t->rounds_done = r + 1; /* the next round's halves start after this store, or not at all */
    return t->rounds_done < t->rounds;
}

/* True when the run of `rounds` rounds of `phases` phases went as the contract says; *split
 * counts rounds that ran on two threads. */
static bool rounds_once(int phases, int rounds, int *split) {
    rounds_tally *t = calloc(1, sizeof *t);
    t->phases = phases, t->rounds = rounds, t->caller = pthread_self();
    nbt_parallel_phase_rounds(phases, round_phase, next_round, t);
    bool ok = atomic_load(&t->bad) == 0 && t->rounds_done == rounds;
    int last_end = -1; /* when the halves before ended */
    for (int r = 0; ok && r < rounds; r++) {
        for (int p = 0; p < phases; p++) {
            for (int h = 0; h < 2; h++)
                ok = ok && atomic_load(&t->calls[r][p][h]) == 1 && t->started[r][p][h] > last_end;
            last_end =
                t->ended[r][p][0] > t->ended[r][p][1] ? t->ended[r][p][0] : t->ended[r][p][1];
            const bool two = !pthread_equal(t->thread[r][p][0], t->thread[r][p][1]);
            ok = ok && two == t->helped[r] && pthread_equal(t->thread[r][p][0], t->caller) &&
                 pthread_equal(t->thread[r][p][1], t->thread[0][0][1]);
        }
        ok = ok && t->again_at[r] > last_end;
        last_end = t->again_at[r];
        *split += t->helped[r];
    }
    free(t);
    return ok;
}

static bool rounds_run(int i, int *split) {
    return rounds_once(1 + i % MAX_PHASES, 1 + i % MAX_ROUNDS, split);
}

static void test_phase_rounds(void) {
    at_one_and_two_threads(2000, rounds_run);
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
        {"parallel phases: each half once, in phase order, any budget, nested",
         test_parallel_phases},
        {"rounds of phases: each half once per round, in order, `again` between rounds",
         test_phase_rounds},
        {"serial on this thread only", test_serial_here},
        {"a crowded machine gets one thread", test_crowded_machine_plans_one_thread},
        {"cpu count", test_cpu_count},
        {"thread budget from the environment, or set", test_thread_budget_defaults},
    };
    return nbtest_run("pool", cases, sizeof cases / sizeof cases[0]);
}
