/* Differentiable views and joins: each forward is a raw strided view (or copy), each backward
 * routes the gradient back to the input's layout. */
#include "node.h"

#include <stdio.h>
#include <string.h>

/* Shared by view, reshape, unsqueeze and squeeze: only the shape changed. */
static void reshape_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0];
    nb_tensor *g = nbt_contiguous(gout);
    if (g) nba_accumulate(n, 0, nbt_view(g, x->ndim, x->shape));
}

static nb_tensor *record_unary(const char *op, nb_tensor *out, const nb_tensor *x,
                               nba_backward_fn backward) {
    nba_record(op, out, 1, &x, backward);
    return out;
}

nb_tensor *nb_view(const nb_tensor *t, int ndim, const int64_t *shape) {
    if (!nba_check_inputs("view", 1, &t)) return NULL;
    return record_unary("view", nbt_view(t, ndim, shape), t, reshape_backward);
}

nb_tensor *nb_reshape(const nb_tensor *t, int ndim, const int64_t *shape) {
    if (!nba_check_inputs("reshape", 1, &t)) return NULL;
    if (ndim > 0 && !shape)
        return nbt_error("reshape",
                         "shape is NULL for a reshape to %d dims of a tensor of "
                         "shape %s",
                         ndim, nbt_shape(t));
    return record_unary("reshape", nbt_reshape(t, ndim, shape), t, reshape_backward);
}

static void transpose_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, nbt_transpose(gout, (int)n->i[0], (int)n->i[1]));
}

nb_tensor *nb_transpose(const nb_tensor *t, int dim0, int dim1) {
    if (!nba_check_inputs("transpose", 1, &t)) return NULL;
    nb_tensor *out = nbt_transpose(t, dim0, dim1);
    nb_node *n = nba_record("transpose", out, 1, &t, transpose_backward);
    if (n) n->i[0] = dim0, n->i[1] = dim1;
    return out;
}

static void permute_backward(nb_node *n, const nb_tensor *gout) {
    int inverse[NB_MAX_DIMS];
    for (int k = 0; k < gout->ndim; k++) inverse[n->i[k]] = k;
    nba_accumulate(n, 0, nbt_permute(gout, inverse));
}

nb_tensor *nb_permute(const nb_tensor *t, const int *dims) {
    if (!nba_check_inputs("permute", 1, &t)) return NULL;
    if (!dims) return nbt_error("permute", "dims is NULL for a tensor of shape %s", nbt_shape(t));
    nb_tensor *out = nbt_permute(t, dims);
    nb_node *n = nba_record("permute", out, 1, &t, permute_backward);
    for (int k = 0; n && k < t->ndim; k++) n->i[k] = dims[k] < 0 ? dims[k] + t->ndim : dims[k];
    return out;
}

nb_tensor *nb_unsqueeze(const nb_tensor *t, int dim) {
    if (!nba_check_inputs("unsqueeze", 1, &t)) return NULL;
    return record_unary("unsqueeze", nbt_unsqueeze(t, dim), t, reshape_backward);
}

nb_tensor *nb_squeeze(const nb_tensor *t, int dim) {
    if (!nba_check_inputs("squeeze", 1, &t)) return NULL;
    return record_unary("squeeze", nbt_squeeze(t, dim), t, reshape_backward);
}

nb_tensor *nb_squeeze_all(const nb_tensor *t) {
    if (!nba_check_inputs("squeeze", 1, &t)) return NULL;
    return record_unary("squeeze", nbt_squeeze(t, NBT_ALL_DIMS), t, reshape_backward);
}

/* The engine sums a broadcast-shaped gradient down to the input's shape. */
static void expand_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, gout);
}

nb_tensor *nb_expand(const nb_tensor *t, int ndim, const int64_t *shape) {
    if (!nba_check_inputs("expand", 1, &t)) return NULL;
    if (!shape && ndim > 0) return nbt_error("expand", "shape is NULL");
    return record_unary("expand", nbt_expand(t, ndim, shape), t, expand_backward);
}

