/* Selection by condition and by index: where, gather, index_select and index_add (PyTorch's
 * torch.where, torch.gather, torch.index_select and torch.index_add), each forward beside its
 * backward. gather and index_select read x at the indices; their backwards add the gradient
 * back at the same indices (duplicates accumulate), which is index_add, and index_add's
 * backward is index_select. Indices are NB_I64 in [0, size) along dim: PyTorch's CPU ops
 * refuse negative ones too. Every sum over duplicate indices runs in index order, so the
 * results are bitwise the same for any thread count. */
#include "node.h"
#include "../tensor/elementwise_kernels.h"
#include "../tensor/reduce_kernels.h"

#include <string.h>

/* ---- checks shared by the index ops ---- */
static bool check_index_dtype(const char *op, const nb_tensor *index) {
    if (index->dtype == NB_I64) return true;
    nbt_error(op, "index must be int64, got %s of shape %s", nb_dtype_name(index->dtype),
              nbt_shape(index));
    return false;
}

/* index as a contiguous tensor (itself or a copy), every element in [0, size); otherwise an
 * error naming the first bad index, its position, dim and the shapes of x and index. */
static nb_tensor *checked_index(const char *op, const nb_tensor *index, int dim, int64_t size,
                                const nb_tensor *x) {
    nb_tensor *idx = nbt_contiguous(index);
    if (!idx) return NULL;
    const int64_t *iv = (const int64_t *)nbt_ptr(idx);
    int64_t count = nbt_numel(idx);
    for (int64_t k = 0; k < count; k++) {
        if (iv[k] >= 0 && iv[k] < size) continue;
        int64_t pos[NB_MAX_DIMS], rest = k;
        for (int i = idx->ndim - 1; i >= 0; i--) {
            pos[i] = rest % idx->shape[i];
            rest /= idx->shape[i];
        }
        return nbt_error(op,
                         "index %lld at position %s is out of range for dim %d of size %lld "
                         "(x %s, index %s)",
                         (long long)iv[k], nbt_dims(idx->ndim, pos), dim, (long long)size,
                         nbt_shape(x), nbt_shape(index));
    }
    return idx;
}

/* x with at least one dim (and float unless any_dtype), index int64, dim normalised into *d. */
static bool check_x_dim_index(const char *op, const nb_tensor *x, int dim, const nb_tensor *index,
                              bool any_dtype, int *d) {
    if (!nba_check_inputs(op, 2, (const nb_tensor *[]){x, index})) return false;
    if (!any_dtype && !nba_check_float(op, x)) return false;
    if (x->ndim == 0) /* PyTorch's 0-d special cases are left out: see the ops.h contracts */
        return nbt_error(op, "x must have at least one dim, got shape %s", nbt_shape(x)), false;
    if (!check_index_dtype(op, index)) return false;
    *d = nbt_dim(op, dim, x->ndim);
    return *d >= 0;
}

/* ---- raw loops ---- */
typedef struct {
    size_t esize;      /* element bytes: elements are copied as bits, so any dtype works */
    int64_t dim_bytes; /* bytes between consecutive positions of x's dim */
} gather_ctx;

/* p[0] out, p[1] the index, p[2] x at position 0 along dim. */
static void gather_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    const gather_ctx *c = vctx;
    for (int64_t i = 0; i < n; i++) {
        const char *x = p[2] + i * s[2] + *(const int64_t *)(p[1] + i * s[1]) * c->dim_bytes;
        if (c->esize == 8)
            *(uint64_t *)(p[0] + i * s[0]) = *(const uint64_t *)x;
        else if (c->esize == 4)
            *(uint32_t *)(p[0] + i * s[0]) = *(const uint32_t *)x;
        else
            *(uint8_t *)(p[0] + i * s[0]) = *(const uint8_t *)x;
    }
}

/* out[p] = x[p with p[dim] replaced by idx[p]] over out's shape, idx read through idx_strides
 * (in elements; 0 where it is broadcast). Indices already checked. */
