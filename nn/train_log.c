/* The trainer's files besides checkpoints: the output directory, train.csv and val.csv (cut
 * back to their checkpointed lengths on resume, so rows of steps that run again are not
 * doubled) and curve.png through gnuplot. */
#define _POSIX_C_SOURCE 200809L
#include "tensor/nbt.h"
#include "train_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

bool nbtr_make_dirs(const char *op, const char *dir) {
    char buf[4096];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof buf)
        return nbt_error(op, "cannot create the output directory '%s': bad length", dir), false;
    memcpy(buf, dir, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) break;
        *p = '/';
    }
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
        struct stat s;
        if (stat(dir, &s) == 0 && S_ISDIR(s.st_mode)) return true;
        errno = ENOTDIR;
    }
    return nbt_error(op, "cannot create %s: %s", dir, strerror(errno)), false;
}

FILE *nbtr_log_open(const char *op, const char *out_dir, const char *name, const char *header,
                    bool resuming, int64_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = NULL;
    if (!resuming) {
        if ((f = fopen(path, "w"))) fputs(header, f);
    } else {
        int fd = open(path, O_WRONLY);
        off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
        if (fd >= 0 && size >= bytes && ftruncate(fd, bytes) == 0 &&
            lseek(fd, 0, SEEK_END) == bytes)
            f = fdopen(fd, "a");
        else if (fd >= 0 && size >= 0 && size < bytes)
            errno = EINVAL; /* shorter than at the checkpoint: not this run's log */
        if (!f && fd >= 0) close(fd);
    }
    if (!f) nbt_error(op, "cannot write %s: %s", path, strerror(errno));
    return f;
}

bool nbtr_log_flush(const char *op, FILE *f, int64_t *bytes) {
    long at;
    if (fflush(f) != 0 || (at = ftell(f)) < 0)
        return nbt_error(op, "cannot write a training log: %s", strerror(errno)), false;
    *bytes = at;
    return true;
}

/* Gnuplot string literal contents: single quotes doubled. */
static void quoted(FILE *g, const char *s) {
    for (; *s; s++) fputs(*s == '\'' ? "''" : (char[]){*s, 0}, g);
}

static bool gnuplot_found(void) {
    int rc = system("command -v gnuplot >/dev/null 2>&1");
    return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

/* Loss against step on a log scale (left axis); the metrics and the validation metric on the
 * right axis. */
static bool draw(FILE *g, const nb_train_opts *o, bool has_val) {
    fprintf(g, "set terminal pngcairo noenhanced size 900,500 font ',11'\nset output '");
    quoted(g, o->out_dir);
    fprintf(g, "/curve.png'\nset datafile separator ','\nset title '");
    quoted(g, o->name);
    fprintf(g, "'\nset xlabel 'step'\nset ylabel 'loss'\nset logscale y\nset grid\n"
               "set key outside bottom center horizontal\n");
    bool right = o->n_metrics > 0 || has_val;
    if (right) fprintf(g, "set ytics nomirror\nset y2tics\n");
    fprintf(g, "plot '");
    quoted(g, o->out_dir);
    fprintf(g, "/train.csv' using 1:2 every ::1 with lines lw 2 title 'loss'");
    for (int i = 0; i < o->n_metrics; i++) {
        fprintf(g, ", '' using 1:%d every ::1 axes x1y2 with lines lw 2 title '", 3 + i);
        quoted(g, o->metric_names[i]);
        fprintf(g, "'");
    }
    if (has_val) {
        fprintf(g, ", '");
        quoted(g, o->out_dir);
        fprintf(g, "/val.csv' using 1:2 every ::1 axes x1y2 with linespoints lw 2 pt 7 title '");
        quoted(g, o->eval_name);
        fprintf(g, "'");
    }
    fprintf(g, "\n");
    return !ferror(g);
}

bool nbtr_plot(const nb_train_opts *o, bool has_val, nbtr_progress *p) {
    if (!gnuplot_found()) {
        nbtr_progress_line(p, "%s: gnuplot not found: no curve.png (apt-get install gnuplot-nox)",
                           o->name);
        return false;
    }
    FILE *g = popen("gnuplot >/dev/null 2>&1", "w");
    bool ok = g && draw(g, o, has_val);
    if (g) {
        int rc = pclose(g);
        ok = ok && rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
    }
    if (!ok) nbtr_progress_line(p, "%s: gnuplot failed: no curve.png", o->name);
    return ok;
}
