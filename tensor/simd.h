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

/* The first `lanes` elements at p (1 <= lanes <= the width), the other lanes zero. A full
 * width known at compile time makes this one plain load. */
static inline nbt_vf32 nbt_vload_f32(const float *p, int lanes) {
    nbt_vf32 v = {0};
    if (lanes == NBT_VW_f32)
        memcpy(&v, p, sizeof v);
    else
        for (int k = 0; k < lanes; k++) v[k] = p[k];
    return v;
}
static inline nbt_vf64 nbt_vload_f64(const double *p, int lanes) {
    nbt_vf64 v = {0};
    if (lanes == NBT_VW_f64)
        memcpy(&v, p, sizeof v);
    else
        for (int k = 0; k < lanes; k++) v[k] = p[k];
    return v;
}
/* Stores the first `lanes` lanes of v at p; memory past them is not touched. */
static inline void nbt_vstore_f32(float *p, nbt_vf32 v, int lanes) {
    if (lanes == NBT_VW_f32)
        memcpy(p, &v, sizeof v);
    else
        for (int k = 0; k < lanes; k++) p[k] = v[k];
}
static inline void nbt_vstore_f64(double *p, nbt_vf64 v, int lanes) {
    if (lanes == NBT_VW_f64)
        memcpy(p, &v, sizeof v);
    else
        for (int k = 0; k < lanes; k++) p[k] = v[k];
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

/* Runs the body, one formula written on vectors, for i = 0, W, 2W, ... over [0, n): S is the
 * dtype suffix (f32 or f64), W its width. The body loads and stores with NBT_VLOAD and
 * NBT_VSTORE, which cover nbt_lanes elements from their pointer: W, a compile-time constant,
 * for each whole vector (plain vector loads and stores), then once the n % W that remain, if
 * any (loads zero-filled, stores of the live lanes only; the zero lanes' results are dropped).
 * So every element goes through the same vector operations, however long the array. */
#define NBT_VFOR(S, i, n, ...)                                                                     \
    do {                                                                                           \
        const int64_t nbt_vfor_end = (n);                                                          \
        int64_t i = 0;                                                                             \
        for (; i + NBT_VW_##S <= nbt_vfor_end; i += NBT_VW_##S) {                                  \
            const int nbt_lanes = NBT_VW_##S;                                                      \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
        if (i < nbt_vfor_end) {                                                                    \
            const int nbt_lanes = (int)(nbt_vfor_end - i);                                         \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
    } while (0)
/* The vector at p, and a store of v at p, inside NBT_VFOR's body (nothing outside it). */
#define NBT_VLOAD(S, p) nbt_vload_##S(p, nbt_lanes)
#define NBT_VSTORE(S, p, v) nbt_vstore_##S(p, v, nbt_lanes)

#endif
