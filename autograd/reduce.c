/* Differentiable reductions: sum and mean over everything or over dims, max over one dim.
 * Forwards run tensor/reduce_kernels.h (fixed summation order, float64 lanes); backwards
 * broadcast the output gradient back over the reduced dims, or route it to the argmax. */
#include "node.h"
#include "../tensor/elementwise_kernels.h"
#include "../tensor/reduce_kernels.h"

/* node->i layout for sums: i[0..ndim) reduced-dim flags, i[NB_MAX_DIMS] keepdim. f[0] is the
 * scale (1 for sum, 1/count for mean). */
#define KEEPDIM NB_MAX_DIMS

/* gout viewed with x's shape: stride 0 along every reduced dim, no copy. */
static nb_tensor *expand_over_reduced(const nb_tensor *g, const nb_tensor *x,
                                      const int64_t *reduced, bool keepdim) {
    int64_t strides[NB_MAX_DIMS];
    int gd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (reduced[i]) {
            strides[i] = 0;
            gd += keepdim;
        } else {
            strides[i] = g->strides[gd++];
        }
    }
    return nbt_alias(g, x->ndim, x->shape, strides, g->offset);
}

/* A new contiguous tensor of x's shape and dtype with every element v. */
static nb_tensor *filled_like(const nb_tensor *x, double v) {
    nb_tensor *t = nbt_new("backward", x->dtype, x->ndim, x->shape);
    return t && nb_fill_(t, v) ? t : NULL;
}

static void sum_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *g = n->f[0] == 1 ? gout : nbt_unary(NBT_MUL_SCALAR, gout, n->f[0]);
    if (!g) return;
    const nb_tensor *x = n->inputs[0];
    /* A sum down to one number (a loss) hands every element the same gradient. Written out
     * contiguous, it is read in place by what comes next (a GEMM, a row kernel); as a stride-0
     * view each of those would copy it first. */
    if (nbt_numel(g) == 1 && nbt_numel(x) > 1) {
        nba_accumulate(n, 0, filled_like(x, nbt_get_linear(g, 0)));
        return;
    }
    nba_accumulate(n, 0, expand_over_reduced(g, x, n->i, n->i[KEEPDIM]));
}

/* Shared by the four public sums. name is for errors, record for the node. */
static nb_tensor *reduce_sum(const char *name, const char *record, const nb_tensor *a, int ndims,
                             const int *dims, bool keepdim, bool all, bool mean) {
    if (!nba_check_float(name, a)) return NULL;
    bool reduce[NB_MAX_DIMS];
    if (all) {
        for (int i = 0; i < NB_MAX_DIMS; i++) reduce[i] = true;
    } else if (!nbt_reduce_dims(name, a, ndims, dims, reduce)) {
        return NULL;
    }
    int64_t count = 1;
    for (int i = 0; i < a->ndim; i++)
        if (reduce[i]) count *= a->shape[i];
    double scale = mean ? 1.0 / (double)count : 1.0;
    nb_tensor *out = nbt_sum_dims(a, reduce, keepdim && !all, scale);
    nb_node *n = nba_record(record, out, 1, &a, sum_backward);
    if (n) {
        for (int i = 0; i < a->ndim; i++) n->i[i] = reduce[i];
        n->i[KEEPDIM] = keepdim && !all;
        n->f[0] = scale;
    }
    return out;
}

nb_tensor *nb_sum(const nb_tensor *a) {
    return reduce_sum("sum", "sum", a, 0, NULL, false, true, false);
}

nb_tensor *nb_mean(const nb_tensor *a) {
    return reduce_sum("mean", "mean", a, 0, NULL, false, true, true);
}

nb_tensor *nb_sum_dims(const nb_tensor *a, int ndims, const int *dims, bool keepdim) {
    return reduce_sum("sum_dims", "sum", a, ndims, dims, keepdim, false, false);
}

nb_tensor *nb_mean_dims(const nb_tensor *a, int ndims, const int *dims, bool keepdim) {
    return reduce_sum("mean_dims", "mean", a, ndims, dims, keepdim, false, true);
}

/* ---- max over a dim ---- */
/* i[0] dim, i[1] keepdim, i[2] set for a 0-d input; saved[0] the indices as returned. */
static void max_dim_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0];
    if (n->i[2]) { /* 0-d: the max is the element itself */
        nba_accumulate(n, 0, gout);
        return;
    }
    int dim = (int)n->i[0];
    const nb_tensor *idx = n->saved[0];
    nb_tensor *g = (nb_tensor *)gout;
    if (!n->i[1]) {
        idx = nbt_unsqueeze(idx, dim);
        g = nbt_unsqueeze(gout, dim);
    }
    nb_tensor *gx = nb_zeros(x->dtype, x->ndim, x->shape);
    if (gx && idx && g && nbt_scatter_add_dim(gx, dim, idx, g)) nba_accumulate(n, 0, gx);
}

nb_tensor *nb_max_dim(const nb_tensor *a, int dim, bool keepdim, nb_tensor **indices) {
    if (!nba_check_float("max_dim", a)) return NULL;
    nb_tensor *values, *idx;
    int d = 0;
    if (a->ndim == 0) { /* PyTorch accepts dim 0 or -1 here and returns the element */
        if (dim != 0 && dim != -1)
            return nbt_error("max_dim",
                             "dim %d is out of range for a tensor of shape %s "
                             "(expected -1 to 0)",
                             dim, nbt_shape(a));
        values = nbt_contiguous_as(a, a->dtype);
        idx = nb_zeros(NB_I64, 0, (const int64_t[1]){0}); /* never a NULL shape: memcpy */
        if (!values || !idx) return NULL;
    } else {
        d = nbt_dim("max_dim", dim, a->ndim);
        if (d < 0) return NULL;
        if (a->shape[d] == 0)
            return nbt_error("max_dim", "cannot take the max over dim %d of size 0 (shape %s)", dim,
                             nbt_shape(a));
        if (!nbt_max_dim(a, d, keepdim, &values, &idx)) return NULL;
    }
    nb_node *n = nba_record("max_dim", values, 1, &a, max_dim_backward);
    if (n) {
        n->i[0] = d, n->i[1] = keepdim, n->i[2] = a->ndim == 0;
        n->saved[0] = idx;
    }
    if (indices) *indices = idx;
    return values;
}
