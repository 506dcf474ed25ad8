/* Tensor creation, element access and in-place fills. */
#include "nbt.h"
#include "simd.h"

#include <math.h>
#include <string.h>

static inline void fill(nb_tensor *t, double value);

nb_tensor *nb_empty(nb_dtype dt, int ndim, const int64_t *shape) {
    return nbt_new("empty", dt, ndim, shape);
}

nb_tensor *nb_full(nb_dtype dt, int ndim, const int64_t *shape, double value) {
    nb_tensor *t = nbt_new("full", dt, ndim, shape);
    if (t) fill(t, value);
    return t;
}

nb_tensor *nb_zeros(nb_dtype dt, int ndim, const int64_t *shape) {
    nb_tensor *t = nbt_new("zeros", dt, ndim, shape);
    if (t) memset(t->storage->data, 0, (size_t)nbt_numel(t) * nbt_esize(dt));
    return t;
}

nb_tensor *nb_ones(nb_dtype dt, int ndim, const int64_t *shape) {
    nb_tensor *t = nbt_new("ones", dt, ndim, shape);
    if (t) fill(t, 1.0);
    return t;
}

nb_tensor *nb_scalar(nb_dtype dt, double value) {
    return nb_full(dt, 0, NULL, value);
}

/* Records "op: input is NULL" unless an earlier failure in a chain already explains it. */
static void *null_input(const char *op) {
    if (!nb_last_error()[0]) nbt_error(op, "input is NULL");
    return NULL;
}

nb_tensor *nb_arange(nb_dtype dt, double start, double end, double step) {
    double count = (end - start) / step;
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step) || !(count >= 0))
        return nbt_error("arange", "cannot go from %g to %g in steps of %g", start, end, step);
    /* Checked before the cast: converting a double beyond int64 is undefined. */
    if (ceil(count) > (double)(INT64_MAX / 64))
        return nbt_error("arange", "%g to %g in steps of %g makes too many elements", start, end,
                         step);
    int64_t n = (int64_t)ceil(count);
    nb_tensor *t = nbt_new("arange", dt, 1, &n);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) nb_set(t, &i, start + (double)i * step);
    return t;
}

nb_tensor *nb_from_array(nb_dtype dt, int ndim, const int64_t *shape, const void *data) {
    if (!data) {
        if (!nbt_check_shape("from_array", ndim, shape, dt)) return NULL;
        int64_t n = 1;
        for (int i = 0; i < ndim; i++) n *= shape[i];
        if (n > 0)
            return nbt_error("from_array", "data is NULL for shape %s", nbt_dims(ndim, shape));
    }
    nb_tensor *t = nbt_new("from_array", dt, ndim, shape);
    if (!t || !data) return t;
    size_t nbytes = (size_t)nbt_numel(t) * nbt_esize(dt);
    memcpy(t->storage->data, data, nbytes);
    if (dt == NB_BOOL) { /* any non-zero byte is true, stored as 1 like every other bool */
        uint8_t *b = t->storage->data;
        for (size_t i = 0; i < nbytes; i++) b[i] = b[i] != 0;
    }
    return t;
}

nb_tensor *nb_eye(nb_dtype dt, int64_t n) {
    if (!nbt_check_shape("eye", 2, (int64_t[]){n, n}, dt)) return NULL;
    nb_tensor *t = nb_zeros(dt, 2, (int64_t[]){n, n});
    for (int64_t i = 0; t && i < n; i++) nb_set(t, (int64_t[]){i, i}, 1.0);
    return t;
}

static nb_tensor *band(const char *op, const nb_tensor *t, int64_t k, bool lower) {
    if (!t) return null_input(op);
    if (!nbt_check_live(op, t)) return NULL;
    if (t->ndim < 2)
        return nbt_error(op, "expected a tensor with at least 2 dims, got shape %s", nbt_shape(t));
    nb_tensor *out = nbt_contiguous_as(t, t->dtype);
    if (!out) return NULL;
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    int64_t area = rows * cols, mats = area > 0 ? nbt_numel(t) / area : 0;
    size_t es = nbt_esize(t->dtype);
    char *base = out->storage->data;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                bool zero = lower ? (j - i > k) : (j - i < k);
                if (zero) memset(base + ((m * rows + i) * cols + j) * (int64_t)es, 0, es);
            }
    return out;
}

nb_tensor *nb_tril(const nb_tensor *t, int64_t k) {
    return band("tril", t, k, true);
}
nb_tensor *nb_triu(const nb_tensor *t, int64_t k) {
    return band("triu", t, k, false);
}

nb_tensor *nb_clone(const nb_tensor *t) {
    if (!t) return null_input("clone");
    if (!nbt_check_live("clone", t)) return NULL;
    return nbt_contiguous_as(t, t->dtype);
}

nb_tensor *nb_to_dtype(const nb_tensor *t, nb_dtype dt) {
    if (!t) return null_input("to_dtype");
    if (!nbt_check_live("to_dtype", t)) return NULL;
    if ((unsigned)dt > NB_BOOL) return nbt_error("to_dtype", "unknown dtype %d", (int)dt);
    return nbt_contiguous_as(t, dt);
}

