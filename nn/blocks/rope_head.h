/* One head's rotate-half rotation, shared by blk_rope (rope.c) and the attention's fused q/k/v
 * node (qkv_rope.c), so both compute the same bits (internal to this folder). */
#ifndef NABLA_BLOCKS_ROPE_HEAD_H
#define NABLA_BLOCKS_ROPE_HEAD_H

#include <stdint.h>

/* y = x rotated by the angles whose cos and sin are c and s (half of each), pair i being
 * elements i and half + i: (a c - b s, b c + a s). sign -1 rotates backwards (a backward). */
#define ROPE_HEAD(T_)                                                                              \
    static inline void rope_head_##T_(const T_ *x, T_ *y, const T_ *c, const T_ *s, int64_t half,  \
                                      T_ sign) {                                                   \
        for (int64_t i = 0; i < half; i++) {                                                       \
            T_ a = x[i], b = x[half + i], si = sign * s[i];                                        \
            y[i] = a * c[i] - b * si;                                                              \
            y[half + i] = b * c[i] + a * si;                                                       \
        }                                                                                          \
    }
ROPE_HEAD(float)
ROPE_HEAD(double)

#endif
