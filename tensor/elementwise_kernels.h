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

typedef enum { NBT_ADD, NBT_SUB, NBT_MUL, NBT_DIV } nbt_binary_op;

/* Unary ops; the *_SCALAR ones take their scalar as `param` (ignored by the others). */
typedef enum {
    NBT_NEG,
    NBT_ADD_SCALAR, /* x + param */
    NBT_MUL_SCALAR, /* x * param */
    NBT_POW_SCALAR, /* x ^ param */
    NBT_EXP,
    NBT_LOG,
    NBT_SQRT,
    NBT_TANH,
    NBT_SIGMOID,
    NBT_RELU,     /* x < 0 ? 0 : x, so relu(NaN) = NaN and relu(-0) = -0 as in PyTorch */
    NBT_GELU,     /* x * Phi(x), exact erf form */
    NBT_GELU_TANH /* tanh approximation */
} nbt_unary_op;

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

/* Backward of a unary op: gout * f'(x), shaped like gout (x and y broadcast to it).
 * x is the op's input and y = f(x) its output; each op reads the one its derivative is
 * cheapest from (exp, sqrt, tanh, sigmoid, relu read y; the others read x), so the other
 * may be NULL. New tensor in the current scope. */
nb_tensor *nbt_unary_grad(nbt_unary_op op, const nb_tensor *gout, const nb_tensor *x,
                          const nb_tensor *y, double param);
/* True if nbt_unary_grad(op, ...) reads y rather than x. */
bool nbt_unary_grad_uses_output(nbt_unary_op op);

/* Exact gelu that also returns Phi(x), the normal CDF, in *cdf, so the backward needs no
 * erf. y and *cdf are new contiguous tensors in the current scope with x's shape. */
nb_tensor *nbt_gelu_with_cdf(const nb_tensor *x, nb_tensor **cdf);
/* gout * gelu'(x) = gout * (cdf + x phi(x)), with cdf the one nbt_gelu_with_cdf returned;
 * x and cdf have gout's shape. New tensor in the current scope. */
nb_tensor *nbt_gelu_grad_from_cdf(const nb_tensor *gout, const nb_tensor *x, const nb_tensor *cdf);

/* Shorthands for the common cases (new tensors in the current scope). */
static inline nb_tensor *nbt_add(const nb_tensor *a, const nb_tensor *b) {
    return nbt_binary(NBT_ADD, a, b);
}
static inline nb_tensor *nbt_sub(const nb_tensor *a, const nb_tensor *b) {
    return nbt_binary(NBT_SUB, a, b);
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
