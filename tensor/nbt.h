/* Internal tensor-layer API shared by tensor/, autograd/ and nn/. Not installed.
 * Functions named nbt_* never record autograd nodes. */
#ifndef NABLA_NBT_H
#define NABLA_NBT_H

#include "nabla/tensor.h"

#include <stdarg.h>

struct nb_storage {
    void *data;
    size_t nbytes;
    int refcount;
    nb_storage *next_free; /* pool link */
    uint64_t born;         /* its thread's tag and allocation count when handed out */
};

/* ---- errors ---- */
/* Records "op: message" as the thread's last error. Always returns NULL for tail calls. */
void *nbt_error(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* How many errors this thread has recorded (nbt_error and nb_error): the autograd engine
 * takes it before each backward function to notice one that failed. */
uint64_t nbt_error_count(void);
/* True if an error was recorded since mark (an nbt_error_count value) and not cleared since
 * (nb_clear_error): how a caller of code that may recover from errors by itself (a user
 * function's forward or backward) tells a failure from a recovery. */
bool nbt_error_left_since(uint64_t mark);
/* "[2, 3]" for t, in a rotating thread-local buffer good for a few uses per message. */
const char *nbt_shape(const nb_tensor *t);
const char *nbt_dims(int ndim, const int64_t *shape);

/* ---- allocation (pooled; counts mallocs) ---- */
void *nbt_malloc(size_t n);
void nbt_free(void *p);
nb_storage *nbt_storage_new(size_t nbytes); /* refcount 1, data 64-byte aligned, uninitialised */
#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
/* After n more storages are allocated on this thread, the next one fails as if out of memory
 * (once); n < 0 turns the hook off. */
void nbt_fail_storage_after(int64_t n);
#endif
void nbt_storage_retain(nb_storage *s);
void nbt_storage_release(nb_storage *s);
/* Where this thread is in its sequence of storages handed out, for nbt_storage_made_since. */
uint64_t nbt_storage_mark(void);
/* True if this thread handed s out after taking mark (and no other thread handed it out
 * since): the autograd engine's test that a gradient is its own to release. */
bool nbt_storage_made_since(const nb_storage *s, uint64_t mark);

/* ---- tensor structs ---- */
/* A tensor with fresh contiguous storage in the current scope. Data uninitialised. */
nb_tensor *nbt_new(const char *op, nb_dtype dt, int ndim, const int64_t *shape);
/* A tensor struct sharing t's storage (same dtype) with the given layout, in the current scope. */
nb_tensor *nbt_alias(const nb_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                     int64_t offset);
/* A new tensor in scope s (used for leaf grads, which live with their leaf). */
nb_tensor *nbt_new_in(nb_scope *s, const char *op, nb_dtype dt, int ndim, const int64_t *shape);
/* Releases t (and its leaf gradient) now instead of at its scope's end. Nothing may use t
 * afterwards (a module constructor that failed releases its parameters this way). */
void nbt_release(nb_tensor *t);
void nbt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Checks ndim <= 8, sizes >= 0 and that numel * elemsize fits; sets an error naming op. */
bool nbt_check_shape(const char *op, int ndim, const int64_t *shape, nb_dtype dt);
/* Normalises a possibly negative dim for a tensor of ndim dims; -1 with an error if invalid. */
int nbt_dim(const char *op, int dim, int ndim);
/* CLOCK_MONOTONIC in nanoseconds (clock.c): for intervals, never for results. */
int64_t nbt_now_ns(void);

/* ---- use after release ----
 * Released tensor structs are poisoned (their scope is nbt_released_marker) and quarantined
 * before reuse (tensor/memory.c), in every build, so entry points can report a use after the
 * scope ended. meson -Ddebug_checks=true (NABLA_DEBUG_CHECKS=1) adds never reusing the scopes
 * of nb_scope_new. */
#ifndef NABLA_DEBUG_CHECKS
#define NABLA_DEBUG_CHECKS 0
#endif
/* Records "op: the tensor ... was released ..." and returns false. */
bool nbt_report_released(const char *op, const nb_tensor *t);
extern nb_scope nbt_released_marker;
static inline bool nbt_is_released(const nb_tensor *t) {
    return t && t->scope == &nbt_released_marker;
}
/* False with an error naming op if t was released and its struct not yet reused (see
 * nb_scope_end in nabla/tensor.h for how long that is); true otherwise, NULL included. */
static inline bool nbt_check_live(const char *op, const nb_tensor *t) {
    return __builtin_expect(!nbt_is_released(t), 1) || nbt_report_released(op, t);
}

/* Inline twins of nb_dtype_size and nb_numel for hot paths (every op calls them). */
static inline size_t nbt_esize(nb_dtype dt) {
    static const size_t sizes[] = {4, 8, 8, 1};
    return (unsigned)dt < 4 ? sizes[dt] : 0;
}
static inline int64_t nbt_numel(const nb_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* The element at p of dtype dt as a double (int64 beyond 2^53 rounds; bool is 0 or 1). */
static inline double nbt_load_double(const char *p, nb_dtype dt) {
    switch (dt) {
    case NB_F32:
        return *(const float *)p;
    case NB_F64:
        return *(const double *)p;
    case NB_I64:
        return (double)*(const int64_t *)p;
    case NB_BOOL:
        return *(const uint8_t *)p ? 1.0 : 0.0;
    }
    return 0;
}

/* v stored at p as dtype dt: int64 converts as x86 does (and so PyTorch there), truncating,
 * with INT64_MIN for NaN or values out of range, where a plain C cast would be undefined
 * behaviour; bool is v != 0. */
static inline void nbt_store_double(char *p, nb_dtype dt, double v) {
    switch (dt) {
    case NB_F32:
        *(float *)p = (float)v;
        break;
    case NB_F64:
        *(double *)p = v;
        break;
    case NB_I64:
        *(int64_t *)p = v >= -0x1p63 && v < 0x1p63 ? (int64_t)v : INT64_MIN;
        break;
    case NB_BOOL:
        *(uint8_t *)p = v != 0;
        break;
    }
}

/* Element pointer at the first element of t. */
static inline char *nbt_ptr(const nb_tensor *t) {
    return (char *)t->storage->data + t->offset * (int64_t)nbt_esize(t->dtype);
}

/* ---- raw views (no autograd): the differentiable nb_view & co wrap these ---- */
nb_tensor *nbt_view(const nb_tensor *t, int ndim, const int64_t *shape);
/* nbt_view where strides allow it, else a view of a contiguous copy; errors name "reshape".
 * Deciding before trying records no error on the copy path (a caller comparing error counts
 * would take one for a failure). */
nb_tensor *nbt_reshape(const nb_tensor *t, int ndim, const int64_t *shape);
nb_tensor *nbt_transpose(const nb_tensor *t, int d0, int d1);
nb_tensor *nbt_permute(const nb_tensor *t, const int *dims);
nb_tensor *nbt_unsqueeze(const nb_tensor *t, int dim);
#define NBT_ALL_DIMS INT32_MIN /* nbt_squeeze: every size-1 dim */
nb_tensor *nbt_squeeze(const nb_tensor *t, int dim);
nb_tensor *nbt_expand(const nb_tensor *t, int ndim, const int64_t *shape);
nb_tensor *nbt_narrow(const nb_tensor *t, int dim, int64_t start, int64_t length);
nb_tensor *nbt_select(const nb_tensor *t, int dim, int64_t index);
/* Copy into fresh contiguous storage (dtype dt). */
nb_tensor *nbt_contiguous_as(const nb_tensor *t, nb_dtype dt);
/* Returns t itself if contiguous, else a contiguous copy. */
nb_tensor *nbt_contiguous(const nb_tensor *t);

/* ---- threads ---- */
/* How many threads to use for `work` units when each thread should get at least
 * min_work_per_thread of them (1 inside a parallel region). Use in OpenMP num_threads(). */
int nbt_threads_for(int64_t work, int64_t min_work_per_thread);
#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
/* While set, work started on this thread runs on it alone (nbt_threads_for gives 1), whatever
 * the budget. Returns the previous setting, to restore. Other threads are unaffected. */
bool nbt_set_serial(bool serial);
#endif
/* Calls fn on disjoint [begin, end) slices covering [0, n), in parallel when n is at least two
 * grains. Each index is handled by exactly one call, so per-index results are the same for
 * any thread count. */
typedef void (*nbt_range_fn)(int64_t begin, int64_t end, void *ctx);
void nbt_parallel_ranges(int64_t n, int64_t grain, nbt_range_fn fn, void *ctx);

/* ---- broadcasting ---- */
/* Broadcast shape of a and b (NumPy rules) into out/out_ndim; error naming op on mismatch. */
bool nbt_broadcast_shape(const char *op, int andim, const int64_t *ashape, int bndim,
                         const int64_t *bshape, int *out_ndim, int64_t *out);

/* ---- strided iteration ----
 * Visits every element of an ndim/shape index space for up to NBT_ITER_MAX operands with
 * their own element strides (0 for broadcast dims). Dims are coalesced where all operands
 * allow, then the inner callback gets one 1-D run at a time. */
#define NBT_ITER_MAX 4
typedef void (*nbt_inner_fn)(int64_t n, char **ptrs, const int64_t *byte_strides, void *ctx);
typedef struct {
    int nops;
    char *base[NBT_ITER_MAX];
    int64_t strides[NBT_ITER_MAX][NB_MAX_DIMS]; /* in elements */
    size_t elem[NBT_ITER_MAX];                  /* element sizes */
} nbt_operands;
void nbt_iterate(int ndim, const int64_t *shape, const nbt_operands *ops, nbt_inner_fn fn,
                 void *ctx);
/* Strides of t aligned to an ndim-dim broadcast target (leading dims and size-1 dims -> 0). */
void nbt_broadcast_strides(const nb_tensor *t, int ndim, const int64_t *shape, int64_t *out);

/* Elementwise dtype conversion copy dst <- src (src broadcast to dst's shape). */
bool nbt_copy(nb_tensor *dst, const nb_tensor *src);
/* Reads element k (row-major order over t's shape) as double. Slow; for tests and printing. */
double nbt_get_linear(const nb_tensor *t, int64_t k);
/* Writes nb_randperm(rng, n)'s permutation into out (n entries), drawing as it does. */
void nbt_randperm_into(nb_rng *rng, int64_t n, int64_t *out);

#endif
