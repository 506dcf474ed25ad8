/* Thread-local last-error message and shape formatting for messages. */
#include "nbt.h"

#include <stdio.h>

static _Thread_local char last_error[1024];
static _Thread_local uint64_t error_count;

uint64_t nbt_error_count(void) { return error_count; }

/* Recording always writes a non-empty message ("op: ..."), so an empty one means the last
 * error was cleared after it was recorded. */
bool nbt_error_left_since(uint64_t mark) {
    return error_count != mark && last_error[0] != '\0';
}

const char *nb_last_error(void) {
    return last_error;
}

void nb_clear_error(void) {
    last_error[0] = '\0';
}

static void record(const char *op, const char *fmt, va_list ap) {
    error_count++;
    int n = snprintf(last_error, sizeof last_error, "%s: ", op ? op : "(unnamed)");
    if (n < 0 || (size_t)n >= sizeof last_error) return;
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt ? fmt : "", ap);
}

void *nbt_error(const char *op, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(op, fmt, ap);
    va_end(ap);
    return NULL;
}

void *nb_error(const char *op, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(op, fmt, ap);
    va_end(ap);
    return NULL;
}

/* Several shapes can appear in one message, so formatting rotates through a few buffers. */
const char *nbt_dims(int ndim, const int64_t *shape) {
    static _Thread_local char bufs[6][128];
    static _Thread_local int next;
    char *buf = bufs[next];
    next = (next + 1) % 6;
    size_t len = sizeof bufs[0], pos = 0;
    pos += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && pos < len; i++)
        pos += (size_t)snprintf(buf + pos, len - pos, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (pos < len) snprintf(buf + pos, len - pos, "]");
    return buf;
}

const char *nbt_shape(const nb_tensor *t) {
    if (!t) return "(null)";
    return nbt_dims(t->ndim, t->shape);
}

const char *nb_shape_text(const nb_tensor *t) {
    return nbt_shape(t);
}

char *nb_shape_str(const nb_tensor *t, char *buf, size_t len) {
    if (!buf || len == 0) return buf;
    snprintf(buf, len, "%s", nbt_shape(t));
    return buf;
}
