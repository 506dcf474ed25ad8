/* Vectorised transcendentals over contiguous arrays, through SLEEF (1.0-ULP variants).
 * The widest instruction set the CPU offers is chosen once at run time (AVX-512, AVX2, or
 * SSE2); under valgrind, which hides AVX-512, the AVX2 path runs. y may alias x. */
#ifndef NABLA_VECMATH_H
#define NABLA_VECMATH_H

#include <stdint.h>

void nbt_vexp_f32(float *y, const float *x, int64_t n);
void nbt_vexp_f64(double *y, const double *x, int64_t n);
void nbt_vlog_f32(float *y, const float *x, int64_t n);
void nbt_vlog_f64(double *y, const double *x, int64_t n);
void nbt_vtanh_f32(float *y, const float *x, int64_t n);
void nbt_vtanh_f64(double *y, const double *x, int64_t n);
void nbt_verf_f32(float *y, const float *x, int64_t n);
void nbt_verf_f64(double *y, const double *x, int64_t n);
/* Name of the instruction set in use ("avx512f", "avx2", "sse2"). */
const char *nbt_vecmath_isa(void);

#endif