static void gather_into(nb_tensor *out, const nb_tensor *x, int dim, const nb_tensor *idx,
                        const int64_t *idx_strides) {
    size_t es = nbt_esize(x->dtype);
    nbt_operands ops = {.nops = 3,
                        .base = {nbt_ptr(out), nbt_ptr(idx), nbt_ptr(x)},
                        .elem = {es, sizeof(int64_t), es}};
    memcpy(ops.strides[0], out->strides, sizeof(int64_t) * (size_t)out->ndim);
    memcpy(ops.strides[1], idx_strides, sizeof(int64_t) * (size_t)out->ndim);
    memcpy(ops.strides[2], x->strides, sizeof(int64_t) * (size_t)x->ndim);
    ops.strides[2][dim] = 0; /* the index picks the position along dim */
    gather_ctx c = {es, x->strides[dim] * (int64_t)es};
    nbt_iterate(out->ndim, out->shape, &ops, gather_inner, &c);
}

/* x with dim resized to the K entries of the contiguous 1-D (or 0-d) idx: index_select. */
static nb_tensor *select_rows(const char *op, const nb_tensor *x, int dim, const nb_tensor *idx) {
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS] = {0};
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[dim] = nbt_numel(idx);
    strides[dim] = 1;
    nb_tensor *out = nbt_new(op, x->dtype, x->ndim, shape);
    if (out) gather_into(out, x, dim, idx, strides);
    return out;
}

/* out viewed as [O, D, I] (dim in the middle), src as [O, K, I]: out[o, idx[k], i] += alpha *
 * src[o, k, i]. A task owns a block of columns i of one o and adds every k in index order,
 * so each element's sum has the same order for any number of threads. */
typedef struct {
    nb_dtype dtype;
    char *out;
    const char *src;
    const int64_t *idx;
    int64_t K, D, I, width, blocks;
    double alpha;
} index_add_job;

#define INDEX_ADD_LOOP(T)                                                                          \
    do {                                                                                           \
        T *out = (T *)j->out + o * j->D * j->I;                                                    \
        const T *src = (const T *)j->src + o * j->K * j->I;                                        \
        const T alpha = (T)j->alpha;                                                               \
        for (int64_t k = 0; k < j->K; k++) {                                                       \
            T *row = out + j->idx[k] * j->I;                                                       \
            const T *s = src + k * j->I;                                                           \
            if (j->alpha == 1)                                                                     \
                for (int64_t i = i0; i < i1; i++) row[i] += s[i];                                  \
            else                                                                                   \
                for (int64_t i = i0; i < i1; i++) row[i] += alpha * s[i];                          \
        }                                                                                          \
    } while (0)

static void index_add_range(int64_t begin, int64_t end, void *vctx) {
    const index_add_job *j = vctx;
    for (int64_t t = begin; t < end; t++) {
        int64_t o = t / j->blocks, i0 = t % j->blocks * j->width;
        int64_t i1 = i0 + j->width < j->I ? i0 + j->width : j->I;
        if (j->dtype == NB_F32)
            INDEX_ADD_LOOP(float);
        else
            INDEX_ADD_LOOP(double);
    }
}

bool nba_index_add(nb_tensor *out, int dim, const nb_tensor *idx, const nb_tensor *src,
                   double alpha) {
    nb_tensor *s = nbt_contiguous(src);
    if (!s) return false;
    index_add_job j = {.dtype = out->dtype,
                       .out = nbt_ptr(out),
                       .src = nbt_ptr(s),
                       .idx = (const int64_t *)nbt_ptr(idx),
                       .K = nbt_numel(idx),
                       .D = out->shape[dim],
                       .I = 1,
                       .alpha = alpha};
    int64_t O = 1;
    for (int i = 0; i < dim; i++) O *= out->shape[i];
    for (int i = dim + 1; i < out->ndim; i++) j.I *= out->shape[i];
    if (O == 0 || j.I == 0 || j.K == 0) return true;
    j.width = j.I < 512 ? j.I : 512; /* columns per task: long runs for the inner loop */
    if (O < 8) { /* few o (an embedding's weight: one): the columns split too, 16 or more a task */
        int64_t parts = 8 / O, cut = ((j.I + parts - 1) / parts + 15) / 16 * 16;
        if (cut < j.width) j.width = cut;
    }
    j.blocks = (j.I + j.width - 1) / j.width;
    int64_t work = j.K * j.width; /* elements added per task */
    nbt_parallel_ranges(O * j.blocks, 32768 / work + 1, index_add_range, &j);
    return true;
}

