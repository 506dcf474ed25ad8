/* Checkpoints of a module's parameters in the safetensors format. */
#include "module.h"

#include <stdlib.h>

/* The subtree's parameters as a heap array the caller frees; NULL with an error. */
static nb_param *all_params(const nb_module *m, int *n) {
    *n = nb_module_param_count(m);
    nb_param *p = malloc(sizeof *p * (size_t)(*n ? *n : 1));
    if (!p) return nbt_error("module_save", "out of memory");
    nb_module_params(m, p, *n);
    return p;
}

bool nb_module_save(const nb_module *m, const char *path) {
    if (!m || !path) return nbt_error("module_save", "NULL argument"), false;
    int n;
    nb_param *p = all_params(m, &n);
    bool ok = p && nb_safetensors_save(path, n, p);
    free(p);
    return ok;
}

bool nb_module_load(nb_module *m, const char *path) {
    if (!m || !path) return nbt_error("module_load", "NULL argument"), false;
    int n;
    nb_param *p = all_params(m, &n);
    bool ok = p && nb_safetensors_load(path, n, p);
    free(p);
    return ok;
}
