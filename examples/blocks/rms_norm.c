/* RMSNorm (Llama's normalisation): x * rsqrt(mean(x^2) + eps) * weight over the last dim. */
#include "blocks.h"
#include "errors.h"

nb_tensor *blk_rms_norm(const nb_tensor *x, const nb_tensor *weight, double eps) {
    if (!x) return blk_null_argument("rms_norm");
    if (!nb_is_float(x) || x->ndim < 1)
        return nb_error("rms_norm", "expects a float tensor [..., D], got %s %s",
                        nb_dtype_name(x->dtype), nb_shape_text(x));
    int64_t dim = x->shape[x->ndim - 1];
    if (weight && (weight->ndim != 1 || weight->shape[0] != dim))
        return nb_error("rms_norm", "weight must be [%lld] for x %s, got %s", (long long)dim,
                        nb_shape_text(x), nb_shape_text(weight));
    if (!(eps >= 0)) return nb_error("rms_norm", "eps must be >= 0, got %g", eps);
    nb_tensor *mean_square = nb_mean_dims(nb_mul(x, x), 1, (int[]){-1}, true);
    nb_tensor *normed = nb_mul(x, nb_pow_scalar(nb_add_scalar(mean_square, eps), -0.5));
    return weight ? nb_mul(normed, weight) : normed;
}

blk_rmsnorm *blk_rmsnorm_new(nb_module *parent, const char *name, int64_t dim, double eps) {
    if (dim <= 0 || !(eps >= 0))
        return nb_error("RMSNorm", "needs dim > 0 and eps >= 0, got %lld and %g", (long long)dim,
                        eps);
    blk_rmsnorm *m = nb_module_new(parent, name, "RMSNorm", sizeof *m);
    if (!m) return NULL;
    m->eps = eps;
    if (!(m->weight = nb_module_add_param(&m->base, "weight", NB_SHAPE(dim), nb_init_ones())))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *blk_rmsnorm_forward(blk_rmsnorm *m, const nb_tensor *x) {
    if (!m) return blk_null_argument("RMSNorm");
    nb_tensor *y = blk_rms_norm(x, m->weight, m->eps);
    if (!y && x) return blk_module_error(&m->base);
    return y;
}
