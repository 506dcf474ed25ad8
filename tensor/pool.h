/* nabla's worker threads: a small pool in place of OpenMP. Internal to tensor/.
 *
 * Work is split into tasks that whichever thread is free claims in order, the calling
 * thread included. So a worker that the OS has descheduled (a busy machine) holds up only
 * the task it is running, never a share assigned to it in advance; idle workers spin for a
 * while and then sleep (at once when the machine has more runnable threads than CPUs), so
 * they do not take the CPU from the thread that still has work, and sleeping workers are
 * woken only for jobs long enough to pay for it (pool.c). GNU OpenMP's default spin-waiting
 * made two threads 100x slower than one on a machine where other processes kept a core busy;
 * with this pool 2 threads measured from 0.41x to 1.15x one thread's time there on a loaded
 * machine when it was written (the busy-neighbour rounds in docs/performance.md are today's).
 *
 * Which thread runs a task never changes what the task computes, so results do not depend on
 * the thread count as long as each task writes its own outputs. */
#ifndef NABLA_POOL_H
#define NABLA_POOL_H

#include <stdbool.h>
#include <stdint.h>

/* A spinning thread's pause: lets the core's other hardware thread run, and spares the
 * memory-order flush of leaving a tight load loop. */
static inline void nbt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* More threads than this are never used. */
#define NBT_POOL_MAX_THREADS 64

/* Callers split a job into about this many tasks per thread (when the work allows), not one
 * each: a worker the OS deschedules then holds up only its current piece while the others
 * take the rest, where with one share per thread the job waited for its whole share. */
#ifndef NBT_PIECES_PER_THREAD /* -DNBT_PIECES_PER_THREAD=1: the old one-share split */
#define NBT_PIECES_PER_THREAD 4
#endif

/* One task: task is in [0, ntasks); worker in [0, threads) names the thread running it (for
 * per-thread scratch: no two tasks run on the same worker at once). */
typedef void (*nbt_task_fn)(int64_t task, int worker, void *ctx);

/* Runs fn for every task on up to `threads` threads and returns when all are done. The
 * calling thread works too (as worker 0). Inside a task, while another thread's call is
 * running, or if threads cannot be started, the tasks run on the calling thread in order. */
void nbt_run_tasks(int64_t ntasks, int threads, nbt_task_fn fn, void *ctx);

/* True while the machine has more runnable threads than CPUs, counting this pool's sleeping
 * workers as runnable (seen at two looks in a row, 5 ms apart; pool.c, CROWD_POLL_NS): work should
 * then stay on its calling thread (nbt_threads_for plans one). */
bool nbt_pool_crowded(void);
#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
/* Turns that look on or off, and with it a spinning worker's look that sends it to sleep at
 * once on a crowded machine (on unless the environment has NABLA_CROWD_CHECK=0; the unit
 * tests turn it off so that their 1- and 2-thread runs really differ on a busy test machine:
 * with the worker's look on, a worker there slept after every gap of 10 us and joined only
 * jobs of 20 us, so a 2-thread run of short jobs ran on one thread). */
void nbt_pool_set_crowd_check(bool on);
/* Workers asleep now, and the times a sleeping worker has been woken for a job. */
int nbt_pool_sleeping_workers(void);
int64_t nbt_pool_worker_wakeups(void);
#endif
/* True inside a task (where nested work should stay on the current thread). */
bool nbt_in_task(void);

/* The number of CPUs this process may run on (at least 1). */
int nbt_cpu_count(void);

#endif
