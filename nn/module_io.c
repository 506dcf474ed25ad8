/* Checkpoints of a module's parameters in the safetensors format. */
#include "module.h"
#include "nabla/optim.h"
#include "optim_impl.h"
#include "safetensors_file.h"

#include <stdlib.h>

/* The subtree's parameters as a heap array the caller frees; NULL with an error. */
static nb_param *all_params(const nb_module *m, int *n) {
    *n = nb_module_param_count(m);
    nb_param *p = malloc(sizeof *p * (size_t)(*n ? *n : 1));
    if (!p) return nbt_error("module_save", "out of memory");
    nb_module_params(m, p, *n);
    return p;
}

/* The parameters, then (if opt) the optimizer's state under "optim.", as one list the caller
 * frees; NULL with an error. */
static nb_param *checkpoint_entries(const nb_module *m, nb_optimizer *opt, int *n) {
    int np;
    nb_param *p = all_params(m, &np);
    const nb_named_tensor *state = NULL;
    int ns = opt ? nb_optimizer_state(opt, "optim.", &state) : 0;
    if (!p || ns < 0) return free(p), NULL;
    nb_param *all = realloc(p, sizeof *all * (size_t)(np + ns + 1));
    if (!all) return free(p), nbt_error("module_save", "out of memory");
    for (int i = 0; i < ns; i++) all[np + i] = state[i];
    *n = np + ns;
    return all;
}

bool nb_module_save_with(const nb_module *m, nb_optimizer *opt, const char *path) {
    if (!m || !path) return nbt_error("module_save", "NULL argument"), false;
    int n;
    nb_param *p = checkpoint_entries(m, opt, &n);
    bool ok = p && nb_safetensors_save(path, n, p);
    free(p);
    return ok;
}

bool nb_module_load_with(nb_module *m, nb_optimizer *opt, const char *path) {
    if (!m || !path) return nbt_error("module_load", "NULL argument"), false;
    int n;
    nb_param *p = checkpoint_entries(m, opt, &n);
    /* The optimizer's state is range-checked before anything is written. */
    bool ok = p && nbst_load_checked("nb_safetensors_load", path, n, p,
                                     opt ? nbo_check_loaded_state : NULL, opt);
    free(p);
    return ok;
}

bool nb_module_save(const nb_module *m, const char *path) {
    return nb_module_save_with(m, NULL, path);
}

bool nb_module_load(nb_module *m, const char *path) { return nb_module_load_with(m, NULL, path); }
