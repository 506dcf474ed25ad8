/* Differentiable elementwise ops: forwards run the raw kernels of
 * tensor/elementwise_kernels.h, backwards sit beside them. Binary backwards may produce
 * broadcast-shaped gradients; nba_accumulate sums them down to each input's shape. */
#include "node.h"
#include "../tensor/elementwise_kernels.h"
#include "../tensor/simd.h"
#include "../tensor/vecmath.h"

#include <math.h>

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

/* ---- unary: derivative kernels, gx[i] = g[i] * f'(v[i]) on contiguous arrays, v being the
 * input x or the output y = f(x), whichever the derivative is cheapest from. Run over any
 * layout by nbt_map2; operation orders follow PyTorch's CPU kernels. ---- */
/* S: dtype suffix; T: element type; FN(name): the libm function for T. */
#define V(S, p) NBT_VLOAD(S, p)
#define ST(S, p, v) NBT_VSTORE(S, p, v)
#define SPLAT(S, x) nbt_vsplat_##S(x)
#define GRAD_KERNELS(S, T, FN)                                                                     \
    static void neg_grad_##S(int64_t n, T *gx, const T *g, const T *v, T p) {                      \
        (void)v, (void)p;                                                                          \
        NBT_VFOR(S, i, n, ST(S, gx + i, -V(S, g + i)));                                            \
    }                                                                                              \
    static void mul_scalar_grad_##S(int64_t n, T *gx, const T *g, const T *v, T p) {               \
        (void)v;                                                                                   \
        const nbt_v##S vp = SPLAT(S, p);                                                           \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * vp));                                        \
    }                                                                                              \
    /* p x^(p-1); PyTorch makes the gradient of x^0 zero everywhere, even at x = 0. */             \
    static void pow_scalar_grad_##S(int64_t n, T *gx, const T *g, const T *x, T p) {               \
        if (p == 0) {                                                                              \
            for (int64_t i = 0; i < n; i++) gx[i] = 0;                                             \
            return;                                                                                \
        }                                                                                          \
        if (p == 2) {                                                                              \
            NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * (2 * V(S, x + i))));                     \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++) gx[i] = g[i] * (p * FN(pow)(x[i], p - 1));                 \
    }                                                                                              \
    static void exp_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                      \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * V(S, y + i)));                               \
    }                                                                                              \
    static void log_grad_##S(int64_t n, T *gx, const T *g, const T *x, T p) {                      \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) / V(S, x + i)));                               \
    }                                                                                              \
    static void sqrt_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                     \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) / (2 * V(S, y + i))));                         \
    }                                                                                              \
    static void tanh_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                     \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * (1 - V(S, y + i) * V(S, y + i))));           \
    }                                                                                              \
    static void sigmoid_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                  \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * (1 - V(S, y + i)) * V(S, y + i)));           \
    }                                                                                              \
    /* Passes the gradient where y > 0 (and where y is NaN, as PyTorch does). */                   \
    static void relu_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                     \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n,                                                                          \
                 ST(S, gx + i, nbt_vselect_##S(~(nbt_vmask_##S)(V(S, y + i) <= 0), V(S, g + i)))); \
    }                                                                                              \
    /* The two below in one pass of the set's widest vectors (tensor/kernels/activations.c). */    \
    static void gelu_tanh_grad_##S(int64_t n, T *gx, const T *g, const T *x, T p) {                \
        (void)p;                                                                                   \
        nbt_vgelu_tanh_grad_##S(gx, g, x, n);                                                      \
    }                                                                                              \
    static void silu_grad_##S(int64_t n, T *gx, const T *g, const T *x, T p) {                     \
        (void)p;                                                                                   \
        nbt_vsilu_grad_##S(gx, g, x, n);                                                           \
    }

#define FN_F32(name) name##f
#define FN_F64(name) name
GRAD_KERNELS(f32, float, FN_F32)
GRAD_KERNELS(f64, double, FN_F64)

/* Each unary op's derivative kernel and whether it reads the output (else the input), from
 * the derivative column of NBT_UNARY_OPS (tensor/elementwise_ops.h): an op listed there without its
 * <name>_grad_f32/_f64 does not compile. PASS ops pass the gradient on; OWN ops (gelu) record
 * a backward of their own and never reach unary_backward. */
