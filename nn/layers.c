/* LayerNorm, Embedding, Dropout and the GELU feed-forward block. */
#include "nabla/nn.h"
#include "module_error.h"
#include "tensor/nbt.h" /* nbt_error, nbt_shape */

nb_layer_norm *nb_layer_norm_new(nb_module *parent, const char *name, int64_t dim) {
    if (dim <= 0) return nbt_error("LayerNorm", "dim must be positive, got %lld", (long long)dim);
    nb_layer_norm *m = nb_module_new(parent, name, "LayerNorm", sizeof *m);
    if (!m) return NULL;
    m->eps = 1e-5;
    if (!(m->weight = nb_module_add_param(&m->base, "weight", NB_SHAPE(dim), nb_init_ones())) ||
        !(m->bias = nb_module_add_param(&m->base, "bias", NB_SHAPE(dim), nb_init_zeros())))
        return nbn_discard(&m->base);
    return m;
}

nb_tensor *nb_layer_norm_forward(nb_layer_norm *m, const nb_tensor *x) {
    if (!m || !x) return nbn_null_argument("LayerNorm", m ? &m->base : NULL, "input");
    return nbn_result(&m->base, nb_f_layer_norm(x, m->weight, m->bias, m->eps));
}

nb_tensor *nb_layer_norm_forward_add(nb_layer_norm *m, const nb_tensor *x, const nb_tensor *res,
                                     nb_tensor **sum) {
    if (sum) *sum = NULL;
    if (!m || !x || !res || !sum)
        return nbn_null_argument("LayerNorm", m ? &m->base : NULL, !sum ? "sum" : "input");
    return nbn_result(&m->base, nb_f_add_layer_norm(x, res, m->weight, m->bias, m->eps, sum));
}

nb_embedding *nb_embedding_new(nb_module *parent, const char *name, int64_t num, int64_t dim) {
    if (num <= 0 || dim <= 0)
        return nbt_error("Embedding", "sizes must be positive, got %lld x %lld", (long long)num,
                         (long long)dim);
    nb_embedding *m = nb_module_new(parent, name, "Embedding", sizeof *m);
    if (!m) return NULL;
    m->weight = nb_module_add_param(&m->base, "weight", NB_SHAPE(num, dim), nb_init_embedding());
    return m->weight ? m : nbn_discard(&m->base);
}

nb_tensor *nb_embedding_forward(nb_embedding *m, const nb_tensor *indices) {
    if (!m || !indices) return nbn_null_argument("Embedding", m ? &m->base : NULL, "indices");
    return nbn_result(&m->base, nb_f_embedding(m->weight, indices));
}

nb_dropout *nb_dropout_new(nb_module *parent, const char *name, double p) {
    if (!(p >= 0 && p < 1)) return nbt_error("Dropout", "p must be in [0, 1), got %g", p);
    nb_dropout *m = nb_module_new(parent, name, "Dropout", sizeof *m);
    if (!m) return NULL;
    m->p = p;
    nb_rng_seed(&m->rng, nb_rng_next(nb_module_rng(&m->base)));
    return m;
}

nb_tensor *nb_dropout_forward(nb_dropout *m, const nb_tensor *x) {
    if (!m || !x) return nbn_null_argument("Dropout", m ? &m->base : NULL, "input");
    if (!nb_module_is_training(&m->base) || m->p == 0) return (nb_tensor *)x;
    return nbn_result(&m->base, nb_f_dropout(&m->rng, x, m->p, true));
}

nb_feedforward *nb_feedforward_new(nb_module *parent, const char *name, int64_t dim,
                                   int64_t hidden) {
    nb_feedforward *m = nb_module_new(parent, name, "FeedForward", sizeof *m);
    if (!m) return NULL;
    if (!(m->fc1 = nb_linear_new(&m->base, "fc1", dim, hidden, true)) ||
        !(m->fc2 = nb_linear_new(&m->base, "fc2", hidden, dim, true)))
        return nbn_discard(&m->base);
    return m;
}

nb_tensor *nb_feedforward_forward(nb_feedforward *m, const nb_tensor *x) {
    if (!m || !x) return nbn_null_argument("FeedForward", m ? &m->base : NULL, "input");
    nb_tensor *h = nb_linear_forward_act(m->fc1, x, m->gelu_tanh ? NB_ACT_GELU_TANH : NB_ACT_GELU);
    return nbn_result(&m->base, nb_linear_forward(m->fc2, h));
}
