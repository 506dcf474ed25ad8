/* Catalogue entries for views, joins and splits. */
#include "catalogue.h"

/* nb_gradcheck projects the output on a random vector, so each output element carries a
 * different weight and a permuted gradient cannot pass. */
static nb_tensor *f_view(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_view(in[0], NB_SHAPE(3, -1));
}
static nb_tensor *f_reshape(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_reshape(in[0], NB_SHAPE(-1));
}
static nb_tensor *f_transpose(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_transpose(in[0], 0, -1);
}
static nb_tensor *f_permute(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_permute(in[0], (int[]){2, 0, 1});
}
static nb_tensor *f_unsqueeze_squeeze(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_squeeze_all(nb_squeeze(nb_unsqueeze(in[0], 1), 1));
}
static nb_tensor *f_expand(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_expand(in[0], NB_SHAPE(2, 3, 4));
}
static nb_tensor *f_narrow_select(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_select(nb_narrow(in[0], 1, 1, 2), -1, 2);
}
static nb_tensor *f_contiguous(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_contiguous(nb_transpose(in[0], 0, 1));
}
static nb_tensor *f_concat(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_concat(n, in, 1);
}
static nb_tensor *f_stack(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_stack(n, in, -1);
}
static nb_tensor *f_split(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *parts[4];
    int k = nb_split(in[0], 2, 1, parts, 4);
    if (k != 3) return NULL;
    nb_tensor *swapped[3] = {parts[2], parts[0], parts[1]};
    return nb_concat(3, swapped, 1);
}

const nbcat_entry nbcat_views[] = {
    {"view [4,6] -> [3,-1]", f_view, 1, {IN(4, 6)}, NULL},
    {"reshape of a transposed [4,3] (copies)", f_reshape, 1, {IN_T(4, 3)}, NULL},
    {"transpose [2,3,4]", f_transpose, 1, {IN(2, 3, 4)}, NULL},
    {"transpose of a sliced [3,4]", f_transpose, 1, {IN_S(3, 4)}, NULL},
    {"permute [2,3,4] -> (2,0,1)", f_permute, 1, {IN_T(2, 3, 4)}, NULL},
    {"unsqueeze/squeeze [3,4]", f_unsqueeze_squeeze, 1, {IN_S(3, 4)}, NULL},
    {"expand [3,1] -> [2,3,4]", f_expand, 1, {IN(3, 1)}, NULL},
    {"expand [4] -> [2,3,4]", f_expand, 1, {IN(4)}, NULL},
    {"narrow then select [3,4,5]", f_narrow_select, 1, {IN_T(3, 4, 5)}, NULL},
    {"contiguous of a transposed [3,4]", f_contiguous, 1, {IN_S(3, 4)}, NULL},
    {"concat dim 1 of [2,3] [2,1] [2,2]", f_concat, 3, {IN(2, 3), IN_T(2, 1), IN_S(2, 2)}, NULL},
    {"stack two [3,2] at dim -1", f_stack, 2, {IN(3, 2), IN_T(3, 2)}, NULL},
    {"split [2,6] by 2, reordered", f_split, 1, {IN_S(2, 6)}, NULL},
};
const int nbcat_views_count = sizeof nbcat_views / sizeof nbcat_views[0];
