/* nabla tensor core: dtypes, strided tensors, scopes, errors, creation, element access,
 * printing and the seeded generator.
 *
 * Ownership in one sentence: every tensor belongs to the scope that was current when it was
 * created, and ending that scope releases it (see "Scopes" below and the README). No nabla
 * function returns memory the caller must free() unless its contract says so. */
#ifndef NABLA_TENSOR_H
#define NABLA_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NB_MAX_DIMS 8

typedef enum {
    NB_F32 = 0, /* float: training */
    NB_F64 = 1, /* double: gradient checks */
    NB_I64 = 2, /* int64_t: class indices, token ids, argmax */
    NB_BOOL = 3 /* uint8_t 0/1: masks (true = blocked) */
} nb_dtype;

typedef struct nb_storage nb_storage;
typedef struct nb_node nb_node;
typedef struct nb_scope nb_scope;
typedef struct nb_tensor nb_tensor;

/* A strided view onto refcounted storage. Read the fields; change them only through the API. */
struct nb_tensor {
    nb_dtype dtype;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    int64_t strides[NB_MAX_DIMS]; /* in elements, may be 0 (expanded) */
    int64_t offset;               /* in elements from the storage base */
    nb_storage *storage;
    bool requires_grad;
    bool graph_released; /* its producing node died with an ended scope */
    nb_tensor *grad;     /* leaves only; lives in the leaf's scope */
    nb_node *node;       /* the autograd node that produced it, or NULL */
    /* scope bookkeeping (intrusive list) */
    nb_scope *scope;
    nb_tensor *scope_prev, *scope_next;
};

/* ---- Errors ----------------------------------------------------------------------------- */
/* The message of this thread's most recent failure ("" before any, or after nb_clear_error).
 * A call says whether it failed by its return value (NULL, false, NaN or -1, per function);
 * read the message only right after one reports failure. Successful calls leave it as it was
 * (they neither clear nor set it), so after a success it may hold an older failure's message,
 * as PyTorch's exception is about the call that raised it and no other. An op given a NULL
 * input keeps the message that is there (the NULL most likely came from that failure): after
 * handling a failure and carrying on, clear it. Owned by nabla. */
const char *nb_last_error(void);
/* Empties this thread's last error, to mark a failure as handled. A user function's forward
 * or backward that recovers from an op's failure clears it to say so (nabla/function.h). */
void nb_clear_error(void);
/* Records "op: message" (printf-style) as this thread's last error, as nabla's own ops and
 * modules do; for user ops and modules. Always returns NULL, for `return nb_error(...);`. */
