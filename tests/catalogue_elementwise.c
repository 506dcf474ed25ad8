/* Catalogue entries for the elementwise ops: every op on contiguous, transposed and sliced
 * inputs, binary ops also broadcast ([3,1] with [4], a 0-d scalar, rows), with inputs kept
 * away from kinks (relu) and singularities (log, sqrt, pow, div denominators). */
#include "catalogue.h"

#define SCALAR                                                                                     \
    { .ndim = 0 }
/* The same with a value domain. */

typedef struct {
    nb_tensor *(*unary)(const nb_tensor *);
    nb_tensor *(*binary)(const nb_tensor *, const nb_tensor *);
    nb_tensor *(*with_scalar)(const nb_tensor *, double);
    double scalar;
} op_ctx;

static nb_tensor *f_unary(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return ((const op_ctx *)ctx)->unary(in[0]);
}
static nb_tensor *f_binary(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return ((const op_ctx *)ctx)->binary(in[0], in[1]);
}
static nb_tensor *f_with_scalar(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const op_ctx *c = ctx;
    return c->with_scalar(in[0], c->scalar);
}
/* op(expand(x) , y): a broadcast operand that is a stride-0 view, not a leaf. */
static nb_tensor *f_binary_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return ((const op_ctx *)ctx)->binary(nb_expand(in[0], NB_SHAPE(3, 4)), in[1]);
}
/* sum(f(x)): the gradient reaching f's backward is an expanded (stride 0) tensor. */
static nb_tensor *f_sum_of_unary(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return nb_sum(((const op_ctx *)ctx)->unary(in[0]));
}
/* x * x + x: fan-out, the gradient of x is the sum of three contributions. */
static nb_tensor *f_fan_out(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_add(nb_mul(in[0], in[0]), in[0]);
}

static const op_ctx add = {.binary = nb_add}, sub = {.binary = nb_sub}, mul = {.binary = nb_mul},
                    div_ = {.binary = nb_div};
static const op_ctx neg = {.unary = nb_neg}, exp_ = {.unary = nb_exp}, log_ = {.unary = nb_log},
                    sqrt_ = {.unary = nb_sqrt}, tanh_ = {.unary = nb_tanh},
                    sigmoid = {.unary = nb_sigmoid}, relu = {.unary = nb_relu},
                    gelu = {.unary = nb_gelu}, gelu_tanh = {.unary = nb_gelu_tanh};
static const op_ctx add_scalar = {.with_scalar = nb_add_scalar, .scalar = -1.5},
                    mul_scalar = {.with_scalar = nb_mul_scalar, .scalar = 2.5},
                    pow_half = {.with_scalar = nb_pow_scalar, .scalar = 0.5},
                    pow_square = {.with_scalar = nb_pow_scalar, .scalar = 2},
                    pow_neg = {.with_scalar = nb_pow_scalar, .scalar = -1.5};

#define P NBCAT_POSITIVE
#define A NBCAT_AWAY_FROM_0

