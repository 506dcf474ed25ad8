/* Pooled memory and scopes.
 *
 * Every tensor struct lives on an intrusive list of the scope that was current when it was
 * made; ending the scope releases the structs (and their storage references) in one sweep.
 * Freed structs and data buffers go to free lists, so a steady loop of identical steps
 * reuses memory and stops calling malloc after its first step. */
#include "scope.h"

#include <stdlib.h>
#include <string.h>

struct nb_scope {
    nb_tensor *tensors;
    nbt_owned *owned;
    nb_scope *parent; /* the scope below it on the stack while pushed */
    bool on_stack;
    bool from_begin; /* made by nb_scope_begin, so nb_scope_end destroys it */
    int64_t count;
    nb_scope *next_free;
};

static nb_scope root_scope;
static nb_scope *current = &root_scope;
static uint64_t alloc_count;

uint64_t nb_alloc_count(void) { return alloc_count; }

void *nbt_malloc(size_t n) {
    alloc_count++;
    return malloc(n);
}

void nbt_free(void *p) { free(p); }

/* ---- data buffers: size classes of 4 steps per power of two ---- */
#define NUM_CLASSES 256
static nb_storage *buffer_cache[NUM_CLASSES];
static nb_storage *storage_free;

static int size_class(size_t n, size_t *rounded) {
    if (n <= 64) {
        *rounded = 64;
        return 0;
    }
    int k = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^k <= n-1 < 2^(k+1) */
    size_t step = (size_t)1 << (k - 2); /* quarters of 2^k: at most 25% waste (k >= 6 here) */
    size_t r = (n + step - 1) / step * step; /* in (2^k, 2^(k+1)], so r / step in 5..8 */
    *rounded = r;
    int cls = 4 * k + (int)(r / step) - 5;
    return cls < NUM_CLASSES ? cls : NUM_CLASSES - 1;
}

nb_storage *nbt_storage_new(size_t nbytes) {
    size_t rounded;
    int cls = size_class(nbytes ? nbytes : 1, &rounded);
    nb_storage *s = buffer_cache[cls];
    if (s && s->nbytes == rounded) {
        buffer_cache[cls] = s->next_free;
        s->refcount = 1;
        s->next_free = NULL;
        return s;
    }
    if (storage_free) {
        s = storage_free;
        storage_free = s->next_free;
    } else {
        s = nbt_malloc(sizeof *s);
        if (!s) return nbt_error("alloc", "out of memory for a storage header");
    }
    alloc_count++;
    s->data = aligned_alloc(64, (rounded + 63) / 64 * 64); /* C11: a multiple of 64 */
    if (!s->data) {
        s->next_free = storage_free;
        storage_free = s;
        return nbt_error("alloc", "out of memory allocating %zu bytes", nbytes);
    }
    s->nbytes = rounded;
    s->refcount = 1;
    s->next_free = NULL;
    return s;
}

void nbt_storage_retain(nb_storage *s) { s->refcount++; }

void nbt_storage_release(nb_storage *s) {
    if (--s->refcount > 0) return;
    size_t rounded;
    int cls = size_class(s->nbytes, &rounded);
    s->next_free = buffer_cache[cls];
    buffer_cache[cls] = s;
}

/* ---- tensor structs ---- */
static nb_tensor *tensor_free;

static void link_tensor(nb_scope *s, nb_tensor *t) {
    t->scope = s;
    t->scope_prev = NULL;
    t->scope_next = s->tensors;
    if (s->tensors) s->tensors->scope_prev = t;
    s->tensors = t;
    s->count++;
}

static void unlink_tensor(nb_tensor *t) {
    nb_scope *s = t->scope;
    if (t->scope_prev) t->scope_prev->scope_next = t->scope_next;
    else s->tensors = t->scope_next;
    if (t->scope_next) t->scope_next->scope_prev = t->scope_prev;
    s->count--;
}

static nb_tensor *tensor_struct(nb_scope *s) {
    nb_tensor *t = tensor_free;
    if (t) tensor_free = t->scope_next;
    else if (!(t = nbt_malloc(sizeof *t))) return nbt_error("alloc", "out of memory");
    /* Field by field: both callers write dtype, ndim, shape and strides up to ndim and the
     * storage, and nothing reads shape or strides past ndim. A memset of the whole struct
     * (rep stos) was 7% of a seed step. */
    t->offset = 0;
    t->storage = NULL;
    t->requires_grad = t->graph_released = false;
    t->grad = NULL;
    t->node = NULL;
    link_tensor(s, t);
    return t;
}

static void release_tensor(nb_tensor *t) {
    if (t->storage) nbt_storage_release(t->storage);
    t->scope_next = tensor_free;
    tensor_free = t;
}

nb_scope *nbt_current_scope(void) { return current; }

void nbt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

nb_tensor *nbt_new_in(nb_scope *s, const char *op, nb_dtype dt, int ndim, const int64_t *shape) {
    if (!nbt_check_shape(op, ndim, shape, dt)) return NULL;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    nb_storage *st = nbt_storage_new((size_t)n * nbt_esize(dt));
    if (!st) return NULL;
    nb_tensor *t = tensor_struct(s);
    if (!t) {
        nbt_storage_release(st);
        return NULL;
    }
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim > 0) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim); /* 0-d: shape NULL */
    nbt_contiguous_strides(ndim, shape, t->strides);
    t->storage = st;
    return t;
}

