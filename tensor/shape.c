/* Metadata queries, shape validation and broadcasting rules. */
#include "nbt.h"

const char *nb_dtype_name(nb_dtype dt) {
    switch (dt) {
    case NB_F32: return "float32";
    case NB_F64: return "float64";
    case NB_I64: return "int64";
    case NB_BOOL: return "bool";
    }
    return "unknown";
}

size_t nb_dtype_size(nb_dtype dt) {
    switch (dt) {
    case NB_F32: return 4;
    case NB_F64: return 8;
    case NB_I64: return 8;
    case NB_BOOL: return 1;
    }
    return 0;
}

int64_t nb_numel(const nb_tensor *t) {
    if (!t) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int64_t nb_size(const nb_tensor *t, int dim) {
    if (!t) return -1;
    if (dim < 0) dim += t->ndim;
    if (dim < 0 || dim >= t->ndim) return -1;
    return t->shape[dim];
}

bool nb_is_contiguous(const nb_tensor *t) {
    if (!t) return false;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 1) continue; /* the stride of a size-1 dim never matters */
        if (t->strides[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

bool nb_is_float(const nb_tensor *t) { return t && (t->dtype == NB_F32 || t->dtype == NB_F64); }

bool nb_same_shape(const nb_tensor *a, const nb_tensor *b) {
    if (!a || !b || a->ndim != b->ndim) return false;
    /* a loop, not memcmp: a few dims, compared for every gradient a backward pass adds, where
     * the library call was 1.5% of the seed step's samples */
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

bool nbt_check_shape(const char *op, int ndim, const int64_t *shape, nb_dtype dt) {
    if (ndim < 0 || ndim > NB_MAX_DIMS) {
        nbt_error(op, "ndim %d is out of range (0 to %d)", ndim, NB_MAX_DIMS);
        return false;
    }
    if ((unsigned)dt > NB_BOOL) {
        nbt_error(op, "unknown dtype %d", (int)dt);
        return false;
    }
    if (ndim > 0 && !shape) {
        nbt_error(op, "shape is NULL for ndim %d", ndim);
        return false;
    }
    /* Sizes of 0 count as 1: a tensor with no elements still has strides (products of the
     * other sizes), and they must fit in int64 too, as in PyTorch. */
    /* sizes are powers of two: a shift, where a division was 1% of the seed step */
    int64_t limit = (INT64_MAX / 64) >> __builtin_ctzll(nb_dtype_size(dt)), n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            nbt_error(op, "negative size %lld in dim %d of shape %s", (long long)shape[i], i,
                      nbt_dims(ndim, shape));
            return false;
        }
        /* no division: this check runs for every tensor made */
        if (__builtin_mul_overflow(n, shape[i] ? shape[i] : 1, &n) || n > limit) {
            nbt_error(op, "shape %s overflows: too many elements of %s", nbt_dims(ndim, shape),
                      nb_dtype_name(dt));
            return false;
        }
    }
    return true;
}

int nbt_dim(const char *op, int dim, int ndim) {
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim) {
        nbt_error(op, "dim %d is out of range for a tensor with %d dims (expected %d to %d)", dim,
                  ndim, -ndim, ndim - 1);
        return -1;
    }
    return d;
}

bool nbt_broadcast_shape(const char *op, int andim, const int64_t *ashape, int bndim,
                         const int64_t *bshape, int *out_ndim, int64_t *out) {
    int n = andim > bndim ? andim : bndim;
    for (int i = 0; i < n; i++) {
        int ai = andim - n + i, bi = bndim - n + i;
        int64_t as = ai >= 0 ? ashape[ai] : 1, bs = bi >= 0 ? bshape[bi] : 1;
        if (as != bs && as != 1 && bs != 1) {
            nbt_error(op, "shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)",
                      nbt_dims(andim, ashape), nbt_dims(bndim, bshape), i, (long long)as,
                      (long long)bs);
            return false;
        }
        out[i] = as == 1 ? bs : as;
    }
    *out_ndim = n;
    return true;
}

void nbt_broadcast_strides(const nb_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
    for (int i = 0; i < ndim; i++) {
        int ti = t->ndim - ndim + i;
        out[i] = (ti >= 0 && t->shape[ti] == shape[i] && shape[i] != 1) ? t->strides[ti] : 0;
    }
}