/* ---- where ---- */
typedef struct {
    nb_dtype dtype;
} where_ctx;

/* p[0] out, p[1] cond, p[2] a, p[3] b (either may be a stride-0 zero). */
static void where_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    const where_ctx *c = vctx;
    for (int64_t i = 0; i < n; i++) {
        bool take_a = *(const uint8_t *)(p[1] + i * s[1]) != 0;
        const char *v = take_a ? p[2] + i * s[2] : p[3] + i * s[3];
        if (c->dtype == NB_F32)
            *(float *)(p[0] + i * s[0]) = *(const float *)v;
        else
            *(double *)(p[0] + i * s[0]) = *(const double *)v;
    }
}

/* out = cond ? a : b, all broadcast to out's shape; a NULL a or b reads as 0. */
static void where_into(nb_tensor *out, const nb_tensor *cond, const nb_tensor *a,
                       const nb_tensor *b) {
    static const double zero = 0; /* 0.0 as float or double: all bits zero either way */
    size_t es = nbt_esize(out->dtype);
    int nd = out->ndim;
    nbt_operands ops = {.nops = 4,
                        .base = {nbt_ptr(out), nbt_ptr(cond), a ? nbt_ptr(a) : (char *)&zero,
                                 b ? nbt_ptr(b) : (char *)&zero},
                        .elem = {es, 1, es, es}};
    memcpy(ops.strides[0], out->strides, sizeof(int64_t) * (size_t)nd);
    nbt_broadcast_strides(cond, nd, out->shape, ops.strides[1]);
    if (a) nbt_broadcast_strides(a, nd, out->shape, ops.strides[2]); /* else stays 0 */
    if (b) nbt_broadcast_strides(b, nd, out->shape, ops.strides[3]);
    nbt_iterate(nd, out->shape, &ops, where_inner, &(where_ctx){out->dtype});
}

/* saved[0] cond. The gradient goes to a where cond holds and to b elsewhere, in the output's
 * shape; nba_accumulate sums it down to each input's. */
static void where_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *cond = n->saved[0];
    for (int i = 0; i < 2; i++) {
        if (!nba_input_needs_grad(n, i)) continue;
        nb_tensor *g = nbt_new("where", gout->dtype, gout->ndim, gout->shape);
        if (!g) return;
        where_into(g, cond, i == 0 ? gout : NULL, i == 0 ? NULL : gout);
        nba_accumulate(n, i, g);
    }
}

nb_tensor *nb_where(const nb_tensor *cond, const nb_tensor *a, const nb_tensor *b) {
    const char *op = "where";
    if (!nba_check_inputs(op, 3, (const nb_tensor *[]){cond, a, b})) return NULL;
    if (!nba_check_same_float(op, a, b)) return NULL;
    if (cond->dtype != NB_BOOL)
        return nbt_error(op, "cond must be bool, got %s of shape %s", nb_dtype_name(cond->dtype),
                         nbt_shape(cond));
    int64_t ab[NB_MAX_DIMS], shape[NB_MAX_DIMS];
    int abn, nd;
    if (!nbt_broadcast_shape(op, a->ndim, a->shape, b->ndim, b->shape, &abn, ab) ||
        !nbt_broadcast_shape(op, cond->ndim, cond->shape, abn, ab, &nd, shape))
        return NULL;
    nb_tensor *out = nbt_new(op, a->dtype, nd, shape);
    if (!out) return NULL;
    where_into(out, cond, a, b);
    nb_node *n = nba_record(op, out, 2, (const nb_tensor *[]){a, b}, where_backward);
    if (n) n->saved[0] = (nb_tensor *)cond;
    return out;
}

/* ---- gather ---- */
/* i[0] dim; saved[0] the contiguous index. */
static void gather_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0];
    nb_tensor *gx = nb_zeros(x->dtype, x->ndim, x->shape);
    /* nbt_scatter_add_dim adds in row-major order of the index, on this thread. */
    if (gx && nbt_scatter_add_dim(gx, (int)n->i[0], n->saved[0], gout)) nba_accumulate(n, 0, gx);
}

