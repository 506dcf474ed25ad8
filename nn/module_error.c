/* Module errors: a failure inside a module's forward or constructor is reported once, by the
 * innermost module it happened in, as "<Type> '<path>': <cause>"; the modules around it pass
 * that message on unchanged, so the first error of a chain is the one the caller reads. */
#include "module_error.h"
#include "tensor/nbt.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The last message a module named itself in: an error equal to it needs no second name. */
static _Thread_local char named[1024];

static void name_error(const nb_module *m, const char *cause) {
    char op[512];
    if (m->path[0])
        snprintf(op, sizeof op, "%s '%s'", m->type, m->path);
    else
        snprintf(op, sizeof op, "%s", m->type);
    nbt_error(op, "%s", cause);
    snprintf(named, sizeof named, "%s", nb_last_error());
}

/* True if message quotes path or a path below it ('path' or 'path.child...'). */
static bool names_path_within(const char *message, const char *path) {
    size_t len = strlen(path);
    if (len == 0) return false;
    for (const char *p = strchr(message, '\''); p; p = strchr(p + 1, '\''))
        if (strncmp(p + 1, path, len) == 0 && (p[len + 1] == '\'' || p[len + 1] == '.'))
            return true;
    return false;
}

void *nbn_error(const nb_module *m, const char *fmt, ...) {
    char cause[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cause, sizeof cause, fmt, ap);
    va_end(ap);
    name_error(m, cause);
    return NULL;
}

void *nbn_result(const nb_module *m, void *out) {
    if (out || !m) return out;
    const char *err = nb_last_error();
    if (strcmp(err, named) == 0 || names_path_within(err, m->path))
        return NULL; /* m or a module inside it is named already */
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", err[0] ? err : "failed without a message");
    name_error(m, cause);
    return NULL;
}

void *nbn_null_argument(const char *type, const nb_module *m, const char *what) {
    if (!m) return nbt_error(type, "NULL module");
    /* A NULL input is most often an earlier op's failure: its message is the real cause. */
    if (!nb_last_error()[0]) nbn_error(m, "NULL %s", what);
    return NULL;
}

void *nbn_discard(nb_module *m) {
    nbn_result(m, NULL);
    return nb_module_discard(m);
}
