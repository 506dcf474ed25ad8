/* The module tree: names, parameters in the root's scope, traversal, modes. */
#include "module.h"

#include <stdlib.h>
#include <string.h>

static char *join_path(const char *prefix, const char *name) {
    size_t a = strlen(prefix), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    if (a && b) sprintf(s, "%s.%s", prefix, name);
    else sprintf(s, "%s%s", prefix, name);
    return s;
}

nb_module *nb_model_new(nb_dtype dt, uint64_t seed) {
    if (dt != NB_F32 && dt != NB_F64)
        return nbt_error("model_new", "parameters must be float32 or float64, got %s",
                         nb_dtype_name(dt));
    nb_module *m = calloc(1, sizeof *m);
    if (!m) return nbt_error("model_new", "out of memory");
    m->type = "Model";
    m->path = calloc(1, 1);
    m->root = m;
    m->training = true;
    m->scope = nb_scope_create();
    m->dtype = dt;
    nb_rng_seed(&m->rng, seed);
    if (!m->path || !m->scope) {
        nb_module_free(m);
        return nbt_error("model_new", "out of memory");
    }
    return m;
}

static void free_tree(nb_module *m) {
    for (int i = 0; i < m->nchildren; i++) free_tree(m->children[i]);
    for (int i = 0; i < m->nparams; i++) free((char *)m->params[i].name);
    free(m->children);
    free(m->params);
    free(m->path);
    free(m);
}

void nb_module_free(nb_module *root) {
    if (!root) return;
    if (root->root != root) {
        nbt_error("module_free", "'%s' is not a root module; free its model instead", root->path);
        return;
    }
    nb_scope_destroy(root->scope);
    free_tree(root);
}

void *nbn_module_new(nb_module *parent, const char *name, const char *type, size_t size) {
    if (!parent) return nbt_error(type, "parent is NULL; make a root with nb_model_new first");
    if (!name || strchr(name, '.'))
        return nbt_error(type, "module name '%s' must be non-NULL and contain no '.'",
                         name ? name : "(null)");
    nb_module *m = calloc(1, size);
    char *path = join_path(parent->path, name);
    if (parent->nchildren == parent->cap_children) {
        int cap = parent->cap_children ? 2 * parent->cap_children : 4;
        nb_module **grown = realloc(parent->children, sizeof *grown * (size_t)cap);
        if (grown) parent->children = grown, parent->cap_children = cap;
    }
    if (!m || !path || parent->nchildren == parent->cap_children) {
        free(m);
        free(path);
        return nbt_error(type, "out of memory");
    }
    m->type = type;
    m->path = path;
    m->root = parent->root;
    m->parent = parent;
    m->training = parent->training;
    parent->children[parent->nchildren++] = m;
    return m;
}

nb_module *nb_module_container(nb_module *parent, const char *name) {
    return nbn_module_new(parent, name, "Container", sizeof(nb_module));
}

nb_tensor *nbn_add_param(nb_module *m, const char *name, nb_tensor *t) {
    if (!t) return NULL;
    if (m->nparams == m->cap_params) {
        int cap = m->cap_params ? 2 * m->cap_params : 4;
        nb_param *grown = realloc(m->params, sizeof *grown * (size_t)cap);
        if (!grown) return nbt_error(m->type, "out of memory");
        m->params = grown;
        m->cap_params = cap;
    }
    char *full = join_path(m->path, name);
    if (!full) return nbt_error(m->type, "out of memory");
    nb_requires_grad_(t, true);
    m->params[m->nparams++] = (nb_param){full, t};
    return t;
}

/* Parameters are made while the root's scope is current, so they live as long as the model. */
static nb_tensor *make_param(nb_module *m, const char *name, int ndim, const int64_t *shape,
                             int kind, double a) {
    nb_module *root = m->root;
    nb_scope_push(root->scope);
    nb_tensor *t = kind == 0   ? nb_uniform(&root->rng, root->dtype, ndim, shape, -a, a)
                   : kind == 1 ? nb_randn(&root->rng, root->dtype, ndim, shape)
                               : nb_full(root->dtype, ndim, shape, a);
    nb_scope_pop();
    return nbn_add_param(m, name, t);
}

