/* Internal to the module tree's own files (module.c, module_state.c, module_io.c): naming
 * and list helpers. Layers use only the public nabla/module.h. */
#ifndef NABLA_MODULE_TREE_H
#define NABLA_MODULE_TREE_H

#include "nabla/autograd.h"
#include "nabla/module.h"
#include "tensor/nbt.h"

/* "prefix.name" (or name under the root's empty path), malloc'd; NULL when out of memory. */
char *nbn_join_path(const char *prefix, const char *name);
/* The local part of a full dotted name registered on m. Points into full. */
const char *nbn_local_name(const nb_module *m, const char *full);
/* Checks that name is a valid local name not yet used by m's parameters, buffers or children;
 * the error names op, m's path and what kind of name (`what`) was being added. */
bool nbn_check_new_name(const nb_module *m, const char *op, const char *what, const char *name);
/* m's subtree's persistent buffers (those checkpoints hold), in nb_module_named_buffers' order:
 * stores up to max in out and returns how many there are. */
int nbn_saved_buffers(const nb_module *m, nb_param *out, int max);
/* Records that m is about to draw from the root's generator (nb_module_discard's rule). */
void nbn_note_draw(nb_module *m);
/* Adds a new root to the live models nbn_param_name searches (false when out of memory), and
 * removes it (a root never added is ignored). */
bool nbn_register_root(nb_module *root);
void nbn_unregister_root(const nb_module *root);
/* Makes room for one more entry in a parameter or buffer list of n entries. */
bool nbn_grow_list(nb_param **list, int *cap, int n);

#endif
