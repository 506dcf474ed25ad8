/* Strict command-line parsing for char_lm (toy_tasks and head_analysis use getopt_long through
 * train_flags.h; char_lm moves there when it is rebuilt on nb_train): a flag's number must be the
 * whole string and lie within the flag's range, or the flag is refused with a message naming it.
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

#include "train_flags.h"

#include <stdbool.h>
#include <stdint.h>

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

/* If the current flag is one of trainer_flags', parses its value into f, sets *ok to whether
 * that worked and returns true; returns false for any other flag. */
bool args_trainer_flag(args *a, trainer_flags *f, bool *ok);
/* args_trainer_flag for the flags in `honoured` (ARGS_* bits) only: any other returns false,
 * so the program reports it as unknown instead of accepting a flag it would ignore. */
bool args_some_trainer_flag(args *a, trainer_flags *f, unsigned honoured, bool *ok);
/* After parsing: false with a message if the trainer flags contradict each other. */
bool args_trainer_check(const args *a, const trainer_flags *f);

#endif
