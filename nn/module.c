/* The module tree: roots, children, names, discarding a failed constructor, modes. */
#include "module_tree.h"
#include "safetensors_file.h"

#include <stdlib.h>
#include <string.h>

char *nbn_join_path(const char *prefix, const char *name) {
    size_t a = strlen(prefix), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    if (a && b)
        sprintf(s, "%s.%s", prefix, name);
    else
        sprintf(s, "%s%s", prefix, name);
    return s;
}

const char *nbn_local_name(const nb_module *m, const char *full) {
    size_t n = strlen(m->path);
    return n == 0 ? full : strlen(full) > n ? full + n + 1 : "";
}

static bool has_name(const nb_param *list, int n, const nb_module *m, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(nbn_local_name(m, list[i].name), name) == 0) return true;
    return false;
}

bool nbn_check_new_name(const nb_module *m, const char *op, const char *what, const char *name) {
    const char *where = m->path[0] ? m->path : "(root)";
    /* An empty module name is allowed: its parameters are named as the parent's own (a lone
     * Linear under the root has "weight", as in its PyTorch state_dict). */
    bool empty_ok = strcmp(what, "module") == 0;
    if (!name || (!name[0] && !empty_ok) || strchr(name, '.')) {
        nbt_error(op, "'%s': %s name '%s' must be %scontain no '.'", where, what,
                  name ? name : "(null)", empty_ok ? "" : "non-empty and ");
        return false;
    }
    /* Refused here rather than by nb_module_save later (the saver's own rule). */
    const char *problem = name[0] ? nbst_name_problem(name) : NULL;
    if (problem) {
        nbt_error(op, "'%s': %s '%s' has %s; checkpoints could not hold it", where, what, name,
                  problem);
        return false;
    }
    const char *clash =
        has_name(m->params, m->nparams, m, name) ? "parameter"
        : has_name(m->buffers, m->nbuffers, m, name) || has_name(m->unsaved, m->nunsaved, m, name)
            ? "buffer"
            : NULL;
    for (int i = 0; !clash && i < m->nchildren; i++)
        if (strcmp(nbn_local_name(m, m->children[i]->path), name) == 0) clash = "child module";
    if (clash) nbt_error(op, "'%s' already has a %s named '%s'", where, clash, name);
    return !clash;
}

static bool grow(void **items, int *cap, int n, size_t item_size) {
    if (n < *cap) return true;
    int c = *cap ? 2 * *cap : 4;
    void *grown = realloc(*items, item_size * (size_t)c);
    if (!grown) return false;
    *items = grown;
    *cap = c;
    return true;
}

bool nbn_grow_list(nb_param **list, int *cap, int n) {
    return grow((void **)list, cap, n, sizeof **list);
}

nb_module *nb_model_new(nb_dtype dt, uint64_t seed) {
    if (dt != NB_F32 && dt != NB_F64)
        return nbt_error("model_new", "parameters must be float32 or float64, got %s",
                         nb_dtype_name(dt));
    nb_module *m = calloc(1, sizeof *m);
    if (!m) return nbt_error("model_new", "out of memory");
    m->type = strdup("Model");
    m->path = calloc(1, 1);
    m->root = m;
    m->training = true;
    m->scope = nb_scope_new();
    m->dtype = dt;
    nb_rng_seed(&m->rng, seed);
    if (!m->type || !m->path || !m->scope || !nbn_register_root(m)) {
        nb_module_free(m);
        return nbt_error("model_new", "out of memory");
    }
    return m;
}

static void free_list(nb_param *list, int n, bool release) {
    for (int i = 0; i < n; i++) {
        if (release) nbt_release(list[i].tensor);
        free((char *)list[i].name);
    }
    free(list);
}

/* Frees m's subtree; with release, also its tensors (a discarded constructor's), which
 * otherwise go with the root's scope. */
static void free_tree(nb_module *m, bool release) {
    for (int i = 0; i < m->nchildren; i++) free_tree(m->children[i], release);
    free_list(m->params, m->nparams, release);
    free_list(m->buffers, m->nbuffers, release);
    free_list(m->unsaved, m->nunsaved, release);
    free(m->children);
    free(m->path);
    free(m->type);
    free(m);
}

