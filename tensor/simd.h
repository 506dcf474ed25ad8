/* Fixed-width vectors through the GCC / Clang vector extensions, for elementwise loops.
 *
 * At -O2 GCC only vectorises a loop whose trip count is a known multiple of the vector width,
 * so the elementwise kernels spell their vectors out. The width is 16 bytes, what SSE2 (the
 * x86-64 baseline the library is built for) holds natively. Each lane computes exactly what
 * the scalar code computes: IEEE operations, nothing fused or reassociated. Loads and stores
 * go through memcpy, so pointers need no alignment. */
#ifndef NABLA_SIMD_H
#define NABLA_SIMD_H

#include <stdint.h>
#include <string.h>

typedef float nbt_vf32 __attribute__((vector_size(16)));
typedef double nbt_vf64 __attribute__((vector_size(16)));
/* Comparison results: all ones where true, zero where false. */
typedef int32_t nbt_vmask_f32 __attribute__((vector_size(16)));
typedef int64_t nbt_vmask_f64 __attribute__((vector_size(16)));

/* Lanes per vector. */
#define NBT_VW_f32 4
#define NBT_VW_f64 2

static inline nbt_vf32 nbt_vload_f32(const float *p) {
    nbt_vf32 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline nbt_vf64 nbt_vload_f64(const double *p) {
    nbt_vf64 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void nbt_vstore_f32(float *p, nbt_vf32 v) {
    memcpy(p, &v, sizeof v);
}
static inline void nbt_vstore_f64(double *p, nbt_vf64 v) {
    memcpy(p, &v, sizeof v);
}
static inline nbt_vf32 nbt_vsplat_f32(float x) {
    return (nbt_vf32){x, x, x, x};
}
static inline nbt_vf64 nbt_vsplat_f64(double x) {
    return (nbt_vf64){x, x};
}

/* v where keep is all ones, +0 where it is zero. */
static inline nbt_vf32 nbt_vselect_f32(nbt_vmask_f32 keep, nbt_vf32 v) {
    return (nbt_vf32)((nbt_vmask_f32)v & keep);
}
static inline nbt_vf64 nbt_vselect_f64(nbt_vmask_f64 keep, nbt_vf64 v) {
    return (nbt_vf64)((nbt_vmask_f64)v & keep);
}

/* Runs VBODY for i = 0, W, 2W, ... while a whole vector fits in [0, n), then SBODY for each
 * remaining i. S is the dtype suffix (f32 or f64). */
#define NBT_VFOR(S, i, n, VBODY, SBODY)                                                            \
    do {                                                                                           \
        int64_t i = 0;                                                                             \
        for (; i + NBT_VW_##S <= (n); i += NBT_VW_##S) {                                           \
            VBODY;                                                                                 \
        }                                                                                          \
        for (; i < (n); i++) {                                                                     \
            SBODY;                                                                                 \
        }                                                                                          \
    } while (0)

#endif