nb_tensor *nb_gather(const nb_tensor *x, int dim, const nb_tensor *index) {
    const char *op = "gather";
    int d;
    if (!check_x_dim_index(op, x, dim, index, false, &d)) return NULL;
    bool fits = index->ndim == x->ndim;
    for (int i = 0; fits && i < x->ndim; i++)
        if (i != d && index->shape[i] > x->shape[i]) fits = false;
    if (!fits)
        return nbt_error(op,
                         "index %s must have as many dims as x %s and be no larger outside "
                         "dim %d",
                         nbt_shape(index), nbt_shape(x), dim);
    nb_tensor *idx = checked_index(op, index, d, x->shape[d], x);
    if (!idx) return NULL;
    nb_tensor *out = nbt_new(op, x->dtype, idx->ndim, idx->shape);
    if (!out) return NULL;
    gather_into(out, x, d, idx, idx->strides);
    nb_node *n = nba_record(op, out, 1, &x, gather_backward);
    if (n) n->i[0] = d, n->saved[0] = idx;
    return out;
}

/* ---- index_select ---- */
/* The 1-D (or 0-d) index of index_select and index_add, checked and contiguous. */
static nb_tensor *checked_vector_index(const char *op, const nb_tensor *x, int d,
                                       const nb_tensor *index) {
    if (index->ndim > 1)
        return nbt_error(op, "index must be 1-D, got shape %s (x %s)", nbt_shape(index),
                         nbt_shape(x));
    return checked_index(op, index, d, x->shape[d], x);
}

/* i[0] dim; saved[0] the contiguous index. */
static void index_select_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0];
    nb_tensor *gx = nb_zeros(x->dtype, x->ndim, x->shape);
    if (gx && nba_index_add(gx, (int)n->i[0], n->saved[0], gout, 1)) nba_accumulate(n, 0, gx);
}

nb_tensor *nb_index_select(const nb_tensor *x, int dim, const nb_tensor *index) {
    const char *op = "index_select";
    int d;
    /* Any dtype: int64 and bool rows never require grad, so they get no node. */
    if (!check_x_dim_index(op, x, dim, index, true, &d)) return NULL;
    nb_tensor *idx = checked_vector_index(op, x, d, index);
    nb_tensor *out = idx ? select_rows(op, x, d, idx) : NULL;
    if (!out) return NULL;
    nb_node *n = nba_record(op, out, 1, &x, index_select_backward);
    if (n) n->i[0] = d, n->saved[0] = idx;
    return out;
}

/* ---- index_add ---- */
/* i[0] dim, f[0] alpha; saved[0] the contiguous index. */
static void index_add_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, gout);
    if (!nba_input_needs_grad(n, 1)) return;
    nb_tensor *gs = select_rows("index_add", gout, (int)n->i[0], n->saved[0]);
    if (gs && n->f[0] != 1) gs = nbt_unary(NBT_MUL_SCALAR, gs, n->f[0]);
    if (gs) nba_accumulate(n, 1, gs);
}

nb_tensor *nb_index_add(const nb_tensor *x, int dim, const nb_tensor *index,
                        const nb_tensor *source, double alpha) {
    const char *op = "index_add";
    int d;
    if (!nba_check_inputs(op, 3, (const nb_tensor *[]){x, index, source})) return NULL;
    if (!check_x_dim_index(op, x, dim, index, false, &d) || !nba_check_same_float(op, x, source))
        return NULL;
    nb_tensor *idx = checked_vector_index(op, x, d, index);
    if (!idx) return NULL;
    bool fits = source->ndim == x->ndim;
    for (int i = 0; fits && i < x->ndim; i++)
        fits = source->shape[i] == (i == d ? nbt_numel(idx) : x->shape[i]);
    if (!fits)
        return nbt_error(op,
                         "source %s must have x's shape %s with dim %d the index's length "
                         "%lld (index %s)",
                         nbt_shape(source), nbt_shape(x), dim, (long long)nbt_numel(idx),
                         nbt_shape(index));
    nb_tensor *out = nbt_contiguous_as(x, x->dtype); /* a new tensor even for a contiguous x */
    if (!out || !nba_index_add(out, d, idx, source, alpha)) return NULL;
    nb_node *n = nba_record(op, out, 2, (const nb_tensor *[]){x, source}, index_add_backward);
    if (n) n->i[0] = d, n->f[0] = alpha, n->saved[0] = idx;
    return out;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h): indices and masks are constants of each entry, made inside
 * its function; indices repeat, so gradients accumulate at the repeated positions ---- */