/* Gradient of a sub-block: zeros of the input's shape with gout written into the block. */
static void block_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0];
    nb_tensor *g = nb_zeros(gout->dtype, x->ndim, x->shape);
    if (!g) return;
    nb_tensor *block = n->i[2] ? nbt_select(g, (int)n->i[0], n->i[1])
                               : nbt_narrow(g, (int)n->i[0], n->i[1], n->i[3]);
    if (block && nbt_copy(block, gout)) nba_accumulate(n, 0, g);
}

nb_tensor *nb_narrow(const nb_tensor *t, int dim, int64_t start, int64_t length) {
    if (!nba_check_inputs("narrow", 1, &t)) return NULL;
    nb_tensor *out = nbt_narrow(t, dim, start, length);
    nb_node *n = nba_record("narrow", out, 1, &t, block_backward);
    if (n) {
        n->i[0] = dim < 0 ? dim + t->ndim : dim;
        n->i[1] = start < 0 ? start + t->shape[n->i[0]] : start;
        n->i[2] = 0;
        n->i[3] = length;
    }
    return out;
}

nb_tensor *nb_select(const nb_tensor *t, int dim, int64_t index) {
    if (!nba_check_inputs("select", 1, &t)) return NULL;
    nb_tensor *out = nbt_select(t, dim, index);
    nb_node *n = nba_record("select", out, 1, &t, block_backward);
    if (n) {
        n->i[0] = dim < 0 ? dim + t->ndim : dim;
        n->i[1] = index < 0 ? index + t->shape[n->i[0]] : index;
        n->i[2] = 1;
    }
    return out;
}

static void identity_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, gout);
}

nb_tensor *nb_contiguous(const nb_tensor *t) {
    if (!nba_check_inputs("contiguous", 1, &t)) return NULL;
    if (nb_is_contiguous(t)) return (nb_tensor *)t;
    return record_unary("contiguous", nbt_contiguous_as(t, t->dtype), t, identity_backward);
}

/* ---- joins ---- */
static void concat_backward(nb_node *n, const nb_tensor *gout) {
    int dim = (int)n->i[0];
    int64_t start = 0;
    for (int k = 0; k < n->ninputs; k++) {
        int64_t len = n->inputs[k]->shape[dim];
        if (nba_input_needs_grad(n, k)) nba_accumulate(n, k, nbt_narrow(gout, dim, start, len));
        start += len;
    }
}

/* Normalises dim for an ndim-dim result built from t; -1 with an error naming t's shape. */
static int join_dim(const char *op, int dim, int ndim, const nb_tensor *t) {
    int d = dim < 0 ? dim + ndim : dim;
    if (d >= 0 && d < ndim) return d;
    nbt_error(op, "dim %d is out of range for tensors of shape %s (expected %d to %d)", dim,
              nbt_shape(t), -ndim, ndim - 1);
    return -1;
}

static bool check_join(const char *op, int n, nb_tensor *const *ts) {
    if (n <= 0) return nbt_error(op, "expected at least one tensor, got %d", n), false;
    if (!ts) return nbt_error(op, "the array of %d tensors is NULL", n), false;
    if (!nba_check_inputs(op, n, (const nb_tensor *const *)ts)) return false;
    for (int k = 1; k < n; k++)
        if (ts[k]->dtype != ts[0]->dtype)
            return nbt_error(op, "dtype mismatch: tensor 0 is %s, tensor %d is %s",
                             nb_dtype_name(ts[0]->dtype), k, nb_dtype_name(ts[k]->dtype)),
                   false;
    return true;
}

