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

/* Tensors whose storage is smaller are left to their scope's end by nbt_release_newest and
 * by the autograd engine's release of spent gradients: releasing one costs a few hundred
 * instructions (a tenth of the seed step's backward) for memory that does not matter. */
#define NBT_RELEASE_MIN_BYTES 16384

/* True if t is worth releasing before its scope ends (NULL: no). */
static inline bool nbt_worth_releasing(const nb_tensor *t) {
    return t && t->storage && t->storage->nbytes >= NBT_RELEASE_MIN_BYTES;
}

/* Where the current scope's list of tensors stands, for nbt_release_newest. */
typedef struct {
    nb_scope *scope;
    int64_t count;
} nbt_tensor_mark;
nbt_tensor_mark nbt_tensor_mark_now(void);
/* Releases (nbt_release) each tensor made in the current scope since mark whose storage has
 * NBT_RELEASE_MIN_BYTES or more and for which keep returns false. Only tensors known to be
 * that new are visited: none if the current scope is another than mark's or the root scope
 * (shared by threads); fewer if tensors left the scope in between.
 * The autograd engine's release of what a backward made and dropped. */
void nbt_release_newest(nbt_tensor_mark mark, bool (*keep)(const nb_tensor *t, void *ctx),
                        void *ctx);

#endif
