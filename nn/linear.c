/* Linear: y = x W^T + b. */
#include "nabla/nn.h"
#include "module_error.h"
#include "tensor/nbt.h" /* nbt_error, nbt_shape */
#include "tensor/row_products.h"

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

/* The grouped one-row path of nb_linears_forward: every layer's weight read in place (rows
 * contiguous), its bias contiguous, no gradient to record, x one row. */
static bool group_fits(int n, nb_linear *const *layers, const nb_tensor *x) {
    if (nb_is_grad_enabled() && x->requires_grad) return false;
    if (nbt_numel(x) != x->shape[x->ndim - 1]) return false;
    for (int i = 0; i < n; i++) {
        const nb_tensor *w = layers[i]->weight, *b = layers[i]->bias;
        if ((nb_is_grad_enabled() && (w->requires_grad || (b && b->requires_grad))) ||
            w->dtype != x->dtype || w->strides[1] != 1 || (b && b->strides[0] != 1))
            return false;
    }
    return true;
}

_Static_assert((int)NB_ACT_GELU == (int)NBT_ACT_GELU &&
                   (int)NB_ACT_GELU_TANH == (int)NBT_ACT_GELU_TANH &&
                   (int)NB_ACT_SILU == (int)NBT_ACT_SILU,
               "nb_activation and nbt_activation name the same activations");

/* nb_linears_forward with an activation for each layer's outputs (acts NULL: none). */
static bool linears_act(int n, nb_linear *const *layers, const nb_tensor *x,
                        const nb_activation *acts, nb_tensor **out);

bool nb_linears_forward(int n, nb_linear *const *layers, const nb_tensor *x, nb_tensor **out) {
    return linears_act(n, layers, x, NULL, out);
}

/* act(y) op by op, as the grouped path's tasks apply it (act checked by the caller). */
static nb_tensor *activated(nb_linear *m, nb_tensor *y, nb_activation act) {
    switch (act) {
    case NB_ACT_GELU:
        return nbn_result(&m->base, nb_gelu(y));
    case NB_ACT_GELU_TANH:
        return nbn_result(&m->base, nb_gelu_tanh(y));
    case NB_ACT_SILU:
        return nbn_result(&m->base, nb_silu(y));
    default: /* NB_ACT_NONE */
        return y;
    }
}

nb_tensor *nb_linear_forward_act(nb_linear *m, const nb_tensor *x, nb_activation act) {
    if (m && (act < NB_ACT_NONE || act > NB_ACT_SILU))
        return nbn_error(&m->base, "unknown activation %d", (int)act);
    nb_tensor *y;
    return linears_act(1, &m, x, &act, &y) ? y : NULL;
}

/* The grouped one-row path's operands, for layers that fit it (group_fits): x with its last
 * dim's stride not 0 (*xs), for each layer a new output of x's shape with its out_features
 * last (out[i]) and the row product that fills it, acts[i] applied (acts NULL: none). False
 * with an error naming the layer. */
static bool row_products_for(int n, nb_linear *const *layers, const nb_tensor *x,
                             const nb_activation *acts, const nb_tensor **xs, nb_tensor **out,
                             nbt_row_product *products) {
    *xs = x->strides[x->ndim - 1] == 0 ? nbt_contiguous(x) : x;
    if (!*xs) return nbn_result(&layers[0]->base, NULL), false;
    int64_t shape[NB_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = x->shape[d];
    for (int i = 0; i < n; i++) {
        shape[x->ndim - 1] = layers[i]->out_features;
        if (!(out[i] = nbt_new("linear", x->dtype, x->ndim, shape)))
            return nbn_result(&layers[i]->base, NULL), false;
        const nb_tensor *w = layers[i]->weight, *b = layers[i]->bias;
        products[i] = (nbt_row_product){.w = nbt_ptr(w),
                                        .ldw = w->strides[0],
                                        .n = layers[i]->out_features,
                                        .bias = b ? nbt_ptr(b) : NULL,
                                        .out = nbt_ptr(out[i]),
                                        .act = acts ? (nbt_activation)acts[i] : NBT_ACT_NONE};
    }
    return true;
}

static bool linears_act(int n, nb_linear *const *layers, const nb_tensor *x,
                        const nb_activation *acts, nb_tensor **out) {
    if (n < 1 || n > NB_LINEARS_MAX || !layers || !x || !out)
        return nbt_error("Linear",
                         "nb_linears_forward needs 1 to %d layers, an input and room "
                         "for the outputs, got %d%s%s%s",
                         NB_LINEARS_MAX, n, layers ? "" : ", NULL layers", x ? "" : ", NULL input",
                         out ? "" : ", NULL outputs"),
               false;
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (!nbt_check_live("linear", x)) return false;
    for (int i = 0; i < n; i++) {
        if (!layers[i]) return nbn_null_argument("Linear", NULL, "layer"), false;
        if (x->ndim < 1 || x->shape[x->ndim - 1] != layers[i]->in_features)
            return nbn_error(&layers[i]->base, "expects inputs [..., %lld], got %s",
                             (long long)layers[i]->in_features, nbt_shape(x)),
                   false;
    }
    if (!nb_is_float(x) || !group_fits(n, layers, x)) { /* one op each, as nb_linear_forward */
        for (int i = 0; i < n; i++)
            if (!(out[i] = nb_linear_forward(layers[i], x)) ||
                (acts && !(out[i] = activated(layers[i], out[i], acts[i]))))
                return false;
        return true;
    }
    const nb_tensor *xs;
    nbt_row_product products[NB_LINEARS_MAX];
    if (!row_products_for(n, layers, x, acts, &xs, out, products)) return false;
    nbt_row_products(x->dtype == NB_F64, x->shape[x->ndim - 1], nbt_ptr(xs),
                     xs->strides[xs->ndim - 1], n, products);
    return true;
}

nb_tensor *nb_linear_gated_forward(nb_linear *gate, nb_linear *up, const nb_tensor *x,
                                   nb_activation act) {
    if (!gate || !up)
        return nbn_null_argument("Linear", gate ? &gate->base : up ? &up->base : NULL, "layer");
    if (act < NB_ACT_NONE || act > NB_ACT_SILU)
        return nbn_error(&gate->base, "unknown activation %d", (int)act);
    if (up->in_features != gate->in_features || up->out_features != gate->out_features)
        return nbn_error(
            &up->base, "cannot gate '%s' (%lld -> %lld features): it maps %lld -> %lld",
            gate->base.path, (long long)gate->in_features, (long long)gate->out_features,
            (long long)up->in_features, (long long)up->out_features);
    nb_linear *pair[2] = {gate, up};
    if (!x || !nbt_check_live("linear", x) || x->ndim < 1 ||
        x->shape[x->ndim - 1] != gate->in_features || !nb_is_float(x) || !group_fits(2, pair, x)) {
        /* op by op; their errors name the layer */
        nb_tensor *g = nb_linear_forward_act(gate, x, act);
        return g ? nbn_result(&up->base, nb_mul(g, nb_linear_forward(up, x))) : NULL;
    }
    const nb_tensor *xs;
    nb_tensor *y[2]; /* y[0], the gate's outputs, is gated in place: the result */
    nbt_row_product products[2];
    if (!row_products_for(2, pair, x, (const nb_activation[]){act, NB_ACT_NONE}, &xs, y, products))
        return NULL;
    nbt_row_products_gated(x->dtype == NB_F64, x->shape[x->ndim - 1], nbt_ptr(xs),
                           xs->strides[xs->ndim - 1], products);
    return y[0];
}
