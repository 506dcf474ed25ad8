/* The live models, so that a parameter list's consumers (optimizers, the gradient reducer) can
 * name a tensor by its module path in their messages without being given the module: a
 * parameter lives in its root's scope, and the root knows its name. */
#include "module_tree.h"
#include "param_list.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static nb_module **roots;
static int nroots, cap_roots;

bool nbn_register_root(nb_module *root) {
    pthread_mutex_lock(&lock);
    bool ok = true;
    if (nroots == cap_roots) {
        int cap = cap_roots ? 2 * cap_roots : 8;
        nb_module **grown = realloc(roots, sizeof *roots * (size_t)cap);
        if (grown)
            roots = grown, cap_roots = cap;
        else
            ok = false;
    }
    if (ok) roots[nroots++] = root;
    pthread_mutex_unlock(&lock);
    return ok;
}

void nbn_unregister_root(const nb_module *root) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nroots; i++)
        if (roots[i] == root) {
            roots[i] = roots[--nroots];
            break;
        }
    if (nroots == 0) {
        free(roots);
        roots = NULL;
        cap_roots = 0;
    }
    pthread_mutex_unlock(&lock);
}

static const char *find_param(const nb_module *m, const nb_tensor *t) {
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].tensor == t) return m->params[i].name;
    for (int i = 0; i < m->nchildren; i++) {
        const char *name = find_param(m->children[i], t);
        if (name) return name;
    }
    return NULL;
}

bool nbn_param_name(const nb_tensor *t, char *buf, size_t size) {
    const char *name = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nroots && !name; i++)
        if (roots[i]->scope == t->scope) name = find_param(roots[i], t);
    if (name) snprintf(buf, size, "%s", name);
    pthread_mutex_unlock(&lock);
    return name != NULL;
}
