/* A module's parameters as a plain array of tensors (PyTorch's model.parameters()), the form
 * optimizers and gradient clipping take. */
#include "module_tree.h"

#include <stdlib.h>

nb_tensor **nb_module_param_tensors(const nb_module *m, int *count) {
    if (!m || !count) return nbt_error("module_param_tensors", "NULL argument");
    int n = nb_module_param_count(m);
    nb_param *named = malloc(sizeof *named * (size_t)(n ? n : 1));
    nb_tensor **out = malloc(sizeof *out * (size_t)(n ? n : 1));
    if (!named || !out || nb_module_named_params(m, named, n) != n) {
        free(named);
        free(out);
        return nbt_error("module_param_tensors", "out of memory");
    }
    for (int i = 0; i < n; i++) out[i] = named[i].tensor;
    free(named);
    *count = n;
    return out;
}
