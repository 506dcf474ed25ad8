/* Errors of the layers' forwards and constructors (module_error.c): a failure inside a
 * module is named once, by the innermost module it happened in, as "<Type> '<path>': <cause>",
 * and the modules around it pass that message on unchanged, so the first error of a chain is
 * the one the caller reads. Internal to nn/. */
#ifndef NABLA_MODULE_ERROR_H
#define NABLA_MODULE_ERROR_H

#include "nabla/module.h"

/* Sets the error "<Type> '<path>': <message>" for module m and returns NULL. */
void *nbn_error(const nb_module *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Returns out. When out is NULL (something inside m failed), prefixes the current error with
 * m's type and path, unless a module inside m already did: a forward or constructor ends with
 * `return nbn_result(&m->base, out);` and its error names the innermost failing module. */
void *nbn_result(const nb_module *m, void *out);
/* For a failed constructor: names m in the current error (as nbn_result), then discards m
 * (nb_module_discard). Returns NULL. */
void *nbn_discard(nb_module *m);
/* For a forward given a NULL module or input: keeps an earlier error (the chain's real cause)
 * and sets "NULL <what>" only when there is none. Returns NULL. type names a NULL module. */
void *nbn_null_argument(const char *type, const nb_module *m, const char *what);

#endif
