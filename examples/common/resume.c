#define _POSIX_C_SOURCE 200809L
#include "resume.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATE_FILE "resume.json"

static void checkpoint_name(char *buf, size_t len, int64_t step) {
    snprintf(buf, len, "resume-%" PRId64 ".safetensors", step);
}

/* Generator states as hex strings: JSON integers are signed and often only doubles. */
static json_t *rng_to_json(const nb_rng *rng) {
    json_t *a = json_array();
    for (int i = 0; i < 4; i++) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, rng->s[i]);
        json_array_append_new(a, json_string(hex));
    }
    return a;
}

static bool rng_from_json(const json_t *a, nb_rng *rng) {
    if (!json_is_array(a) || json_array_size(a) != 4) return false;
    for (size_t i = 0; i < 4; i++) {
        const char *hex = json_string_value(json_array_get(a, i));
        char *end;
        if (!hex || strlen(hex) != 16) return false;
        errno = 0;
        rng->s[i] = strtoull(hex, &end, 16);
        if (*end || errno) return false;
    }
    return true;
}

/* Writes json to dir/name through a temporary file, flushed and renamed over the old one. */
static bool write_json_atomically(const char *prog, const char *dir, const char *name,
                                  const json_t *json) {
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", dir, name, (long)getpid());
    FILE *f = fopen(tmp, "w");
    bool ok =
        f && json_dumpf(json, f, JSON_INDENT(2)) == 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, strerror(errno));
        unlink(tmp);
    }
    return ok;
}

/* Removes every resume-*.safetensors in dir but keep (left by older steps or by a run killed
 * between its two writes), the temporaries of killed checkpoint saves (those no running save
 * holds: nb_safetensors_remove_stale_temporaries) and resume.json temporaries of processes
 * that are gone. */
static void remove_other_checkpoints(const char *dir, const char *keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    const size_t suffix = strlen(".safetensors");
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name, *tmp = strstr(name, ".safetensors.tmp-");
        size_t len = strlen(name);
        char path[4096];
        long pid;
        int used;
        if (strncmp(name, "resume-", 7) == 0 && tmp) {
            /* the checkpoint the temporary was for: its name up to ".tmp-" */
            snprintf(path, sizeof path, "%s/%.*s", dir, (int)(tmp + suffix - name), name);
            nb_safetensors_remove_stale_temporaries(path);
        } else if (sscanf(name, "." STATE_FILE ".%ld.tmp%n", &pid, &used) == 1 &&
                   (size_t)used == len && pid > 0 && pid != (long)getpid() &&
                   kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            unlink(path);
        } else if (strncmp(name, "resume-", 7) == 0 && len > suffix &&
                   strcmp(name + len - suffix, ".safetensors") == 0 && strcmp(name, keep) != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            unlink(path);
        }
    }
    closedir(d);
}

/* Log lengths as a JSON array and back. */
static json_t *lengths_to_json(const int64_t *bytes) {
    json_t *a = json_array();
    for (int i = 0; i < RESUME_MAX_LOGS; i++) json_array_append_new(a, json_integer(bytes[i]));
    return a;
}

static bool lengths_from_json(const json_t *a, int64_t *bytes) {
    if (!json_is_array(a) || json_array_size(a) != RESUME_MAX_LOGS) return false;
    for (size_t i = 0; i < RESUME_MAX_LOGS; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
        bytes[i] = json_integer_value(v);
    }
    return true;
}

bool resume_save(const resume_target *t, const resume_state *st) {
    char name[64], path[4096];
    checkpoint_name(name, sizeof name, st->step);
    snprintf(path, sizeof path, "%s/%s", t->dir, name);
    if (!nb_module_save_with(t->model, t->opt, path)) {
        fprintf(stderr, "%s: saving %s: %s\n", t->prog, path, nb_last_error());
        return false;
    }
    json_t *json = json_pack(
        "{s:s, s:I, s:s, s:o, s:o, s:o}", "run", t->run, "step", (json_int_t)st->step, "checkpoint",
        name, "data_rng", rng_to_json(&st->data_rng), "model_rng",
        rng_to_json(nb_module_rng(t->model)), "log_bytes", lengths_to_json(st->log_bytes));
    bool ok = json && write_json_atomically(t->prog, t->dir, STATE_FILE, json);
    json_decref(json);
    if (ok) remove_other_checkpoints(t->dir, name);
    return ok;
}

