/* Elementwise kernels built around one vector function of vecmath.h (exp, tanh, erf):
 *
 *   out = after(x, g, f(before(x)))
 *
 * for a forward (g NULL) or a derivative (g the incoming gradient), on contiguous arrays.
 * nbt_chunked_f32/_f64 make the middle value CHUNK elements at a time in a buffer on the
 * stack, so it stays in L1 between the three steps, x is read from memory once and out
 * written once, and out may alias x or g. before and after are the formula's two halves,
 * written with NBT_VFOR (simd.h); f is the vecmath.h function. The before steps that a
 * forward shares with its derivative are here too. */
#ifndef NABLA_CHUNKED_H
#define NABLA_CHUNKED_H

#include "elementwise_kernels.h"
#include "simd.h"

#include <stddef.h>
#include <stdint.h>

#define NBT_CHUNK 256

#define NBT_CHUNKED(S, T)                                                                          \
    static inline void nbt_chunked_##S(                                                            \
        int64_t n, T *out, const T *x, const T *g, void (*before)(int64_t m, T * t, const T *x),   \
        void (*f)(T * y, const T *x, int64_t m),                                                   \
        void (*after)(int64_t m, T * out, const T *x, const T *g, const T *t)) {                   \
        T t[NBT_CHUNK];                                                                            \
        for (int64_t i0 = 0; i0 < n; i0 += NBT_CHUNK) {                                            \
            int64_t m = n - i0 < NBT_CHUNK ? n - i0 : NBT_CHUNK;                                   \
            before(m, t, x + i0);                                                                  \
            f(t, t, m);                                                                            \
            after(m, out + i0, x + i0, g ? g + i0 : NULL, t);                                      \
        }                                                                                          \
    }                                                                                              \
    /* -x: before exp in silu and its derivative */                                                \
    static inline void nbt_negate_##S(int64_t m, T *t, const T *x) {                               \
        NBT_VFOR(S, i, m, NBT_VSTORE(S, t + i, -NBT_VLOAD(S, x + i)));                             \
    }                                                                                              \
    /* beta (x + kappa x^3): before tanh in gelu_tanh and its derivative */                        \
    static inline void nbt_gelu_tanh_arg_##S(int64_t m, T *t, const T *x) {                        \
        NBT_VFOR(S, i, m, nbt_v##S v = NBT_VLOAD(S, x + i);                                        \
                 NBT_VSTORE(S, t + i, (T)NBT_GELU_BETA * (v + (T)NBT_GELU_KAPPA * (v * v * v))));  \
    }
NBT_CHUNKED(f32, float)
NBT_CHUNKED(f64, double)
#undef NBT_CHUNKED

#endif
