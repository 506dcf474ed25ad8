#include "train_flags.h"

#include "flag_values.h"

#include <stdio.h>
#include <string.h>

/* In bit order (ARGS_STEPS is bit 0). */
static const struct {
    const char *name;
    bool takes_value;
} flags[TRAIN_FLAGS_MAX] = {
    {"--steps", true}, {"--seed", true}, {"--threads", true}, {"--lr", true},
    {"--out", true},   {"--eval", true}, {"--resume", false}, {"--checkpoint-every", true},
    {"--accum", true},
};

int train_flag_id(const char *name, unsigned honoured) {
    for (int i = 0; i < TRAIN_FLAGS_MAX; i++)
        if ((honoured & (1u << i)) && strcmp(flags[i].name, name) == 0) return TRAIN_FLAG_ID + i;
    return -1;
}

bool train_flag_takes_value(int id) {
    return flags[id - TRAIN_FLAG_ID].takes_value;
}

int train_flags_options(unsigned honoured, struct option *opts) {
    int n = 0;
    for (int i = 0; i < TRAIN_FLAGS_MAX; i++)
        if (honoured & (1u << i))
            opts[n++] = (struct option){flags[i].name + 2,
                                        flags[i].takes_value ? required_argument : no_argument,
                                        NULL, TRAIN_FLAG_ID + i};
    opts[n] = (struct option){0};
    return n;
}

bool train_flag_value(const char *prog, int id, const char *v, trainer_flags *f) {
    const char *name = flags[id - TRAIN_FLAG_ID].name;
    switch (1 << (id - TRAIN_FLAG_ID)) {
    case ARGS_STEPS:
        return flag_int(prog, name, v, 1, ARGS_MAX_STEPS, &f->steps);
    case ARGS_SEED:
        return flag_uint64(prog, name, v, &f->seed);
    case ARGS_THREADS:
        return flag_int32(prog, name, v, 1, ARGS_MAX_THREADS, &f->threads);
    case ARGS_LR:
        return flag_double(prog, name, v, 1e-12, 1e30, &f->lr);
    case ARGS_OUT:
        return (f->out = v) != NULL;
    case ARGS_EVAL:
        return (f->eval = v) != NULL;
    case ARGS_RESUME:
        return f->resume = true;
    case ARGS_CHECKPOINT_EVERY:
        return flag_int(prog, name, v, 1, ARGS_MAX_STEPS, &f->checkpoint_every);
    case ARGS_ACCUM:
        return flag_int32(prog, name, v, 1, ARGS_MAX_ACCUM, &f->accum);
    }
    return false;
}

bool train_flags_check(const char *prog, const trainer_flags *f) {
    if (f->eval && (f->resume || f->checkpoint_every)) {
        fprintf(stderr, "%s: --eval does not train: it takes no --resume or --checkpoint-every\n",
                prog);
        return false;
    }
    return true;
}

int flags_next(const char *prog, int argc, char **argv, const struct option *longopts) {
    opterr = 0; /* the messages below name the flag as the examples' tests expect */
    int c = getopt_long(argc, argv, "+:h", longopts, NULL);
    if (c == -1 && optind < argc) {
        fprintf(stderr, "%s: unknown option '%s'\n", prog, argv[optind]);
        return FLAGS_BAD;
    }
    if (c == ':') {
        fprintf(stderr, "%s: %s needs a value\n", prog, argv[optind - 1]);
        return FLAGS_BAD;
    }
    if (c == '?') {
        if (optopt && optopt < 256)
            fprintf(stderr, "%s: unknown option '-%c'\n", prog, optopt);
        else
            fprintf(stderr, "%s: unknown option '%s'\n", prog, argv[optind - 1]);
        return FLAGS_BAD;
    }
    return c;
}
