#include "flag_values.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* strtol and friends skip leading spaces and accept an empty tail only by the end check; a
 * value must also not start with a space, so " 5" is refused like "5 ". */
static bool starts_clean(const char *s) {
    return *s && !isspace((unsigned char)*s);
}

bool flag_int(const char *prog, const char *flag, const char *s, int64_t min, int64_t max,
              int64_t *out) {
    char *end;
    errno = 0;
    long long v = starts_clean(s) ? strtoll(s, &end, 10) : 0;
    if (!starts_clean(s) || *end || errno || v < min || v > max) {
        fprintf(stderr, "%s: %s wants a whole number from %" PRId64 " to %" PRId64 ", not '%s'\n",
                prog, flag, min, max, s);
        return false;
    }
    *out = v;
    return true;
}

bool flag_int32(const char *prog, const char *flag, const char *s, int min, int max, int *out) {
    int64_t v;
    if (!flag_int(prog, flag, s, min, max, &v)) return false;
    *out = (int)v;
    return true;
}

bool flag_uint64(const char *prog, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    /* strtoull would wrap "-1" to the largest value: only digits are accepted. */
    unsigned long long v = isdigit((unsigned char)*s) ? strtoull(s, &end, 10) : 0;
    if (!isdigit((unsigned char)*s) || *end || errno) {
        fprintf(stderr, "%s: %s wants a whole number from 0 to %" PRIu64 ", not '%s'\n", prog, flag,
                UINT64_MAX, s);
        return false;
    }
    *out = v;
    return true;
}

bool flag_double(const char *prog, const char *flag, const char *s, double min, double max,
                 double *out) {
    char *end;
    errno = 0;
    double v = starts_clean(s) ? strtod(s, &end) : NAN;
    if (!starts_clean(s) || *end || errno || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "%s: %s wants a number from %g to %g, not '%s'\n", prog, flag, min, max, s);
        return false;
    }
    *out = v;
    return true;
}
