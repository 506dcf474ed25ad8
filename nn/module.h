/* Internal helpers for writing modules (see linear.c for the pattern). */
#ifndef NABLA_MODULE_H
#define NABLA_MODULE_H

#include "nabla/nn.h"
#include "tensor/nbt.h"

/* Allocates a zeroed module struct of `size` bytes whose first member is nb_module, named
 * name under parent (an error, NULL, if parent is NULL or name has a '.'). Owned by the root. */
void *nbn_module_new(nb_module *parent, const char *name, const char *type, size_t size);
/* Registers t (made in the root's scope by the caller via nbn_param_*) as parameter `name`. */
nb_tensor *nbn_add_param(nb_module *m, const char *name, nb_tensor *t);
/* Parameter factories: allocate in the root's scope with the root's dtype and generator. */
nb_tensor *nbn_param_uniform(nb_module *m, const char *name, int ndim, const int64_t *shape,
                             double bound);
nb_tensor *nbn_param_normal(nb_module *m, const char *name, int ndim, const int64_t *shape);
nb_tensor *nbn_param_fill(nb_module *m, const char *name, int ndim, const int64_t *shape,
                          double value);

#endif
