/* nabla modules: the model tree, parameters, buffers and checkpoints, for built-in and user
 * modules alike (every layer in nabla/nn.h is written with this header only).
 *
 * A model is a tree of modules under a root made by nb_model_new. The root owns a scope that
 * holds every parameter, its gradient and every buffer; nb_module_free(root) releases all of
 * it. A module is a C struct whose first member is nb_module:
 *
 *     typedef struct { nb_module base; nb_tensor *weight; } my_scale;
 *     my_scale *my_scale_new(nb_module *parent, const char *name, int64_t dim) {
 *         my_scale *m = nb_module_new(parent, name, "Scale", sizeof *m);
 *         if (!m) return NULL;
 *         m->weight = nb_module_add_param(&m->base, "weight", NB_SHAPE(dim), nb_init_ones());
 *         if (!m->weight) return nb_module_discard(&m->base);
 *         return m;
 *     }
 *
 * Parameters are trainable (requires_grad, returned by nb_module_named_params, so optimizers,
 * zero_grad, save and load see them). Buffers are state that is saved and loaded with the
 * parameters but never trained or zeroed (PyTorch's register_buffer): masks, running
 * statistics, rotary tables. Constructors are all-or-nothing: a constructor that fails after
 * nb_module_new calls nb_module_discard, which removes the module and everything made under
 * it, so a failed constructor leaves the model as it was. */
#ifndef NABLA_MODULE_H
#define NABLA_MODULE_H

#include "nabla/checkpoint.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_module nb_module;

/* A parameter or buffer and its dotted name ("blocks.0.attn.W_query.weight"). */
typedef nb_named_tensor nb_param;

/* Embed as the first member of a module struct. Read it through the nb_module_* accessors;
 * the fields are the library's bookkeeping. */
struct nb_module {
    char *type; /* "Linear", "MultiHeadAttention", ... */
    char *path; /* dotted path from the root ("" for the root itself) */
    nb_module *root, *parent;
    nb_module **children;
    int nchildren, cap_children;
    nb_param *params; /* this module's own parameters, full dotted names */
    int nparams, cap_params;
    nb_param *buffers; /* this module's own buffers, full dotted names */
    int nbuffers, cap_buffers;
    nb_param *unsaved; /* its non-persistent buffers (not in checkpoints) */
    int nunsaved, cap_unsaved;
    bool training;
    /* Numbers from the root's count of generator events (modules made, draws): when this
     * module was made, and its latest draw (a parameter, nb_module_rng). nb_module_discard
     * rewinds the generator only if nothing outside the discarded subtree drew since. */
    uint64_t made, last_draw;
    /* root only */
    nb_scope *scope;
    nb_rng rng;
    nb_dtype dtype;
    uint64_t events;
};

/* ---- Models and the module tree ------------------------------------------------------ */
/* A root module (type "Model") whose descendants draw their initial values from a generator
 * seeded with seed and hold parameters of dtype dt. Caller owns; free with nb_module_free. */
nb_module *nb_model_new(nb_dtype dt, uint64_t seed);
/* Frees the root's whole tree and every parameter, gradient and buffer in its scope.
 * Only roots can be freed; a child's memory belongs to its root. */
void nb_module_free(nb_module *root);
/* Allocates a zeroed module struct of `size` bytes (at least sizeof(nb_module); its first
 * member is the nb_module) as child `name` of parent, with type name `type` (copied) and
 * training mode inherited. The name must be without '.', valid UTF-8 and not "__metadata__"
 * (checkpoints could not hold it; the same for parameter and buffer names), and unique among
 * the parent's children, parameters and buffers. It may be empty: then it adds nothing to
 * its tensors' names (a lone Linear under the root has "weight", as in its PyTorch
 * state_dict). Checkpoints do not need that any more: they name tensors relative to the
 * module saved or loaded, whatever its name (nb_module_save). Owned by the root; NULL with an
 * error naming type and path. */
void *nb_module_new(nb_module *parent, const char *name, const char *type, size_t size);
/* A plain container child (for grouping, e.g. "blocks"); owned by the root. */
nb_module *nb_module_container(nb_module *parent, const char *name);
/* For a constructor that fails after nb_module_new: detaches m from its parent, releases m,
 * its children and all their parameters and buffers, and rewinds the model's generator to
 * where it was when m was made, so the model is as if m had never been built. Nothing may use
 * m or its tensors afterwards. The error message is kept. A root is left alone (free it with
 * nb_module_free). Always returns NULL, for `return nb_module_discard(&m->base);`.
 * If anything outside m drew from the generator after m was made (a later sibling, a
 * parameter of m's parent, nb_module_rng), the generator is not rewound: the modules built
 * later keep their values and the next module does not repeat them. */
