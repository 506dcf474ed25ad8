/* Errors of the built-in modules' forwards and constructors (module_error.c), internal to
 * nn/: a failure inside a module is named once, by the innermost module it happened in, as
 * "<Type> '<path>': <cause>", and the modules around it pass that message on unchanged, so
 * the first error of a chain is the one the caller reads (tests/test_module_errors.c).
 *
 * The pattern every built-in module follows (nn/linear.c is the shortest):
 *
 *     nb_foo *nb_foo_new(nb_module *parent, const char *name, int64_t dim) {
 *         if (dim <= 0) return nbt_error("Foo", "dim must be positive, got %lld", ...);
 *         nb_foo *m = nb_module_new(parent, name, "Foo", sizeof *m);
 *         if (!m) return NULL;
 *         if (!(m->weight = nb_module_add_param(&m->base, "weight", ...)))
 *             return nbn_discard(&m->base); // names it, undoes the module
 *         return m;
 *     }
 *     nb_tensor *nb_foo_forward(nb_foo *m, const nb_tensor *x) {
 *         if (!m || !x) return nbn_null_argument("Foo", m ? &m->base : NULL, "input");
 *         if (x->ndim != 2)
 *             return nbn_error(&m->base, "expects [B, D], got %s", nbt_shape(x));
 *         return nbn_result(&m->base, nb_some_op(x, m->weight)); // names it on failure
 *     }
 *
 * Arguments checked before nb_module_new have no path yet: they name the type only. User
 * modules (outside the library) name their errors with nb_error (docs/extending.md). */
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
