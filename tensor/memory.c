/* Pooled memory and scopes.
 *
 * Every tensor struct lives on an intrusive list of the scope that was current when it was
 * made; ending the scope releases the structs (and their storage references) in one sweep.
 * Freed structs and data buffers go to free lists, so a steady loop of identical steps
 * reuses memory and stops calling malloc after its first step. */
#include "isa.h"
#include "scope.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct nb_scope {
    nb_tensor *tensors;
    nbt_owned *owned;
    nb_scope *parent; /* the scope below it on the stack while pushed */
    bool on_stack;
    bool from_begin; /* made by nb_scope_begin, so nb_scope_end destroys it */
    bool destroyed;  /* on a free list: destroying or pushing it again is an error */
    int64_t count;
    nb_scope *next_free;
};

/* The root scope is shared by every thread (tensors made outside any scope), so its lists
 * are changed under root_lock; every other scope is used by one thread at a time. */
static nb_scope root_scope;
static pthread_mutex_t root_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t alloc_count;

/* A released tensor struct's scope: nbt_check_live reports a use of a handle to it. */
nb_scope nbt_released_marker;

/* Quarantine, in every build: released tensor structs wait, poisoned, before a new tensor may
 * have them, so a handle kept past its scope's end is reported instead of reading whatever
 * tensor got its struct (a plain LIFO free list hands the last released struct to the next
 * tensor made: the next step's loss got the old loss's struct). The structs one scope end
 * releases are one batch, the chain the scope's list already is, so the hot path adds one
 * store per tensor (the marker) and a few operations per scope end (a first version, a ring
 * of one pointer per struct with more stores, cost 1.2% of the seed step's instructions,
 * this one 0.3%: docs/design.md). A batch goes to the free list once at
 * least QUARANTINE structs were released after it; the quarantine holds about that many
 * (200 KB), or the last batch when one scope releases more. */
#define QUARANTINE 1024
/* Batches in the ring (a power of two, for the mask). When it is full a new batch joins the
 * newest one, which only delays reuse. */
#define QUARANTINE_BATCHES 64
typedef struct {
    nb_tensor *head, *tail; /* chained by scope_next */
    int64_t n;
} released_batch;

/* Each thread has its own current scope and its own free lists: nothing on the hot path is
 * shared or locked. Memory released by a thread goes to that thread's lists (whichever thread
 * made it); a thread's lists are freed when it exits, or by nb_shutdown. */
#define NUM_CLASSES 256
typedef struct {
    nb_tensor *tensor_free;
    nb_storage *buffer_cache[NUM_CLASSES];
    nb_storage *storage_free;
    nb_scope *scope_free;
    bool exit_hook; /* flush_pools is registered to run when this thread exits */
    released_batch quarantine[QUARANTINE_BATCHES]; /* a ring, oldest at quarantine_first */
    int quarantine_first, quarantine_batches;
    int64_t quarantined; /* structs in the quarantine */
    /* Struct mallocs not counted by nb_alloc_count: made while a plain free list would still
     * have held some of the quarantined structs, so the quarantine's own structs are not
     * counted and a steady loop still counts none after its first step. */
    int64_t quarantine_mallocs;
    uint64_t born_tag, born_count; /* nbt_storage_mark's sequence: a thread tag, a count */
#if NABLA_DEBUG_CHECKS
    nb_scope *destroyed_scopes; /* made by nb_scope_new, never reused */
#endif
} thread_pools;

static _Thread_local nb_scope *current = &root_scope;
static _Thread_local thread_pools pools;

uint64_t nb_alloc_count(void) {
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}

static void count_alloc(void) {
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
}

void *nbt_malloc(size_t n) {
    count_alloc();
    return malloc(n);
}

void nbt_free(void *p) {
    free(p);
}

/* Released buffers are poisoned for AddressSanitizer while they wait in a cache: a read through
 * a stale data pointer is reported instead of returning another tensor's data. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static void flush_pools(void *unused);
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static void make_exit_key(void) {
    pthread_key_create(&exit_key, flush_pools);
}

/* Called before anything is put on this thread's lists. */
static inline void pools_in_use(void) {
    if (pools.exit_hook) return;
    pthread_once(&exit_key_once, make_exit_key);
    pthread_setspecific(exit_key, &pools); /* any non-NULL value makes the destructor run */
    pools.exit_hook = true;
}

/* ---- data buffers: size classes of 4 steps per power of two ---- */

/* A storage's birth: the thread's tag from bit BORN_TAG_SHIFT up, its count of storages
 * handed out below (2^44 of them, a thousand years of steps). */