nb_tensor *nbt_new(const char *op, nb_dtype dt, int ndim, const int64_t *shape) {
    return nbt_new_in(current, op, dt, ndim, shape);
}

nb_tensor *nbt_alias(const nb_tensor *src, int ndim, const int64_t *shape, const int64_t *strides,
                     int64_t offset) {
    nb_tensor *t = tensor_struct(current);
    if (!t) return NULL;
    t->dtype = src->dtype;
    t->ndim = ndim;
    if (ndim > 0) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    if (ndim > 0) memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
    t->offset = offset;
    t->storage = src->storage;
    nbt_storage_retain(t->storage);
    return t;
}

/* ---- scopes ---- */
static nb_scope *scope_free;

void nbt_scope_own(nbt_owned *o) {
    o->scope = current;
    o->prev = NULL;
    o->next = current->owned;
    if (current->owned) current->owned->prev = o;
    current->owned = o;
}

nb_scope *nb_scope_create(void) {
    nb_scope *s = scope_free;
    if (s) scope_free = s->next_free;
    else if (!(s = nbt_malloc(sizeof *s))) return nbt_error("nb_scope_create", "out of memory");
    memset(s, 0, sizeof *s);
    return s;
}

static void clear_scope(nb_scope *s) {
    /* Owned objects (autograd nodes) first: they look at their output tensors' scopes. */
    while (s->owned) {
        nbt_owned *o = s->owned;
        s->owned = o->next;
        o->release(o);
    }
    while (s->tensors) {
        nb_tensor *t = s->tensors;
        s->tensors = t->scope_next;
        release_tensor(t);
    }
    s->count = 0;
}

void nb_scope_destroy(nb_scope *s) {
    if (!s || s == &root_scope) return;
    if (s->on_stack) {
        nbt_error("nb_scope_destroy", "the scope is still pushed; pop it first");
        return;
    }
    clear_scope(s);
    s->next_free = scope_free;
    scope_free = s;
}

void nb_scope_push(nb_scope *s) {
    if (!s || s->on_stack) {
        nbt_error("nb_scope_push", s ? "the scope is already on the stack" : "NULL scope");
        return;
    }
    s->parent = current;
    s->on_stack = true;
    current = s;
}

static void pop_current(void) {
    nb_scope *s = current;
    current = s->parent;
    s->on_stack = false;
    s->parent = NULL;
}

void nb_scope_pop(void) {
    if (current == &root_scope) {
        nbt_error("nb_scope_pop", "no scope to pop (only the root scope is current)");
        return;
    }
    /* Popping a begun scope would lose it (nobody could end or destroy it afterwards). */
    if (current->from_begin) {
        nbt_error("nb_scope_pop", "the current scope was opened by nb_scope_begin; close it "
                                  "with nb_scope_end");
        return;
    }
    pop_current();
}

void nb_scope_begin(void) {
    nb_scope *s = nb_scope_create();
    if (!s) return;
    s->from_begin = true;
    nb_scope_push(s);
}

void nb_scope_end(void) {
    nb_scope *s = current;
    if (s == &root_scope || !s->from_begin) {
        nbt_error("nb_scope_end", "the current scope was not opened by nb_scope_begin");
        return;
    }
    pop_current();
    nb_scope_destroy(s);
}

nb_tensor *nb_keep(nb_tensor *t) {
    if (!t) return NULL;
    nb_scope *s = t->scope;
    if (s != current || !s->parent) return t; /* already outside the current scope */
    unlink_tensor(t);
    link_tensor(s->parent, t);
    /* A leaf's gradient lives in the leaf's scope, so it moves too. */
    if (t->grad && t->grad->scope == s) {
        unlink_tensor(t->grad);
        link_tensor(s->parent, t->grad);
    }
    return t;
}

void nbt_release(nb_tensor *t) {
    if (!t) return;
    if (t->grad && t->grad->scope) {
        unlink_tensor(t->grad);
        release_tensor(t->grad);
    }
    unlink_tensor(t);
    release_tensor(t);
}

int64_t nb_scope_tensor_count(void) { return current->count; }

void nb_shutdown(void) {
    while (current != &root_scope) {
        nb_scope *s = current;
        pop_current();
        if (s->from_begin) nb_scope_destroy(s);
    }
    clear_scope(&root_scope);
    while (tensor_free) {
        nb_tensor *t = tensor_free;
        tensor_free = t->scope_next;
        free(t);
    }
    for (int c = 0; c < NUM_CLASSES; c++) {
        while (buffer_cache[c]) {
            nb_storage *s = buffer_cache[c];
            buffer_cache[c] = s->next_free;
            free(s->data);
            free(s);
        }
    }
    while (storage_free) {
        nb_storage *s = storage_free;
        storage_free = s->next_free;
        free(s);
    }
    while (scope_free) {
        nb_scope *s = scope_free;
        scope_free = s->next_free;
        free(s);
    }
}