typedef struct {
    nbt_map2_kernel kernel;
    bool reads_output, passes;
} derivative;
#define DERIVATIVE_INPUT(name)                                                                     \
    {                                                                                              \
        .kernel = { name##_grad_f32, name##_grad_f64 }                                             \
    }
#define DERIVATIVE_OUTPUT(name)                                                                    \
    { .kernel = {name##_grad_f32, name##_grad_f64}, .reads_output = true }
#define DERIVATIVE_PASS(name)                                                                      \
    { .passes = true }
#define DERIVATIVE_OWN(name)                                                                       \
    {                                                                                              \
        .kernel = { NULL, NULL }                                                                   \
    }
#define DERIVATIVE(ENUM, name, reads) [NBT_##ENUM] = DERIVATIVE_##reads(name),
static const derivative derivatives[] = {NBT_UNARY_OPS(DERIVATIVE)};
_Static_assert(sizeof derivatives / sizeof derivatives[0] == NBT_NUM_UNARY, "derivatives[]");

/* The node keeps the op and its scalar. */
static void unary_backward(nb_node *n, const nb_tensor *gout) {
    nbt_unary_op op = (nbt_unary_op)n->i[0];
    if (derivatives[op].passes) {
        nba_accumulate(n, 0, gout);
        return;
    }
    const nb_tensor *v = derivatives[op].reads_output ? n->out : n->inputs[0];
    nba_accumulate(n, 0, nbt_map2(nbt_unary_name(op), &derivatives[op].kernel, gout, v, n->f[0]));
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
/* saved: [0] gelu'(x), which the forward took while x and Phi(x) were in cache (the
 * rounding of PyTorch's g * (Phi + x phi)). */
static void gelu_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, nbt_mul(gout, n->saved[0]));
}

nb_tensor *nb_gelu(const nb_tensor *a) {
    if (!nba_check_float("gelu", a)) return NULL;
    if (!nba_any_requires_grad(1, &a)) return unary(NBT_GELU, a, 0);
    nb_tensor *derivative = NULL;
    nb_tensor *out = nbt_gelu_with_derivative(a, &derivative);
    nb_node *n = nba_record("gelu", out, 1, &a, gelu_backward);
    if (n) n->saved[0] = derivative;
    return out;
}
nb_tensor *nb_gelu_tanh(const nb_tensor *a) {
    return unary(NBT_GELU_TANH, a, 0);
}
nb_tensor *nb_silu(const nb_tensor *a) {
    return unary(NBT_SILU, a, 0);
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h): inputs kept away from kinks (relu) and singularities (log,
 * sqrt, pow, div denominators) ---- */
#include "op_def.h"

typedef struct {
    nb_tensor *(*unary)(const nb_tensor *);
    nb_tensor *(*binary)(const nb_tensor *, const nb_tensor *);
    nb_tensor *(*with_scalar)(const nb_tensor *, double);
    double scalar;
} op_ctx;

static nb_tensor *cat_unary(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return ((const op_ctx *)ctx)->unary(in[0]);
}
static nb_tensor *cat_binary(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return ((const op_ctx *)ctx)->binary(in[0], in[1]);
}
static nb_tensor *cat_with_scalar(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const op_ctx *c = ctx;
    return c->with_scalar(in[0], c->scalar);
}
/* op(expand(x), y): a broadcast operand that is a stride-0 view, not a leaf. */
static nb_tensor *cat_binary_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return ((const op_ctx *)ctx)->binary(nb_expand(in[0], NB_SHAPE(3, 4)), in[1]);
}
/* sum(f(x)): the gradient reaching f's backward is an expanded (stride 0) tensor. */
static nb_tensor *cat_sum_of_unary(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return nb_sum(((const op_ctx *)ctx)->unary(in[0]));
}
/* x * x + x: fan-out, the gradient of x is the sum of three contributions. */
static nb_tensor *cat_fan_out(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_add(nb_mul(in[0], in[0]), in[0]);
}

static const op_ctx add_ctx = {.binary = nb_add}, sub_ctx = {.binary = nb_sub},
                    mul_ctx = {.binary = nb_mul}, div_ctx = {.binary = nb_div};
static const op_ctx neg_ctx = {.unary = nb_neg}, exp_ctx = {.unary = nb_exp},
                    log_ctx = {.unary = nb_log}, sqrt_ctx = {.unary = nb_sqrt},
                    tanh_ctx = {.unary = nb_tanh}, sigmoid_ctx = {.unary = nb_sigmoid},
                    relu_ctx = {.unary = nb_relu}, gelu_ctx = {.unary = nb_gelu},
                    gelu_tanh_ctx = {.unary = nb_gelu_tanh}, silu_ctx = {.unary = nb_silu};
static const op_ctx add_scalar_ctx = {.with_scalar = nb_add_scalar, .scalar = -1.5},
                    mul_scalar_ctx = {.with_scalar = nb_mul_scalar, .scalar = 2.5},
                    pow_half = {.with_scalar = nb_pow_scalar, .scalar = 0.5},
                    pow_square = {.with_scalar = nb_pow_scalar, .scalar = 2},
                    pow_neg = {.with_scalar = nb_pow_scalar, .scalar = -1.5};

/* Golden runners: inputs "a" (and "b"), parameters "scalar" or "exponent". */
#define GOLDEN_UNARY(op)                                                                           \
    static int golden_##op(nba_golden_call *c, nb_tensor **out) {                                  \
        out[0] = nb_##op(c->input(c, "a", true));                                                  \
        return 1;                                                                                  \
    }