nb_tensor *nb_concat(int n, nb_tensor *const *ts, int dim) {
    if (!check_join("concat", n, ts)) return NULL;
    int d = join_dim("concat", dim, ts[0]->ndim, ts[0]);
    if (d < 0) return NULL;
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, ts[0]->shape, sizeof shape);
    shape[d] = 0;
    for (int k = 0; k < n; k++) {
        bool ok = ts[k]->ndim == ts[0]->ndim;
        for (int j = 0; ok && j < ts[0]->ndim; j++)
            if (j != d && ts[k]->shape[j] != ts[0]->shape[j]) ok = false;
        if (!ok)
            return nbt_error("concat", "tensor %d has shape %s, expected %s outside dim %d", k,
                             nbt_shape(ts[k]), nbt_shape(ts[0]), dim);
        if (__builtin_add_overflow(shape[d], ts[k]->shape[d], &shape[d]))
            return nbt_error("concat", "the sizes of dim %d add up past int64 (tensor %d: %s)", dim,
                             k, nbt_shape(ts[k]));
    }
    nb_tensor *out = nbt_new("concat", ts[0]->dtype, ts[0]->ndim, shape);
    if (!out) return NULL;
    int64_t start = 0;
    for (int k = 0; k < n; k++) {
        nb_tensor *dst = nbt_narrow(out, d, start, ts[k]->shape[d]);
        if (!dst || !nbt_copy(dst, ts[k])) return NULL;
        start += ts[k]->shape[d];
    }
    nb_node *node = nba_record("concat", out, n, (const nb_tensor *const *)ts, concat_backward);
    if (node) node->i[0] = d;
    return out;
}

static void stack_backward(nb_node *n, const nb_tensor *gout) {
    for (int k = 0; k < n->ninputs; k++)
        if (nba_input_needs_grad(n, k)) nba_accumulate(n, k, nbt_select(gout, (int)n->i[0], k));
}

nb_tensor *nb_stack(int n, nb_tensor *const *ts, int dim) {
    if (!check_join("stack", n, ts)) return NULL;
    if (ts[0]->ndim >= NB_MAX_DIMS)
        return nbt_error("stack", "tensors of shape %s already have %d dims", nbt_shape(ts[0]),
                         NB_MAX_DIMS);
    int d = join_dim("stack", dim, ts[0]->ndim + 1, ts[0]);
    if (d < 0) return NULL;
    for (int k = 1; k < n; k++)
        if (!nb_same_shape(ts[k], ts[0]))
            return nbt_error("stack", "tensor %d has shape %s, expected %s", k, nbt_shape(ts[k]),
                             nbt_shape(ts[0]));
    int64_t shape[NB_MAX_DIMS];
    for (int j = 0, s = 0; j <= ts[0]->ndim; j++) shape[j] = j == d ? n : ts[0]->shape[s++];
    nb_tensor *out = nbt_new("stack", ts[0]->dtype, ts[0]->ndim + 1, shape);
    if (!out) return NULL;
    for (int k = 0; k < n; k++) {
        nb_tensor *dst = nbt_select(out, d, k);
        if (!dst || !nbt_copy(dst, ts[k])) return NULL;
    }
    nb_node *node = nba_record("stack", out, n, (const nb_tensor *const *)ts, stack_backward);
    if (node) node->i[0] = d;
    return out;
}

int nb_split(const nb_tensor *t, int64_t split_size, int dim, nb_tensor **out, int max_out) {
    if (!nba_check_inputs("split", 1, &t)) return -1;
    int d = join_dim("split", dim, t->ndim, t);
    if (d < 0) return -1;
    if (!out) return nbt_error("split", "out is NULL for a split of shape %s", nbt_shape(t)), -1;
    if (split_size <= 0)
        return nbt_error("split", "split_size must be positive, got %lld", (long long)split_size),
               -1;
    int64_t size = t->shape[d];
    int64_t chunks = size == 0 ? 1 : size / split_size + (size % split_size != 0);
    if (chunks > max_out)
        return nbt_error("split",
                         "dim %d of shape %s makes %lld chunks of %lld, but out has room "
                         "for %d",
                         dim, nbt_shape(t), (long long)chunks, (long long)split_size, max_out),
               -1;
    for (int64_t c = 0; c < chunks; c++) {
        int64_t start = c * split_size;
        int64_t len = size - start < split_size ? size - start : split_size;
        out[c] = nb_narrow(t, d, start, len);
        if (!out[c]) return -1;
    }
    return (int)chunks;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h). nb_gradcheck projects the output on a random vector, so
 * each output element carries a different weight and a permuted gradient cannot pass. ---- */
#include "op_def.h"

