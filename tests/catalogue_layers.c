/* Catalogue entries for the losses (cross_entropy, mse_loss). Class targets are built
 * inside each function, so they are constants of the check. */
#include "catalogue.h"

/* clang-format off */
#define NDIM(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define IN(...) {.ndim = NDIM(__VA_ARGS__), .shape = {__VA_ARGS__}}
#define IN_T(...) {.ndim = NDIM(__VA_ARGS__), .shape = {__VA_ARGS__}, .layout = NBCAT_TRANSPOSED}
#define IN_S(...) {.ndim = NDIM(__VA_ARGS__), .shape = {__VA_ARGS__}, .layout = NBCAT_SLICED}
/* An input that does not require grad. */
#define IN_C(...) {.ndim = NDIM(__VA_ARGS__), .shape = {__VA_ARGS__}, .constant = true}
/* clang-format on */

/* An int64 tensor from a literal: I64(NB_SHAPE(2), IDX(1, 0)). */
#define IDX(...) ((const int64_t[]){__VA_ARGS__})
#define I64(...) nb_from_array(NB_I64, __VA_ARGS__)

/* ---- cross_entropy: logits [4, 5], the third target ignored ---- */
static nb_tensor *ce_targets(void) {
    return I64(NB_SHAPE(4), IDX(1, 0, -100, 4));
}
static nb_tensor *f_ce_mean(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_cross_entropy(in[0], ce_targets(), -100, NB_REDUCE_MEAN);
}
static nb_tensor *f_ce_sum(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_cross_entropy(in[0], ce_targets(), -100, NB_REDUCE_SUM);
}
static nb_tensor *f_ce_none(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_cross_entropy(in[0], ce_targets(), -100, NB_REDUCE_NONE);
}
/* Logits [2, 3, 4] (batch, time, classes), ignore_index 2 is also a valid class. */
static nb_tensor *f_ce_sequence(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_cross_entropy(in[0], I64(NB_SHAPE(2, 3), IDX(0, 2, 3, 1, 1, 2)), 2, NB_REDUCE_MEAN);
}

/* ---- mse_loss ---- */
static nb_tensor *f_mse_mean(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_mse_loss(in[0], in[1], NB_REDUCE_MEAN);
}
static nb_tensor *f_mse_sum(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_mse_loss(in[0], in[1], NB_REDUCE_SUM);
}
static nb_tensor *f_mse_none(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_mse_loss(in[0], in[1], NB_REDUCE_NONE);
}

/* clang-format off */
const nbcat_entry nbcat_layers[] = {
    {"cross_entropy mean, ignore_index -100, [4,5]", f_ce_mean, 1, {IN(4, 5)}, NULL},
    {"cross_entropy sum of a transposed [4,5]", f_ce_sum, 1, {IN_T(4, 5)}, NULL},
    {"cross_entropy none of a sliced [4,5]", f_ce_none, 1, {IN_S(4, 5)}, NULL},
    {"cross_entropy mean [2,3,4], ignore_index 2", f_ce_sequence, 1, {IN_T(2, 3, 4)}, NULL},
    {"mse_loss mean [3,4] vs [3,4]", f_mse_mean, 2, {IN(3, 4), IN_T(3, 4)}, NULL},
    {"mse_loss sum [3,4] vs broadcast [4]", f_mse_sum, 2, {IN_S(3, 4), IN(4)}, NULL},
    {"mse_loss none [2,3,2] vs broadcast [3,1]", f_mse_none, 2, {IN_T(2, 3, 2), IN(3, 1)}, NULL},
    {"mse_loss mean against a constant target", f_mse_mean, 2, {IN(5), IN_C(5)}, NULL},
};
/* clang-format on */
const int nbcat_layers_count = sizeof nbcat_layers / sizeof nbcat_layers[0];
