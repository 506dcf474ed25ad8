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
        return nbt_error("reshape", "shape is NULL for a reshape to %d dims of a tensor of "
                         "shape %s", ndim, nbt_shape(t));
    nb_tensor *out = nbt_view(t, ndim, shape);
    if (!out) {
        /* Not viewable: copy, then view (a shape error from the copy path is the real one). */
        nb_clear_error();
        nb_tensor *c = nbt_contiguous(t);
        out = c ? nbt_view(c, ndim, shape) : NULL;
        if (!out) {
            /* Rename the op in the message; copy it first, nbt_error writes the same buffer. */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", nb_last_error());
            if (strncmp(msg, "view: ", 6) == 0) nbt_error("reshape", "%s", msg + 6);
            return NULL;
        }
    }
    return record_unary("reshape", out, t, reshape_backward);
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
static void expand_backward(nb_node *n, const nb_tensor *gout) { nba_accumulate(n, 0, gout); }

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

static void identity_backward(nb_node *n, const nb_tensor *gout) { nba_accumulate(n, 0, gout); }

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
                             nb_dtype_name(ts[0]->dtype), k, nb_dtype_name(ts[k]->dtype)), false;
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
    if (split_size <= 0) return nbt_error("split", "split_size must be positive, got %lld",
                                          (long long)split_size), -1;
    int64_t size = t->shape[d];
    int64_t chunks = size == 0 ? 1 : size / split_size + (size % split_size != 0);
    if (chunks > max_out)
        return nbt_error("split", "dim %d of shape %s makes %lld chunks of %lld, but out has room "
                         "for %d", dim, nbt_shape(t), (long long)chunks, (long long)split_size,
                         max_out), -1;
    for (int64_t c = 0; c < chunks; c++) {
        int64_t start = c * split_size;
        int64_t len = size - start < split_size ? size - start : split_size;
        out[c] = nb_narrow(t, d, start, len);
        if (!out[c]) return -1;
    }
    return (int)chunks;
}
