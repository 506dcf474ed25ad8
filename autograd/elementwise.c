/* Differentiable elementwise ops: forwards run the raw kernels of
 * tensor/elementwise_kernels.h, backwards sit beside them. Binary backwards may produce
 * broadcast-shaped gradients; nba_accumulate sums them down to each input's shape. */
#include "node.h"
#include "../tensor/elementwise_kernels.h"

/* ---- binary ---- */
static nb_tensor *binary(nbt_binary_op op, const nb_tensor *a, const nb_tensor *b,
                         nba_backward_fn backward) {
    const char *name = nbt_binary_name(op);
    if (!nba_check_same_float(name, a, b)) return NULL;
    nb_tensor *out = nbt_binary(op, a, b);
    nba_record(name, out, 2, (const nb_tensor *[]){a, b}, backward);
    return out;
}

static void add_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, gout);
    nba_accumulate(n, 1, gout);
}

static void sub_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, gout);
    if (nba_input_needs_grad(n, 1)) nba_accumulate(n, 1, nbt_unary(NBT_NEG, gout, 0));
}

static void mul_backward(nb_node *n, const nb_tensor *gout) {
    if (nba_input_needs_grad(n, 0)) nba_accumulate(n, 0, nbt_mul(gout, n->inputs[1]));
    if (nba_input_needs_grad(n, 1)) nba_accumulate(n, 1, nbt_mul(gout, n->inputs[0]));
}

/* d(a/b)/da = 1/b and d(a/b)/db = -a/b^2 = -(1/b) (a/b): both reuse g/b, the second also
 * the output a/b. */
static void div_backward(nb_node *n, const nb_tensor *gout) {
    nb_tensor *g_over_b = nbt_div(gout, n->inputs[1]);
    if (!g_over_b) return;
    if (nba_input_needs_grad(n, 0)) nba_accumulate(n, 0, g_over_b);
    if (nba_input_needs_grad(n, 1)) {
        nb_tensor *gb = nbt_mul(g_over_b, n->out);
        if (gb && nbt_unary_into(gb, NBT_NEG, gb, 0)) nba_accumulate(n, 1, gb);
    }
}

nb_tensor *nb_add(const nb_tensor *a, const nb_tensor *b) {
    return binary(NBT_ADD, a, b, add_backward);
}
nb_tensor *nb_sub(const nb_tensor *a, const nb_tensor *b) {
    return binary(NBT_SUB, a, b, sub_backward);
}
nb_tensor *nb_mul(const nb_tensor *a, const nb_tensor *b) {
    return binary(NBT_MUL, a, b, mul_backward);
}
nb_tensor *nb_div(const nb_tensor *a, const nb_tensor *b) {
    return binary(NBT_DIV, a, b, div_backward);
}

/* ---- unary: the kernel layer knows each derivative; the node keeps the op and scalar ---- */
static void unary_backward(nb_node *n, const nb_tensor *gout) {
    nbt_unary_op op = (nbt_unary_op)n->i[0];
    if (op == NBT_ADD_SCALAR) {
        nba_accumulate(n, 0, gout);
        return;
    }
    nba_accumulate(n, 0, nbt_unary_grad(op, gout, n->inputs[0], n->out, n->f[0]));
}

static nb_tensor *unary(nbt_unary_op op, const nb_tensor *a, double param) {
    const char *name = nbt_unary_name(op);
    if (!nba_check_float(name, a)) return NULL;
    nb_tensor *out = nbt_unary(op, a, param);
    nb_node *n = nba_record(name, out, 1, &a, unary_backward);
    if (n) n->i[0] = op, n->f[0] = param;
    return out;
}

nb_tensor *nb_neg(const nb_tensor *a) {
    return unary(NBT_NEG, a, 0);
}
nb_tensor *nb_add_scalar(const nb_tensor *a, double s) {
    return unary(NBT_ADD_SCALAR, a, s);
}
nb_tensor *nb_mul_scalar(const nb_tensor *a, double s) {
    return unary(NBT_MUL_SCALAR, a, s);
}
nb_tensor *nb_pow_scalar(const nb_tensor *a, double p) {
    return unary(NBT_POW_SCALAR, a, p);
}
nb_tensor *nb_exp(const nb_tensor *a) {
    return unary(NBT_EXP, a, 0);
}
nb_tensor *nb_log(const nb_tensor *a) {
    return unary(NBT_LOG, a, 0);
}
nb_tensor *nb_sqrt(const nb_tensor *a) {
    return unary(NBT_SQRT, a, 0);
}
nb_tensor *nb_tanh(const nb_tensor *a) {
    return unary(NBT_TANH, a, 0);
}
nb_tensor *nb_sigmoid(const nb_tensor *a) {
    return unary(NBT_SIGMOID, a, 0);
}
nb_tensor *nb_relu(const nb_tensor *a) {
    return unary(NBT_RELU, a, 0);
}
/* saved: [0] Phi(x) from the forward, so the backward evaluates only the density. */
static void gelu_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, nbt_gelu_grad_from_cdf(gout, n->inputs[0], n->saved[0]));
}

nb_tensor *nb_gelu(const nb_tensor *a) {
    if (!nba_check_float("gelu", a)) return NULL;
    if (!nba_any_requires_grad(1, &a)) return unary(NBT_GELU, a, 0);
    nb_tensor *cdf = NULL;
    nb_tensor *out = nbt_gelu_with_cdf(a, &cdf);
    nb_node *n = nba_record("gelu", out, 1, &a, gelu_backward);
    if (n) n->saved[0] = cdf;
    return out;
}
nb_tensor *nb_gelu_tanh(const nb_tensor *a) {
    return unary(NBT_GELU_TANH, a, 0);
}
