/* Linear: y = x W^T + b. */
#include "nabla/nn.h"
#include "module_error.h"
#include "tensor/nbt.h" /* nbt_error, nbt_shape */

nb_linear *nb_linear_new(nb_module *parent, const char *name, int64_t in, int64_t out, bool bias) {
    if (in <= 0 || out <= 0)
        return nbt_error("Linear", "features must be positive, got in %lld out %lld", (long long)in,
                         (long long)out);
    nb_linear *m = nb_module_new(parent, name, "Linear", sizeof *m);
    if (!m) return NULL;
    m->in_features = in;
    m->out_features = out;
    /* PyTorch's default for both: uniform in +-1/sqrt(in); the weight first. */
    m->weight = nb_module_add_param(&m->base, "weight", NB_SHAPE(out, in), nb_init_linear(in));
    if (!m->weight) return nbn_discard(&m->base);
    if (bias &&
        !(m->bias = nb_module_add_param(&m->base, "bias", NB_SHAPE(out), nb_init_linear(in))))
        return nbn_discard(&m->base);
    return m;
}

nb_tensor *nb_linear_forward(nb_linear *m, const nb_tensor *x) {
    if (!m || !x) return nbn_null_argument("Linear", m ? &m->base : NULL, "input");
    if (x->ndim < 1 || x->shape[x->ndim - 1] != m->in_features)
        return nbn_error(&m->base, "expects inputs [..., %lld], got %s", (long long)m->in_features,
                         nbt_shape(x));
    /* One fused op: W is read through a transpose flag and the bias added in place. */
    return nbn_result(&m->base, nb_f_linear(x, m->weight, m->bias));
}
