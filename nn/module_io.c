/* Checkpoints of a module's parameters and buffers in the safetensors format. */
#include "module_tree.h"
#include "nabla/optim.h"
#include "optim_impl.h"
#include "safetensors_file.h"

#include <stdlib.h>

/* The subtree's parameters, then its persistent buffers, named relative to m (m's own path
 * and its dot removed, as PyTorch's m.state_dict() names them), then (if opt) the optimizer's
 * state under "optim.", as one heap list the caller frees; NULL with an error. */
static nb_param *checkpoint_entries(const nb_module *m, nb_optimizer *opt, int *n) {
    int np = nb_module_param_count(m), nb = nbn_saved_buffers(m, NULL, 0);
    const nb_named_tensor *state = NULL;
    int ns = opt ? nb_optimizer_state(opt, "optim.", &state) : 0;
    if (ns < 0) return NULL;
    nb_param *all = malloc(sizeof *all * (size_t)(np + nb + ns + 1));
    if (!all) return nbt_error("module_save", "out of memory");
    nb_module_named_params(m, all, np);
    nbn_saved_buffers(m, all + np, nb);
    for (int i = 0; i < np + nb; i++) all[i].name = nbn_local_name(m, all[i].name);
    for (int i = 0; i < ns; i++) all[np + nb + i] = state[i];
    *n = np + nb + ns;
    return all;
}

bool nb_module_save_with_metadata(const nb_module *m, nb_optimizer *opt, const char *path,
                                  int n_meta, const nb_metadata_entry *meta) {
    if (!m || !path) return nbt_error("module_save", "NULL argument"), false;
    int n;
    nb_param *p = checkpoint_entries(m, opt, &n);
    bool ok = p && nb_safetensors_save_with_metadata(path, n, p, n_meta, meta);
    free(p);
    return ok;
}

bool nb_module_save_with(const nb_module *m, nb_optimizer *opt, const char *path) {
    return nb_module_save_with_metadata(m, opt, path, 0, NULL);
}

/* Gives state to the parameters of opt that the file at path has it for, and takes it from
 * the others (nbo_load_begin), so that the entries to load are what the file must hold. */
static bool begin_optimizer_load(nb_optimizer *opt, const char *path) {
    nbst_file f;
    if (!nbst_open(&f, "nb_module_load", path)) return false;
    const char **names = malloc(sizeof *names * (size_t)(f.count + 1));
    bool ok = names != NULL;
    for (int i = 0; ok && i < f.count; i++) names[i] = f.entries[i].name;
    ok = ok ? nbo_load_begin(opt, "optim.", f.count, names)
            : nbt_error("module_load", "out of memory") != NULL;
    free(names);
    nbst_close(&f);
    return ok;
}

bool nb_module_load_opts(nb_module *m, nb_optimizer *opt, const char *path,
                         const nb_load_opts *opts, nb_load_report *report) {
    if (report) *report = (nb_load_report){0};
    if (!m || !path) return nbt_error("module_load", "NULL argument"), false;
    if (opt && !begin_optimizer_load(opt, path)) return false;
    int n;
    nb_param *p = checkpoint_entries(m, opt, &n);
    /* The optimizer's state is range-checked before anything is written. */
    bool ok = p && nbst_load("nb_module_load", path, n, p, opts, true,
                             opt ? nbo_check_loaded_state : NULL, opt, report);
    free(p);
    if (opt) nbo_load_end(opt, ok);
    return ok;
}

bool nb_module_load_with(nb_module *m, nb_optimizer *opt, const char *path) {
    return nb_module_load_opts(m, opt, path, NULL, NULL);
}

bool nb_module_save(const nb_module *m, const char *path) {
    return nb_module_save_with(m, NULL, path);
}

bool nb_module_load(nb_module *m, const char *path) {
    return nb_module_load_with(m, NULL, path);
}
