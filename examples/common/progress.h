/* A one-line live progress display for training loops: step, loss, accuracy, steps/s, ETA.
 * On a terminal it redraws one line; otherwise it prints a plain line every `every` steps. */
#ifndef NABLA_EXAMPLES_PROGRESS_H
#define NABLA_EXAMPLES_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t total;
    int64_t every; /* plain-line interval when not on a terminal */
    bool tty;
    double start, last_draw;
} progress;

void progress_start(progress *p, int64_t total_steps);
/* Reports step (1-based) with the current loss and accuracy (accuracy < 0: not shown). */
void progress_update(progress *p, int64_t step, double loss, double accuracy);
/* Ends the live line with a newline and prints the elapsed time. */
void progress_finish(progress *p, const char *what);
/* Monotonic seconds. */
double progress_now(void);

#endif
