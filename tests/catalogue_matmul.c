/* Catalogue entries for matmul: every torch.matmul shape case, transposed and sliced
 * operands, broadcast batches, and a non-contiguous output gradient. */
#include "catalogue.h"


static nb_tensor *f_matmul(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_matmul(in[0], in[1]);
}
/* The right operand read through a transpose view: a flag for the kernel, not a copy. */
static nb_tensor *f_matmul_bt(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_matmul(in[0], nb_transpose(in[1], -1, -2));
}
/* The output transposed afterwards: its gradient arrives transposed. */
static nb_tensor *f_matmul_then_t(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_transpose(nb_matmul(in[0], in[1]), -1, -2);
}
/* A batch made by expand: batch stride 0, gradient summed over it. */
static nb_tensor *f_matmul_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_matmul(nb_expand(in[0], NB_SHAPE(3, -1, -1)), in[1]);
}
/* Attention's pattern: scores = q k^T, then scores v, all batched over heads. */
static nb_tensor *f_attention_products(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_matmul(nb_matmul(in[0], nb_transpose(in[1], -1, -2)), in[2]);
}

static nb_tensor *f_linear(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_f_linear(in[0], in[1], n > 2 ? in[2] : NULL);
}

/* The output transposed afterwards, so the gradient reaches linear's backward transposed. */
static nb_tensor *f_linear_then_t(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_transpose(nb_f_linear(in[0], in[1], n > 2 ? in[2] : NULL), 0, -1);
}
/* x [3,2,4] with its first two dims swapped: rows contiguous, but the leading dims do not
 * collapse into one row stride. */
static nb_tensor *f_linear_swapped_batch(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_f_linear(nb_transpose(in[0], 0, 1), in[1], n > 2 ? in[2] : NULL);
}

const nbcat_entry nbcat_matmul[] = {
    {"linear [2,3,4] W [5,4] b [5]", f_linear, 3, {IN(2, 3, 4), IN(5, 4), IN(5)}, NULL},
    {"linear transposed x, transposed W, sliced b", f_linear, 3,
     {IN_T(3, 4), IN_T(5, 4), IN_S(5)}, NULL},
    {"linear sliced x (copied), no bias", f_linear, 2, {IN_S(2, 4), IN(3, 4)}, NULL},
    {"linear [4] (1-D input) W [2,4]", f_linear, 2, {IN(4), IN_S(2, 4)}, NULL},
    {"linear x [3,2,4] dims 0, 1 swapped", f_linear_swapped_batch, 3, {IN(3, 2, 4), IN(5, 4), IN(5)}, NULL},
    {"linear 3-D transposed x [2,3,4]", f_linear, 3, {IN_T(2, 3, 4), IN(5, 4), IN(5)}, NULL},
    {"linear [1,3,1,4] sliced x, size-1 dims", f_linear, 3, {IN_S(1, 3, 1, 4), IN_T(2, 4), IN(2)}, NULL},
    {"linear, gradient transposed [3,4] W [5,4]", f_linear_then_t, 3, {IN(3, 4), IN(5, 4), IN_S(5)}, NULL},
    {"matmul 1-D . 1-D [5] [5]", f_matmul, 2, {IN(5), IN(5)}, NULL},
    {"matmul 1-D . 1-D sliced [4] [4]", f_matmul, 2, {IN_S(4), IN_S(4)}, NULL},
    {"matmul 2-D [3,4]@[4,5]", f_matmul, 2, {IN(3, 4), IN(4, 5)}, NULL},
    {"matmul 2-D transposed [3,4]@[4,5]", f_matmul, 2, {IN_T(3, 4), IN_T(4, 5)}, NULL},
    {"matmul 2-D sliced (copied) [3,4]@[4,2]", f_matmul, 2, {IN_S(3, 4), IN_S(4, 2)}, NULL},
    {"matmul 2-D [4,3]@transpose([5,3])", f_matmul_bt, 2, {IN(4, 3), IN(5, 3)}, NULL},
    {"matmul 1-D@2-D [4]@[4,3]", f_matmul, 2, {IN(4), IN_T(4, 3)}, NULL},
    {"matmul 2-D@1-D [3,4]@[4]", f_matmul, 2, {IN_T(3, 4), IN_S(4)}, NULL},
    {"matmul 1-D@3-D [4]@[2,4,3]", f_matmul, 2, {IN(4), IN(2, 4, 3)}, NULL},
    {"matmul 3-D@1-D [2,3,4]@[4]", f_matmul, 2, {IN_S(2, 3, 4), IN(4)}, NULL},
    {"matmul batched [2,3,4]@[2,4,5]", f_matmul, 2, {IN(2, 3, 4), IN_T(2, 4, 5)}, NULL},
    {"matmul batched, both T [2,3,4]@[2,4,5]", f_matmul, 2, {IN_T(2, 3, 4), IN_T(2, 4, 5)}, NULL},
    {"matmul broadcast [2,1,3,4]@[5,4,6]", f_matmul, 2, {IN(2, 1, 3, 4), IN(5, 4, 6)}, NULL},
    {"matmul broadcast right [2,3,4]@[4,5]", f_matmul, 2, {IN(2, 3, 4), IN(4, 5)}, NULL},
    {"matmul broadcast left [3,4]@[2,4,5]", f_matmul, 2, {IN_T(3, 4), IN(2, 4, 5)}, NULL},
    {"matmul broadcast [1,3,4]@[2,1,4,2]", f_matmul, 2, {IN(1, 3, 4), IN_S(2, 1, 4, 2)}, NULL},
    {"matmul expanded [3,4]->[3,3,4]@[3,4,2]", f_matmul_expanded, 2, {IN(3, 4), IN(3, 4, 2)}, NULL},
    {"matmul constant left [3,4]@[4,2]", f_matmul, 2, {IN_C(3, 4), IN(4, 2)}, NULL},
    {"matmul constant right [2,3,4]@[4,2]", f_matmul, 2, {IN(2, 3, 4), IN_C(4, 2)}, NULL},
    {"matmul then transpose [2,3,4]@[2,4,5]", f_matmul_then_t, 2, {IN(2, 3, 4), IN(2, 4, 5)}, NULL},
    /* big enough for the tiled kernels (the products above take the tiny-product path) */
    {"matmul tiled [2,9,17]@[17,13]", f_matmul, 2, {IN(2, 9, 17), IN_T(17, 13)}, NULL},
    {"matmul tiled [2,1,9,16]@[3,16,12]^T",
     f_matmul_bt,
     2,
     {IN_S(2, 1, 9, 16), IN(3, 12, 16)},
     NULL},
    {"matmul q k^T v",
     f_attention_products,
     3,
     {IN(2, 2, 3, 4), IN_T(2, 2, 3, 4), IN_S(2, 2, 3, 2)},
     NULL},
};
const int nbcat_matmul_count = sizeof nbcat_matmul / sizeof nbcat_matmul[0];
