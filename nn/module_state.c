/* What a module holds: parameters (with their initialisers) and buffers, looked up, counted,
 * zeroed and printed over a subtree. */
#include "module_tree.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

nb_init nb_init_linear(int64_t fan_in) {
    /* NaN bounds make nb_module_add_param refuse the init with a message. */
    double bound = fan_in > 0 ? 1.0 / sqrt((double)fan_in) : NAN;
    return nb_init_uniform(bound);
}

static const char *where(const nb_module *m) {
    return m->path[0] ? m->path : "(root)";
}

static bool valid_init(const nb_module *m, nb_init init) {
    bool ok = isfinite(init.a) && isfinite(init.b);
    if (init.kind == NB_INIT_UNIFORM)
        ok = ok && init.a <= init.b;
    else if (init.kind == NB_INIT_NORMAL)
        ok = ok && init.b >= 0;
    else
        ok = ok && init.kind == NB_INIT_CONSTANT;
    if (!ok)
        nbt_error(m->type,
                  "'%s': invalid initialiser (kind %d, %g, %g); nb_init_linear needs "
                  "fan_in > 0",
                  where(m), (int)init.kind, init.a, init.b);
    return ok;
}

/* N(mean, std) from the standard normal draws nb_randn makes, so N(0, 1) gives its bits. */
static void scale_shift(nb_tensor *t, double mean, double std) {
    if (mean == 0 && std == 1) return;
    int64_t n = nb_numel(t);
    if (t->dtype == NB_F32)
        for (float *p = nb_data(t); n-- > 0; p++) *p = (float)(mean + std * *p);
    else
        for (double *p = nb_data(t); n-- > 0; p++) *p = mean + std * *p;
}

static nb_tensor *initial_value(nb_module *root, int ndim, const int64_t *shape, nb_init init) {
    switch (init.kind) {
    case NB_INIT_UNIFORM:
        return nb_uniform(&root->rng, root->dtype, ndim, shape, init.a, init.b);
    case NB_INIT_NORMAL: {
        nb_tensor *t = nb_randn(&root->rng, root->dtype, ndim, shape);
        if (t) scale_shift(t, init.a, init.b);
        return t;
    }
    default:
        return nb_full(root->dtype, ndim, shape, init.a);
    }
}

/* Re-records the error that made a parameter or buffer fail with m's path in front. */
static void *failed(const nb_module *m, const char *what, const char *name) {
    char cause[512];
    snprintf(cause, sizeof cause, "%s", nb_last_error());
    return nbt_error(m->type, "'%s': %s '%s': %s", where(m), what, name, cause);
}

/* Appends (full name of `name`, t) to a parameter or buffer list of m; false with an error. */
/* The lists a module holds, as bits of a set. */
enum { PARAMS = 1, SAVED_BUFFERS = 2, UNSAVED_BUFFERS = 4, BUFFERS = 6 };

static nb_tensor *find(const nb_module *m, int lists, const char *name);

static bool append(nb_module *m, nb_param **list, int *n, int *cap, const char *name,
                   nb_tensor *t) {
    char *full = nbn_grow_list(list, cap, *n) ? nbn_join_path(m->path, name) : NULL;
    if (!full) return nbt_error(m->type, "'%s': out of memory adding '%s'", where(m), name), false;
    /* Names are unique within a module already; this catches a clash through a child module
     * with an empty name, whose tensors are named like its parent's. */
    if (find(m->root, PARAMS | BUFFERS, full)) {
        nbt_error(m->type, "'%s': the model already has a tensor named '%s'", where(m), full);
        free(full);
        return false;
    }
    (*list)[(*n)++] = (nb_param){full, t};
    return true;
}

