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
/* A softmax row's shift and exp in one pass: y = exp(x + shift) (y may be x), returning the
 * sum of y as nbt_row_sum (rows.h) adds it; or y = a exp(x + shift). Each element and the sum
 * have the bits of nbt_row_shift, nbt_vexp, nbt_row_sum and nbt_row_scale run in turn. */
double nbt_vexp_sum_f32(float *y, const float *x, float shift, int64_t n);
double nbt_vexp_sum_f64(double *y, const double *x, double shift, int64_t n);
void nbt_vexp_scale_f32(float *y, const float *x, float shift, float a, int64_t n);
void nbt_vexp_scale_f64(double *y, const double *x, double shift, double a, int64_t n);
/* Activations in one pass of SLEEF's vectors (kernels/activations.c): y = f(x), y may be x.
 * gelu is exact (erf), gelu_tanh its tanh approximation, sigmoid 1 / (1 + exp(-x)), silu
 * x sigmoid(x). */
void nbt_vgelu_f32(float *y, const float *x, int64_t n);
void nbt_vgelu_f64(double *y, const double *x, int64_t n);
void nbt_vgelu_tanh_f32(float *y, const float *x, int64_t n);
void nbt_vgelu_tanh_f64(double *y, const double *x, int64_t n);
void nbt_vsilu_f32(float *y, const float *x, int64_t n);
void nbt_vsilu_f64(double *y, const double *x, int64_t n);
void nbt_vsigmoid_f32(float *y, const float *x, int64_t n);
void nbt_vsigmoid_f64(double *y, const double *x, int64_t n);
/* Their derivatives gx = g f'(x) (gx may be g or x), and gelu's y with gelu'(x) in d. */
void nbt_vgelu_tanh_grad_f32(float *gx, const float *g, const float *x, int64_t n);
void nbt_vgelu_tanh_grad_f64(double *gx, const double *g, const double *x, int64_t n);
void nbt_vsilu_grad_f32(float *gx, const float *g, const float *x, int64_t n);
void nbt_vsilu_grad_f64(double *gx, const double *g, const double *x, int64_t n);
void nbt_vgelu_derivative_f32(float *y, float *d, const float *x, int64_t n);
void nbt_vgelu_derivative_f64(double *y, double *d, const double *x, int64_t n);

#endif