void *nb_module_discard(nb_module *m);

/* Accessors. Strings are owned by the module. */
const char *nb_module_type(const nb_module *m);
/* Dotted path from the root ("" for the root); use it in error messages. */
const char *nb_module_path(const nb_module *m);
nb_module *nb_module_parent(const nb_module *m); /* NULL for a root */
nb_module *nb_module_root(const nb_module *m);
/* Direct children in creation order: count, and child i (NULL with an error out of range). */
int nb_module_child_count(const nb_module *m);
nb_module *nb_module_child(const nb_module *m, int i);
/* True in training mode (nb_module_train), false in evaluation mode. */
bool nb_module_is_training(const nb_module *m);
/* The dtype of the model's parameters. */
nb_dtype nb_module_dtype(const nb_module *m);
/* The model's seeded generator (e.g. to seed a module's own dropout generator), counted as a
 * draw by m (see nb_module_discard). Owned by the root. */
nb_rng *nb_module_rng(nb_module *m);

/* ---- Parameters and buffers --------------------------------------------------------------- */
/* How a new parameter is filled. Make one with the nb_init_* functions below. */
typedef enum {
    NB_INIT_CONSTANT, /* every element a */
    NB_INIT_UNIFORM,  /* uniform in [a, b) */
    NB_INIT_NORMAL    /* normal with mean a and standard deviation b */
} nb_init_kind;
typedef struct {
    nb_init_kind kind;
    double a, b;
} nb_init;
static inline nb_init nb_init_constant(double value) {
    return (nb_init){NB_INIT_CONSTANT, value, 0};
}
static inline nb_init nb_init_zeros(void) {
    return nb_init_constant(0);
}
static inline nb_init nb_init_ones(void) {
    return nb_init_constant(1);
}
/* Uniform in [-bound, bound). */
static inline nb_init nb_init_uniform(double bound) {
    return (nb_init){NB_INIT_UNIFORM, -bound, bound};
}
static inline nb_init nb_init_normal(double mean, double std) {
    return (nb_init){NB_INIT_NORMAL, mean, std};
}
/* PyTorch's nn.Linear default for weight and bias alike: kaiming_uniform(a=sqrt(5)) on the
 * weight is uniform in +-1/sqrt(fan_in), and the bias uses the same bound. */
nb_init nb_init_linear(int64_t fan_in);
/* PyTorch's nn.Embedding default: N(0, 1). */
static inline nb_init nb_init_embedding(void) {
    return nb_init_normal(0, 1);
}

/* A new parameter `name` of m: a tensor of the model's dtype and this shape in the root's
 * scope, filled by init from the model's generator, requires_grad set. Owned by the model;
 * NULL with an error naming m's path (bad init, duplicate name, out of memory). */
nb_tensor *nb_module_add_param(nb_module *m, const char *name, int ndim, const int64_t *shape,
                               nb_init init);
/* A new buffer `name` of m: a contiguous copy of value (any dtype; value is not kept) in the
 * root's scope, without requires_grad. Saved and loaded with the parameters, printed with
 * them, never given to optimizers or zeroed. Update it in place (nb_copy_, nb_fill_). Owned by
 * the model; NULL with an error naming m's path. */
nb_tensor *nb_module_add_buffer(nb_module *m, const char *name, const nb_tensor *value);

/* A buffer left out of checkpoints (PyTorch's register_buffer(..., persistent=False)): state
 * derived from the configuration, such as rotary cos/sin tables, which a PyTorch state_dict
 * does not hold either. Otherwise as nb_module_add_buffer. Owned by the model. */
nb_tensor *nb_module_add_nonpersistent_buffer(nb_module *m, const char *name,
                                              const nb_tensor *value);

/* Number of parameter tensors in m's subtree, and their total element count. */
int nb_module_param_count(const nb_module *m);
int64_t nb_module_param_numel(const nb_module *m);
/* Fills out (capacity max) with m's subtree's parameters in a stable order: a module's own
 * parameters in creation order, then its children depth-first in creation order. Names and
 * tensors are owned by the model. Returns the count, or -1 with an error if max is too small. */
