/* The mixture of experts' router: softmax scores, top-k selection with the chosen weights
 * renormalised, and the load-balancing loss (formulas in blocks.h). */
#include <nabla/nabla.h>
#include "moe.h"

bool moe_route(const nb_tensor *x, const nb_tensor *gate, int64_t k, moe_routes *out) {
    *out = (moe_routes){0};
    out->probs = nb_softmax(nb_f_linear(x, gate, NULL), -1);
    nb_tensor *top = nb_topk(out->probs, k, -1, true, &out->experts);
    out->weights = nb_div(top, nb_sum_dims(top, 1, (const int[]){-1}, true));
    return out->weights != NULL;
}

nb_tensor *moe_aux_loss(const nb_tensor *probs, const nb_tensor *load, int64_t k, double alpha) {
    const int64_t N = probs->shape[0], E = probs->shape[1];
    if (N == 0) return nb_zeros(probs->dtype, 0, NULL);        /* no tokens, no imbalance */
    nb_tensor *fraction = nb_empty(probs->dtype, NB_SHAPE(E)); /* f_i: a count, no gradient */
    if (!fraction) return NULL;
    const int64_t *n = nb_data(load);
    for (int64_t i = 0; i < E; i++) {
        double f = (double)n[i] / (double)(N * k);
        if (probs->dtype == NB_F32)
            ((float *)nb_data(fraction))[i] = (float)f;
        else
            ((double *)nb_data(fraction))[i] = f;
    }
    nb_tensor *mean_probs = nb_mean_dims(probs, 1, (const int[]){0}, false); /* P_i */
    return nb_mul_scalar(nb_sum(nb_mul(fraction, mean_probs)), alpha * (double)E);
}