nb_tensor *nb_module_add_param(nb_module *m, const char *name, int ndim, const int64_t *shape,
                               nb_init init) {
    if (!m) return nbt_error("module_add_param", "NULL module");
    if (!nbn_check_new_name(m, m->type, "parameter", name) || !valid_init(m, init)) return NULL;
    nb_module *root = m->root;
    if (init.kind != NB_INIT_CONSTANT) nbn_note_draw(m);
    /* Made while the root's scope is current, so it lives as long as the model. */
    nb_scope_push(root->scope);
    nb_tensor *t = initial_value(root, ndim, shape, init);
    nb_scope_pop();
    if (!t) return failed(m, "parameter", name);
    nb_requires_grad_(t, true);
    if (!append(m, &m->params, &m->nparams, &m->cap_params, name, t)) return nbt_release(t), NULL;
    return t;
}

static nb_tensor *add_buffer(nb_module *m, const char *name, const nb_tensor *value, bool saved) {
    if (!m || !value) return nbt_error("module_add_buffer", "NULL %s", m ? "value" : "module");
    if (!nbn_check_new_name(m, m->type, "buffer", name)) return NULL;
    nb_scope_push(m->root->scope);
    nb_tensor *t = nb_clone(value);
    nb_scope_pop();
    if (!t) return failed(m, "buffer", name);
    bool ok = saved ? append(m, &m->buffers, &m->nbuffers, &m->cap_buffers, name, t)
                    : append(m, &m->unsaved, &m->nunsaved, &m->cap_unsaved, name, t);
    return ok ? t : (nbt_release(t), NULL);
}

nb_tensor *nb_module_add_buffer(nb_module *m, const char *name, const nb_tensor *value) {
    return add_buffer(m, name, value, true);
}

nb_tensor *nb_module_add_nonpersistent_buffer(nb_module *m, const char *name,
                                              const nb_tensor *value) {
    return add_buffer(m, name, value, false);
}

/* ---- queries over a subtree, for a set of the lists each module holds ---- */

static const nb_param *own(const nb_module *m, int list, int *n) {
    *n = list == PARAMS ? m->nparams : list == SAVED_BUFFERS ? m->nbuffers : m->nunsaved;
    return list == PARAMS ? m->params : list == SAVED_BUFFERS ? m->buffers : m->unsaved;
}

/* Visits the entries of `lists` in a stable order: a module's own (parameters, then saved
 * buffers, then unsaved ones, each in creation order), then its children depth-first.
 * Stores up to max of them in out (may be NULL) from index k; returns the next index. Stops
 * at the first entry named `name` if name is not NULL (*found receives it). */
static int walk(const nb_module *m, int lists, nb_param *out, int max, int k, const char *name,
                nb_tensor **found) {
    for (int list = PARAMS; list <= UNSAVED_BUFFERS; list <<= 1) {
        if (!(lists & list)) continue;
        int n;
        const nb_param *own_list = own(m, list, &n);
        for (int i = 0; i < n; i++, k++) {
            if (name && strcmp(own_list[i].name, name) == 0) {
                *found = own_list[i].tensor;
                return k;
            }
            if (out && k < max) out[k] = own_list[i];
        }
    }
    for (int i = 0; i < m->nchildren && !(name && *found); i++)
        k = walk(m->children[i], lists, out, max, k, name, found);
    return k;
}

static nb_tensor *find(const nb_module *m, int lists, const char *name) {
    nb_tensor *found = NULL;
    walk(m, lists, NULL, 0, 0, name, &found);
    return found;
}

static int list_all(const nb_module *m, int lists, nb_param *out, int max) {
    const char *op = lists == PARAMS ? "module_named_params" : "module_named_buffers";
    if (!m || (!out && max > 0)) return nbt_error(op, "NULL argument"), -1;
    int n = walk(m, lists, out, max, 0, NULL, NULL);
    if (n > max)
        return nbt_error(op, "'%s' has %d %s, room for only %d", m->path[0] ? m->path : m->type, n,
                         lists == PARAMS ? "parameters" : "buffers", max),
               -1;
    return n;
}

static nb_tensor *find_named(const nb_module *m, int lists, const char *name) {
    const char *op = lists == PARAMS ? "module_param" : "module_buffer";
    if (!m || !name) return nbt_error(op, "NULL argument");
    nb_tensor *t = find(m, lists, name);
    if (!t)
        return nbt_error(op, "no %s named '%s'", lists == PARAMS ? "parameter" : "buffer", name);
    return t;
}

