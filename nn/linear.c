/* Linear: y = x W^T + b. */
#include "module.h"

#include <math.h>

nb_linear *nb_linear_new(nb_module *parent, const char *name, int64_t in, int64_t out,
                         bool bias) {
    if (in <= 0 || out <= 0)
        return nbt_error("Linear", "features must be positive, got in %lld out %lld",
                         (long long)in, (long long)out);
    nb_linear *m = nbn_module_new(parent, name, "Linear", sizeof *m);
    if (!m) return NULL;
    m->in_features = in;
    m->out_features = out;
    double bound = 1.0 / sqrt((double)in);
    m->weight = nbn_param_uniform(&m->base, "weight", NB_SHAPE(out, in), bound);
    if (bias) m->bias = nbn_param_uniform(&m->base, "bias", NB_SHAPE(out), bound);
    if (!m->weight || (bias && !m->bias)) return NULL;
    return m;
}

nb_tensor *nb_linear_forward(nb_linear *m, const nb_tensor *x) {
    if (!m || !x) return nbt_error("Linear", "NULL %s", m ? "input" : "module");
    if (x->ndim < 1 || x->shape[x->ndim - 1] != m->in_features)
        return nbt_error("Linear", "'%s' expects inputs [..., %lld], got %s", m->base.path,
                         (long long)m->in_features, nbt_shape(x));
    /* One fused op: W is read through a transpose flag and the bias added in place. */
    return nb_f_linear(x, m->weight, m->bias);
}