#define BORN_TAG_SHIFT 44
static atomic_uint_fast64_t born_tags;

static inline uint64_t born_now(void) {
    if (!pools.born_tag) pools.born_tag = atomic_fetch_add(&born_tags, 1) + 1;
    return pools.born_tag << BORN_TAG_SHIFT | pools.born_count;
}

uint64_t nbt_storage_mark(void) {
    return born_now();
}

bool nbt_storage_made_since(const nb_storage *s, uint64_t mark) {
    return s->born >> BORN_TAG_SHIFT == mark >> BORN_TAG_SHIFT && s->born > mark;
}

/* s is handed out now: one more in this thread's count, and s's birth. */
static inline void stamp_birth(nb_storage *s) {
    pools.born_count++;
    s->born = born_now();
}

static int size_class(size_t n, size_t *rounded) {
    if (n <= 64) {
        *rounded = 64;
        return 0;
    }
    int k = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^k <= n-1 < 2^(k+1) */
    size_t step = (size_t)1 << (k - 2);      /* quarters of 2^k: at most 25% waste (k >= 6 here) */
    size_t r = (n + step - 1) / step * step; /* in (2^k, 2^(k+1)], so r / step in 5..8 */
    *rounded = r;
    int cls = 4 * k + (int)(r / step) - 5;
    return cls < NUM_CLASSES ? cls : NUM_CLASSES - 1;
}

#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
static _Thread_local int64_t fail_countdown = -1;

void nbt_fail_storage_after(int64_t n) {
    fail_countdown = n < 0 ? -1 : n;
}
#endif

nb_storage *nbt_storage_new(size_t nbytes) {
#ifdef NABLA_TESTS
    if (fail_countdown >= 0 && fail_countdown-- == 0)
        return nbt_error("alloc", "out of memory allocating %zu bytes (test hook)", nbytes);
#endif
    size_t rounded;
    int cls = size_class(nbytes ? nbytes : 1, &rounded);
    nb_storage *s = pools.buffer_cache[cls];
    if (s && s->nbytes == rounded) {
        pools.buffer_cache[cls] = s->next_free;
        UNPOISON(s->data, s->nbytes);
        s->refcount = 1;
        s->next_free = NULL;
        stamp_birth(s);
        return s;
    }
    if (pools.storage_free) {
        s = pools.storage_free;
        pools.storage_free = s->next_free;
    } else {
        s = nbt_malloc(sizeof *s);
        if (!s) return nbt_error("alloc", "out of memory for a storage header");
    }
    count_alloc();
    s->data = aligned_alloc(64, (rounded + 63) / 64 * 64); /* C11: a multiple of 64 */
    if (!s->data) {
        pools_in_use();
        s->next_free = pools.storage_free;
        pools.storage_free = s;
        return nbt_error("alloc", "out of memory allocating %zu bytes", nbytes);
    }
    s->nbytes = rounded;
    s->refcount = 1;
    s->next_free = NULL;
    stamp_birth(s);
    return s;
}

void nbt_storage_retain(nb_storage *s) {
    s->refcount++;
}

void nbt_storage_release(nb_storage *s) {
    if (--s->refcount > 0) return;
    size_t rounded;
    int cls = size_class(s->nbytes, &rounded);
    pools_in_use();
    POISON(s->data, s->nbytes);
    s->next_free = pools.buffer_cache[cls];
    pools.buffer_cache[cls] = s;
}

/* ---- tensor structs ---- */
static void link_tensor(nb_scope *s, nb_tensor *t) {
    bool root = s == &root_scope;
    if (root) pthread_mutex_lock(&root_lock);
    t->scope = s;
    t->scope_prev = NULL;
    t->scope_next = s->tensors;
    if (s->tensors) s->tensors->scope_prev = t;
    s->tensors = t;
    s->count++;
    if (root) pthread_mutex_unlock(&root_lock);
}

static void unlink_tensor(nb_tensor *t) {
    nb_scope *s = t->scope;
    bool root = s == &root_scope;
    if (root) pthread_mutex_lock(&root_lock);
    if (t->scope_prev)
        t->scope_prev->scope_next = t->scope_next;
    else
        s->tensors = t->scope_next;
    if (t->scope_next) t->scope_next->scope_prev = t->scope_prev;
    s->count--;
    if (root) pthread_mutex_unlock(&root_lock);
}

