#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

/* strtol and friends skip leading spaces and accept an empty tail only by the end check; a
 * value must also not start with a space, so " 5" is refused like "5 ". */
static bool starts_clean(const char *s) {
    return *s && !isspace((unsigned char)*s);
}

bool args_int(args *a, int64_t min, int64_t max, int64_t *out) {
    const char *s = args_string(a);
    if (!s) return false;
    char *end;
    errno = 0;
    long long v = starts_clean(s) ? strtoll(s, &end, 10) : 0;
    if (!starts_clean(s) || *end || errno || v < min || v > max) {
        fprintf(stderr, "%s: %s wants a whole number from %" PRId64 " to %" PRId64 ", not '%s'\n",
                a->prog, a->flag, min, max, s);
        return false;
    }
    *out = v;
    return true;
}

bool args_int32(args *a, int min, int max, int *out) {
    int64_t v;
    if (!args_int(a, min, max, &v)) return false;
    *out = (int)v;
    return true;
}

bool args_uint64(args *a, uint64_t *out) {
    const char *s = args_string(a);
    if (!s) return false;
    char *end;
    errno = 0;
    /* strtoull would wrap "-1" to the largest value: only digits are accepted. */
    unsigned long long v = isdigit((unsigned char)*s) ? strtoull(s, &end, 10) : 0;
    if (!isdigit((unsigned char)*s) || *end || errno) {
        fprintf(stderr, "%s: %s wants a whole number from 0 to %" PRIu64 ", not '%s'\n", a->prog,
                a->flag, UINT64_MAX, s);
        return false;
    }
    *out = v;
    return true;
}

bool args_double(args *a, double min, double max, double *out) {
    const char *s = args_string(a);
    if (!s) return false;
    char *end;
    errno = 0;
    double v = starts_clean(s) ? strtod(s, &end) : NAN;
    if (!starts_clean(s) || *end || errno || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "%s: %s wants a number from %g to %g, not '%s'\n", a->prog, a->flag, min,
                max, s);
        return false;
    }
    *out = v;
    return true;
}

bool args_is_help(const args *a) {
    return args_is(a, "--help") || args_is(a, "-h");
}

bool args_some_trainer_flag(args *a, trainer_flags *f, unsigned honoured, bool *ok) {
    if (args_is(a, "--steps") && (honoured & ARGS_STEPS))
        *ok = args_int(a, 1, ARGS_MAX_STEPS, &f->steps);
    else if (args_is(a, "--seed") && (honoured & ARGS_SEED))
        *ok = args_uint64(a, &f->seed);
    else if (args_is(a, "--threads") && (honoured & ARGS_THREADS))
        *ok = args_int32(a, 1, ARGS_MAX_THREADS, &f->threads);
    else if (args_is(a, "--out") && (honoured & ARGS_OUT))
        *ok = (f->out = args_string(a)) != NULL;
    else if (args_is(a, "--eval") && (honoured & ARGS_EVAL))
        *ok = (f->eval = args_string(a)) != NULL;
    else if (args_is(a, "--lr") && (honoured & ARGS_LR))
        *ok = args_double(a, 1e-12, 1e30, &f->lr);
    else if (args_is(a, "--resume") && (honoured & ARGS_RESUME))
        *ok = f->resume = true;
    else if (args_is(a, "--checkpoint-every") && (honoured & ARGS_CHECKPOINT_EVERY))
        *ok = args_int(a, 1, ARGS_MAX_STEPS, &f->checkpoint_every);
    else if (args_is(a, "--accum") && (honoured & ARGS_ACCUM))
        *ok = args_int32(a, 1, ARGS_MAX_ACCUM, &f->accum);
    else
        return false;
    return true;
}

bool args_trainer_flag(args *a, trainer_flags *f, bool *ok) {
    return args_some_trainer_flag(a, f, ARGS_ALL_TRAINER_FLAGS, ok);
}

bool args_trainer_check(const args *a, const trainer_flags *f) {
    if (f->eval && (f->resume || f->checkpoint_every)) {
        fprintf(stderr, "%s: --eval does not train: it takes no --resume or --checkpoint-every\n",
                a->prog);
        return false;
    }
    return true;
}

bool args_unknown(const args *a) {
    fprintf(stderr, "%s: unknown option '%s'\n", a->prog, a->flag);
    return false;
}