void *nb_error(const char *op, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* "[2, 3]" for t ("(null)" for NULL), for error messages. The text lives in a small rotating
 * thread-local buffer: valid for the next few calls only. Owned by nabla. */
const char *nb_shape_text(const nb_tensor *t);

/* ---- Scopes ----------------------------------------------------------------------------- */
/* Opens a scope on the thread's scope stack; tensors created until the matching end live in it. */
void nb_scope_begin(void);
/* Releases every tensor and autograd node created since the matching begin, except kept ones.
 * A released tensor must not be used again. In every build a use through the API is caught
 * while its struct waits in the thread's quarantine: the call fails with an error naming it
 * ("item: the tensor (shape [], float32) was released when its scope ended ...", NaN, NULL or
 * false) instead of reading another tensor. The struct is not reused until at least 1024
 * more tensor structs were released on that thread after this scope end: in a loop of steps
 * of K tensors each (one scope per step), through the next 1024 / K steps, and through the
 * whole next step when K > 1024, so the common slip, reading the last step's loss, is caught.
 * Not caught: a use after the struct was reused (the handle then names a live tensor, and
 * reads it); reads of the struct's fields or of functions that read only them (nb_numel,
 * nb_size, nb_is_contiguous, nb_shape_text: the old metadata); a data pointer taken with
 * nb_data before the end (AddressSanitizer builds catch that); a second nb_scope_free of
 * a scope since reused (-Ddebug_checks=true never reuses them). nb_scope_free is alike. */
void nb_scope_end(void);
/* Moves t into the parent of the current scope so it survives nb_scope_end. Returns t.
 * Its autograd history does not survive: backward through it afterwards is an error. */
nb_tensor *nb_keep(nb_tensor *t);
/* A scope that is not on the stack, e.g. a model's parameters. Caller owns; destroy releases
 * every tensor in it. */
nb_scope *nb_scope_new(void);
void nb_scope_free(nb_scope *s);
/* Makes s the current scope until the matching nb_scope_pop. */
void nb_scope_push(nb_scope *s);
void nb_scope_pop(void);
/* Number of live tensors in the current scope (for tests and leak hunting). */
int64_t nb_scope_tensor_count(void);
/* Releases every scope, tensor and cached buffer; nabla may be used again afterwards. */
void nb_shutdown(void);
/* Number of heap allocations nabla has made so far (the bench counts these per step). */
uint64_t nb_alloc_count(void);

/* Threads nabla's kernels may use. n < 1 means the default: NABLA_NUM_THREADS, else
 * OMP_NUM_THREADS, else every CPU the process may run on. */
void nb_set_num_threads(int n);
int nb_get_num_threads(void);

/* ---- Metadata ----------------------------------------------------------------------------- */
const char *nb_dtype_name(nb_dtype dt);
size_t nb_dtype_size(nb_dtype dt);
int64_t nb_numel(const nb_tensor *t);
/* Size of dimension dim (negative counts from the end); -1 if out of range. */
int64_t nb_size(const nb_tensor *t, int dim);
bool nb_is_contiguous(const nb_tensor *t);
bool nb_is_float(const nb_tensor *t);
bool nb_same_shape(const nb_tensor *a, const nb_tensor *b);
/* Writes "[2, 3, 4]" ("(null)" for a NULL t) into buf (always terminated). Returns buf; a NULL
 * buf or len 0 writes nothing. */
char *nb_shape_str(const nb_tensor *t, char *buf, size_t len);

/* ---- Creation (all return a new tensor in the current scope, or NULL with an error) ------- */
/* Shape helper: nb_zeros(NB_F32, NB_SHAPE(2, 3)). */
#define NB_SHAPE(...)                                                                              \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { __VA_ARGS__ }

nb_tensor *nb_empty(nb_dtype dt, int ndim, const int64_t *shape);
nb_tensor *nb_zeros(nb_dtype dt, int ndim, const int64_t *shape);
nb_tensor *nb_ones(nb_dtype dt, int ndim, const int64_t *shape);
nb_tensor *nb_full(nb_dtype dt, int ndim, const int64_t *shape, double value);
/* A 0-d tensor holding value. */
nb_tensor *nb_scalar(nb_dtype dt, double value);
/* 1-D [start, start+step, ...) below end (PyTorch's arange). */
nb_tensor *nb_arange(nb_dtype dt, double start, double end, double step);
/* Copies numel elements of C type matching dt (float, double, int64_t, uint8_t) from data;
 * for NB_BOOL any non-zero byte becomes 1. */
nb_tensor *nb_from_array(nb_dtype dt, int ndim, const int64_t *shape, const void *data);
nb_tensor *nb_eye(nb_dtype dt, int64_t n);
/* Copy of a 2-D (or batched) t with entries above (tril) / below (triu) diagonal k zeroed. */
nb_tensor *nb_tril(const nb_tensor *t, int64_t k);
nb_tensor *nb_triu(const nb_tensor *t, int64_t k);
/* Contiguous copy with its own storage; no autograd history. */
nb_tensor *nb_clone(const nb_tensor *t);
/* Contiguous copy converted to dt (always a copy, even when t already has dtype dt). */
nb_tensor *nb_to_dtype(const nb_tensor *t, nb_dtype dt);
/* Same storage, no autograd history, requires_grad false. */
nb_tensor *nb_detach(const nb_tensor *t);

/* ---- Seeded generator ------------------------------------------------------------------- */
/* xoshiro256** seeded through splitmix64: the same seed gives the same numbers everywhere. */
typedef struct {
    uint64_t s[4];
} nb_rng;
/* A NULL rng is an error: seed does nothing, next returns 0, uniform and normal NaN. */
void nb_rng_seed(nb_rng *rng, uint64_t seed);
uint64_t nb_rng_next(nb_rng *rng);
/* Uniform in [0, 1). */
double nb_rng_uniform(nb_rng *rng);
/* Standard normal (Box-Muller). */
double nb_rng_normal(nb_rng *rng);
/* Uniform in [0, 1), or [low, high): low <= high, high - low finite, and (for f32) both bounds
 * within float32's range, else an error. */
nb_tensor *nb_rand(nb_rng *rng, nb_dtype dt, int ndim, const int64_t *shape);
nb_tensor *nb_uniform(nb_rng *rng, nb_dtype dt, int ndim, const int64_t *shape, double low,
                      double high);
nb_tensor *nb_randn(nb_rng *rng, nb_dtype dt, int ndim, const int64_t *shape);
/* Integers in [low, high) as NB_I64. */
nb_tensor *nb_randint(nb_rng *rng, int64_t low, int64_t high, int ndim, const int64_t *shape);
/* A random permutation of 0..n-1 as NB_I64 [n] (torch.randperm; n >= 0), new in the current
 * scope. The same rng state gives the same permutation. Every permutation is equally likely:
 * starting from 0..n-1, for i = n-1 down to 1 entry i is swapped with entry j, j uniform in
 * [0, i] (one nb_rng_next per draw, redrawn while the draw is at or above the largest
 * multiple of i + 1 that fits in 2^64, then j = draw mod (i + 1)). It does not give
 * torch.randperm's permutation for the same seed: the generators differ (PyTorch's is
 * Mersenne Twister). */
nb_tensor *nb_randperm(nb_rng *rng, int64_t n);

/* ---- Element access ------------------------------------------------------------------- */
/* Index helper: nb_get(t, NB_IDX(1, 2)). Negative indices count from the end. */
#define NB_IDX(...) (const int64_t[]) { __VA_ARGS__ }
/* Element at idx (t->ndim entries) as double; NaN with an error if idx is out of range. */
double nb_get(const nb_tensor *t, const int64_t *idx);
/* Returns false with an error if idx is out of range. */
bool nb_set(nb_tensor *t, const int64_t *idx, double value);
/* The single element of a one-element tensor; NaN with an error otherwise. */
double nb_item(const nb_tensor *t);
/* Copies all elements in row-major order into out as doubles (numel entries). */
bool nb_to_doubles(const nb_tensor *t, double *out);
/* Pointer to the first element; only meaningful for contiguous tensors. Owned by the tensor. */
void *nb_data(const nb_tensor *t);
/* Fills t in place (no autograd). */
bool nb_fill_(nb_tensor *t, double value);
/* Copies src into dst in place (broadcasting src, converting dtype; no autograd). */
bool nb_copy_(nb_tensor *dst, const nb_tensor *src);

/* True if t holds no NaN and no infinity (like torch.isfinite(t).all()); integer and bool
 * tensors always do, and so does an empty tensor. False with an error for NULL. */
bool nb_all_finite(const nb_tensor *t);

/* Elementwise a | b of two NB_BOOL masks, broadcast. New tensor in the current scope. */
nb_tensor *nb_logical_or(const nb_tensor *a, const nb_tensor *b);

/* ---- Comparisons, counting, argmax (no autograd) ---------------------------------------- */
/* Elementwise a == b, a != b, a < b, a <= b, a > b, a >= b as NB_BOOL (1 = true), broadcast,
 * any dtypes (the same dtype compares natively, mixed ones as doubles; NaN is unequal to
 * everything). New tensors in the current scope; not differentiable. */
nb_tensor *nb_eq(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_ne(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_lt(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_le(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_gt(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_ge(const nb_tensor *a, const nb_tensor *b);
/* Number of nonzero (true) elements of t, any dtype; -1 with an error for NULL. */
int64_t nb_count_nonzero(const nb_tensor *t);
/* Index of the largest element along dim (the first of equal maxima), NB_I64, dim removed
 * unless keepdim. New tensor in the current scope. */
nb_tensor *nb_argmax(const nb_tensor *a, int dim, bool keepdim);
/* Fraction of positions where argmax(logits [..., C], -1) equals target (NB_I64 [...]),
 * leaving out targets equal to ignore_index; NaN if all are left out, -1 with an error on bad
 * input. */
double nb_accuracy(const nb_tensor *logits, const nb_tensor *target, int64_t ignore_index);

/* ---- Printing --------------------------------------------------------------------------- */
/* PyTorch style: tensor([[1., 2.], [3., 4.]]) followed by shape and dtype; "tensor(NULL)" for
 * a NULL t. A NULL f is an error (nothing printed). */
void nb_fprint(FILE *f, const nb_tensor *t);
void nb_print(const nb_tensor *t);
/* The values alone, as PyTorch prints a float32 tensor: tensor([[1., 2.], [3., 4.]]) with no
 * shape or dtype suffix, for comparing output with the tutorials' printouts. */
void nb_fprint_values(FILE *f, const nb_tensor *t);
void nb_print_values(const nb_tensor *t);
/* The same text as nb_fprint; caller frees with free(). */
char *nb_to_string(const nb_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
