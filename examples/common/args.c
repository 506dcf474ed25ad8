#include "args.h"

#include "flag_values.h"

#include <stdio.h>
#include <string.h>

void args_start(args *a, const char *prog, int argc, char **argv) {
    *a = (args){.prog = prog, .argc = argc, .argv = argv, .next = 1, .flag = NULL};
}

bool args_next(args *a) {
    if (a->next >= a->argc) return false;
    a->flag = a->argv[a->next++];
    return true;
}

bool args_is(const args *a, const char *name) {
    return strcmp(a->flag, name) == 0;
}

const char *args_string(args *a) {
    if (a->next >= a->argc) {
        fprintf(stderr, "%s: %s needs a value\n", a->prog, a->flag);
        return NULL;
    }
    return a->argv[a->next++];
}

bool args_int(args *a, int64_t min, int64_t max, int64_t *out) {
    const char *s = args_string(a);
    return s && flag_int(a->prog, a->flag, s, min, max, out);
}

bool args_int32(args *a, int min, int max, int *out) {
    const char *s = args_string(a);
    return s && flag_int32(a->prog, a->flag, s, min, max, out);
}

bool args_uint64(args *a, uint64_t *out) {
    const char *s = args_string(a);
    return s && flag_uint64(a->prog, a->flag, s, out);
}

bool args_double(args *a, double min, double max, double *out) {
    const char *s = args_string(a);
    return s && flag_double(a->prog, a->flag, s, min, max, out);
}

bool args_is_help(const args *a) {
    return args_is(a, "--help") || args_is(a, "-h");
}

bool args_some_trainer_flag(args *a, trainer_flags *f, unsigned honoured, bool *ok) {
    int id = train_flag_id(a->flag, honoured);
    if (id < 0) return false;
    const char *value = train_flag_takes_value(id) ? args_string(a) : NULL;
    *ok = (value || !train_flag_takes_value(id)) && train_flag_value(a->prog, id, value, f);
    return true;
}

bool args_trainer_flag(args *a, trainer_flags *f, bool *ok) {
    return args_some_trainer_flag(a, f, ARGS_ALL_TRAINER_FLAGS, ok);
}

bool args_trainer_check(const args *a, const trainer_flags *f) {
    return train_flags_check(a->prog, f);
}

bool args_unknown(const args *a) {
    fprintf(stderr, "%s: unknown option '%s'\n", a->prog, a->flag);
    return false;
}
