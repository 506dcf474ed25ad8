/* Vectors of 16 floats through GCC's vector extension, for the kernels written once for every
 * instruction set (kernels.h): one register with AVX-512, two with AVX2, four with SSE2. Loads
 * and stores go through memcpy, so pointers need no alignment. */
#ifndef NABLA_KERNELS_VEC16_H
#define NABLA_KERNELS_VEC16_H

#include <string.h>

#define V16_W 16
typedef float v16 __attribute__((vector_size(V16_W * sizeof(float))));

static inline v16 v16_load(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v16_store(float *p, v16 v) {
    memcpy(p, &v, sizeof v);
}
static inline v16 v16_splat(float x) {
    return (v16){0} + x;
}

#endif