bool resume_checkpoint_due(const resume_target *t, int64_t every, int64_t total, resume_state *st,
                           FILE *const *logs, int nlogs) {
    if (every <= 0 || (st->step % every != 0 && st->step != total)) return true;
    for (int i = 0; i < nlogs && i < RESUME_MAX_LOGS; i++) {
        long bytes;
        if (fflush(logs[i]) != 0 || (bytes = ftell(logs[i])) < 0) {
            fprintf(stderr, "%s: cannot write a training log: %s\n", t->prog, strerror(errno));
            return false;
        }
        st->log_bytes[i] = bytes;
    }
    return resume_save(t, st);
}

bool resume_load(const resume_target *t, resume_state *st) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", t->dir, STATE_FILE);
    json_error_t jerr;
    json_t *json = json_load_file(path, 0, &jerr);
    if (!json) {
        fprintf(stderr, "%s: nothing to resume in %s: %s\n", t->prog, t->dir, jerr.text);
        return false;
    }
    const char *run = NULL, *name = NULL;
    json_int_t step = -1;
    json_t *data_rng = NULL, *model_rng = NULL, *log_bytes = NULL;
    resume_state loaded;
    nb_rng model_state;
    bool ok = false;
    if (json_unpack(json, "{s:s, s:I, s:s, s:o, s:o, s:o}", "run", &run, "step", &step,
                    "checkpoint", &name, "data_rng", &data_rng, "model_rng", &model_rng,
                    "log_bytes", &log_bytes) != 0 ||
        step < 0 || strchr(name, '/') || !lengths_from_json(log_bytes, loaded.log_bytes) ||
        !rng_from_json(data_rng, &loaded.data_rng) || !rng_from_json(model_rng, &model_state)) {
        fprintf(stderr, "%s: %s is damaged\n", t->prog, path);
    } else if (strcmp(run, t->run) != 0) {
        fprintf(stderr, "%s: %s holds the run '%s', not '%s'\n", t->prog, t->dir, run, t->run);
    } else if (t->steps > 0 && step > t->steps) {
        /* The same flags cannot have saved it: checkpoints are taken at steps <= the total. */
        fprintf(stderr, "%s: %s is at step %lld, past this run's %lld steps\n", t->prog, path,
                (long long)step, (long long)t->steps);
    } else {
        snprintf(path, sizeof path, "%s/%s", t->dir, name);
        if (!nb_module_load_with(t->model, t->opt, path))
            fprintf(stderr, "%s: resuming from %s: %s\n", t->prog, path, nb_last_error());
        else
            ok = true;
    }
    if (ok) {
        loaded.step = step;
        *st = loaded;
        *nb_module_rng(t->model) = model_state;
    }
    json_decref(json);
    return ok;
}

FILE *resume_open_log(const char *prog, const char *path, const char *header, bool resuming,
                      int64_t bytes) {
    FILE *f = NULL;
    if (!resuming) {
        if ((f = fopen(path, "w"))) fputs(header, f);
    } else {
        /* The rows after the checkpoint were written by steps that will run again. */
        int fd = open(path, O_WRONLY);
        off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
        if (fd >= 0 && size >= bytes && ftruncate(fd, bytes) == 0 &&
            lseek(fd, 0, SEEK_END) == bytes)
            f = fdopen(fd, "a");
        else if (fd >= 0 && size >= 0 && size < bytes)
            errno = EINVAL; /* shorter than at the checkpoint: not this run's log */
        if (!f && fd >= 0) close(fd);
    }
    if (!f) fprintf(stderr, "%s: cannot write %s: %s\n", prog, path, strerror(errno));
    return f;
}

void resume_kill_hook(int64_t step) {
    static int64_t kill_after = -2; /* -2: not read yet, -1: no hook */
    if (kill_after == -2) {
        const char *v = getenv("NABLA_TEST_KILL_AFTER_STEP");
        kill_after = v ? strtoll(v, NULL, 10) : -1;
    }
    if (step == kill_after) raise(SIGKILL);
}