const nbcat_entry nbcat_elementwise[] = {
    /* binary: same shape, broadcast, 0-d scalar, non-contiguous */
    {"add [2,3] + transposed [2,3]", f_binary, 2, {IN(2, 3), IN_T(2, 3)}, &add},
    {"add broadcast [3,1] + [4]", f_binary, 2, {IN(3, 1), IN(4)}, &add},
    {"add row broadcast sliced [2,3,4] + [4]", f_binary, 2, {IN_S(2, 3, 4), IN(4)}, &add},
    {"add 0-d + [2,3]", f_binary, 2, {SCALAR, IN(2, 3)}, &add},
    {"add expanded [4] + [3,4]", f_binary_expanded, 2, {IN(4), IN_T(3, 4)}, &add},
    {"sub [3,1] - sliced [4]", f_binary, 2, {IN(3, 1), IN_S(4)}, &sub},
    {"sub transposed [3,4] - [3,1]", f_binary, 2, {IN_T(3, 4), IN(3, 1)}, &sub},
    {"sub rows [3,4] - [4]", f_binary, 2, {IN(3, 4), IN(4)}, &sub},
    {"sub rows [4] - [2,3,4]", f_binary, 2, {IN(4), IN(2, 3, 4)}, &sub},
    {"sub [2,3] - 0-d", f_binary, 2, {IN(2, 3), SCALAR}, &sub},
    {"mul [3,4] * [3,4]", f_binary, 2, {IN(3, 4), IN(3, 4)}, &mul},
    {"mul broadcast [3,1] * [4]", f_binary, 2, {IN(3, 1), IN(4)}, &mul},
    {"mul [2,1,4] * transposed [3,4]", f_binary, 2, {IN(2, 1, 4), IN_T(3, 4)}, &mul},
    {"mul 0-d * sliced [2,3]", f_binary, 2, {SCALAR, IN_S(2, 3)}, &mul},
    {"mul with a constant operand", f_binary, 2, {IN(2, 3), {NBCAT_DIMS(3), .constant = true}}, &mul},
    {"mul expanded [4] * [3,4]", f_binary_expanded, 2, {IN(4), IN(3, 4)}, &mul},
    {"div [2,3] / positive [2,3]", f_binary, 2, {IN(2, 3), IN_D(P, 2, 3)}, &div_},
    {"div broadcast [3,1] / positive [4]", f_binary, 2, {IN(3, 1), IN_D(P, 4)}, &div_},
    {"div rows [3,4] / positive [1,4]", f_binary, 2, {IN(3, 4), IN_D(P, 1, 4)}, &div_},
    {"div [4] / positive transposed [3,4]", f_binary, 2, {IN(4), IN_TD(P, 3, 4)}, &div_},
    {"div sliced [2,3] / positive 0-d", f_binary, 2, {IN_S(2, 3), {.ndim = 0, .domain = P}}, &div_},
    {"div expanded [4] / positive [3,4]", f_binary_expanded, 2, {IN(4), IN_SD(P, 3, 4)}, &div_},
    {"fan-out x * x + x", f_fan_out, 1, {IN_T(3, 4)}, NULL},
    /* unary: contiguous, transposed, sliced, 0-d, and with an expanded incoming gradient */
    {"neg [2,3]", f_unary, 1, {IN(2, 3)}, &neg},
    {"neg sliced [3,4]", f_unary, 1, {IN_S(3, 4)}, &neg},
    {"add_scalar transposed [3,4]", f_with_scalar, 1, {IN_T(3, 4)}, &add_scalar},
    {"add_scalar 0-d", f_with_scalar, 1, {SCALAR}, &add_scalar},
    {"mul_scalar [2,3]", f_with_scalar, 1, {IN(2, 3)}, &mul_scalar},
    {"mul_scalar sliced [3,4]", f_with_scalar, 1, {IN_S(3, 4)}, &mul_scalar},
    {"pow_scalar 0.5 positive [2,3]", f_with_scalar, 1, {IN_D(P, 2, 3)}, &pow_half},
    {"pow_scalar 2 transposed [3,4]", f_with_scalar, 1, {IN_T(3, 4)}, &pow_square},
    {"pow_scalar -1.5 positive sliced [3,4]", f_with_scalar, 1, {IN_SD(P, 3, 4)}, &pow_neg},
    {"exp [2,3]", f_unary, 1, {IN(2, 3)}, &exp_},
    {"exp transposed [3,4]", f_unary, 1, {IN_T(3, 4)}, &exp_},
    {"sum(exp) sliced [3,4]", f_sum_of_unary, 1, {IN_S(3, 4)}, &exp_},
    {"log positive [2,3]", f_unary, 1, {IN_D(P, 2, 3)}, &log_},
    {"log positive transposed [3,4]", f_unary, 1, {IN_TD(P, 3, 4)}, &log_},
    {"sum(log) positive sliced [3,4]", f_sum_of_unary, 1, {IN_SD(P, 3, 4)}, &log_},
    {"sqrt positive [2,3]", f_unary, 1, {IN_D(P, 2, 3)}, &sqrt_},
    {"sqrt positive sliced [3,4]", f_unary, 1, {IN_SD(P, 3, 4)}, &sqrt_},
    {"tanh [2,3]", f_unary, 1, {IN(2, 3)}, &tanh_},
    {"tanh transposed [3,4]", f_unary, 1, {IN_T(3, 4)}, &tanh_},
    {"sum(tanh) sliced [3,4]", f_sum_of_unary, 1, {IN_S(3, 4)}, &tanh_},
    {"sigmoid [2,3]", f_unary, 1, {IN(2, 3)}, &sigmoid},
    {"sigmoid sliced [3,4]", f_unary, 1, {IN_S(3, 4)}, &sigmoid},
    {"relu away from 0 [2,3]", f_unary, 1, {IN_D(A, 2, 3)}, &relu},
    {"relu away from 0 transposed [3,4]", f_unary, 1, {IN_TD(A, 3, 4)}, &relu},
    {"sum(relu) away from 0 sliced [3,4]", f_sum_of_unary, 1, {IN_SD(A, 3, 4)}, &relu},
    {"gelu [2,3]", f_unary, 1, {IN(2, 3)}, &gelu},
    {"gelu transposed [3,4]", f_unary, 1, {IN_T(3, 4)}, &gelu},
    {"sum(gelu) sliced [3,4]", f_sum_of_unary, 1, {IN_S(3, 4)}, &gelu},
    {"gelu_tanh [2,3]", f_unary, 1, {IN(2, 3)}, &gelu_tanh},
    {"gelu_tanh sliced [3,4]", f_unary, 1, {IN_S(3, 4)}, &gelu_tanh},
    {"sum(gelu_tanh) transposed [3,4]", f_sum_of_unary, 1, {IN_T(3, 4)}, &gelu_tanh},
};
const int nbcat_elementwise_count = sizeof nbcat_elementwise / sizeof nbcat_elementwise[0];
