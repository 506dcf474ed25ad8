/* SwiGLU feed-forward (Llama's MLP): w2(silu(w1 x) * w3 x), no biases. */
#include "blocks.h"
#include "errors.h"

nb_tensor *blk_swiglu(const nb_tensor *x, const nb_tensor *w1, const nb_tensor *w3,
                      const nb_tensor *w2) {
    if (!x || !w1 || !w3 || !w2) return blk_null_argument("swiglu");
    if (x->ndim < 1 || w1->ndim != 2 || w3->ndim != 2 || w2->ndim != 2 ||
        w1->shape[1] != x->shape[x->ndim - 1] || !nb_same_shape(w1, w3) ||
        w2->shape[0] != w1->shape[1] || w2->shape[1] != w1->shape[0])
        return nb_error("swiglu",
                        "expects x [..., D], w1 and w3 [hidden, D], w2 [D, hidden], got x %s, "
                        "w1 %s, w3 %s, w2 %s",
                        nb_shape_text(x), nb_shape_text(w1), nb_shape_text(w3), nb_shape_text(w2));
    nb_tensor *gate = nb_f_linear(x, w1, NULL);
    nb_tensor *silu = nb_mul(gate, nb_sigmoid(gate));
    return nb_f_linear(nb_mul(silu, nb_f_linear(x, w3, NULL)), w2, NULL);
}

blk_swiglu_ff *blk_swiglu_new(nb_module *parent, const char *name, int64_t dim, int64_t hidden) {
    if (dim <= 0 || hidden <= 0)
        return nb_error("SwiGLU", "dim %lld and hidden %lld must be positive", (long long)dim,
                        (long long)hidden);
    blk_swiglu_ff *m = nb_module_new(parent, name, "SwiGLU", sizeof *m);
    if (!m) return NULL;
    if (!(m->w1 = nb_linear_new(&m->base, "w1", dim, hidden, false)) ||
        !(m->w2 = nb_linear_new(&m->base, "w2", hidden, dim, false)) ||
        !(m->w3 = nb_linear_new(&m->base, "w3", dim, hidden, false)))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *blk_swiglu_forward(blk_swiglu_ff *m, const nb_tensor *x) {
    if (!m) return blk_null_argument("SwiGLU");
    nb_tensor *y = blk_swiglu(x, m->w1->weight, m->w3->weight, m->w2->weight);
    if (!y && x) return blk_module_error(&m->base);
    return y;
}
