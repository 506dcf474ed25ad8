/* Boolean mask algebra (masks are NB_BOOL, true = blocked). */
#include "nbt.h"

static void or_inner(int64_t n, char **p, const int64_t *s, void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        *(uint8_t *)(p[0] + i * s[0]) = *(const uint8_t *)(p[1] + i * s[1]) |
                                        *(const uint8_t *)(p[2] + i * s[2]);
}

nb_tensor *nb_logical_or(const nb_tensor *a, const nb_tensor *b) {
    if (!a || !b) return nbt_error("logical_or", "NULL input");
    if (!nbt_check_live("logical_or", a) || !nbt_check_live("logical_or", b)) return NULL;
    if (a->dtype != NB_BOOL || b->dtype != NB_BOOL)
        return nbt_error("logical_or", "expected bool masks, got %s %s and %s %s",
                         nb_dtype_name(a->dtype), nbt_shape(a), nb_dtype_name(b->dtype),
                         nbt_shape(b));
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (!nbt_broadcast_shape("logical_or", a->ndim, a->shape, b->ndim, b->shape, &nd, shape))
        return NULL;
    nb_tensor *out = nbt_new("logical_or", NB_BOOL, nd, shape);
    if (!out) return NULL;
    nbt_operands ops = {.nops = 3, .base = {nbt_ptr(out), nbt_ptr(a), nbt_ptr(b)},
                        .elem = {1, 1, 1}};
    for (int i = 0; i < nd; i++) ops.strides[0][i] = out->strides[i];
    nbt_broadcast_strides(a, nd, shape, ops.strides[1]);
    nbt_broadcast_strides(b, nd, shape, ops.strides[2]);
    nbt_iterate(nd, shape, &ops, or_inner, NULL);
    return out;
}
