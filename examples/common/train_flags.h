/* The flags every example trainer takes (--steps N, --seed S, --threads N, --lr X, --out DIR,
 * --eval CHECKPOINT, --resume, --checkpoint-every N, --accum K), parsed with glibc's
 * getopt_long:
 *
 *   struct option opts[TRAIN_FLAGS_MAX + 4] = {{"task", required_argument, 0, 't'}, ...};
 *   train_flags_options(ARGS_ALL_TRAINER_FLAGS, opts + n);       (appends, then the 0 entry)
 *   for (int c; (c = flags_next("prog", argc, argv, opts)) != -1;)
 *       if (c == FLAGS_BAD || (is_train_flag(c) && !train_flag_value("prog", c, optarg, &f)))
 *           ... usage, exit 2
 */
#ifndef NABLA_EXAMPLES_TRAIN_FLAGS_H
#define NABLA_EXAMPLES_TRAIN_FLAGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

/* Upper bounds shared by the examples. Threads: the most nabla's pool runs. Steps: a budget
 * beyond any example's use that still keeps step arithmetic far from overflow. */
#define ARGS_MAX_THREADS 64
#define ARGS_MAX_STEPS 100000000
/* Micro-batches accumulated per step (--accum): far more than any example's batch needs. */
#define ARGS_MAX_ACCUM 1024

typedef struct {
    int64_t steps;
    uint64_t seed;
    int threads; /* 0: nabla's default */
    double lr;   /* 0: the program's default */
    const char *out, *eval;
    bool resume;              /* continue from the last checkpoint in out */
    int64_t checkpoint_every; /* 0: no resume checkpoints */
    int accum;                /* micro-batches per step and rank (0 or 1: one) */
} trainer_flags;

/* Usage text for trainer_flags' flags, for the programs' usage lines. */
#define ARGS_TRAINER_USAGE                                                                         \
    "[--steps N] [--seed S] [--threads N] [--lr X] [--out DIR] [--eval CHECKPOINT] "               \
    "[--checkpoint-every N] [--resume] [--accum K]"

/* The trainer flags as bits, for a program that honours only some of them. */
enum {
    ARGS_STEPS = 1 << 0,
    ARGS_SEED = 1 << 1,
    ARGS_THREADS = 1 << 2,
    ARGS_LR = 1 << 3,
    ARGS_OUT = 1 << 4,
    ARGS_EVAL = 1 << 5,
    ARGS_RESUME = 1 << 6,
    ARGS_CHECKPOINT_EVERY = 1 << 7,
    ARGS_ACCUM = 1 << 8,
    ARGS_ALL_TRAINER_FLAGS = (1 << 9) - 1
};
#define TRAIN_FLAGS_MAX 9
/* getopt_long ids of the trainer flags: TRAIN_FLAG_ID + the flag's bit number. */
#define TRAIN_FLAG_ID 0x1000
/* What flags_next returns after reporting a bad flag. */
#define FLAGS_BAD '?'

/* The trainer flag called name ("--steps") among `honoured`: its id, or -1. */
int train_flag_id(const char *name, unsigned honoured);
static inline bool is_train_flag(int id) {
    return id >= TRAIN_FLAG_ID && id < TRAIN_FLAG_ID + TRAIN_FLAGS_MAX;
}
/* False for the flags without a value (--resume). */
bool train_flag_takes_value(int id);
/* Writes the getopt_long options of the flags in `honoured` to opts, then a zero entry;
 * returns how many. opts needs room for TRAIN_FLAGS_MAX + 1. */
int train_flags_options(unsigned honoured, struct option *opts);
/* Parses value (NULL for --resume) of the trainer flag `id` into f; false with a message. */
bool train_flag_value(const char *prog, int id, const char *value, trainer_flags *f);
/* After parsing: false with a message if the trainer flags contradict each other. */
bool train_flags_check(const char *prog, const trainer_flags *f);

/* The next flag of argv through getopt_long (options "+:h" and longopts): its id, 'h' for -h
 * (give --help the id 'h' too), -1 at the end, or FLAGS_BAD after printing "prog: unknown
 * option '...'" or "prog: --flag needs a value" (a stray argument is an unknown option). */
int flags_next(const char *prog, int argc, char **argv, const struct option *longopts);

#endif