void nb_module_free(nb_module *root) {
    if (!root) return;
    if (root->root != root) {
        nbt_error("module_free", "'%s' is not a root module; free its model instead", root->path);
        return;
    }
    nbn_unregister_root(root);
    nb_scope_free(root->scope);
    free_tree(root, false);
}

void *nb_module_new(nb_module *parent, const char *name, const char *type, size_t size) {
    const char *op = type ? type : "module_new";
    if (!parent) return nbt_error(op, "parent is NULL; make a root with nb_model_new first");
    if (!type || size < sizeof(nb_module))
        return nbt_error(op,
                         "'%s': needs a type name and a size of at least sizeof(nb_module), "
                         "got %zu",
                         parent->path, size);
    if (!nbn_check_new_name(parent, op, "module", name)) return NULL;
    nb_module *m = calloc(1, size);
    char *path = nbn_join_path(parent->path, name), *type_copy = strdup(type);
    if (!m || !path || !type_copy ||
        !grow((void **)&parent->children, &parent->cap_children, parent->nchildren,
              sizeof *parent->children)) {
        free(m), free(path), free(type_copy);
        return nbt_error(op, "out of memory creating '%s.%s'", parent->path, name);
    }
    m->type = type_copy;
    m->path = path;
    m->root = parent->root;
    m->parent = parent;
    m->training = parent->training;
    /* The root's generator as it was, so discarding a failed constructor restores it too. */
    m->rng = m->root->rng;
    m->made = m->last_draw = ++m->root->events;
    parent->children[parent->nchildren++] = m;
    return m;
}

void nbn_note_draw(nb_module *m) {
    m->last_draw = ++m->root->events;
}

/* True if a module of t's tree outside `skip`'s subtree was made or drew after event `since`. */
static bool drawn_since(const nb_module *t, const nb_module *skip, uint64_t since) {
    if (t == skip) return false;
    if (t->made > since || t->last_draw > since) return true;
    for (int i = 0; i < t->nchildren; i++)
        if (drawn_since(t->children[i], skip, since)) return true;
    return false;
}

void *nb_module_discard(nb_module *m) {
    if (!m || !m->parent) return NULL; /* a root is freed with nb_module_free */
    /* Rewinding past a later module's draws would hand its values out again. */
    bool rewind = !drawn_since(m->root, m, m->made);
    nb_module *p = m->parent;
    for (int i = 0; i < p->nchildren; i++)
        if (p->children[i] == m) {
            memmove(&p->children[i], &p->children[i + 1],
                    sizeof *p->children * (size_t)(p->nchildren - i - 1));
            p->nchildren--;
            break;
        }
    if (rewind) m->root->rng = m->rng;
    free_tree(m, true);
    return NULL;
}

nb_module *nb_module_container(nb_module *parent, const char *name) {
    return nb_module_new(parent, name, "Container", sizeof(nb_module));
}

const char *nb_module_type(const nb_module *m) {
    return m ? m->type : NULL;
}
const char *nb_module_path(const nb_module *m) {
    return m ? m->path : NULL;
}
nb_module *nb_module_parent(const nb_module *m) {
    return m ? m->parent : NULL;
}
nb_module *nb_module_root(const nb_module *m) {
    return m ? m->root : NULL;
}
int nb_module_child_count(const nb_module *m) {
    return m ? m->nchildren : 0;
}
bool nb_module_is_training(const nb_module *m) {
    return m && m->training;
}
nb_dtype nb_module_dtype(const nb_module *m) {
    return m ? m->root->dtype : NB_F32;
}
nb_rng *nb_module_rng(nb_module *m) {
    if (!m) return NULL;
    nbn_note_draw(m);
    return &m->root->rng;
}

nb_module *nb_module_child(const nb_module *m, int i) {
    if (!m) return nbt_error("module_child", "NULL module");
    if (i < 0 || i >= m->nchildren)
        return nbt_error("module_child", "'%s' has %d children, no child %d", m->path, m->nchildren,
                         i);
    return m->children[i];
}

void nb_module_train(nb_module *m, bool training) {
    if (!m) return;
    m->training = training;
    for (int i = 0; i < m->nchildren; i++) nb_module_train(m->children[i], training);
}
