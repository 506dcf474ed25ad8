/* The trainer's parts (nb_train in nn/train.c): the progress line, the CSV logs and their
 * plot, and the resume checkpoint. Private to nn/train*.c. */
#ifndef NABLA_NN_TRAIN_IMPL_H
#define NABLA_NN_TRAIN_IMPL_H

#include "nabla/train.h"

/* ---- Progress line (train_progress.c) --------------------------------------------------- */
typedef struct {
    FILE *f;    /* NULL: silent (quiet, or not rank 0) */
    bool tty;   /* redraw one line instead of printing one per report */
    bool drawn; /* a live line is on the terminal, to end before another line */
    const nb_train_opts *o;
    int64_t every;           /* plain-line interval */
    int64_t first;           /* steps done when this process started (resume) */
    double start, last_draw; /* monotonic seconds */
    double loss_sum, metric_sums[NB_TRAIN_MAX_METRICS];
    int64_t summed; /* steps in the sums: those since the last report */
} nbtr_progress;

void nbtr_progress_start(nbtr_progress *p, const nb_train_opts *o, FILE *f, int64_t done);
/* After step `done` (1-based count) with its loss and metrics: shows their mean over the steps
 * since the last report when a report is due. */
void nbtr_progress_step(nbtr_progress *p, int64_t done, double loss, const double *metrics);
/* A line of its own (an evaluation, a note), after ending a live line. printf-like. */
void nbtr_progress_line(nbtr_progress *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Ends the live line and says how many steps ran in how long. */
void nbtr_progress_finish(nbtr_progress *p, int64_t done, bool stopped_early);

/* ---- Logs and plot (train_log.c) --------------------------------------------------------- */
enum { NBTR_TRAIN_LOG, NBTR_VAL_LOG, NBTR_LOGS };

/* Creates dir and its missing parents (mkdir -p). False with an error naming dir. */
bool nbtr_make_dirs(const char *op, const char *dir);
/* Opens out_dir/name: a new file with header, or (resuming) the old one cut back to `bytes`,
 * its length at the checkpoint, and opened for appending. NULL with an error naming it. */
FILE *nbtr_log_open(const char *op, const char *out_dir, const char *name, const char *header,
                    bool resuming, int64_t bytes);
/* Flushes f and writes its length to *bytes. False with an error. */
bool nbtr_log_flush(const char *op, FILE *f, int64_t *bytes);
/* Draws out_dir/curve.png from train.csv (and val.csv when has_val) through gnuplot. False
 * after a note on p when gnuplot is missing or fails (never an error: plots are extras). */
bool nbtr_plot(const nb_train_opts *o, bool has_val, nbtr_progress *p);

/* ---- Checkpoints (train_checkpoint.c) ------------------------------------------------------ */
/* What resume.json holds besides the data state bytes. */
typedef struct {
    int64_t step; /* steps done */
    int64_t log_bytes[NBTR_LOGS];
    double best;       /* best evaluation metric; NaN before the first */
    int64_t best_step; /* -1 before the first */
    int bad_evals;     /* evaluations since the best */
    bool stopped;      /* early stopping ended the run */
} nbtr_state;

/* Saves out_dir/resume-<step>.safetensors (model and optimizer), then resume.json atomically,
 * then removes older checkpoints and stale temporaries. False with an error. */
bool nbtr_checkpoint_save(const char *op, nb_module *model, nb_optimizer *opt,
                          const nb_train_opts *o, const nbtr_state *st);
/* Restores model, optimizer, the model's generator, *st and the data state from out_dir's
 * checkpoint; all or nothing. False with an error when there is none, it is damaged, it is
 * another run's or its step is past o->steps. */
bool nbtr_checkpoint_load(const char *op, nb_module *model, nb_optimizer *opt,
                          const nb_train_opts *o, nbtr_state *st);

#endif
