/* Helpers every backward uses: reducing broadcast gradients, in-place accumulation, checks. */
#include "node.h"
#include "../tensor/elementwise_kernels.h"

#include <string.h>

static void accumulate_f32(int64_t n, char **p, const int64_t *s, void *ctx) {
    (void)ctx;
    if (s[0] == 0) { /* reducing a run into one element */
        float acc = *(float *)p[0];
        for (int64_t i = 0; i < n; i++) acc += *(const float *)(p[1] + i * s[1]);
        *(float *)p[0] = acc;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        *(float *)(p[0] + i * s[0]) += *(const float *)(p[1] + i * s[1]);
}

static void accumulate_f64(int64_t n, char **p, const int64_t *s, void *ctx) {
    (void)ctx;
    if (s[0] == 0) {
        double acc = *(double *)p[0];
        for (int64_t i = 0; i < n; i++) acc += *(const double *)(p[1] + i * s[1]);
        *(double *)p[0] = acc;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        *(double *)(p[0] + i * s[0]) += *(const double *)(p[1] + i * s[1]);
}

/* dst[idx] += src[idx] over the index space `shape`, dst strides may be 0 (reduction). */
static void accumulate(nb_tensor *dst, const int64_t *dst_strides, const nb_tensor *src, int ndim,
                       const int64_t *shape) {
    nbt_operands ops = {.nops = 2,
                        .base = {nbt_ptr(dst), nbt_ptr(src)},
                        .elem = {nbt_esize(dst->dtype), nbt_esize(src->dtype)}};
    memcpy(ops.strides[0], dst_strides, sizeof(int64_t) * (size_t)ndim);
    nbt_broadcast_strides(src, ndim, shape, ops.strides[1]);
    nbt_iterate(ndim, shape, &ops, dst->dtype == NB_F32 ? accumulate_f32 : accumulate_f64, NULL);
}

nb_tensor *nba_sum_to_shape(const nb_tensor *t, int ndim, const int64_t *shape) {
    nb_tensor *out = nb_zeros(t->dtype, ndim, shape);
    if (!out) return NULL;
    int64_t strides[NB_MAX_DIMS];
    nbt_broadcast_strides(out, t->ndim, t->shape, strides);
    accumulate(out, strides, t, t->ndim, t->shape);
    return out;
}

void nba_add_into(nb_tensor *dst, const nb_tensor *src) {
    if (nb_same_shape(dst, src)) { /* the common case: nothing to broadcast */
        nbt_binary_into(dst, NBT_ADD, dst, src);
        return;
    }
    if (src->ndim <= dst->ndim) {
        int64_t bshape[NB_MAX_DIMS];
        int bnd;
        if (nbt_broadcast_shape("backward", dst->ndim, dst->shape, src->ndim, src->shape, &bnd,
                                bshape) &&
            bnd == dst->ndim && memcmp(bshape, dst->shape, sizeof(int64_t) * (size_t)bnd) == 0) {
            /* The binary kernel's vector loops and threads, in place: dst = dst + src. */
            nbt_binary_into(dst, NBT_ADD, dst, src);
            return;
        }
    }
    /* src is bigger than dst: reduce it first. */
    nb_tensor *r = nba_sum_to_shape(src, dst->ndim, dst->shape);
    if (r) accumulate(dst, dst->strides, r, dst->ndim, dst->shape);
}

bool nba_check_inputs(const char *op, int n, const nb_tensor *const *inputs) {
    for (int i = 0; i < n; i++)
        if (!inputs[i]) {
            /* Keep the first error of a chain: it names the op that really failed. */
            if (!nb_last_error()[0]) nbt_error(op, "input %d is NULL", i);
            return false;
        } else if (!nbt_check_live(op, inputs[i])) {
            return false;
        }
    return true;
}

bool nba_check_float(const char *op, const nb_tensor *a) {
    if (!a || !nbt_check_live(op, a)) return nba_check_inputs(op, 1, &a);
    if (nb_is_float(a)) return true;
    nbt_error(op, "expected a float32 or float64 tensor, got %s of shape %s",
              nb_dtype_name(a->dtype), nbt_shape(a));
    return false;
}

bool nba_check_same_float(const char *op, const nb_tensor *a, const nb_tensor *b) {
    /* The common case in one test (every linear and binary op asks; through the general checks
     * below, which then name what is wrong, 1.7% of the seed step's instructions). */
    if (a && b && a->dtype == b->dtype && (a->dtype == NB_F32 || a->dtype == NB_F64) &&
        !nbt_is_released(a) && !nbt_is_released(b))
        return true;
    if (!nba_check_inputs(op, 2, (const nb_tensor *[]){a, b})) return false;
    if (!nba_check_float(op, a) || !nba_check_float(op, b)) return false;
    if (a->dtype == b->dtype) return true;
    nbt_error(op, "dtype mismatch: %s %s and %s %s; cast one with nb_to_dtype", nbt_shape(a),
              nb_dtype_name(a->dtype), nbt_shape(b), nb_dtype_name(b->dtype));
    return false;
}
