/* Strided N-ary iteration with dim coalescing, and the dtype-converting copy built on it. */
#include "nbt.h"

#include <string.h>

void nbt_iterate(int ndim, const int64_t *shape, const nbt_operands *ops, nbt_inner_fn fn,
                 void *ctx) {
    int64_t sh[NB_MAX_DIMS], st[NBT_ITER_MAX][NB_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) return;
        if (shape[i] == 1) continue; /* size-1 dims contribute nothing */
        sh[n] = shape[i];
        for (int k = 0; k < ops->nops; k++) st[k][n] = ops->strides[k][i];
        n++;
    }
    /* Merge dim i into i+1 when every operand steps through them as one run. */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0) {
            bool merge = true;
            for (int k = 0; k < ops->nops; k++)
                if (st[k][m - 1] != st[k][i] * sh[i]) merge = false;
            if (merge) {
                sh[m - 1] *= sh[i];
                for (int k = 0; k < ops->nops; k++) st[k][m - 1] = st[k][i];
                continue;
            }
        }
        sh[m] = sh[i];
        for (int k = 0; k < ops->nops; k++) st[k][m] = st[k][i];
        m++;
    }
    char *ptr[NBT_ITER_MAX];
    int64_t inner_bytes[NBT_ITER_MAX];
    for (int k = 0; k < ops->nops; k++) ptr[k] = ops->base[k];
    if (m == 0) {
        fn(1, ptr, (int64_t[NBT_ITER_MAX]){0}, ctx);
        return;
    }
    for (int k = 0; k < ops->nops; k++) inner_bytes[k] = st[k][m - 1] * (int64_t)ops->elem[k];
    int64_t idx[NB_MAX_DIMS] = {0};
    int64_t inner = sh[m - 1];
    for (;;) {
        fn(inner, ptr, inner_bytes, ctx);
        int d = m - 2;
        for (; d >= 0; d--) {
            for (int k = 0; k < ops->nops; k++) ptr[k] += st[k][d] * (int64_t)ops->elem[k];
            if (++idx[d] < sh[d]) break;
            for (int k = 0; k < ops->nops; k++) ptr[k] -= st[k][d] * sh[d] * (int64_t)ops->elem[k];
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

typedef struct {
    nb_dtype dst, src;
} copy_ctx;

static void copy_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    const copy_ctx *c = vctx;
    char *d = p[0], *x = p[1];
    size_t es = nbt_esize(c->dst);
    if (c->dst == c->src && s[0] == (int64_t)es && s[1] == (int64_t)es) {
        memcpy(d, x, (size_t)n * es);
        return;
    }
    if (c->dst == c->src && c->dst == NB_F32) {
        for (int64_t i = 0; i < n; i++) *(float *)(d + i * s[0]) = *(const float *)(x + i * s[1]);
        return;
    }
    if (c->dst == c->src && es == 8) { /* f64 and i64 copy as raw 8-byte words */
        for (int64_t i = 0; i < n; i++)
            *(int64_t *)(d + i * s[0]) = *(const int64_t *)(x + i * s[1]);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        nbt_store_double(d + i * s[0], c->dst, nbt_load_double(x + i * s[1], c->src));
}

/* Same-dtype copy of a few elements with a plain odometer: for tiny tensors (a 3-token
 * attention head) the iterator's coalescing costs more than the copy. */
#define SMALL_COPY 256
static void copy_small(nb_tensor *dst, const nb_tensor *src) {
    int nd = dst->ndim;
    int64_t sstr[NB_MAX_DIMS], idx[NB_MAX_DIMS] = {0}, n = nbt_numel(dst);
    nbt_broadcast_strides(src, nd, dst->shape, sstr);
    size_t es = nbt_esize(dst->dtype);
    char *d = nbt_ptr(dst);
    const char *s = nbt_ptr(src);
    int64_t doff = 0, soff = 0;
    for (int64_t k = 0; k < n; k++) {
        if (es == 4)
            ((uint32_t *)d)[doff] = ((const uint32_t *)s)[soff];
        else if (es == 8)
            ((uint64_t *)d)[doff] = ((const uint64_t *)s)[soff];
        else
            d[doff] = s[soff];              /* bool */
        for (int i = nd - 1; i >= 0; i--) { /* next index, last dim fastest */
            doff += dst->strides[i];
            soff += sstr[i];
            if (++idx[i] < dst->shape[i]) break;
            doff -= dst->strides[i] * dst->shape[i];
            soff -= sstr[i] * dst->shape[i];
            idx[i] = 0;
        }
    }
}

bool nbt_copy(nb_tensor *dst, const nb_tensor *src) {
    if (dst->dtype == src->dtype && nb_same_shape(dst, src) && nb_is_contiguous(dst) &&
        nb_is_contiguous(src)) { /* the common case, without the iterator's set-up */
        memmove(nbt_ptr(dst), nbt_ptr(src), (size_t)nbt_numel(dst) * nbt_esize(dst->dtype));
        return true;
    }
    int64_t bshape[NB_MAX_DIMS];
    int bnd;
    if (!nbt_broadcast_shape("copy_", dst->ndim, dst->shape, src->ndim, src->shape, &bnd, bshape))
        return false;
    for (int i = 0; i < bnd; i++)
        if (bnd != dst->ndim || bshape[i] != dst->shape[i]) {
            nbt_error("copy_", "source of shape %s does not broadcast to destination shape %s",
                      nbt_shape(src), nbt_shape(dst));
            return false;
        }
    if (dst->dtype == src->dtype && nbt_numel(dst) <= SMALL_COPY) {
        copy_small(dst, src);
        return true;
    }
    nbt_operands ops = {.nops = 2,
                        .base = {nbt_ptr(dst), nbt_ptr(src)},
                        .elem = {nbt_esize(dst->dtype), nbt_esize(src->dtype)}};
    memcpy(ops.strides[0], dst->strides, sizeof(int64_t) * (size_t)dst->ndim);
    nbt_broadcast_strides(src, dst->ndim, dst->shape, ops.strides[1]);
    copy_ctx c = {dst->dtype, src->dtype};
    nbt_iterate(dst->ndim, dst->shape, &ops, copy_inner, &c);
    return true;
}

double nbt_get_linear(const nb_tensor *t, int64_t k) {
    int64_t off = t->offset;
    for (int i = t->ndim - 1; i >= 0; i--) {
        off += (k % t->shape[i]) * t->strides[i];
        k /= t->shape[i];
    }
    return nbt_load_double((const char *)t->storage->data + off * (int64_t)nbt_esize(t->dtype),
                           t->dtype);
}

bool nb_copy_(nb_tensor *dst, const nb_tensor *src) {
    if (!dst || !src) {
        nbt_error("copy_", "NULL tensor");
        return false;
    }
    if (!nbt_check_live("copy_", dst) || !nbt_check_live("copy_", src)) return false;
    return nbt_copy(dst, src);
}

bool nb_to_doubles(const nb_tensor *t, double *out) {
    if (!t || !out) {
        nbt_error("to_doubles", "NULL argument");
        return false;
    }
    if (!nbt_check_live("to_doubles", t)) return false;
    int64_t n = nbt_numel(t);
    if (nb_is_contiguous(t)) { /* one pass, without an index division per element */
        const char *p = (const char *)t->storage->data + t->offset * (int64_t)nbt_esize(t->dtype);
        if (t->dtype == NB_F32)
            for (int64_t k = 0; k < n; k++) out[k] = ((const float *)p)[k];
        else
            for (int64_t k = 0; k < n; k++)
                out[k] = nbt_load_double(p + k * (int64_t)nbt_esize(t->dtype), t->dtype);
        return true;
    }
    for (int64_t k = 0; k < n; k++) out[k] = nbt_get_linear(t, k);
    return true;
}