#define GOLDEN_BINARY(op)                                                                          \
    static int golden_##op(nba_golden_call *c, nb_tensor **out) {                                  \
        out[0] = nb_##op(c->input(c, "a", true), c->input(c, "b", true));                          \
        return 1;                                                                                  \
    }
#define GOLDEN_WITH_SCALAR(op, key)                                                                \
    static int golden_##op(nba_golden_call *c, nb_tensor **out) {                                  \
        out[0] = nb_##op(c->input(c, "a", true), c->number(c, key));                               \
        return 1;                                                                                  \
    }
GOLDEN_BINARY(add)
GOLDEN_BINARY(sub)
GOLDEN_BINARY(mul)
GOLDEN_BINARY(div)
GOLDEN_UNARY(neg)
GOLDEN_UNARY(exp)
GOLDEN_UNARY(log)
GOLDEN_UNARY(sqrt)
GOLDEN_UNARY(tanh)
GOLDEN_UNARY(sigmoid)
GOLDEN_UNARY(relu)
GOLDEN_UNARY(gelu)
GOLDEN_UNARY(gelu_tanh)
GOLDEN_UNARY(silu)
GOLDEN_WITH_SCALAR(add_scalar, "scalar")
GOLDEN_WITH_SCALAR(mul_scalar, "scalar")
GOLDEN_WITH_SCALAR(pow_scalar, "exponent")

#define P NBA_POSITIVE
#define A NBA_AWAY_FROM_0
#define UNARY_NO_BROADCAST "one input: nothing to broadcast"
#define OP(op, entries, goldens, ...) NBA_OP_DEF(nba_op_##op, #op, entries, goldens, __VA_ARGS__)
#define GOLDENS(op, torch, cases)                                                                  \
    static const nba_golden op##_goldens[] = {NBA_GOLDEN(#op, golden_##op, torch, cases)};

/* Golden cases: binary ops on equal, broadcast and 0-d shapes and with a constant operand;
 * unary ops on 1-3 dims and 0-d, and a wide range reaching the tails of exp, tanh, sigmoid
 * and gelu and their vector loops. */
static const nba_golden_case binary_cases[] = {
    {"a: [3,4]; b: [3,4]", ""},    {"a: [3,1]; b: [1,4]", ""}, {"a: [2,3,4]; b: [4]", ""},
    {"a: [2,1,4]; b: [3,1]", ""},  {"a: []; b: [2,3]", ""},    {"a: [5]; b: []", ""},
    {"a: [2,3]; b: [3] const", ""}};
static const nba_golden_case div_cases[] = {
    {"a: [3,4]; b: positive [3,4]", ""},    {"a: [3,1]; b: positive [1,4]", ""},
    {"a: [2,3,4]; b: positive [4]", ""},    {"a: [2,1,4]; b: positive [3,1]", ""},
    {"a: []; b: positive [2,3]", ""},       {"a: [5]; b: positive []", ""},
    {"a: [2,3]; b: positive [3] const", ""}};
#define UNARY_CASES(domain)                                                                        \
    {"a: " domain "[5]", ""}, {"a: " domain "[3,4]", ""}, {"a: " domain "[2,3,4]", ""}, {          \
        "a: " domain "[]", ""                                                                      \
    }