nb_tensor *nbn_param_uniform(nb_module *m, const char *name, int ndim, const int64_t *shape,
                             double bound) {
    return make_param(m, name, ndim, shape, 0, bound);
}

nb_tensor *nbn_param_normal(nb_module *m, const char *name, int ndim, const int64_t *shape) {
    return make_param(m, name, ndim, shape, 1, 0);
}

nb_tensor *nbn_param_fill(nb_module *m, const char *name, int ndim, const int64_t *shape,
                          double value) {
    return make_param(m, name, ndim, shape, 2, value);
}

int nb_module_param_count(const nb_module *m) {
    if (!m) return 0;
    int n = m->nparams;
    for (int i = 0; i < m->nchildren; i++) n += nb_module_param_count(m->children[i]);
    return n;
}

int64_t nb_module_numel(const nb_module *m) {
    if (!m) return 0;
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++) n += nb_numel(m->params[i].tensor);
    for (int i = 0; i < m->nchildren; i++) n += nb_module_numel(m->children[i]);
    return n;
}

static int collect(const nb_module *m, nb_param *out, int max, int k) {
    for (int i = 0; i < m->nparams; i++) {
        if (k < max) out[k] = m->params[i];
        k++;
    }
    for (int i = 0; i < m->nchildren; i++) k = collect(m->children[i], out, max, k);
    return k;
}

int nb_module_params(const nb_module *m, nb_param *out, int max) {
    if (!m || (!out && max > 0)) return nbt_error("module_params", "NULL argument"), -1;
    int n = collect(m, out, max, 0);
    if (n > max)
        return nbt_error("module_params", "'%s' has %d parameters, room for only %d",
                         m->path[0] ? m->path : m->type, n, max), -1;
    return n;
}

static nb_tensor *find_param(const nb_module *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return m->params[i].tensor;
    for (int i = 0; i < m->nchildren; i++) {
        nb_tensor *t = find_param(m->children[i], name);
        if (t) return t;
    }
    return NULL;
}

nb_tensor *nb_module_param(const nb_module *m, const char *name) {
    if (!m || !name) return nbt_error("module_param", "NULL argument");
    nb_tensor *t = find_param(m, name);
    if (!t) return nbt_error("module_param", "no parameter named '%s'", name);
    return t;
}

void nb_module_zero_grad(nb_module *m) {
    if (!m) return;
    for (int i = 0; i < m->nparams; i++) nb_zero_grad(m->params[i].tensor);
    for (int i = 0; i < m->nchildren; i++) nb_module_zero_grad(m->children[i]);
}

void nb_module_train(nb_module *m, bool training) {
    if (!m) return;
    m->training = training;
    for (int i = 0; i < m->nchildren; i++) nb_module_train(m->children[i], training);
}

static void print_tree(FILE *f, const nb_module *m) {
    for (int i = 0; i < m->nparams; i++) {
        const nb_tensor *t = m->params[i].tensor;
        fprintf(f, "  %-40s %-16s %10lld\n", m->params[i].name, nbt_shape(t),
                (long long)nb_numel(t));
    }
    for (int i = 0; i < m->nchildren; i++) print_tree(f, m->children[i]);
}

void nb_module_fprint(FILE *f, const nb_module *m) {
    if (!f) {
        nbt_error("nb_module_fprint", "NULL file");
        return;
    }
    if (!m) return;
    fprintf(f, "%s '%s' (%s, %s)\n", m->type, m->path, nb_dtype_name(m->root->dtype),
            m->training ? "train" : "eval");
    print_tree(f, m);
    fprintf(f, "  %d tensors, %lld parameters\n", nb_module_param_count(m),
            (long long)nb_module_numel(m));
}
