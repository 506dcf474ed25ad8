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

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h): sum and mean over everything and over dims (with and
 * without keepdim, negative dims), max over a dim on distinct values (no ties) ---- */
#include "op_def.h"

typedef struct {
    int ndims;
    int dims[3];
    bool keepdim;
    bool mean;
} dims_ctx;

static nb_tensor *cat_sum(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_sum(in[0]);
}
static nb_tensor *cat_mean(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_mean(in[0]);
}
static nb_tensor *cat_dims(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const dims_ctx *c = ctx;
    return c->mean ? nb_mean_dims(in[0], c->ndims, c->dims, c->keepdim)
                   : nb_sum_dims(in[0], c->ndims, c->dims, c->keepdim);
}
/* The reduction of an expanded (stride 0) view of the input. */
static nb_tensor *cat_dims_of_expanded(nb_tensor *const *in, int n, void *ctx) {
    return cat_dims((nb_tensor *const[]){nb_expand(in[0], NB_SHAPE(2, 3, 4))}, n, ctx);
}
static nb_tensor *cat_max(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const dims_ctx *c = ctx;
    nb_tensor *idx = NULL;
    nb_tensor *v = nb_max_dim(in[0], c->dims[0], c->keepdim, &idx);
    return idx ? v : NULL;
}
/* Both outputs in one expression: max values times the mean of the input over that dim. */
static nb_tensor *cat_max_times_mean(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_mul(nb_max_dim(in[0], 1, true, NULL), nb_mean_dims(in[0], 1, (int[]){1}, true));
}

static const dims_ctx sum0 = {1, {0}, false, false}, sum_last_keep = {1, {-1}, true, false},
                      sum02 = {2, {0, 2}, false, false}, sum20_keep = {2, {2, -3}, true, false},
                      sum_all3 = {3, {1, 0, 2}, false, false}, mean1 = {1, {1}, false, true},
                      mean01_keep = {2, {0, 1}, true, true}, mean_last = {1, {-1}, false, true};
static const dims_ctx max0 = {1, {0}, false, false}, max1_keep = {1, {1}, true, false},
                      max_last = {1, {-1}, false, false};

/* Golden runners: input "a", parameters "dims"/"dim" and "keepdim". */
static int golden_sum(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_sum(c->input(c, "a", true));
    return 1;
}
static int golden_mean(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_mean(c->input(c, "a", true));
    return 1;
}
static int golden_dims(nba_golden_call *c, nb_tensor **out, bool mean) {
    int64_t wide[NB_MAX_DIMS];
    int dims[NB_MAX_DIMS], n = c->integers(c, "dims", wide, NB_MAX_DIMS);
    for (int k = 0; k < n; k++) dims[k] = (int)wide[k];
    nb_tensor *a = c->input(c, "a", true);
    bool keep = c->flag(c, "keepdim");
    out[0] = mean ? nb_mean_dims(a, n, dims, keep) : nb_sum_dims(a, n, dims, keep);
    return 1;
}
static int golden_sum_dims(nba_golden_call *c, nb_tensor **out) {
    return golden_dims(c, out, false);
}
static int golden_mean_dims(nba_golden_call *c, nb_tensor **out) {
    return golden_dims(c, out, true);
}
static int golden_max_dim(nba_golden_call *c, nb_tensor **out) {
    out[1] = NULL;
    out[0] = nb_max_dim(c->input(c, "a", true), (int)c->integer(c, "dim"), c->flag(c, "keepdim"),
                        &out[1]);
    return 2;
}

/* clang-format off */
static const nba_entry sum_entries[] = {
    {"sum [3,4]", NBA_RANDOM, cat_sum, 1, {IN(3, 4)}, NULL},
    {"sum transposed [3,4]", NBA_STRIDED, cat_sum, 1, {IN_T(3, 4)}, NULL},
    {"sum 0-d", NBA_RANDOM, cat_sum, 1, {SCALAR}, NULL},
    {"sum_dims 0 of [3,4]", NBA_RANDOM, cat_dims, 1, {IN(3, 4)}, &sum0},
    {"sum_dims -1 keepdim of transposed [3,4]", NBA_STRIDED, cat_dims, 1, {IN_T(3, 4)}, &sum_last_keep},
    {"sum_dims (0,2) of sliced [2,3,4]", NBA_STRIDED, cat_dims, 1, {IN_S(2, 3, 4)}, &sum02},
    {"sum_dims (2,-3) keepdim of transposed [2,3,4]", NBA_STRIDED, cat_dims, 1, {IN_T(2, 3, 4)}, &sum20_keep},
    {"sum_dims (1,0,2) of [2,3,4]", NBA_RANDOM, cat_dims, 1, {IN(2, 3, 4)}, &sum_all3},
    {"sum_dims (0,2) of expanded [3,1]", NBA_BROADCAST, cat_dims_of_expanded, 1, {IN(3, 1)}, &sum02},
};
static const nba_golden_case all_cases[] = {{"a: [5]", ""}, {"a: [3,4]", ""}, {"a: [2,3,4]", ""}, {"a: []", ""}};
static const nba_golden_case dims_cases[] = {
    {"a: [3,4]", "dims=[0], keepdim=False"},        {"a: [3,4]", "dims=[1], keepdim=True"},
    {"a: [2,3,4]", "dims=[0,2], keepdim=False"},    {"a: [2,3,4]", "dims=[-1], keepdim=True"},
    {"a: [2,3,4]", "dims=[1,0], keepdim=True"},     {"a: [2,3,4,5]", "dims=[1,3], keepdim=False"},
    {"a: [2,3,4]", "dims=[0,1,2], keepdim=False"}};