int nb_module_param_count(const nb_module *m) {
    return m ? walk(m, PARAMS, NULL, 0, 0, NULL, NULL) : 0;
}
int nb_module_buffer_count(const nb_module *m) {
    return m ? walk(m, BUFFERS, NULL, 0, 0, NULL, NULL) : 0;
}
int nb_module_named_params(const nb_module *m, nb_param *out, int max) {
    return list_all(m, PARAMS, out, max);
}
int nb_module_named_buffers(const nb_module *m, nb_param *out, int max) {
    return list_all(m, BUFFERS, out, max);
}
nb_tensor *nb_module_param(const nb_module *m, const char *name) {
    return find_named(m, PARAMS, name);
}
nb_tensor *nb_module_buffer(const nb_module *m, const char *name) {
    return find_named(m, BUFFERS, name);
}

int nbn_saved_buffers(const nb_module *m, nb_param *out, int max) {
    return walk(m, SAVED_BUFFERS, out, max, 0, NULL, NULL);
}

int64_t nb_module_param_numel(const nb_module *m) {
    if (!m) return 0;
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++) n += nb_numel(m->params[i].tensor);
    for (int i = 0; i < m->nchildren; i++) n += nb_module_param_numel(m->children[i]);
    return n;
}

void nb_module_zero_grad(nb_module *m) {
    if (!m) return;
    for (int i = 0; i < m->nparams; i++) nb_zero_grad(m->params[i].tensor);
    for (int i = 0; i < m->nchildren; i++) nb_module_zero_grad(m->children[i]);
}

bool nb_module_requires_grad_(nb_module *m, bool requires_grad) {
    if (!m) return nbt_error("nb_module_requires_grad_", "NULL module"), false;
    for (int i = 0; i < m->nparams; i++) nb_requires_grad_(m->params[i].tensor, requires_grad);
    for (int i = 0; i < m->nchildren; i++) nb_module_requires_grad_(m->children[i], requires_grad);
    return true;
}

static void print_tree(FILE *f, const nb_module *m, int64_t *buffer_numel) {
    for (int i = 0; i < m->nparams; i++) {
        const nb_tensor *t = m->params[i].tensor;
        fprintf(f, "  %-40s %-16s %10lld\n", m->params[i].name, nbt_shape(t),
                (long long)nb_numel(t));
    }
    for (int list = SAVED_BUFFERS; list <= UNSAVED_BUFFERS; list <<= 1) {
        int n;
        const nb_param *buffers = own(m, list, &n);
        for (int i = 0; i < n; i++) {
            const nb_tensor *t = buffers[i].tensor;
            fprintf(f, "  %-40s %-16s %10lld  (buffer, %s%s)\n", buffers[i].name, nbt_shape(t),
                    (long long)nb_numel(t), nb_dtype_name(t->dtype),
                    list == UNSAVED_BUFFERS ? ", not saved" : "");
            *buffer_numel += nb_numel(t);
        }
    }
    for (int i = 0; i < m->nchildren; i++) print_tree(f, m->children[i], buffer_numel);
}

void nb_module_fprint(FILE *f, const nb_module *m) {
    if (!f || !m) {
        nbt_error("nb_module_fprint", "NULL %s", f ? "module" : "file");
        return;
    }
    fprintf(f, "%s '%s' (%s, %s)\n", m->type, m->path, nb_dtype_name(m->root->dtype),
            m->training ? "train" : "eval");
    int64_t buffer_numel = 0;
    print_tree(f, m, &buffer_numel);
    fprintf(f, "  %d tensors, %lld parameters", nb_module_param_count(m),
            (long long)nb_module_param_numel(m));
    int nbuf = nb_module_buffer_count(m);
    if (nbuf) fprintf(f, "; %d buffers, %lld elements", nbuf, (long long)buffer_numel);
    fputc('\n', f);
}
