/* Scope internals: objects other than tensors (autograd nodes) that a scope owns. */
#ifndef NABLA_SCOPE_H
#define NABLA_SCOPE_H

#include "nbt.h"

/* Embed as the first member of anything a scope should release when it ends. */
typedef struct nbt_owned nbt_owned;
struct nbt_owned {
    void (*release)(nbt_owned *self); /* called at scope end, before the scope's tensors go */
    nb_scope *scope;
    nbt_owned *prev, *next;
};

/* Registers o with the current scope. */
void nbt_scope_own(nbt_owned *o);

#endif