nb_tensor *nb_detach(const nb_tensor *t) {
    if (!t) return null_input("detach");
    if (!nbt_check_live("detach", t)) return NULL;
    return nbt_alias(t, t->ndim, t->shape, t->strides, t->offset);
}

/* Element offset of idx in t, or -1 with an error. */
static int64_t element_offset(const char *op, const nb_tensor *t, const int64_t *idx) {
    if (t->ndim > 0 && !idx) {
        nbt_error(op, "index is NULL for a tensor of shape %s", nbt_shape(t));
        return -1;
    }
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        int64_t k = idx[i] < 0 ? idx[i] + t->shape[i] : idx[i];
        if (k < 0 || k >= t->shape[i]) {
            nbt_error(op, "index %lld is out of range for dim %d of shape %s", (long long)idx[i], i,
                      nbt_shape(t));
            return -1;
        }
        off += k * t->strides[i];
    }
    return off;
}

double nb_get(const nb_tensor *t, const int64_t *idx) {
    if (!t) return (nbt_error("get", "NULL tensor"), NAN);
    if (!nbt_check_live("get", t)) return NAN;
    int64_t off = element_offset("get", t, idx);
    if (off < 0) return NAN;
    return nbt_load_double((const char *)t->storage->data + off * (int64_t)nbt_esize(t->dtype),
                           t->dtype);
}

bool nb_set(nb_tensor *t, const int64_t *idx, double v) {
    if (!t) return nbt_error("set", "NULL tensor"), false;
    if (!nbt_check_live("set", t)) return false;
    int64_t off = element_offset("set", t, idx);
    if (off < 0) return false;
    nbt_store_double((char *)t->storage->data + off * (int64_t)nbt_esize(t->dtype), t->dtype, v);
    return true;
}

double nb_item(const nb_tensor *t) {
    if (!t) return (nbt_error("item", "NULL tensor"), NAN);
    if (!nbt_check_live("item", t)) return NAN;
    if (nbt_numel(t) != 1)
        return (nbt_error("item", "expected a tensor with one element, got shape %s", nbt_shape(t)),
                NAN);
    return nbt_get_linear(t, 0);
}

void *nb_data(const nb_tensor *t) {
    return t && nbt_check_live("data", t) ? nbt_ptr(t) : NULL;
}

typedef struct {
    nb_dtype dt;
    double value;
    char *base; /* fill_run's contiguous tensor */
} fill_ctx;

/* Elements [begin, end) of a contiguous float tensor: the first 64 bytes by hand, then copies
 * of what is written so far, doubling: memcpy stores with the machine's widest vectors, where
 * a loop here has only the baseline's (128 KB of floats took 11,700 TSC ticks by the loop,
 * about half that this way). */
static void fill_run(int64_t begin, int64_t end, void *vctx) {
    const fill_ctx *c = vctx;
    const int64_t n = end - begin, es = nbt_esize(c->dt), head = 64 / es;
    char *p = c->base + begin * es;
    for (int64_t i = 0; i < n && i < head; i++) nbt_store_double(p + i * es, c->dt, c->value);
    for (int64_t done = head; done < n; done *= 2)
        memcpy(p + done * es, p, (size_t)((done < n - done ? done : n - done) * es));
}

/* Elements a thread fills at least: in the toy step the 128 KB gradient of its loss, written
 * into memory the other core had last, took some 29,000 TSC ticks on one thread. */
#define FILL_GRAIN 16384

static void fill_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    const fill_ctx *c = vctx;
    for (int64_t i = 0; i < n; i++) nbt_store_double(p[0] + i * s[0], c->dt, c->value);
}

/* nb_fill_ past its checks: nb_full and nb_ones fill a tensor they just made. (With the
 * checks in front, gcc also split nb_fill_ in two, which cost 10 instructions a call.) */
static inline __attribute__((always_inline)) void fill(nb_tensor *t, double value) {
    if (value == 0 && !signbit(value) && nb_is_contiguous(t)) {
        /* zero_grad's case: all-zero bytes are 0 in every dtype */
        memset(nbt_ptr(t), 0, (size_t)nbt_numel(t) * nbt_esize(t->dtype));
        return;
    }
    if (nb_is_contiguous(t) && nb_is_float(t)) { /* a loss's gradient, [B, T, D] of ones */
        fill_ctx c = {t->dtype, value, nbt_ptr(t)};
        nbt_parallel_ranges(nbt_numel(t), FILL_GRAIN, fill_run, &c);
        return;
    }
    nbt_operands ops = {.nops = 1, .base = {nbt_ptr(t)}, .elem = {nbt_esize(t->dtype)}};
    for (int i = 0; i < t->ndim; i++) ops.strides[0][i] = t->strides[i];
    fill_ctx c = {t->dtype, value, NULL};
    nbt_iterate(t->ndim, t->shape, &ops, fill_inner, &c);
}

bool nb_fill_(nb_tensor *t, double value) {
    if (!t) return nbt_error("fill_", "NULL tensor"), false;
    if (!nbt_check_live("fill_", t)) return false;
    fill(t, value);
    return true;
}
