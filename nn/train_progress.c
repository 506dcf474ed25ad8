/* The trainer's progress line: step, loss, metrics, steps/s and ETA. On a terminal one line
 * is redrawn in place (at most 10 times a second); to a file or pipe a plain line is printed
 * every report_every steps, so logs hold one line per report. */
#define _POSIX_C_SOURCE 200809L
#include "train_impl.h"
#include "tensor/nbt.h"

#include <stdarg.h>
#include <unistd.h>

static double now_seconds(void) {
    return 1e-9 * (double)nbt_now_ns();
}

void nbtr_progress_start(nbtr_progress *p, const nb_train_opts *o, FILE *f, int64_t done) {
    *p = (nbtr_progress){.f = f, .o = o, .first = done, .start = now_seconds()};
    p->tty = f && isatty(fileno(f));
    p->every = o->report_every > 0 ? o->report_every : o->steps >= 10 ? o->steps / 10 : 1;
}

static void format_duration(double seconds, char *buf, size_t len) {
    if (seconds >= 3600)
        snprintf(buf, len, "%dh%02dm", (int)(seconds / 3600), (int)(seconds / 60) % 60);
    else if (seconds >= 60)
        snprintf(buf, len, "%dm%02ds", (int)(seconds / 60), (int)seconds % 60);
    else
        snprintf(buf, len, "%.1fs", seconds);
}

void nbtr_progress_step(nbtr_progress *p, int64_t done, double loss, const double *metrics) {
    if (!p->f) return;
    const nb_train_opts *o = p->o;
    p->loss_sum += loss;
    for (int i = 0; i < o->n_metrics; i++) p->metric_sums[i] += metrics[i];
    p->summed++;
    double now = now_seconds(), elapsed = now - p->start;
    bool last = done == o->steps;
    if (p->tty ? (now - p->last_draw < 0.1 && !last) : (done % p->every != 0 && !last)) return;
    p->last_draw = now;
    double rate = elapsed > 0 ? (double)(done - p->first) / elapsed : 0;
    char eta[32];
    format_duration(rate > 0 ? (double)(o->steps - done) / rate : 0, eta, sizeof eta);
    fprintf(p->f, "%s%s: step %lld/%lld  loss %.4f", p->tty ? "\r\033[K" : "", o->name,
            (long long)done, (long long)o->steps, p->loss_sum / (double)p->summed);
    for (int i = 0; i < o->n_metrics; i++)
        fprintf(p->f, "  %s %.4f", o->metric_names[i], p->metric_sums[i] / (double)p->summed);
    fprintf(p->f, "  %.1f steps/s  ETA %s%s", rate, eta, p->tty ? "" : "\n");
    fflush(p->f);
    p->drawn = p->tty;
    p->loss_sum = 0;
    for (int i = 0; i < o->n_metrics; i++) p->metric_sums[i] = 0;
    p->summed = 0;
}

void nbtr_progress_line(nbtr_progress *p, const char *fmt, ...) {
    if (!p->f) return;
    if (p->drawn) fputc('\n', p->f);
    p->drawn = false;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->f, fmt, ap);
    va_end(ap);
    fputc('\n', p->f);
    fflush(p->f);
}

void nbtr_progress_finish(nbtr_progress *p, int64_t done, bool stopped_early) {
    char took[32];
    format_duration(now_seconds() - p->start, took, sizeof took);
    nbtr_progress_line(p, "%s: %s after %lld steps (%lld in this run, %s)", p->o->name,
                       stopped_early ? "stopped early" : "trained", (long long)done,
                       (long long)(done - p->first), took);
}
