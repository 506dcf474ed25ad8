/* Strict command-line parsing for the examples: a flag's number must be the whole string and
 * lie within the flag's range, or the flag is refused with a message naming it.
 *
 *   args a;
 *   args_start(&a, "prog", argc, argv);
 *   while (args_next(&a)) {
 *       if (args_is(&a, "--steps")) ok = args_int(&a, 1, 1000, &steps);
 *       else ok = args_unknown(&a);
 *       if (!ok) ... usage, exit 2
 *   }
 */
#ifndef NABLA_EXAMPLES_ARGS_H
#define NABLA_EXAMPLES_ARGS_H

#include <stdbool.h>
#include <stdint.h>

/* Upper bounds shared by the examples. Threads: the most nabla's pool runs. Steps: a budget
 * beyond any example's use that still keeps step arithmetic far from overflow. */
#define ARGS_MAX_THREADS 64
#define ARGS_MAX_STEPS 100000000
/* Micro-batches accumulated per step (--accum): far more than any example's batch needs. */
#define ARGS_MAX_ACCUM 1024

typedef struct {
    const char *prog; /* prefix of every message */
    int argc;
    char **argv;
    int next;         /* index of the next argv entry to read */
    const char *flag; /* the flag being parsed */
} args;

void args_start(args *a, const char *prog, int argc, char **argv);
/* Moves to the next flag; false when none are left. */
bool args_next(args *a);
/* True if the current flag is name. */
bool args_is(const args *a, const char *name);
/* The current flag's value (borrowed from argv), or NULL with a message when it has none. */
const char *args_string(args *a);
/* The flag's value as an integer in [min, max]; false with a message otherwise. */
bool args_int(args *a, int64_t min, int64_t max, int64_t *out);
/* The same for an int. */
bool args_int32(args *a, int min, int max, int *out);
/* The flag's value as an unsigned 64-bit integer (decimal, no sign); false with a message. */
bool args_uint64(args *a, uint64_t *out);
/* The flag's value as a finite number in [min, max]; false with a message otherwise. */
bool args_double(args *a, double min, double max, double *out);
/* True for --help and -h. */
bool args_is_help(const args *a);
/* Reports the current flag as unknown; always false. */
bool args_unknown(const args *a);

/* The flags every trainer takes: --steps N, --seed S, --threads N, --lr X, --out DIR,
 * --eval CHECKPOINT, --resume and --checkpoint-every N. */
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

/* If the current flag is one of trainer_flags', parses its value into f, sets *ok to whether
 * that worked and returns true; returns false for any other flag. */
bool args_trainer_flag(args *a, trainer_flags *f, bool *ok);
/* args_trainer_flag for the flags in `honoured` (ARGS_* bits) only: any other returns false,
 * so the program reports it as unknown instead of accepting a flag it would ignore. */
bool args_some_trainer_flag(args *a, trainer_flags *f, unsigned honoured, bool *ok);
/* After parsing: false with a message if the trainer flags contradict each other. */
bool args_trainer_check(const args *a, const trainer_flags *f);

#endif