#include "op_def.h"

typedef struct {
    int dim;
    int idx_ndim;
    int64_t idx_shape[3];
    const int64_t *idx;
    double alpha;
    int expand_ndim; /* > 0: in[0] is expanded to this shape first (a stride-0 input) */
    int64_t expand[3];
} index_ctx;

#define IDX(...) ((const int64_t[]){__VA_ARGS__})

static nb_tensor *ctx_index(const index_ctx *c) {
    return nb_from_array(NB_I64, c->idx_ndim, c->idx_shape, c->idx);
}
static nb_tensor *ctx_input(nb_tensor *x, const index_ctx *c) {
    return c->expand_ndim ? nb_expand(x, c->expand_ndim, c->expand) : x;
}
static nb_tensor *cat_gather(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const index_ctx *c = ctx;
    return nb_gather(ctx_input(in[0], c), c->dim, ctx_index(c));
}
/* gather of an expanded x through an expanded index: both inputs stride 0 along dim 0. */
static nb_tensor *cat_gather_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *idx = nb_from_array(NB_I64, NB_SHAPE(1, 2), IDX(3, 1));
    return nb_gather(nb_expand(in[0], NB_SHAPE(3, 4)), 1, nb_expand(idx, NB_SHAPE(3, 2)));
}
static nb_tensor *cat_index_select(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const index_ctx *c = ctx;
    return nb_index_select(ctx_input(in[0], c), c->dim, ctx_index(c));
}
static nb_tensor *cat_index_add(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const index_ctx *c = ctx;
    return nb_index_add(ctx_input(in[0], c), c->dim, ctx_index(c), in[1], c->alpha);
}
/* index_add of an expanded source. */
static nb_tensor *cat_index_add_source_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const index_ctx *c = ctx;
    return nb_index_add(in[0], c->dim, ctx_index(c), nb_expand(in[1], NB_SHAPE(4, 3)), c->alpha);
}

typedef struct {
    int ndim;
    int64_t shape[3];
    const uint8_t *values;
} mask_ctx;

static nb_tensor *cat_where(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const mask_ctx *m = ctx;
    return nb_where(nb_from_array(NB_BOOL, m->ndim, m->shape, m->values), in[0], in[1]);
}

#define MASK(...) ((const uint8_t[]){__VA_ARGS__})
static const mask_ctx mask34 = {2, {3, 4}, MASK(1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0)},
                      mask31 = {2, {3, 1}, MASK(0, 1, 1)}, mask4 = {1, {4}, MASK(1, 0, 1, 1)};

static const index_ctx gather_rows = {1, 2, {3, 2}, IDX(0, 3, 1, 1, 2, 0), 1, 0, {0}},
                       gather_cols = {0, 2, {2, 4}, IDX(2, 0, 1, 2, 0, 0, 1, 1), 1, 0, {0}},
                       gather_small = {1, 2, {2, 2}, IDX(1, 0, 3, 3), 1, 0, {0}},
                       gather_last = {-1, 3, {2, 3, 1}, IDX(3, 0, 3, 1, 1, 2), 1, 0, {0}};
static const index_ctx select0 = {0, 1, {3}, IDX(3, 0, 3), 1, 0, {0}},
                       select1 = {1, 1, {3}, IDX(4, 1, 1), 1, 0, {0}},
                       select_last = {-1, 1, {4}, IDX(2, 2, 2, 0), 1, 0, {0}},
                       select_scalar = {0, 0, {0}, IDX(2), 1, 0, {0}},
                       select_expanded = {1, 1, {2}, IDX(2, 0), 1, 2, {4, 3}};
static const index_ctx add0 = {0, 1, {4}, IDX(0, 4, 0, 2), 1, 0, {0}},
                       add1_half = {1, 1, {3}, IDX(3, 3, 1), -0.5, 0, {0}},
                       add0_twice = {0, 1, {4}, IDX(4, 1, 1, 0), 2, 0, {0}},
                       add_last = {-1, 1, {5}, IDX(1, 1, 1, 1, 1), 1, 0, {0}},
                       add0_expanded = {0, 1, {4}, IDX(2, 2, 0, 4), 1, 2, {5, 3}};

