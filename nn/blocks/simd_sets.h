/* A file's element and row loops built once per instruction set, picked at run time by the
 * set nabla's own kernels use (nb_simd_set, so NABLA_ISA picks them too); internal to this
 * folder. Built for the base x86-64 alone, the loops ran on SSE2's 4 floats (2 doubles): the
 * SwiGLU gate's backward, RMSNorm's rows and the q/k rotation were about 11% of the llama step
 * at one thread on AVX-512 (docs/performance.md).
 *
 * Use: define BLK_SET_BODIES(SET) to define the loops with names ending in _##SET, include this
 * file once, and call BLK_PICK(name) for the set in use's function. The loops must be plain
 * lane-wise arithmetic in a fixed order: the build has no FP contraction and no -ffast-math
 * (so no reordered sums), hence every set's build computes the same bits. (GCC applies
 * `#pragma GCC target` written out, not from a macro's _Pragma: hence an included file.) */
#ifndef BLK_SET_BODIES
#error "define BLK_SET_BODIES(SET) before including simd_sets.h"
#endif

#include <nabla/parallel.h>

BLK_SET_BODIES(generic)

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2")
BLK_SET_BODIES(avx2)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2")
BLK_SET_BODIES(avx512)
#pragma GCC pop_options

/* 2 for "avx512", 1 for "avx2", 0 for "generic". */
static inline int blk_simd_set(void) {
    const char *set = nb_simd_set();
    return set[0] != 'a' ? 0 : set[3] == '5' ? 2 : 1;
}
#define BLK_PICK(fn)                                                                               \
    (blk_simd_set() == 2 ? fn##_avx512 : blk_simd_set() == 1 ? fn##_avx2 : fn##_generic)
#else
#define BLK_PICK(fn) fn##_generic
#endif
