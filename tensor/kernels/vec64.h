/* Vectors of 64 bytes (16 floats, 8 doubles) through GCC's vector extension, for the kernels
 * written once for every instruction set (kernels.h): one register with AVX-512, two with
 * AVX2, four with SSE2. Loads and stores go through memcpy, so pointers need no alignment. */
#ifndef NABLA_KERNELS_VEC64_H
#define NABLA_KERNELS_VEC64_H

#include <string.h>

#define V16_W 16
typedef float v16 __attribute__((vector_size(V16_W * sizeof(float))));
#define V8D_W 8
typedef double v8d __attribute__((vector_size(V8D_W * sizeof(double))));

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

static inline v8d v8d_load(const double *p) {
    v8d v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v8d_store(double *p, v8d v) {
    memcpy(p, &v, sizeof v);
}
static inline v8d v8d_splat(double x) {
    return (v8d){0} + x;
}

#endif