int nb_module_named_params(const nb_module *m, nb_param *out, int max);
/* The parameter with this dotted name, or NULL with an error. Owned by the model. */
nb_tensor *nb_module_param(const nb_module *m, const char *name);
/* m's subtree's parameter tensors, in nb_module_named_params order, as a new array of *count
 * pointers for optimizers and nb_clip_grad_norm (PyTorch's model.parameters()). The caller
 * frees the array with free(); the tensors belong to the model. NULL with an error. */
nb_tensor **nb_module_param_tensors(const nb_module *m, int *count);
/* The same three for buffers, persistent and not: each module's persistent buffers, then its
 * non-persistent ones, then its children's. */
int nb_module_buffer_count(const nb_module *m);
int nb_module_named_buffers(const nb_module *m, nb_param *out, int max);
nb_tensor *nb_module_buffer(const nb_module *m, const char *name);

/* Zeroes every parameter gradient in the subtree (buffers are left alone). */
void nb_module_zero_grad(nb_module *m);
/* Sets requires_grad on every parameter in m's subtree (torch's Module.requires_grad_): false
 * freezes them (backward gives them no gradient, optimizers and nb_train skip them), true
 * trains them again. Buffers are left alone. False with an error for a NULL m. */
bool nb_module_requires_grad_(nb_module *m, bool requires_grad);
/* Training mode (dropout active) or evaluation mode, for the whole subtree. */
void nb_module_train(nb_module *m, bool training);
/* Prints a table of names, shapes and counts: parameters, then buffers marked (buffer), and
 * "not saved" for non-persistent ones. Errors (no output) for a NULL argument. */
void nb_module_fprint(FILE *f, const nb_module *m);

/* ---- Checkpoints ------------------------------------------------------------------------ */
/* How names are matched. A checkpoint names each tensor relative to the module saved: its
 * dotted path below m, without m's own path (PyTorch's m.state_dict() names), so
 * nb_module_save(lm) writes "tok_emb.weight" whether lm is the root's child "lm", "" or
 * deeper. A load matches names relative to the module loaded in the same way, so a checkpoint
 * loads into a model whatever its root's or its own name. Files named from further up load
 * too: when the names as they are do not all match, a prefix carried by every file name
 * ("lm.tok_emb.weight" for the module's "tok_emb.weight": saved from the root of a tree
 * holding the module as "lm") or by every one of the module's names (loading into that root a
 * file saved from the module) is removed where that matches more tensors; such a prefix is
 * found as what a name on one side has in front of a whole name of the other. Optimizer state
 * ("optim." names) is never prefixed. nb_load_report says which prefix was removed. */

/* Saves every parameter and persistent buffer of m's subtree under its name relative to m to
 * a safetensors file (written to a temporary file and renamed, so a failed save leaves an
 * older file intact). */
bool nb_module_save(const nb_module *m, const char *path);
/* Loads every parameter and persistent buffer of m's subtree from a safetensors file written by
 * nb_module_save or PyTorch's state_dict (names matched as above, same dtypes and shapes,
 * nothing extra). On any problem returns false with an error that lists every missing,
 * unexpected and mismatched tensor by name, and leaves every tensor unchanged. */
bool nb_module_load(nb_module *m, const char *path);
/* The same with an optimizer's state too (moments, step counts), stored under "optim." names
 * next to the parameters, so training can resume exactly. opt may be NULL. Loading is
 * all-or-nothing across parameters, buffers and optimizer state alike. */
typedef struct nb_optimizer nb_optimizer;
bool nb_module_save_with(const nb_module *m, nb_optimizer *opt, const char *path);
bool nb_module_load_with(nb_module *m, nb_optimizer *opt, const char *path);
/* nb_module_load_with with options (NULL: strict): a partial load, F32/F64 conversion, a name
 * map (nabla/checkpoint.h's nb_load_opts), and a report of what was loaded, skipped and
 * refused (may be NULL; filled on success and failure, freed by the caller with
 * nb_load_report_free). Still all or nothing: a refused load changes no tensor. */
bool nb_module_load_opts(nb_module *m, nb_optimizer *opt, const char *path,
                         const nb_load_opts *opts, nb_load_report *report);
/* nb_module_save_with, also writing n_meta string entries into the file's __metadata__ (see
 * nb_safetensors_save_with_metadata); read them back with nb_safetensors_read_metadata. */
bool nb_module_save_with_metadata(const nb_module *m, nb_optimizer *opt, const char *path,
                                  int n_meta, const nb_metadata_entry *meta);

#ifdef __cplusplus
}
#endif
#endif
