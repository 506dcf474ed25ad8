#include "errors.h"

#include <stdio.h>

void *blk_null_argument(const char *op) {
    if (!nb_last_error()[0]) nb_error(op, "NULL argument");
    return NULL;
}

void *blk_module_error(const nb_module *m) {
    char cause[768]; /* nb_error rewrites the buffer nb_last_error points into */
    snprintf(cause, sizeof cause, "%s", nb_last_error());
    return nb_error(nb_module_type(m), "'%s': %s", nb_module_path(m), cause);
}