static nb_tensor *cat_view(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_view(in[0], NB_SHAPE(3, -1));
}
/* A transposed [4, 6] is stored as [6, 4]: its dim 1 (stride 4) splits into [2, 3] in place. */
static nb_tensor *cat_view_split(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_view(in[0], NB_SHAPE(4, 2, 3));
}
static nb_tensor *cat_reshape(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_reshape(in[0], NB_SHAPE(-1));
}
static nb_tensor *cat_transpose(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_transpose(in[0], 0, -1);
}
static nb_tensor *cat_permute(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_permute(in[0], (int[]){2, 0, 1});
}
static nb_tensor *cat_unsqueeze(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_unsqueeze(in[0], 1);
}
static nb_tensor *cat_squeeze(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_squeeze(in[0], 1);
}
static nb_tensor *cat_squeeze_all(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_squeeze_all(in[0]);
}
static nb_tensor *cat_expand(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_expand(in[0], NB_SHAPE(2, 3, 4));
}
static nb_tensor *cat_narrow(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_narrow(in[0], 1, 1, 2);
}
static nb_tensor *cat_select(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_select(in[0], -1, 2);
}
/* split is narrow per chunk: the chunks reordered, so each gradient must find its block. */
static nb_tensor *cat_split(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *parts[4];
    if (nb_split(in[0], 2, 1, parts, 4) != 3) return NULL;
    return nb_concat(3, (nb_tensor *[]){parts[2], parts[0], parts[1]}, 1);
}
static nb_tensor *cat_contiguous(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_contiguous(in[0]);
}
static nb_tensor *cat_concat(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_concat(n, in, 1);
}
static nb_tensor *cat_stack(nb_tensor *const *in, int n, void *ctx) {
    (void)ctx;
    return nb_stack(n, in, -1);
}

/* Golden runners: the case's input "a" and its parameters. */
static int shape_param(nba_golden_call *c, int64_t *shape) {
    return c->integers(c, "shape", shape, NB_MAX_DIMS);
}
static int golden_view(nba_golden_call *c, nb_tensor **out) {
    int64_t shape[NB_MAX_DIMS];
    int n = shape_param(c, shape);
    out[0] = nb_view(c->input(c, "a", true), n, shape);
    return 1;
}
static int golden_reshape(nba_golden_call *c, nb_tensor **out) {
    int64_t shape[NB_MAX_DIMS];
    int n = shape_param(c, shape);
    out[0] = nb_reshape(c->input(c, "a", true), n, shape);
    return 1;
}
static int golden_expand(nba_golden_call *c, nb_tensor **out) {
    int64_t shape[NB_MAX_DIMS];
    int n = shape_param(c, shape);
    out[0] = nb_expand(c->input(c, "a", true), n, shape);
    return 1;
}
static int golden_transpose(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_transpose(c->input(c, "a", true), (int)c->integer(c, "dim0"),
                          (int)c->integer(c, "dim1"));
    return 1;
}
static int golden_permute(nba_golden_call *c, nb_tensor **out) {
    int64_t wide[NB_MAX_DIMS];
    int dims[NB_MAX_DIMS], n = c->integers(c, "dims", wide, NB_MAX_DIMS);
    for (int k = 0; k < n; k++) dims[k] = (int)wide[k];
    out[0] = nb_permute(c->input(c, "a", true), dims);
    return 1;
}
static int golden_unsqueeze(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_unsqueeze(c->input(c, "a", true), (int)c->integer(c, "dim"));
    return 1;
}
static int golden_squeeze(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_squeeze(c->input(c, "a", true), (int)c->integer(c, "dim"));
    return 1;
}
static int golden_squeeze_all(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_squeeze_all(c->input(c, "a", true));
    return 1;
}
static int golden_narrow(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_narrow(c->input(c, "a", true), (int)c->integer(c, "dim"), c->integer(c, "start"),
                       c->integer(c, "length"));
    return 1;
}
static int golden_split(nba_golden_call *c, nb_tensor **out) {
    int n = nb_split(c->input(c, "a", true), c->integer(c, "split_size"), (int)c->integer(c, "dim"),
                     out, NBA_MAX_GOLDEN_OUTPUTS);
    return n < 0 ? 0 : n;
}
static int golden_select(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_select(c->input(c, "a", true), (int)c->integer(c, "dim"), c->integer(c, "index"));
    return 1;
}
static int golden_contiguous(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_contiguous(c->input(c, "a", true));
    return 1;
}
/* concat and stack take every input, in file order. */
static int golden_concat(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_concat(c->ninputs, c->inputs, (int)c->integer(c, "dim"));
    return 1;
}
static int golden_stack(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_stack(c->ninputs, c->inputs, (int)c->integer(c, "dim"));
    return 1;
}

