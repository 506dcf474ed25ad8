/* Catalogue entries for softmax, log_softmax, masked_fill and masked_softmax. Masks are built
 * inside each function, so they are constants of the check. */
#include "catalogue.h"

#include <math.h>


/* A bool mask from a literal: MASK(NB_SHAPE(2, 2), U8(1, 0, 0, 1)). */
#define U8(...) ((const uint8_t[]){__VA_ARGS__})
#define MASK(...) nb_from_array(NB_BOOL, __VA_ARGS__)

static nb_tensor *f_softmax_last(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_softmax(in[0], -1);
}
static nb_tensor *f_softmax_first(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_softmax(in[0], 0);
}
static nb_tensor *f_softmax_middle(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_softmax(in[0], 1);
}
/* Broadcast input: every row reads the same [1, 4] leaf, so row gradients must add up. */
static nb_tensor *f_softmax_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_softmax(nb_expand(in[0], NB_SHAPE(3, 4)), -1);
}
static nb_tensor *f_log_softmax_last(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log_softmax(in[0], -1);
}
static nb_tensor *f_log_softmax_first(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log_softmax(in[0], 0);
}
static nb_tensor *f_log_softmax_middle(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log_softmax(in[0], 1);
}
static nb_tensor *f_log_softmax_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log_softmax(nb_expand(in[0], NB_SHAPE(2, 3)), -1);
}

/* [3, 4] input, [4] mask broadcast over rows; a finite fill keeps the output finite. */
static nb_tensor *f_masked_fill_row_mask(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_fill(in[0], MASK(NB_SHAPE(4), U8(0, 1, 0, 1)), 0.75);
}
/* [3, 4] input, [3, 1] mask broadcast over columns. */
static nb_tensor *f_masked_fill_col_mask(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_fill(in[0], MASK(NB_SHAPE(3, 1), U8(1, 0, 0)), -2.0);
}
/* The PyTorch idiom: fill with -inf, then softmax; blocked entries get 0 and no gradient. */
static nb_tensor *f_masked_fill_then_softmax(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(3, 4), U8(0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0));
    return nb_softmax(nb_masked_fill(in[0], mask, -INFINITY), -1);
}

static nb_tensor *f_causal(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_softmax(in[0], NULL, true, 0.5);
}
/* Key padding: mask [2, 1, 1, 4] over scores [2, 2, 3, 4] (batch, heads, queries, keys). */
static nb_tensor *f_padding(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(2, 1, 1, 4), U8(0, 0, 0, 1, 0, 0, 1, 1));
    return nb_masked_softmax(in[0], mask, false, 1.0 / sqrt(4.0));
}
/* Padding and causal together, with the second batch's keys all padded: its rows are fully
 * blocked and must give zeros and zero gradient. */
static nb_tensor *f_padding_causal_blocked(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(2, 1, 4), U8(0, 0, 1, 0, 1, 1, 1, 1));
    return nb_masked_softmax(in[0], mask, true, 0.7);
}
/* A [3, 4] mask whose middle row is all true. */
static nb_tensor *f_blocked_row(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(3, 4), U8(1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0));
    return nb_masked_softmax(in[0], mask, false, 1.0);
}
/* A per-key mask broadcast along the keys' own dim ([3, 1]): the first query sees nothing. */
static nb_tensor *f_query_mask(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_softmax(in[0], MASK(NB_SHAPE(3, 1), U8(1, 0, 0)), false, 2.0);
}
static nb_tensor *f_masked_softmax_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_softmax(nb_expand(in[0], NB_SHAPE(2, 3, 3)), NULL, true, 1.0);
}

/* clang-format off */
const nbcat_entry nbcat_softmax[] = {
    {"softmax dim -1 [3,5]", f_softmax_last, 1, {IN(3, 5)}, NULL},
    {"softmax dim -1 of a sliced [2,4]", f_softmax_last, 1, {IN_S(2, 4)}, NULL},
    {"softmax dim 0 of a transposed [4,3]", f_softmax_first, 1, {IN_T(4, 3)}, NULL},
    {"softmax dim 1 [2,3,4]", f_softmax_middle, 1, {IN(2, 3, 4)}, NULL},
    {"softmax dim 1 of a sliced [2,3,2]", f_softmax_middle, 1, {IN_S(2, 3, 2)}, NULL},
    {"softmax of [1,4] expanded to [3,4]", f_softmax_expanded, 1, {IN(1, 4)}, NULL},
    {"log_softmax dim -1 [3,4]", f_log_softmax_last, 1, {IN(3, 4)}, NULL},
    {"log_softmax dim -1 of a transposed [3,4]", f_log_softmax_last, 1, {IN_T(3, 4)}, NULL},
    {"log_softmax dim 0 of a sliced [3,4]", f_log_softmax_first, 1, {IN_S(3, 4)}, NULL},
    {"log_softmax dim 1 of a transposed [2,4,3]", f_log_softmax_middle, 1, {IN_T(2, 4, 3)}, NULL},
    {"log_softmax of [3] expanded to [2,3] dim -1", f_log_softmax_expanded, 1, {IN(3)}, NULL},
    {"masked_fill [3,4] with a [4] mask", f_masked_fill_row_mask, 1, {IN(3, 4)}, NULL},
    {"masked_fill transposed [3,4] with a [3,1] mask",
     f_masked_fill_col_mask, 1, {IN_T(3, 4)}, NULL},
    {"masked_fill sliced [3,4] with a [4] mask", f_masked_fill_row_mask, 1, {IN_S(3, 4)}, NULL},
    {"masked_fill -inf then softmax [3,4]", f_masked_fill_then_softmax, 1, {IN(3, 4)}, NULL},
    {"masked_softmax causal [2,4,4] scale 0.5", f_causal, 1, {IN(2, 4, 4)}, NULL},
    {"masked_softmax causal non-square [3,5]", f_causal, 1, {IN_T(3, 5)}, NULL},
    {"masked_softmax padding mask [2,1,1,4] on [2,2,3,4]", f_padding, 1, {IN(2, 2, 3, 4)}, NULL},
    {"masked_softmax padding on a sliced [2,2,3,4]", f_padding, 1, {IN_S(2, 2, 3, 4)}, NULL},
    {"masked_softmax padding + causal, fully blocked batch",
     f_padding_causal_blocked, 1, {IN_T(2, 4, 4)}, NULL},
    {"masked_softmax with a fully blocked row [3,4]", f_blocked_row, 1, {IN(3, 4)}, NULL},
    {"masked_softmax [3,1] mask broadcast over keys", f_query_mask, 1, {IN_S(3, 4)}, NULL},
    {"masked_softmax causal of [3] expanded to [2,3,3]",
     f_masked_softmax_expanded, 1, {IN(3)}, NULL},
};
/* clang-format on */
const int nbcat_softmax_count = sizeof nbcat_softmax / sizeof nbcat_softmax[0];