static nb_tensor *tensor_struct(nb_scope *s) {
    nb_tensor *t = pools.tensor_free;
    if (t)
        pools.tensor_free = t->scope_next;
    else if ((t = malloc(sizeof(nb_tensor)))) {
        /* A plain free list would now hold the quarantined structs less those already made
         * in their place: count this one only if that list would have been empty too. */
        if (pools.quarantined > pools.quarantine_mallocs)
            pools.quarantine_mallocs++;
        else
            count_alloc();
    } else {
        return nbt_error("alloc", "out of memory");
    }
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

/* Drops t's storage reference and poisons t: nbt_check_live reports any use. Called with
 * pools_in_use done; the caller puts t in the quarantine. */
static void release_tensor(nb_tensor *t) {
    if (t->storage) nbt_storage_release(t->storage);
    t->scope = &nbt_released_marker;
#if NABLA_DEBUG_CHECKS
    /* No storage, no grad, no history left, should an unchecked path get this far. (Without
     * the option the checked entry points are the guard, and these stores are not made.) */
    t->storage = NULL;
    t->grad = NULL;
    t->node = NULL;
    t->requires_grad = false;
#endif
}

/* Puts the chain head..tail (n released structs, linked by scope_next) in the quarantine,
 * then moves the oldest batches to the free list while QUARANTINE structs were released
 * after them. */
static void quarantine(nb_tensor *head, nb_tensor *tail, int64_t n) {
    enum { MASK = QUARANTINE_BATCHES - 1 };
    if (!n) return;
    if (pools.quarantine_batches == QUARANTINE_BATCHES) {
        released_batch *b = &pools.quarantine[(pools.quarantine_first + MASK) & MASK];
        b->tail->scope_next = head;
        b->tail = tail;
        b->n += n;
    } else {
        pools.quarantine[(pools.quarantine_first + pools.quarantine_batches++) & MASK] =
            (released_batch){head, tail, n};
    }
    pools.quarantined += n;
    for (;;) {
        released_batch *b = &pools.quarantine[pools.quarantine_first];
        if (pools.quarantined - b->n < QUARANTINE) break;
        b->tail->scope_next = pools.tensor_free;
        pools.tensor_free = b->head;
        pools.quarantined -= b->n;
        pools.quarantine_first = (pools.quarantine_first + 1) & MASK;
        pools.quarantine_batches--;
    }
}

/* A struct released on its own (nbt_release). */
static void release_one(nb_tensor *t) {
    release_tensor(t);
    t->scope_next = NULL;
    quarantine(t, t, 1);
}

bool nbt_report_released(const char *op, const nb_tensor *t) {
    nbt_error(op,
              "the tensor (shape %s, %s) was released when its scope ended; it must not be "
              "used after nb_scope_end or nb_scope_free",
              nbt_shape(t), nb_dtype_name(t->dtype));
    return false;
}

void nbt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

nb_tensor *nbt_new_in(nb_scope *s, const char *op, nb_dtype dt, int ndim, const int64_t *shape) {
    if (!nbt_check_shape(op, ndim, shape, dt)) return NULL;
    const char *refused = nbt_isa_error(); /* a NABLA_ISA this CPU cannot run */
    if (refused) return nbt_error(op, "%s", refused);
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
void nbt_scope_own(nbt_owned *o) {
    bool root = current == &root_scope;
    if (root) pthread_mutex_lock(&root_lock);
    o->scope = current;
    o->prev = NULL;
    o->next = current->owned;
    if (current->owned) current->owned->prev = o;
    current->owned = o;
    if (root) pthread_mutex_unlock(&root_lock);
}

nb_scope *nb_scope_new(void) {
    nb_scope *s = pools.scope_free;
    if (s)
        pools.scope_free = s->next_free;
    else if (!(s = nbt_malloc(sizeof *s)))
        return nbt_error("nb_scope_new", "out of memory");
    memset(s, 0, sizeof *s);
    return s;
}

static void clear_scope(nb_scope *s) {
    pools_in_use();
    /* Owned objects (autograd nodes) first: they look at their output tensors' scopes. */
    while (s->owned) {
        nbt_owned *o = s->owned;
        s->owned = o->next;
        o->release(o);
    }
    /* The scope's list, already chained by scope_next, becomes one quarantined batch. */
    nb_tensor *head = s->tensors, *tail = NULL;
    int64_t n = 0;
    for (nb_tensor *t = head; t; t = t->scope_next, n++) {
        release_tensor(t);
        tail = t;
    }
    s->tensors = NULL;
    quarantine(head, tail, n);
    s->count = 0;
}

/* Puts a scope on this thread's free list. In debug-checks builds a scope made by
 * nb_scope_new is never reused, so destroying it twice is always caught. */
static void free_scope(nb_scope *s) {
    s->destroyed = true;
#if NABLA_DEBUG_CHECKS
    if (!s->from_begin) { /* kept, marked destroyed, until nb_shutdown or the thread's end */
        s->next_free = pools.destroyed_scopes;
        pools.destroyed_scopes = s;
        return;
    }
#endif
    s->next_free = pools.scope_free;
    pools.scope_free = s;
}

void nb_scope_free(nb_scope *s) {
    if (!s || s == &root_scope) return;
    if (s->destroyed) {
        nbt_error("nb_scope_free", "the scope was already destroyed");
        return;
    }
    if (s->on_stack) {
        nbt_error("nb_scope_free", "the scope is still pushed; pop it first");
        return;
    }
    clear_scope(s);
    free_scope(s);
}

void nb_scope_push(nb_scope *s) {
    if (!s || s->on_stack || s->destroyed) {
        nbt_error("nb_scope_push", !s             ? "NULL scope"
                                   : s->destroyed ? "the scope was destroyed"
                                                  : "the scope is already on the stack");
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
    nb_scope *s = nb_scope_new();
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
    nb_scope_free(s);
}

nb_tensor *nb_keep(nb_tensor *t) {
    if (!t || !nbt_check_live("nb_keep", t)) return NULL;
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
    pools_in_use();
    if (t->grad && t->grad->scope) {
        unlink_tensor(t->grad);
        release_one(t->grad);
    }
    unlink_tensor(t);
    release_one(t);
}

nbt_tensor_mark nbt_tensor_mark_now(void) {
    return (nbt_tensor_mark){current, current->count};
}

/* New tensors go to the head of the list, so the newest count - mark.count are all new; a
 * tensor that left the list since (nb_keep, nbt_release) only makes that fewer. */
void nbt_release_newest(nbt_tensor_mark mark, bool (*keep)(const nb_tensor *t, void *ctx),
                        void *ctx) {
    if (mark.scope != current || current == &root_scope) return;
    nb_tensor *t = current->tensors;
    for (int64_t n = current->count - mark.count; n > 0 && t; n--) {
        nb_tensor *next = t->scope_next;
        if (nbt_worth_releasing(t) && !keep(t, ctx)) nbt_release(t);
        t = next;
    }
}

int64_t nb_scope_tensor_count(void) {
    return current->count;
}

/* Frees this thread's free lists (at thread exit, and from nb_shutdown). */
static void flush_pools(void *unused) {
    (void)unused;
    for (int k = 0; k < pools.quarantine_batches; k++) {
        released_batch *b =
            &pools.quarantine[(pools.quarantine_first + k) & (QUARANTINE_BATCHES - 1)];
        b->tail->scope_next = pools.tensor_free;
        pools.tensor_free = b->head;
    }
    pools.quarantine_batches = pools.quarantine_first = 0;
    pools.quarantined = pools.quarantine_mallocs = 0;
#if NABLA_DEBUG_CHECKS
    while (pools.destroyed_scopes) {
        nb_scope *s = pools.destroyed_scopes;
        pools.destroyed_scopes = s->next_free;
        free(s);
    }
#endif
    while (pools.tensor_free) {
        nb_tensor *t = pools.tensor_free;
        pools.tensor_free = t->scope_next;
        free(t);
    }
    for (int c = 0; c < NUM_CLASSES; c++) {
        while (pools.buffer_cache[c]) {
            nb_storage *s = pools.buffer_cache[c];
            pools.buffer_cache[c] = s->next_free;
            UNPOISON(s->data, s->nbytes);
            free(s->data);
            free(s);
        }
    }
    while (pools.storage_free) {
        nb_storage *s = pools.storage_free;
        pools.storage_free = s->next_free;
        free(s);
    }
    while (pools.scope_free) {
        nb_scope *s = pools.scope_free;
        pools.scope_free = s->next_free;
        free(s);
    }
    pools.exit_hook = false; /* the key's value is cleared at exit; nb_shutdown re-registers */
}

void nb_shutdown(void) {
    while (current != &root_scope) {
        nb_scope *s = current;
        pop_current();
        if (s->from_begin) nb_scope_free(s);
    }
    pthread_mutex_lock(&root_lock);
    nb_tensor *root_tensors = root_scope.tensors;
    nbt_owned *root_owned = root_scope.owned;
    root_scope.tensors = NULL;
    root_scope.owned = NULL;
    root_scope.count = 0;
    pthread_mutex_unlock(&root_lock);
    nb_scope detached = {.tensors = root_tensors, .owned = root_owned};
    clear_scope(&detached);
    flush_pools(NULL);
}