#define NO_BROADCAST "one input that keeps its shape: nothing broadcasts"
#define JOIN_NO_BROADCAST "inputs keep their own shapes (as torch.cat/stack): no broadcasting"

/* clang-format off */
static const nba_entry view_entries[] = {
    {"view [4,6] -> [3,-1]", NBA_RANDOM, cat_view, 1, {IN(4, 6)}, NULL},
    {"view of a transposed [4,6] -> [4,2,3] (a strided dim split)", NBA_STRIDED, cat_view_split, 1, {IN_T(4, 6)}, NULL},
};
static const nba_golden_case view_cases[] = {
    {"a: [4,6]", "shape=[3,-1]"}, {"a: [2,3,4]", "shape=[6,4]"},
    {"a: [6]", "shape=[1,2,3]"}, {"a: [2,3]", "shape=[6]"}};
static const nba_golden view_goldens[] = {
    NBA_GOLDEN("view", golden_view, "a.view(shape)", view_cases, .contiguous_only = true)};
NBA_OP_DEF(nba_op_view, "view", view_entries, view_goldens,
           .not_applicable = {[NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry reshape_entries[] = {
    {"reshape [3,4] -> [-1]", NBA_RANDOM, cat_reshape, 1, {IN(3, 4)}, NULL},
    {"reshape of a transposed [4,3] (copies)", NBA_STRIDED, cat_reshape, 1, {IN_T(4, 3)}, NULL},
};
static const nba_golden reshape_goldens[] = {
    NBA_GOLDEN("reshape", golden_reshape, "a.reshape(shape)", view_cases)};
NBA_OP_DEF(nba_op_reshape, "reshape", reshape_entries, reshape_goldens,
           .not_applicable = {[NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry transpose_entries[] = {
    {"transpose [2,3,4]", NBA_RANDOM, cat_transpose, 1, {IN(2, 3, 4)}, NULL},
    {"transpose of a sliced [3,4]", NBA_STRIDED, cat_transpose, 1, {IN_S(3, 4)}, NULL},
};
static const nba_golden_case transpose_cases[] = {
    {"a: [3,4]", "dim0=0, dim1=1"}, {"a: [2,3,4]", "dim0=0, dim1=2"},
    {"a: [2,3,4]", "dim0=-1, dim1=-2"}, {"a: [2,3]", "dim0=1, dim1=1"}};
static const nba_golden transpose_goldens[] = {
    NBA_GOLDEN("transpose", golden_transpose, "a.transpose(dim0, dim1)", transpose_cases)};
NBA_OP_DEF(nba_op_transpose, "transpose", transpose_entries, transpose_goldens,
           .not_applicable = {[NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry permute_entries[] = {
    {"permute [2,3,4] -> (2,0,1)", NBA_RANDOM, cat_permute, 1, {IN(2, 3, 4)}, NULL},
    {"permute transposed [2,3,4] -> (2,0,1)", NBA_STRIDED, cat_permute, 1, {IN_T(2, 3, 4)}, NULL},
};
static const nba_golden_case permute_cases[] = {
    {"a: [2,3,4]", "dims=[2,0,1]"}, {"a: [2,3,4,5]", "dims=[1,3,0,2]"}, {"a: [3,4]", "dims=[1,0]"}};
static const nba_golden permute_goldens[] = {
    NBA_GOLDEN("permute", golden_permute, "a.permute(dims)", permute_cases)};
NBA_OP_DEF(nba_op_permute, "permute", permute_entries, permute_goldens,
           .not_applicable = {[NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry unsqueeze_entries[] = {
    {"unsqueeze [3,4] at 1", NBA_RANDOM, cat_unsqueeze, 1, {IN(3, 4)}, NULL},
    {"unsqueeze sliced [3,4] at 1", NBA_STRIDED, cat_unsqueeze, 1, {IN_S(3, 4)}, NULL},
};
static const nba_golden_case unsqueeze_cases[] = {
    {"a: [3,4]", "dim=0"}, {"a: [3,4]", "dim=-1"}, {"a: [3,4]", "dim=1"}};
static const nba_golden unsqueeze_goldens[] = {
    NBA_GOLDEN("unsqueeze", golden_unsqueeze, "a.unsqueeze(dim)", unsqueeze_cases)};
NBA_OP_DEF(nba_op_unsqueeze, "unsqueeze", unsqueeze_entries, unsqueeze_goldens,
           .not_applicable = {[NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry squeeze_entries[] = {
    {"squeeze [3,1,4] at 1", NBA_RANDOM, cat_squeeze, 1, {IN(3, 1, 4)}, NULL},
    {"squeeze_all sliced [1,3,1,4]", NBA_STRIDED, cat_squeeze_all, 1, {IN_S(1, 3, 1, 4)}, NULL},
    {"squeeze transposed [2,1,3] at 1", NBA_STRIDED, cat_squeeze, 1, {IN_T(2, 1, 3)}, NULL},
};
static const nba_golden_case squeeze_cases[] = {
    {"a: [3,1,4]", "dim=1"}, {"a: [3,1,4]", "dim=0"}, {"a: [1,4]", "dim=-2"}};
static const nba_golden_case squeeze_all_cases[] = {{"a: [3,1,4,1]", ""}, {"a: [1,1]", ""}};
static const nba_golden squeeze_goldens[] = {
    NBA_GOLDEN("squeeze", golden_squeeze, "a.squeeze(dim)", squeeze_cases),
    NBA_GOLDEN("squeeze_all", golden_squeeze_all, "a.squeeze()", squeeze_all_cases)};
NBA_OP_DEF(nba_op_squeeze, "squeeze", squeeze_entries, squeeze_goldens,
           .not_applicable = {[NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry expand_entries[] = {
    {"expand [3,1] -> [2,3,4]", NBA_BROADCAST, cat_expand, 1, {IN(3, 1)}, NULL},
    {"expand [2,3,4] -> [2,3,4] (no new dims)", NBA_RANDOM, cat_expand, 1, {IN(2, 3, 4)}, NULL},
    {"expand sliced [4] -> [2,3,4]", NBA_STRIDED, cat_expand, 1, {IN_S(4)}, NULL},
};
static const nba_golden_case expand_cases[] = {
    {"a: [3,1]", "shape=[3,4]"}, {"a: [4]", "shape=[2,3,4]"},
    {"a: [1,3,1]", "shape=[2,-1,5]"}, {"a: []", "shape=[2,2]"}};
static const nba_golden expand_goldens[] = {
    NBA_GOLDEN("expand", golden_expand, "a.expand(shape)", expand_cases)};
NBA_OP_DEF(nba_op_expand, "expand", expand_entries, expand_goldens);

static const nba_entry narrow_entries[] = {
    {"narrow dim 1 of [3,4,5]", NBA_RANDOM, cat_narrow, 1, {IN(3, 4, 5)}, NULL},
    {"narrow dim 1 of a transposed [3,4,5]", NBA_STRIDED, cat_narrow, 1, {IN_T(3, 4, 5)}, NULL},
    {"split sliced [2,6] by 2, reordered", NBA_STRIDED, cat_split, 1, {IN_S(2, 6)}, NULL},
};
static const nba_golden_case narrow_cases[] = {
    {"a: [5,4]", "dim=0, start=1, length=3"}, {"a: [3,6]", "dim=-1, start=2, length=4"},
    {"a: [2,5,3]", "dim=1, start=0, length=5"}};
static const nba_golden_case split_cases[] = {
    {"a: [5,3]", "split_size=2, dim=0"}, {"a: [2,6]", "split_size=3, dim=-1"},
    {"a: [2,3]", "split_size=5, dim=1"}};
static const nba_golden narrow_goldens[] = {
    NBA_GOLDEN("narrow", golden_narrow, "a.narrow(dim, start, length)", narrow_cases),
    NBA_GOLDEN("split", golden_split, "torch.split(a, split_size, dim)", split_cases)};
NBA_OP_DEF(nba_op_narrow, "narrow", narrow_entries, narrow_goldens,
           .not_applicable = {[NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry select_entries[] = {
    {"select index 2 of the last dim of [3,4]", NBA_RANDOM, cat_select, 1, {IN(3, 4)}, NULL},
    {"select of a transposed [3,4,5]", NBA_STRIDED, cat_select, 1, {IN_T(3, 4, 5)}, NULL},
};
static const nba_golden_case select_cases[] = {
    {"a: [5,4]", "dim=0, index=2"}, {"a: [3,6]", "dim=-1, index=5"},
    {"a: [2,5,3]", "dim=1, index=-1"}, {"a: [4]", "dim=0, index=3"}};
static const nba_golden select_goldens[] = {
    NBA_GOLDEN("select", golden_select, "a.select(dim, index)", select_cases)};
NBA_OP_DEF(nba_op_select, "select", select_entries, select_goldens,
           .not_applicable = {[NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry contiguous_entries[] = {
    {"contiguous of a transposed [3,4]", NBA_STRIDED, cat_contiguous, 1, {IN_T(3, 4)}, NULL},
    {"contiguous of a sliced [3,4]", NBA_STRIDED, cat_contiguous, 1, {IN_S(3, 4)}, NULL},
};
static const nba_golden_case contiguous_cases[] = {{"a: [3,4]", ""}, {"a: [2,3,4]", ""}};
static const nba_golden contiguous_goldens[] = {
    NBA_GOLDEN("contiguous", golden_contiguous, "a.contiguous()", contiguous_cases)};
NBA_OP_DEF(nba_op_contiguous, "contiguous", contiguous_entries, contiguous_goldens,
           .not_applicable = {[NBA_RANDOM] = "a contiguous input is returned as it is: no node",
                              [NBA_BROADCAST] = NO_BROADCAST});

static const nba_entry concat_entries[] = {
    {"concat dim 1 of [2,3] [2,1] [2,2]", NBA_RANDOM, cat_concat, 3, {IN(2, 3), IN(2, 1), IN(2, 2)}, NULL},
    {"concat dim 1 of [2,3] transposed [2,1] sliced [2,2]", NBA_STRIDED, cat_concat, 3,
     {IN(2, 3), IN_T(2, 1), IN_S(2, 2)}, NULL},
};
static const nba_golden_case concat_cases[] = {
    {"t0: [2,3]; t1: [4,3]", "dim=0"}, {"t0: [2,3]; t1: [2,1]; t2: [2,2]", "dim=-1"},
    {"t0: [2,3,4]; t1: [2,2,4]", "dim=1"}, {"t0: [2,3]; t1: [2,3] const", "dim=0"}};
static const nba_golden concat_goldens[] = {
    NBA_GOLDEN("concat", golden_concat, "torch.cat(inputs, dim)", concat_cases)};
NBA_OP_DEF(nba_op_concat, "concat", concat_entries, concat_goldens,
           .not_applicable = {[NBA_BROADCAST] = JOIN_NO_BROADCAST});

static const nba_entry stack_entries[] = {
    {"stack two [3,2] at dim -1", NBA_RANDOM, cat_stack, 2, {IN(3, 2), IN(3, 2)}, NULL},
    {"stack [3,2] and a transposed [3,2] at dim -1", NBA_STRIDED, cat_stack, 2, {IN(3, 2), IN_T(3, 2)}, NULL},
};
static const nba_golden_case stack_cases[] = {
    {"t0: [2,3]; t1: [2,3]", "dim=0"}, {"t0: [2,3]; t1: [2,3]; t2: [2,3]", "dim=-1"},
    {"t0: [4]; t1: [4]", "dim=1"}, {"t0: [2,3,4]; t1: [2,3,4]", "dim=2"}};
static const nba_golden stack_goldens[] = {
    NBA_GOLDEN("stack", golden_stack, "torch.stack(inputs, dim)", stack_cases)};
NBA_OP_DEF(nba_op_stack, "stack", stack_entries, stack_goldens,
           .not_applicable = {[NBA_BROADCAST] = JOIN_NO_BROADCAST});
/* clang-format on */
#endif /* NABLA_TESTS */
