/* The trainer's resume checkpoint: out_dir/resume-<step>.safetensors (model and optimizer,
 * itself written atomically by nb_safetensors_save) and then out_dir/resume.json, which names
 * it and holds the rest of the state: the step, the model's generator, the caller's data state,
 * the logs' lengths, the best metric and patience count. resume.json is replaced atomically
 * (nn/atomic_file.h: temporary, fsync, rename, fsync of the directory) and older checkpoint files
 * are removed only after it names the new one, so some complete checkpoint survives a crash at any
 * moment. */
#define _POSIX_C_SOURCE 200809L
#include "atomic_file.h"
#include "tensor/nbt.h"
#include "train_impl.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATE_FILE "resume.json"
#define CKPT_PREFIX "resume-"
#define CKPT_SUFFIX ".safetensors"

/* Bytes as lowercase hex and back (generator states, the data state and doubles' bits:
 * JSON numbers are often only doubles and print rounded). */
static json_t *hex_of(const void *bytes, size_t n) {
    char *hex = malloc(2 * n + 1);
    if (!hex) return NULL;
    for (size_t i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)bytes)[i]);
    hex[2 * n] = '\0';
    json_t *s = json_string(hex);
    free(hex);
    return s;
}

static bool from_hex(const json_t *s, void *bytes, size_t n) {
    const char *hex = json_string_value(s);
    if (!hex || strlen(hex) != 2 * n) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
        ((unsigned char *)bytes)[i] = (unsigned char)v;
    }
    return true;
}

static bool write_text(int fd, void *text) {
    return nbn_write_all(fd, text, strlen(text));
}

/* Replaces dir/name with json, atomically (nn/atomic_file.h). */
static bool write_json_atomically(const char *op, const char *dir, const char *name,
                                  const json_t *json) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = json_dumps(json, JSON_INDENT(2));
    if (!text) return nbt_error(op, "%s: cannot encode the state", path), false;
    bool ok = nbn_replace_file(op, path, write_text, text);
    free(text);
    return ok;
}

/* A resume.json temporary of the examples' older resume code, of a process that is gone:
 * ".resume.json.<pid>.tmp". */
static bool stale_state_temporary(const char *name) {
    long pid;
    int used = 0;
    return sscanf(name, "." STATE_FILE ".%ld.tmp%n", &pid, &used) == 1 &&
           (size_t)used == strlen(name) && pid > 0 && pid != (long)getpid() &&
           kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Removes every resume-*.safetensors in dir but keep (left by older steps or a run killed
 * between its two writes), the temporaries of killed checkpoint saves (those no running save
 * holds: nb_safetensors_remove_stale_temporaries) and stale resume.json temporaries. */
static void remove_other_checkpoints(const char *dir, const char *keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    const size_t prefix = strlen(CKPT_PREFIX), suffix = strlen(CKPT_SUFFIX);
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name, *tmp = strstr(name, CKPT_SUFFIX ".tmp-");
        size_t len = strlen(name);
        char path[4096];
        if (strncmp(name, CKPT_PREFIX, prefix) == 0 && tmp) {
            snprintf(path, sizeof path, "%s/%.*s", dir, (int)(tmp + suffix - name), name);
            nb_safetensors_remove_stale_temporaries(path);
        } else if (stale_state_temporary(name) ||
                   (strncmp(name, CKPT_PREFIX, prefix) == 0 && len > suffix &&
                    strcmp(name + len - suffix, CKPT_SUFFIX) == 0 && strcmp(name, keep) != 0)) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            unlink(path);
        }
    }
    closedir(d);
}

static json_t *lengths_to_json(const int64_t *bytes) {
    json_t *a = json_array();
    for (int i = 0; i < NBTR_LOGS; i++) json_array_append_new(a, json_integer(bytes[i]));
    return a;
}

static bool lengths_from_json(const json_t *a, int64_t *bytes) {
    if (!json_is_array(a) || json_array_size(a) != NBTR_LOGS) return false;
    for (size_t i = 0; i < NBTR_LOGS; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
        bytes[i] = json_integer_value(v);
    }
    return true;
}