static const nba_golden sum_goldens[] = {
    NBA_GOLDEN("sum", golden_sum, "a.sum()", all_cases),
    NBA_GOLDEN("sum_dims", golden_sum_dims, "a.sum(dim=dims, keepdim=keepdim)", dims_cases)};
NBA_OP_DEF(nba_op_sum, "sum", sum_entries, sum_goldens);

static const nba_entry mean_entries[] = {
    {"mean [2,3,4]", NBA_RANDOM, cat_mean, 1, {IN(2, 3, 4)}, NULL},
    {"mean sliced [3,4]", NBA_STRIDED, cat_mean, 1, {IN_S(3, 4)}, NULL},
    {"mean_dims 1 of [2,3,4]", NBA_RANDOM, cat_dims, 1, {IN(2, 3, 4)}, &mean1},
    {"mean_dims (0,1) keepdim of transposed [2,3,4]", NBA_STRIDED, cat_dims, 1, {IN_T(2, 3, 4)}, &mean01_keep},
    {"mean_dims -1 of sliced [3,4]", NBA_STRIDED, cat_dims, 1, {IN_S(3, 4)}, &mean_last},
    {"mean_dims (0,1) keepdim of expanded [4]", NBA_BROADCAST, cat_dims_of_expanded, 1, {IN(4)}, &mean01_keep},
};
static const nba_golden mean_goldens[] = {
    NBA_GOLDEN("mean", golden_mean, "a.mean()", all_cases),
    NBA_GOLDEN("mean_dims", golden_mean_dims, "a.mean(dim=dims, keepdim=keepdim)", dims_cases)};
NBA_OP_DEF(nba_op_mean, "mean", mean_entries, mean_goldens);

static const nba_entry max_dim_entries[] = {
    {"max_dim 0 of [3,4]", NBA_RANDOM, cat_max, 1, {IN_D(NBA_DISTINCT, 3, 4)}, &max0},
    {"max_dim 1 keepdim of transposed [2,3,4]", NBA_STRIDED, cat_max, 1, {IN_TD(NBA_DISTINCT, 2, 3, 4)}, &max1_keep},
    {"max_dim -1 of sliced [3,4]", NBA_STRIDED, cat_max, 1, {IN_SD(NBA_DISTINCT, 3, 4)}, &max_last},
    {"max_dim -1 of transposed [4,5]", NBA_STRIDED, cat_max, 1, {IN_TD(NBA_DISTINCT, 4, 5)}, &max_last},
    {"max_dim 1 keepdim * mean_dims 1 of [3,4]", NBA_RANDOM, cat_max_times_mean, 1, {IN_D(NBA_DISTINCT, 3, 4)}, NULL},
};
static const nba_golden_case max_dim_cases[] = {
    {"a: distinct [5]", "dim=0, keepdim=False"},    {"a: distinct [3,4]", "dim=1, keepdim=False"},
    {"a: distinct [3,4]", "dim=0, keepdim=True"},   {"a: distinct [2,3,4]", "dim=-1, keepdim=True"},
    {"a: distinct [2,3,4]", "dim=1, keepdim=False"}, {"a: distinct [2,5,3]", "dim=1, keepdim=True"}};
static const nba_golden max_dim_goldens[] = {
    NBA_GOLDEN("max_dim", golden_max_dim, "tuple(torch.max(a, dim, keepdim))", max_dim_cases)};
NBA_OP_DEF(nba_op_max_dim, "max_dim", max_dim_entries, max_dim_goldens,
           .not_applicable = {[NBA_BROADCAST] = "an expanded input repeats values: the max has ties, "
                                                "where the gradient is not defined"});
/* clang-format on */
#endif /* NABLA_TESTS */
