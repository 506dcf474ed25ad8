/* Catalogue entries for the losses (cross_entropy, mse_loss) and the layers as functions
 * (layer_norm, embedding, dropout). Class targets and embedding indices are built inside
 * each function, so they are constants of the check. */
#include "catalogue.h"


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

/* ---- layer_norm ---- */
static nb_tensor *f_layer_norm_affine(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_layer_norm(in[0], in[1], in[2], 1e-5);
}
static nb_tensor *f_layer_norm_plain(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_layer_norm(in[0], NULL, NULL, 1e-5);
}
static nb_tensor *f_layer_norm_weight_only(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_layer_norm(in[0], in[1], NULL, 1e-5);
}
static nb_tensor *f_layer_norm_bias_only(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_layer_norm(in[0], NULL, in[1], 1e-5);
}

/* ---- embedding: V = 6, index 1 and 4 repeated so their rows accumulate ---- */
static nb_tensor *f_embedding(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_embedding(in[0], I64(NB_SHAPE(2, 3), IDX(1, 4, 1, 0, 5, 4)));
}
static nb_tensor *f_embedding_flat(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_embedding(in[0], I64(NB_SHAPE(4), IDX(2, 2, 2, 0)));
}

/* ---- dropout: each call re-seeds its own generator, so every finite-difference evaluation
 * sees the same mask ---- */
static nb_tensor *f_dropout_train(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_rng rng;
    nb_rng_seed(&rng, 99);
    return nb_dropout(in[0], 0.4, true, &rng);
}
static nb_tensor *f_dropout_eval(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_dropout(in[0], 0.4, false, NULL);
}
static nb_tensor *f_dropout_all(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_dropout(in[0], 1.0, true, NULL);
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
    {"layer_norm [3,5] with weight and bias",
     f_layer_norm_affine, 3, {IN(3, 5), IN(5), IN(5)}, NULL},
    {"layer_norm over 2 dims: [2,3,4], weight/bias [3,4]",
     f_layer_norm_affine, 3, {IN_T(2, 3, 4), IN_S(3, 4), IN_T(3, 4)}, NULL},
    {"layer_norm without weight or bias, transposed [4,6]",
     f_layer_norm_plain, 1, {IN_T(4, 6)}, NULL},
    {"layer_norm without weight or bias, sliced [2,3,4]",
     f_layer_norm_plain, 1, {IN_S(2, 3, 4)}, NULL},
    {"layer_norm weight only [3,4]", f_layer_norm_weight_only, 2, {IN(3, 4), IN_S(4)}, NULL},
    {"layer_norm bias only [3,4]", f_layer_norm_bias_only, 2, {IN_T(3, 4), IN(4)}, NULL},
    {"embedding [6,3] with indices [2,3], repeated", f_embedding, 1, {IN(6, 3)}, NULL},
    {"embedding of a transposed [6,3]", f_embedding, 1, {IN_T(6, 3)}, NULL},
    {"embedding of a sliced [3,2], one index three times", f_embedding_flat, 1, {IN_S(3, 2)}, NULL},
    {"dropout train p=0.4 fixed seed [4,5]", f_dropout_train, 1, {IN(4, 5)}, NULL},
    {"dropout train p=0.4 fixed seed, transposed [4,5]", f_dropout_train, 1, {IN_T(4, 5)}, NULL},
    {"dropout eval [3,4]", f_dropout_eval, 1, {IN_S(3, 4)}, NULL},
    {"dropout p=1 gives zeros [3]", f_dropout_all, 1, {IN(3)}, NULL},
};
/* clang-format on */
const int nbcat_layers_count = sizeof nbcat_layers / sizeof nbcat_layers[0];