static const nba_golden_case unary_cases[] = {UNARY_CASES("")};
static const nba_golden_case unary_wide_cases[] = {UNARY_CASES(""), {"a: [37] scale 4", ""}};
static const nba_golden_case positive_cases[] = {UNARY_CASES("positive ")};
static const nba_golden_case away_cases[] = {UNARY_CASES("away ")};
static const nba_golden_case scalar_cases[] = {
    {"a: [3,4]", "scalar=2.5"}, {"a: [2,3,4]", "scalar=-0.75"}, {"a: []", "scalar=3.0"}};
static const nba_golden_case pow_cases[] = {{"a: [3,4]", "exponent=2.0"},
                                            {"a: positive [2,3,4]", "exponent=0.5"},
                                            {"a: positive [5]", "exponent=-1.5"},
                                            {"a: [3,4]", "exponent=3.0"},
                                            {"a: positive []", "exponent=1.7"}};
#define UNARY_OP(op)                                                                               \
    OP(op, op##_entries, op##_goldens, .not_applicable = {[NBA_BROADCAST] = UNARY_NO_BROADCAST})

/* clang-format off */
static const nba_entry add_entries[] = {
    {"add [2,3] + [2,3]", NBA_RANDOM, cat_binary, 2, {IN(2, 3), IN(2, 3)}, &add_ctx},
    {"add [2,3] + transposed [2,3]", NBA_STRIDED, cat_binary, 2, {IN(2, 3), IN_T(2, 3)}, &add_ctx},
    {"add broadcast [3,1] + [4]", NBA_BROADCAST, cat_binary, 2, {IN(3, 1), IN(4)}, &add_ctx},
    {"add row broadcast sliced [2,3,4] + [4]", NBA_STRIDED, cat_binary, 2, {IN_S(2, 3, 4), IN(4)}, &add_ctx},
    {"add 0-d + [2,3]", NBA_BROADCAST, cat_binary, 2, {SCALAR, IN(2, 3)}, &add_ctx},
    {"add expanded [4] + transposed [3,4]", NBA_STRIDED, cat_binary_expanded, 2, {IN(4), IN_T(3, 4)}, &add_ctx},
};
GOLDENS(add, "torch.add(a, b)", binary_cases)
OP(add, add_entries, add_goldens);

static const nba_entry sub_entries[] = {
    {"sub [3,4] - [3,4]", NBA_RANDOM, cat_binary, 2, {IN(3, 4), IN(3, 4)}, &sub_ctx},
    {"sub [3,1] - sliced [4]", NBA_STRIDED, cat_binary, 2, {IN(3, 1), IN_S(4)}, &sub_ctx},
    {"sub transposed [3,4] - [3,1]", NBA_STRIDED, cat_binary, 2, {IN_T(3, 4), IN(3, 1)}, &sub_ctx},
    {"sub rows [3,4] - [4]", NBA_BROADCAST, cat_binary, 2, {IN(3, 4), IN(4)}, &sub_ctx},
    {"sub rows [4] - [2,3,4]", NBA_BROADCAST, cat_binary, 2, {IN(4), IN(2, 3, 4)}, &sub_ctx},
    {"sub [2,3] - 0-d", NBA_BROADCAST, cat_binary, 2, {IN(2, 3), SCALAR}, &sub_ctx},
};
GOLDENS(sub, "torch.sub(a, b)", binary_cases)
OP(sub, sub_entries, sub_goldens);

static const nba_entry mul_entries[] = {
    {"mul [3,4] * [3,4]", NBA_RANDOM, cat_binary, 2, {IN(3, 4), IN(3, 4)}, &mul_ctx},
    {"mul broadcast [3,1] * [4]", NBA_BROADCAST, cat_binary, 2, {IN(3, 1), IN(4)}, &mul_ctx},
    {"mul [2,1,4] * transposed [3,4]", NBA_STRIDED, cat_binary, 2, {IN(2, 1, 4), IN_T(3, 4)}, &mul_ctx},
    {"mul 0-d * sliced [2,3]", NBA_STRIDED, cat_binary, 2, {SCALAR, IN_S(2, 3)}, &mul_ctx},
    {"mul with a constant operand", NBA_BROADCAST, cat_binary, 2, {IN(2, 3), IN_C(3)}, &mul_ctx},
    {"mul expanded [4] * [3,4]", NBA_BROADCAST, cat_binary_expanded, 2, {IN(4), IN(3, 4)}, &mul_ctx},
    {"fan-out x * x + x, transposed [3,4]", NBA_STRIDED, cat_fan_out, 1, {IN_T(3, 4)}, NULL},
};
GOLDENS(mul, "torch.mul(a, b)", binary_cases)
OP(mul, mul_entries, mul_goldens);

static const nba_entry div_entries[] = {
    {"div [2,3] / positive [2,3]", NBA_RANDOM, cat_binary, 2, {IN(2, 3), IN_D(P, 2, 3)}, &div_ctx},
    {"div broadcast [3,1] / positive [4]", NBA_BROADCAST, cat_binary, 2, {IN(3, 1), IN_D(P, 4)}, &div_ctx},
    {"div rows [3,4] / positive [1,4]", NBA_BROADCAST, cat_binary, 2, {IN(3, 4), IN_D(P, 1, 4)}, &div_ctx},
    {"div [4] / positive transposed [3,4]", NBA_STRIDED, cat_binary, 2, {IN(4), IN_TD(P, 3, 4)}, &div_ctx},
    {"div sliced [2,3] / positive 0-d", NBA_STRIDED, cat_binary, 2, {IN_S(2, 3), {.ndim = 0, .domain = P}}, &div_ctx},
    {"div expanded [4] / positive sliced [3,4]", NBA_STRIDED, cat_binary_expanded, 2, {IN(4), IN_SD(P, 3, 4)}, &div_ctx},
};
GOLDENS(div, "torch.div(a, b)", div_cases)
OP(div, div_entries, div_goldens);

static const nba_entry neg_entries[] = {
    {"neg [2,3]", NBA_RANDOM, cat_unary, 1, {IN(2, 3)}, &neg_ctx},
    {"neg sliced [3,4]", NBA_STRIDED, cat_unary, 1, {IN_S(3, 4)}, &neg_ctx},
};
GOLDENS(neg, "torch.neg(a)", unary_cases)
UNARY_OP(neg);

static const nba_entry add_scalar_entries[] = {
    {"add_scalar [2,3]", NBA_RANDOM, cat_with_scalar, 1, {IN(2, 3)}, &add_scalar_ctx},
    {"add_scalar transposed [3,4]", NBA_STRIDED, cat_with_scalar, 1, {IN_T(3, 4)}, &add_scalar_ctx},
    {"add_scalar 0-d", NBA_RANDOM, cat_with_scalar, 1, {SCALAR}, &add_scalar_ctx},
};
GOLDENS(add_scalar, "a + scalar", scalar_cases)
UNARY_OP(add_scalar);

static const nba_entry mul_scalar_entries[] = {
    {"mul_scalar [2,3]", NBA_RANDOM, cat_with_scalar, 1, {IN(2, 3)}, &mul_scalar_ctx},
    {"mul_scalar sliced [3,4]", NBA_STRIDED, cat_with_scalar, 1, {IN_S(3, 4)}, &mul_scalar_ctx},
};
GOLDENS(mul_scalar, "a * scalar", scalar_cases)
UNARY_OP(mul_scalar);

static const nba_entry pow_scalar_entries[] = {
    {"pow_scalar 0.5 positive [2,3]", NBA_RANDOM, cat_with_scalar, 1, {IN_D(P, 2, 3)}, &pow_half},
    {"pow_scalar 2 transposed [3,4]", NBA_STRIDED, cat_with_scalar, 1, {IN_T(3, 4)}, &pow_square},
    {"pow_scalar -1.5 positive sliced [3,4]", NBA_STRIDED, cat_with_scalar, 1, {IN_SD(P, 3, 4)}, &pow_neg},
};
GOLDENS(pow_scalar, "a ** exponent", pow_cases)
UNARY_OP(pow_scalar);

static const nba_entry exp_entries[] = {
    {"exp [2,3]", NBA_RANDOM, cat_unary, 1, {IN(2, 3)}, &exp_ctx},
    {"exp transposed [3,4]", NBA_STRIDED, cat_unary, 1, {IN_T(3, 4)}, &exp_ctx},
    {"sum(exp) sliced [3,4]", NBA_STRIDED, cat_sum_of_unary, 1, {IN_S(3, 4)}, &exp_ctx},
};
GOLDENS(exp, "torch.exp(a)", unary_wide_cases)
UNARY_OP(exp);

static const nba_entry log_entries[] = {
    {"log positive [2,3]", NBA_RANDOM, cat_unary, 1, {IN_D(P, 2, 3)}, &log_ctx},
    {"log positive transposed [3,4]", NBA_STRIDED, cat_unary, 1, {IN_TD(P, 3, 4)}, &log_ctx},
    {"sum(log) positive sliced [3,4]", NBA_STRIDED, cat_sum_of_unary, 1, {IN_SD(P, 3, 4)}, &log_ctx},
};
GOLDENS(log, "torch.log(a)", positive_cases)
UNARY_OP(log);

static const nba_entry sqrt_entries[] = {
    {"sqrt positive [2,3]", NBA_RANDOM, cat_unary, 1, {IN_D(P, 2, 3)}, &sqrt_ctx},
    {"sqrt positive sliced [3,4]", NBA_STRIDED, cat_unary, 1, {IN_SD(P, 3, 4)}, &sqrt_ctx},
};
GOLDENS(sqrt, "torch.sqrt(a)", positive_cases)
UNARY_OP(sqrt);

static const nba_entry tanh_entries[] = {
    {"tanh [2,3]", NBA_RANDOM, cat_unary, 1, {IN(2, 3)}, &tanh_ctx},
    {"tanh transposed [3,4]", NBA_STRIDED, cat_unary, 1, {IN_T(3, 4)}, &tanh_ctx},
    {"sum(tanh) sliced [3,4]", NBA_STRIDED, cat_sum_of_unary, 1, {IN_S(3, 4)}, &tanh_ctx},
};
GOLDENS(tanh, "torch.tanh(a)", unary_wide_cases)
UNARY_OP(tanh);

static const nba_entry sigmoid_entries[] = {
    {"sigmoid [2,3]", NBA_RANDOM, cat_unary, 1, {IN(2, 3)}, &sigmoid_ctx},
    {"sigmoid sliced [3,4]", NBA_STRIDED, cat_unary, 1, {IN_S(3, 4)}, &sigmoid_ctx},
};
GOLDENS(sigmoid, "torch.sigmoid(a)", unary_wide_cases)
UNARY_OP(sigmoid);

static const nba_entry relu_entries[] = {
    {"relu away from 0 [2,3]", NBA_RANDOM, cat_unary, 1, {IN_D(A, 2, 3)}, &relu_ctx},
    {"relu away from 0 transposed [3,4]", NBA_STRIDED, cat_unary, 1, {IN_TD(A, 3, 4)}, &relu_ctx},
    {"sum(relu) away from 0 sliced [3,4]", NBA_STRIDED, cat_sum_of_unary, 1, {IN_SD(A, 3, 4)}, &relu_ctx},
};
GOLDENS(relu, "torch.relu(a)", away_cases)
UNARY_OP(relu);

static const nba_entry gelu_entries[] = {
    {"gelu [2,3]", NBA_RANDOM, cat_unary, 1, {IN(2, 3)}, &gelu_ctx},
    {"gelu transposed [3,4]", NBA_STRIDED, cat_unary, 1, {IN_T(3, 4)}, &gelu_ctx},
    {"sum(gelu) sliced [3,4]", NBA_STRIDED, cat_sum_of_unary, 1, {IN_S(3, 4)}, &gelu_ctx},
};
GOLDENS(gelu, "F.gelu(a)", unary_wide_cases)
UNARY_OP(gelu);

static const nba_entry gelu_tanh_entries[] = {
    {"gelu_tanh [2,3]", NBA_RANDOM, cat_unary, 1, {IN(2, 3)}, &gelu_tanh_ctx},
    {"gelu_tanh sliced [3,4]", NBA_STRIDED, cat_unary, 1, {IN_S(3, 4)}, &gelu_tanh_ctx},
    {"sum(gelu_tanh) transposed [3,4]", NBA_STRIDED, cat_sum_of_unary, 1, {IN_T(3, 4)}, &gelu_tanh_ctx},
};
GOLDENS(gelu_tanh, "F.gelu(a, approximate='tanh')", unary_wide_cases)
UNARY_OP(gelu_tanh);

static const nba_entry silu_entries[] = {
    {"silu [2,3]", NBA_RANDOM, cat_unary, 1, {IN(2, 3)}, &silu_ctx},
    {"silu transposed [3,4]", NBA_STRIDED, cat_unary, 1, {IN_T(3, 4)}, &silu_ctx},
    {"sum(silu) sliced [3,4]", NBA_STRIDED, cat_sum_of_unary, 1, {IN_S(3, 4)}, &silu_ctx},
};
GOLDENS(silu, "F.silu(a)", unary_wide_cases)
UNARY_OP(silu);
/* clang-format on */
#endif /* NABLA_TESTS */