bool nbtr_checkpoint_save(const char *op, nb_module *model, nb_optimizer *opt,
                          const nb_train_opts *o, const nbtr_state *st) {
    char name[64], path[4096];
    snprintf(name, sizeof name, CKPT_PREFIX "%" PRId64 CKPT_SUFFIX, st->step);
    snprintf(path, sizeof path, "%s/%s", o->out_dir, name);
    if (!nb_module_save_with(model, opt, path)) return false;
    json_t *json = json_pack(
        "{s:s, s:I, s:s, s:o, s:o, s:o, s:o, s:I, s:i, s:b}", "run", o->run ? o->run : "", "step",
        (json_int_t)st->step, "checkpoint", name, "model_rng",
        hex_of(nb_module_rng(model), sizeof(nb_rng)), "data_state",
        hex_of(o->data_state, o->data_state ? o->data_state_bytes : 0), "log_bytes",
        lengths_to_json(st->log_bytes), "best", hex_of(&st->best, sizeof st->best), "best_step",
        (json_int_t)st->best_step, "bad_evals", st->bad_evals, "stopped", st->stopped);
    if (!json) return nbt_error(op, "cannot build %s/" STATE_FILE, o->out_dir), false;
    bool ok = write_json_atomically(op, o->out_dir, STATE_FILE, json);
    json_decref(json);
    if (ok) remove_other_checkpoints(o->out_dir, name);
    return ok;
}

/* The fields of a parsed resume.json into *st, the generator and data bytes; false if any is
 * missing or malformed. */
static bool parse_state(const nb_train_opts *o, json_t *json, const char **run, const char **name,
                        nbtr_state *st, nb_rng *model_rng, void *data) {
    json_t *rng = NULL, *data_hex = NULL, *lengths = NULL, *best = NULL;
    json_int_t step = -1, best_step = -1;
    int bad = 0, stopped = 0;
    *st = (nbtr_state){0};
    if (json_unpack(json, "{s:s, s:I, s:s, s:o, s:o, s:o, s:o, s:I, s:i, s:b}", "run", run, "step",
                    &step, "checkpoint", name, "model_rng", &rng, "data_state", &data_hex,
                    "log_bytes", &lengths, "best", &best, "best_step", &best_step, "bad_evals",
                    &bad, "stopped", &stopped) != 0)
        return false;
    st->step = step;
    st->best_step = best_step;
    st->bad_evals = bad;
    st->stopped = stopped;
    return step >= 0 && bad >= 0 && best_step >= -1 && !strchr(*name, '/') &&
           lengths_from_json(lengths, st->log_bytes) &&
           from_hex(rng, model_rng, sizeof *model_rng) &&
           from_hex(best, &st->best, sizeof st->best) &&
           from_hex(data_hex, data, o->data_state ? o->data_state_bytes : 0);
}

bool nbtr_checkpoint_load(const char *op, nb_module *model, nb_optimizer *opt,
                          const nb_train_opts *o, nbtr_state *st) {
    char path[4096];
    snprintf(path, sizeof path, "%s/" STATE_FILE, o->out_dir);
    json_error_t jerr;
    json_t *json = json_load_file(path, 0, &jerr);
    if (!json) return nbt_error(op, "nothing to resume in %s: %s", o->out_dir, jerr.text), false;
    const char *run = NULL, *name = NULL, *want = o->run ? o->run : "";
    nbtr_state loaded;
    nb_rng model_rng;
    void *data = o->data_state ? malloc(o->data_state_bytes ? o->data_state_bytes : 1) : NULL;
    bool ok = false;
    if (o->data_state && !data)
        nbt_error(op, "out of memory reading %s", path);
    else if (!parse_state(o, json, &run, &name, &loaded, &model_rng, data))
        nbt_error(op, "%s is damaged (or holds another data state size)", path);
    else if (strcmp(run, want) != 0)
        nbt_error(op, "%s holds the run '%s', not '%s'", o->out_dir, run, want);
    else if (loaded.step > o->steps)
        /* The same options cannot have saved it: checkpoints are taken at steps <= the total. */
        nbt_error(op, "%s is at step %lld, past this run's %lld steps", path,
                  (long long)loaded.step, (long long)o->steps);
    else {
        snprintf(path, sizeof path, "%s/%s", o->out_dir, name);
        ok = nb_module_load_with(model, opt, path);
    }
    if (ok) {
        *st = loaded;
        *nb_module_rng(model) = model_rng;
        if (data) memcpy(o->data_state, data, o->data_state_bytes);
    }
    free(data);
    json_decref(json);
    return ok;
}
