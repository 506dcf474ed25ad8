/* Raw strided views: new tensor structs over the same storage, no copies, no autograd. */
#include "nbt.h"

#include <string.h>

/* Normalises dim for an ndim-dim result of an op on t (ndim is t->ndim, or one more for
 * unsqueeze); -1 with an error naming op, dim and t's shape. */
static int dim_of(const char *op, int dim, int ndim, const nb_tensor *t) {
    int d = dim < 0 ? dim + ndim : dim;
    if (d >= 0 && d < ndim) return d;
    if (ndim == 0)
        nbt_error(op, "dim %d is out of range for a 0-d tensor (shape [])", dim);
    else
        nbt_error(op, "dim %d is out of range for a tensor of shape %s (expected %d to %d)", dim,
                  nbt_shape(t), -ndim, ndim - 1);
    return -1;
}

/* Resolves one -1 in a requested shape against numel; checks the element count. */
static bool infer_shape(const char *op, const nb_tensor *t, int ndim, const int64_t *req,
                        int64_t *shape) {
    if (ndim < 0 || ndim > NB_MAX_DIMS) {
        nbt_error(op, "ndim %d is out of range (0 to %d)", ndim, NB_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !req) {
        nbt_error(op, "shape is NULL for a view of %d dims of a tensor of shape %s", ndim,
                  nbt_shape(t));
        return false;
    }
    int infer = -1;
    int64_t known = 1, numel = nbt_numel(t);
    bool overflow = false;
    for (int i = 0; i < ndim; i++) {
        if (req[i] == -1) {
            if (infer >= 0) {
                nbt_error(op, "only one dimension can be -1 in shape %s", nbt_dims(ndim, req));
                return false;
            }
            infer = i;
        } else if (req[i] < 0) {
            nbt_error(op, "invalid size %lld in shape %s", (long long)req[i], nbt_dims(ndim, req));
            return false;
        } else if (__builtin_mul_overflow(known, req[i], &known)) {
            overflow = true;
        }
        shape[i] = req[i];
    }
    if (overflow) {
        nbt_error(op, "shape %s is invalid for input of size %lld (shape %s): too many elements",
                  nbt_dims(ndim, req), (long long)numel, nbt_shape(t));
        return false;
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0) {
            nbt_error(op, "shape %s is invalid for input of size %lld (shape %s)",
                      nbt_dims(ndim, req), (long long)numel, nbt_shape(t));
            return false;
        }
        shape[infer] = numel / known;
    } else if (known != numel) {
        nbt_error(op, "shape %s is invalid for input of size %lld (shape %s)", nbt_dims(ndim, req),
                  (long long)numel, nbt_shape(t));
        return false;
    }
    /* With no elements any sizes match; the strides they make must still fit. */
    return numel > 0 || nbt_check_shape(op, ndim, shape, t->dtype);
}

/* PyTorch's rule: the new shape must split or merge only dims that are laid out contiguously
 * with respect to each other. Returns false if no strides exist. */
