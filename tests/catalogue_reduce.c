/* Catalogue entries for the reductions: sum and mean over everything and over dims (with and
 * without keepdim, negative dims), max over a dim on distinct values (no ties), each on
 * contiguous, transposed, sliced and expanded inputs. */
#include "catalogue.h"


typedef struct {
    int ndims;
    int dims[3];
    bool keepdim;
    bool mean;
} dims_ctx;

static nb_tensor *f_sum(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_sum(in[0]);
}
static nb_tensor *f_mean(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_mean(in[0]);
}
static nb_tensor *f_dims(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const dims_ctx *c = ctx;
    return c->mean ? nb_mean_dims(in[0], c->ndims, c->dims, c->keepdim)
                   : nb_sum_dims(in[0], c->ndims, c->dims, c->keepdim);
}
/* The reduction of an expanded (stride 0) view of the input. */
static nb_tensor *f_dims_of_expanded(nb_tensor *const *in, int n, void *ctx) {
    return f_dims((nb_tensor *const[]){nb_expand(in[0], NB_SHAPE(2, 3, 4))}, n, ctx);
}
static nb_tensor *f_max(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const dims_ctx *c = ctx;
    nb_tensor *idx = NULL;
    nb_tensor *v = nb_max_dim(in[0], c->dims[0], c->keepdim, &idx);
    return idx ? v : NULL;
}
/* Both outputs in one expression: max values times the mean of the input over that dim. */
static nb_tensor *f_max_times_mean(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_mul(nb_max_dim(in[0], 1, true, NULL), nb_mean_dims(in[0], 1, (int[]){1}, true));
}

static const dims_ctx sum0 = {1, {0}, false, false}, sum_last_keep = {1, {-1}, true, false},
                      sum02 = {2, {0, 2}, false, false}, sum20_keep = {2, {2, -3}, true, false},
                      sum_all3 = {3, {1, 0, 2}, false, false}, mean1 = {1, {1}, false, true},
                      mean01_keep = {2, {0, 1}, true, true}, mean_last = {1, {-1}, false, true};
static const dims_ctx max0 = {1, {0}, false, false}, max1_keep = {1, {1}, true, false},
                      max_last = {1, {-1}, false, false};

const nbcat_entry nbcat_reduce[] = {
    {"sum [3,4]", f_sum, 1, {IN(3, 4)}, NULL},
    {"sum transposed [3,4]", f_sum, 1, {IN_T(3, 4)}, NULL},
    {"sum 0-d", f_sum, 1, {{.ndim = 0}}, NULL},
    {"mean [2,3,4]", f_mean, 1, {IN(2, 3, 4)}, NULL},
    {"mean sliced [3,4]", f_mean, 1, {IN_S(3, 4)}, NULL},
    {"sum_dims 0 of [3,4]", f_dims, 1, {IN(3, 4)}, &sum0},
    {"sum_dims -1 keepdim of transposed [3,4]", f_dims, 1, {IN_T(3, 4)}, &sum_last_keep},
    {"sum_dims (0,2) of sliced [2,3,4]", f_dims, 1, {IN_S(2, 3, 4)}, &sum02},
    {"sum_dims (2,-3) keepdim of transposed [2,3,4]", f_dims, 1, {IN_T(2, 3, 4)}, &sum20_keep},
    {"sum_dims (1,0,2) of [2,3,4]", f_dims, 1, {IN(2, 3, 4)}, &sum_all3},
    {"sum_dims (0,2) of expanded [3,1]", f_dims_of_expanded, 1, {IN(3, 1)}, &sum02},
    {"mean_dims 1 of [2,3,4]", f_dims, 1, {IN(2, 3, 4)}, &mean1},
    {"mean_dims (0,1) keepdim of transposed [2,3,4]", f_dims, 1, {IN_T(2, 3, 4)}, &mean01_keep},
    {"mean_dims -1 of sliced [3,4]", f_dims, 1, {IN_S(3, 4)}, &mean_last},
    {"mean_dims (0,1) keepdim of expanded [4]", f_dims_of_expanded, 1, {IN(4)}, &mean01_keep},
    {"max_dim 0 of [3,4]", f_max, 1, {IN_D(NBCAT_DISTINCT, 3, 4)}, &max0},
    {"max_dim 1 keepdim of transposed [2,3,4]", f_max, 1, {IN_TD(NBCAT_DISTINCT, 2, 3, 4)}, &max1_keep},
    {"max_dim -1 of sliced [3,4]", f_max, 1, {IN_SD(NBCAT_DISTINCT, 3, 4)}, &max_last},
    {"max_dim -1 of transposed [4,5]", f_max, 1, {IN_TD(NBCAT_DISTINCT, 4, 5)}, &max_last},
    {"max_dim 1 keepdim * mean_dims 1 of [3,4]", f_max_times_mean, 1, {IN_D(NBCAT_DISTINCT, 3, 4)}, NULL},
};
const int nbcat_reduce_count = sizeof nbcat_reduce / sizeof nbcat_reduce[0];
