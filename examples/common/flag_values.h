/* Strict values of command-line flags: a number must be the whole string and lie within the
 * flag's range, or it is refused with "prog: --flag wants ..., not 'value'" on stderr. */
#ifndef NABLA_EXAMPLES_FLAG_VALUES_H
#define NABLA_EXAMPLES_FLAG_VALUES_H

#include <stdbool.h>
#include <stdint.h>

/* s as an integer in [min, max]; false with a message naming prog and flag otherwise. */
bool flag_int(const char *prog, const char *flag, const char *s, int64_t min, int64_t max,
              int64_t *out);
bool flag_int32(const char *prog, const char *flag, const char *s, int min, int max, int *out);
/* s as an unsigned 64-bit integer (decimal digits only, no sign). */
bool flag_uint64(const char *prog, const char *flag, const char *s, uint64_t *out);
/* s as a finite number in [min, max]. */
bool flag_double(const char *prog, const char *flag, const char *s, double min, double max,
                 double *out);

#endif