static bool view_strides(const nb_tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
    if (t->ndim == 0 || nbt_numel(t) == 0 || nb_is_contiguous(t)) { /* the common case */
        nbt_contiguous_strides(ndim, shape, strides);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base = t->strides[t->ndim - 1], tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        if (d == 0 ||
            (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) {
                chunk_base = t->strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

nb_tensor *nbt_view(const nb_tensor *t, int ndim, const int64_t *req) {
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    if (!infer_shape("view", t, ndim, req, shape)) return NULL;
    if (!view_strides(t, ndim, shape, strides))
        return nbt_error("view", "view size %s is not compatible with input tensor's size %s and "
                         "strides (at least one dimension spans across two contiguous subspaces). "
                         "Use .contiguous() first, or reshape() instead",
                         nbt_dims(ndim, shape), nbt_shape(t));
    return nbt_alias(t, ndim, shape, strides, t->offset);
}

nb_tensor *nbt_reshape(const nb_tensor *t, int ndim, const int64_t *req) {
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    if (!infer_shape("reshape", t, ndim, req, shape)) return NULL;
    if (view_strides(t, ndim, shape, strides)) return nbt_alias(t, ndim, shape, strides, t->offset);
    nb_tensor *c = nbt_contiguous(t);
    if (!c) return NULL;
    nbt_contiguous_strides(ndim, shape, strides);
    return nbt_alias(c, ndim, shape, strides, c->offset);
}

nb_tensor *nbt_transpose(const nb_tensor *t, int d0, int d1) {
    int a = dim_of("transpose", d0, t->ndim, t), b = a < 0 ? -1 : dim_of("transpose", d1, t->ndim, t);
    if (a < 0 || b < 0) return NULL;
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    shape[a] = t->shape[b], shape[b] = t->shape[a];
    strides[a] = t->strides[b], strides[b] = t->strides[a];
    return nbt_alias(t, t->ndim, shape, strides, t->offset);
}

nb_tensor *nbt_permute(const nb_tensor *t, const int *dims) {
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    bool seen[NB_MAX_DIMS] = {false};
    for (int i = 0; i < t->ndim; i++) {
        int d = dim_of("permute", dims[i], t->ndim, t);
        if (d < 0) return NULL;
        if (seen[d])
            return nbt_error("permute", "dim %d appears twice in the permutation of a tensor of "
                             "shape %s", dims[i], nbt_shape(t));
        seen[d] = true;
        shape[i] = t->shape[d];
        strides[i] = t->strides[d];
    }
    return nbt_alias(t, t->ndim, shape, strides, t->offset);
}

nb_tensor *nbt_unsqueeze(const nb_tensor *t, int dim) {
    if (t->ndim >= NB_MAX_DIMS)
        return nbt_error("unsqueeze", "tensor of shape %s already has the maximum of %d dims",
                         nbt_shape(t), NB_MAX_DIMS);
    int d = dim_of("unsqueeze", dim, t->ndim + 1, t);
    if (d < 0) return NULL;
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            strides[i] = d < t->ndim ? t->strides[d] * t->shape[d] : 1;
        } else {
            shape[i] = t->shape[j];
            strides[i] = t->strides[j++];
        }
    }
    return nbt_alias(t, t->ndim + 1, shape, strides, t->offset);
}

nb_tensor *nbt_squeeze(const nb_tensor *t, int dim) {
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    int n = 0, d = -1;
    if (dim != NBT_ALL_DIMS) {
        d = dim_of("squeeze", dim, t->ndim, t);
        if (d < 0) return NULL;
    }
    for (int i = 0; i < t->ndim; i++) {
        bool drop = t->shape[i] == 1 && (d < 0 || i == d);
        if (!drop) {
            shape[n] = t->shape[i];
            strides[n++] = t->strides[i];
        }
    }
    return nbt_alias(t, n, shape, strides, t->offset);
}

nb_tensor *nbt_expand(const nb_tensor *t, int ndim, const int64_t *req) {
    if (ndim < t->ndim || ndim > NB_MAX_DIMS)
        return nbt_error("expand", "cannot expand shape %s to %s: expected %d to %d dims",
                         nbt_shape(t), ndim >= 0 && ndim <= 64 ? nbt_dims(ndim, req) : "?",
                         t->ndim, NB_MAX_DIMS);
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int ti = i - (ndim - t->ndim);
        int64_t have = ti >= 0 ? t->shape[ti] : 1;
        int64_t want = req[i] == -1 && ti >= 0 ? have : req[i];
        if (want < 0 || (have != want && have != 1))
            return nbt_error("expand", "cannot expand shape %s to %s: dim %d has size %lld, "
                             "expected 1 or %lld", nbt_shape(t), nbt_dims(ndim, req), i,
                             (long long)have, (long long)want);
        shape[i] = want;
        strides[i] = (ti >= 0 && have == want) ? t->strides[ti] : 0;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(numel, shape[i], &numel))
            return nbt_error("expand", "cannot expand shape %s to %s: too many elements",
                             nbt_shape(t), nbt_dims(ndim, shape));
    return nbt_alias(t, ndim, shape, strides, t->offset);
}

nb_tensor *nbt_narrow(const nb_tensor *t, int dim, int64_t start, int64_t length) {
    int d = dim_of("narrow", dim, t->ndim, t);
    if (d < 0) return NULL;
    int64_t first = start < 0 ? start + t->shape[d] : start;
    /* length > size - first rather than first + length > size: no overflow */
    if (first < 0 || first > t->shape[d] || length < 0 || length > t->shape[d] - first)
        return nbt_error("narrow", "start %lld and length %lld are out of bounds for dim %d of "
                         "shape %s", (long long)start, (long long)length, dim, nbt_shape(t));
    start = first;
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = length;
    return nbt_alias(t, t->ndim, shape, t->strides, t->offset + start * t->strides[d]);
}

nb_tensor *nbt_select(const nb_tensor *t, int dim, int64_t index) {
    int d = dim_of("select", dim, t->ndim, t);
    if (d < 0) return NULL;
    int64_t i = index < 0 ? index + t->shape[d] : index;
    if (i < 0 || i >= t->shape[d])
        return nbt_error("select", "index %lld is out of range for dim %d of shape %s",
                         (long long)index, dim, nbt_shape(t));
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    for (int k = 0, n = 0; k < t->ndim; k++) {
        if (k == d) continue;
        shape[n] = t->shape[k];
        strides[n++] = t->strides[k];
    }
    return nbt_alias(t, t->ndim - 1, shape, strides, t->offset + i * t->strides[d]);
}

nb_tensor *nbt_contiguous_as(const nb_tensor *t, nb_dtype dt) {
    nb_tensor *out = nbt_new("contiguous", dt, t->ndim, t->shape);
    if (!out || !nbt_copy(out, t)) return NULL;
    return out;
}

nb_tensor *nbt_contiguous(const nb_tensor *t) {
    if (nb_is_contiguous(t)) return (nb_tensor *)t;
    return nbt_contiguous_as(t, t->dtype);
}