/* Golden runners: inputs by name, parameters "dim" (and "alpha"). */
static int golden_where(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_where(c->input(c, "cond", true), c->input(c, "a", true), c->input(c, "b", true));
    return 1;
}
static int golden_gather(nba_golden_call *c, nb_tensor **out) {
    out[0] =
        nb_gather(c->input(c, "x", true), (int)c->integer(c, "dim"), c->input(c, "index", true));
    return 1;
}
static int golden_index_select(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_index_select(c->input(c, "x", true), (int)c->integer(c, "dim"),
                             c->input(c, "index", true));
    return 1;
}
static int golden_index_add(nba_golden_call *c, nb_tensor **out) {
    out[0] =
        nb_index_add(c->input(c, "x", true), (int)c->integer(c, "dim"), c->input(c, "index", true),
                     c->input(c, "source", true), c->number(c, "alpha"));
    return 1;
}

/* clang-format off */
static const nba_entry where_entries[] = {
    {"where mask [3,4] ? [3,4] : [3,4]", NBA_RANDOM, cat_where, 2, {IN(3, 4), IN(3, 4)}, &mask34},
    {"where mask [3,1] ? [4] : [3,4]", NBA_BROADCAST, cat_where, 2, {IN(4), IN(3, 4)}, &mask31},
    {"where mask [4] ? 0-d : [2,3,4]", NBA_BROADCAST, cat_where, 2, {SCALAR, IN(2, 3, 4)}, &mask4},
    {"where mask [3,4] ? [3,4] : constant [4]", NBA_BROADCAST, cat_where, 2, {IN(3, 4), IN_C(4)}, &mask34},
    {"where mask [3,4] ? transposed [3,4] : sliced [3,4]", NBA_STRIDED, cat_where, 2, {IN_T(3, 4), IN_S(3, 4)}, &mask34},
};
static const nba_golden_case where_cases[] = {
    {"cond: bool [[1,0,1,0],[0,0,1,1],[1,1,0,0]]; a: [3,4]; b: [3,4]", ""},
    {"cond: bool [[1],[0],[1]]; a: [4]; b: [3,1]", ""},
    {"cond: bool [1,0,1,1]; a: []; b: [2,3,4]", ""},
    {"cond: bool 0; a: [2,3]; b: [3]", ""},
    {"cond: bool [[0,1,1],[1,0,0]]; a: [2,3]; b: [2,3] const", ""}};
static const nba_golden where_goldens[] = {
    NBA_GOLDEN("where", golden_where, "torch.where(cond, a, b)", where_cases)};
NBA_OP_DEF(nba_op_where, "where", where_entries, where_goldens);

static const nba_entry gather_entries[] = {
    {"gather dim 1 of [3,4], index [3,2] repeated", NBA_RANDOM, cat_gather, 1, {IN(3, 4)}, &gather_rows},
    {"gather dim 0 of [3,4], index [2,4]", NBA_RANDOM, cat_gather, 1, {IN(3, 4)}, &gather_cols},
    {"gather dim 1 of [3,4], index [2,2] smaller", NBA_RANDOM, cat_gather, 1, {IN(3, 4)}, &gather_small},
    {"gather dim 1 of transposed [3,4]", NBA_STRIDED, cat_gather, 1, {IN_T(3, 4)}, &gather_rows},
    {"gather dim -1 of sliced [2,3,4]", NBA_STRIDED, cat_gather, 1, {IN_S(2, 3, 4)}, &gather_last},
    {"gather dim 1 of expanded [1,4] through an expanded index", NBA_BROADCAST, cat_gather_expanded, 1, {IN(1, 4)}, NULL},
};
static const nba_golden_case gather_cases[] = {
    {"x: [3,4]; index: i64 [[0,3],[1,1],[2,0]]", "dim=1"},
    {"x: [3,4]; index: i64 [[2,0,1,2],[0,0,1,1]]", "dim=0"},
    {"x: [2,3,4]; index: i64 [[[3],[0],[3]],[[1],[1],[2]]]", "dim=-1"},
    {"x: [4,5]; index: i64 [[1,0],[4,4]]", "dim=1"},
    {"x: [2,3]; index: i64 [[1,1,0]]", "dim=0"}};
