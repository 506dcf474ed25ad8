/* The elementwise ops, one line each: the one list every table of them is made from.
 *
 * NBT_BINARY_OPS: X(ENUM, name). NBT_<ENUM> of nbt_binary_op (elementwise_kernels.h) runs
 * the kernels <name>_f32 and <name>_f64 of elementwise_kernels.c; the op is nb_<name>, defined
 * with its derivative and nba_op_<name> in autograd/elementwise.c.
 *
 * NBT_UNARY_OPS: X(ENUM, name, derivative).
 *
 * ENUM makes NBT_<ENUM> of nbt_unary_op (elementwise_kernels.h). name is the op's name in
 * errors and in the op registry (autograd/op_list.h lists it from here), and names the code
 * each table takes from the op's own place: its forward kernels <name>_f32 and <name>_f64
 * (tensor/unary_kernels.c), its derivative kernels <name>_grad_f32 and <name>_grad_f64, its
 * public op nb_<name> and its op definition nba_op_<name> (autograd/elementwise.c). A line
 * whose kernels are missing does not compile (tests/new_op_check.sh checks that).
 * derivative says what the derivative kernel reads: INPUT (x), OUTPUT (y = f(x), where that is
 * cheaper), PASS (none: the gradient passes unchanged) or OWN (none: the op records a backward
 * of its own). The *_SCALAR ops take their scalar as the kernels' param.
 * X-macros: NBT_BINARY_OPS(X) and NBT_UNARY_OPS(X) call X once per op, in enum order. */
#ifndef NABLA_ELEMENTWISE_OPS_H
#define NABLA_ELEMENTWISE_OPS_H

#define NBT_BINARY_OPS(X) X(ADD, add) X(SUB, sub) X(MUL, mul) X(DIV, div)

/* clang-format off */
#define NBT_UNARY_OPS(X)                                                                           \
    X(NEG, neg, INPUT)                                                                             \
    X(ADD_SCALAR, add_scalar, PASS) /* x + param */                                                \
    X(MUL_SCALAR, mul_scalar, INPUT) /* x * param */                                               \
    X(POW_SCALAR, pow_scalar, INPUT) /* x ^ param */                                               \
    X(EXP, exp, OUTPUT)                                                                            \
    X(LOG, log, INPUT)                                                                             \
    X(SQRT, sqrt, OUTPUT)                                                                          \
    X(TANH, tanh, OUTPUT)                                                                          \
    X(SIGMOID, sigmoid, OUTPUT)                                                                    \
    X(RELU, relu, OUTPUT) /* x < 0 ? 0 : x: relu(NaN) = NaN, relu(-0) = -0, as in PyTorch */       \
    X(GELU, gelu, OWN) /* x * Phi(x), the exact erf form; its forward keeps gelu'(x) */            \
    X(GELU_TANH, gelu_tanh, INPUT) /* the tanh approximation */                                    \
    X(SILU, silu, INPUT) /* x * sigmoid(x), as x / (1 + exp(-x)) */
/* clang-format on */

#endif
