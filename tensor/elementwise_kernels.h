/* Raw elementwise kernels (no autograd) for float32 and float64 tensors of any layout.
 *
 * Results are new contiguous tensors in the current scope, or written into a given `out`
 * (the *_into forms). Inputs broadcast to the output's shape with NumPy rules. The *_into
 * forms allow `out` to be one of the inputs itself (same view: in-place update) but not a
 * partial overlap. Errors (mixed dtypes, non-float, shapes that do not broadcast) return
 * NULL / false with nb_last_error() naming the op and the shapes.
 *
 * exp, log, tanh and erf go through vecmath.h (SLEEF): contiguous runs are handed over
 * whole, strided runs are gathered in chunks first. */
#ifndef NABLA_ELEMENTWISE_KERNELS_H
#define NABLA_ELEMENTWISE_KERNELS_H

#include "nbt.h"
#include "elementwise_ops.h"

/* The ops, from their lists in elementwise_ops.h. */
#define NBT_ENUM_ENTRY(ENUM, ...) NBT_##ENUM,
typedef enum { NBT_BINARY_OPS(NBT_ENUM_ENTRY) NBT_NUM_BINARY } nbt_binary_op;
/* The *_SCALAR ones take their scalar as `param` (ignored by the
 * others). NBT_NUM_UNARY: how many there are, the length every table indexed by them asserts. */
typedef enum { NBT_UNARY_OPS(NBT_ENUM_ENTRY) NBT_NUM_UNARY } nbt_unary_op;
#undef NBT_ENUM_ENTRY

/* "add", "exp", ...: the name used in error messages. Static string. */
const char *nbt_binary_name(nbt_binary_op op);
const char *nbt_unary_name(nbt_unary_op op);

/* a op b with broadcasting. New tensor in the current scope. */
nb_tensor *nbt_binary(nbt_binary_op op, const nb_tensor *a, const nb_tensor *b);
/* out = a op b, with a and b broadcast to out's shape. */
bool nbt_binary_into(nb_tensor *out, nbt_binary_op op, const nb_tensor *a, const nb_tensor *b);

/* f(a). New tensor in the current scope with a's shape. */
nb_tensor *nbt_unary(nbt_unary_op op, const nb_tensor *a, double param);
/* out = f(a), with a broadcast to out's shape. */
bool nbt_unary_into(nb_tensor *out, nbt_unary_op op, const nb_tensor *a, double param);

/* A kernel of two inputs on contiguous arrays: out[i] = f(a[i], b[i]; param); out may alias
 * a or b. The derivatives of the unary ops are such kernels (autograd/elementwise.c). */
typedef struct {
    void (*f32)(int64_t n, float *out, const float *a, const float *b, float param);
    void (*f64)(int64_t n, double *out, const double *a, const double *b, double param);
} nbt_map2_kernel;
/* kernel(a, b) elementwise, with b broadcast to a's shape, over any layouts (vector loops on
 * contiguous runs, gathered chunks otherwise, threads for long runs). name is for errors.
 * New tensor in the current scope with a's shape. */
nb_tensor *nbt_map2(const char *name, const nbt_map2_kernel *kernel, const nb_tensor *a,
                    const nb_tensor *b, double param);

/* Exact gelu that also returns its derivative gelu'(x) = Phi(x) + x phi(x) in *derivative, so
 * the backward is one product. y and *derivative are new contiguous tensors in the current
 * scope with x's shape. */
nb_tensor *nbt_gelu_with_derivative(const nb_tensor *x, nb_tensor **derivative);

/* Shorthands for the common cases (new tensors in the current scope). */
static inline nb_tensor *nbt_add(const nb_tensor *a, const nb_tensor *b) {
    return nbt_binary(NBT_ADD, a, b);
}
static inline nb_tensor *nbt_mul(const nb_tensor *a, const nb_tensor *b) {
    return nbt_binary(NBT_MUL, a, b);
}
static inline nb_tensor *nbt_div(const nb_tensor *a, const nb_tensor *b) {
    return nbt_binary(NBT_DIV, a, b);
}
static inline nb_tensor *nbt_scale(const nb_tensor *a, double s) {
    return nbt_unary(NBT_MUL_SCALAR, a, s);
}

#endif