static const nba_golden gather_goldens[] = {
    NBA_GOLDEN("gather", golden_gather, "torch.gather(x, dim, index)", gather_cases)};
NBA_OP_DEF(nba_op_gather, "gather", gather_entries, gather_goldens);

static const nba_entry index_select_entries[] = {
    {"index_select dim 0 of [4,3], index [3] repeated", NBA_RANDOM, cat_index_select, 1, {IN(4, 3)}, &select0},
    {"index_select dim 1 of [2,5,3]", NBA_RANDOM, cat_index_select, 1, {IN(2, 5, 3)}, &select1},
    {"index_select dim 0 of [3,4], 0-d index", NBA_RANDOM, cat_index_select, 1, {IN(3, 4)}, &select_scalar},
    {"index_select dim 0 of transposed [4,3]", NBA_STRIDED, cat_index_select, 1, {IN_T(4, 3)}, &select0},
    {"index_select dim -1 of sliced [2,3]", NBA_STRIDED, cat_index_select, 1, {IN_S(2, 3)}, &select_last},
    {"index_select dim 1 of [3] expanded to [4,3]", NBA_BROADCAST, cat_index_select, 1, {IN(3)}, &select_expanded},
};
static const nba_golden_case index_select_cases[] = {
    {"x: [4,3]; index: i64 [3,0,3]", "dim=0"},
    {"x: [2,5,3]; index: i64 [4,1]", "dim=1"},
    {"x: [2,3]; index: i64 [2,2,2,0]", "dim=-1"},
    {"x: [3,4]; index: i64 1", "dim=0"},
    {"x: [3,2,4]; index: i64 [3,1,0,3,3]", "dim=2"}};
static const nba_golden index_select_goldens[] = {
    NBA_GOLDEN("index_select", golden_index_select, "torch.index_select(x, dim, index)",
               index_select_cases)};
NBA_OP_DEF(nba_op_index_select, "index_select", index_select_entries, index_select_goldens);

static const nba_entry index_add_entries[] = {
    {"index_add dim 0 of [5,3], source [4,3], index repeated", NBA_RANDOM, cat_index_add, 2, {IN(5, 3), IN(4, 3)}, &add0},
    {"index_add dim 1 of [2,4,3], source [2,3,3], alpha -0.5", NBA_RANDOM, cat_index_add, 2, {IN(2, 4, 3), IN(2, 3, 3)}, &add1_half},
    {"index_add dim -1 of [3,2], one index five times", NBA_RANDOM, cat_index_add, 2, {IN(3, 2), IN(3, 5)}, &add_last},
    {"index_add into a constant [5,3]", NBA_RANDOM, cat_index_add, 2, {IN_C(5, 3), IN(4, 3)}, &add0},
    {"index_add transposed [5,3], sliced source, alpha 2", NBA_STRIDED, cat_index_add, 2, {IN_T(5, 3), IN_S(4, 3)}, &add0_twice},
    {"index_add into [3] expanded to [5,3]", NBA_BROADCAST, cat_index_add, 2, {IN(3), IN(4, 3)}, &add0_expanded},
    {"index_add of a source [1,3] expanded to [4,3]", NBA_BROADCAST, cat_index_add_source_expanded, 2, {IN(5, 3), IN(1, 3)}, &add0},
};
static const nba_golden_case index_add_cases[] = {
    {"x: [5,3]; index: i64 [0,4,0,2]; source: [4,3]", "dim=0, alpha=1.0"},
    {"x: [2,4,3]; index: i64 [3,3,1]; source: [2,3,3]", "dim=1, alpha=-0.5"},
    {"x: [3,2]; index: i64 [1,1,1,1,1]; source: [3,5]", "dim=-1, alpha=2.0"},
    {"x: [4] const; index: i64 [3,0,3]; source: [3]", "dim=0, alpha=1.0"},
    {"x: [3,4]; index: i64 2; source: [3,1] const", "dim=1, alpha=1.5"}};
static const nba_golden index_add_goldens[] = {
    NBA_GOLDEN("index_add", golden_index_add, "torch.index_add(x, dim, index, source, alpha=alpha)",
               index_add_cases)};
NBA_OP_DEF(nba_op_index_add, "index_add", index_add_entries, index_add_goldens);
/* clang-format on */
#endif /* NABLA_TESTS */
