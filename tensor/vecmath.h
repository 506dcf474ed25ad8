/* Vectorised transcendentals over contiguous arrays, through SLEEF (1.0-ULP variants), in
 * the instruction set in use (isa.h: AVX-512, AVX2, or SSE2 for the generic set). y may
 * alias x. */
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
/* Exact GELU, y = x / 2 (1 + erf(x / sqrt 2)), in one pass (kernels/gelu_rows.c); y may be x.
 * The _derivative form also writes gelu'(x) into d, for the backward. */
void nbt_vgelu_f32(float *y, const float *x, int64_t n);
void nbt_vgelu_f64(double *y, const double *x, int64_t n);
void nbt_vgelu_derivative_f32(float *y, float *d, const float *x, int64_t n);
void nbt_vgelu_derivative_f64(double *y, double *d, const double *x, int64_t n);

#endif
