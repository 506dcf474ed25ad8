#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_start(progress *p, int64_t total_steps) {
    p->total = total_steps;
    p->every = total_steps >= 10 ? total_steps / 10 : 1;
    p->tty = isatty(fileno(stdout));
    p->start = progress_now();
    p->last_draw = 0;
}

static void format_eta(double seconds, char *buf, size_t len) {
    if (seconds >= 60)
        snprintf(buf, len, "%dm%02ds", (int)(seconds / 60), (int)seconds % 60);
    else
        snprintf(buf, len, "%.1fs", seconds);
}

void progress_update(progress *p, int64_t step, double loss, double accuracy) {
    double now = progress_now(), elapsed = now - p->start;
    bool last = step == p->total;
    if (p->tty ? (now - p->last_draw < 0.1 && !last) : (step % p->every != 0 && !last)) return;
    p->last_draw = now;
    double rate = elapsed > 0 ? (double)step / elapsed : 0;
    char eta[32];
    format_eta(rate > 0 ? (double)(p->total - step) / rate : 0, eta, sizeof eta);
    char acc[32] = "";
    if (accuracy >= 0) snprintf(acc, sizeof acc, "  acc %5.1f%%", 100 * accuracy);
    printf("%sstep %6lld/%lld  loss %.4f%s  %7.1f steps/s  ETA %s%s", p->tty ? "\r\033[K" : "",
           (long long)step, (long long)p->total, loss, acc, rate, eta, p->tty ? "" : "\n");
    fflush(stdout);
}

void progress_finish(progress *p, const char *what) {
    if (p->tty) printf("\n");
    printf("%s in %.1f s\n", what, progress_now() - p->start);
    fflush(stdout);
}
