/* nb_all_finite: whether a tensor holds no NaN or infinity (torch.isfinite(t).all()). */
#include "nbt.h"

#include <string.h>

typedef struct {
    nb_dtype dtype;
    bool all_finite;
} finite_scan;

/* A float is NaN or infinite exactly when its exponent bits are all ones. Testing the bits
 * with integer operations keeps the loop vectorisable without fast-math. */
static bool floats_finite(int64_t n, const char *p, int64_t stride) {
    uint32_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, p + i * stride, sizeof bits);
        nonfinite |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    return !nonfinite;
}

static bool doubles_finite(int64_t n, const char *p, int64_t stride) {
    uint64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, p + i * stride, sizeof bits);
        nonfinite |= (bits & 0x7ff0000000000000u) == 0x7ff0000000000000u;
    }
    return !nonfinite;
}

static void scan_run(int64_t n, char **p, const int64_t *s, void *ctx) {
    finite_scan *scan = ctx;
    if (!scan->all_finite) return;
    scan->all_finite =
        scan->dtype == NB_F32 ? floats_finite(n, p[0], s[0]) : doubles_finite(n, p[0], s[0]);
}

bool nb_all_finite(const nb_tensor *t) {
    if (!t) return nbt_error("all_finite", "NULL input"), false;
    if (!nbt_check_live("all_finite", t)) return false;
    if (t->dtype != NB_F32 && t->dtype != NB_F64) return true; /* integers and masks */
    finite_scan scan = {.dtype = t->dtype, .all_finite = true};
    nbt_operands ops = {.nops = 1, .base = {nbt_ptr(t)}, .elem = {nb_dtype_size(t->dtype)}};
    for (int i = 0; i < t->ndim; i++) ops.strides[0][i] = t->strides[i];
    nbt_iterate(t->ndim, t->shape, &ops, scan_run, &scan);
    return scan.all_finite;
}
