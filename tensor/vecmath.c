/* Vector math through the kernels of the instruction set in use (isa.h). */
#include "vecmath.h"
#include "isa.h"

#define DISPATCH(fn, T, suffix)                                                                    \
    void nbt_v##fn##_##suffix(T *y, const T *x, int64_t n) {                                       \
        nbt_kernels()->v##fn##_##suffix(y, x, n);                                                  \
    }
#define DISPATCH_BOTH(fn) DISPATCH(fn, float, f32) DISPATCH(fn, double, f64)
DISPATCH_BOTH(exp)
DISPATCH_BOTH(log)
DISPATCH_BOTH(tanh)
DISPATCH_BOTH(erf)
DISPATCH_BOTH(gelu)
DISPATCH_BOTH(gelu_tanh)
DISPATCH_BOTH(silu)
DISPATCH_BOTH(sigmoid)

#define DISPATCH_GRAD(fn, T, suffix)                                                               \
    void nbt_v##fn##_##suffix(T *gx, const T *g, const T *x, int64_t n) {                          \
        nbt_kernels()->v##fn##_##suffix(gx, g, x, n);                                              \
    }
DISPATCH_GRAD(gelu_tanh_grad, float, f32)
DISPATCH_GRAD(gelu_tanh_grad, double, f64)
DISPATCH_GRAD(silu_grad, float, f32)
DISPATCH_GRAD(silu_grad, double, f64)

void nbt_vgelu_derivative_f32(float *y, float *d, const float *x, int64_t n) {
    nbt_kernels()->vgelu_derivative_f32(y, d, x, n);
}
void nbt_vgelu_derivative_f64(double *y, double *d, const double *x, int64_t n) {
    nbt_kernels()->vgelu_derivative_f64(y, d, x, n);
}

double nbt_vexp_sum_f32(float *y, const float *x, float shift, int64_t n) {
    return nbt_kernels()->vexp_sum_f32(y, x, shift, n);
}
double nbt_vexp_sum_f64(double *y, const double *x, double shift, int64_t n) {
    return nbt_kernels()->vexp_sum_f64(y, x, shift, n);
}
void nbt_vexp_scale_f32(float *y, const float *x, float shift, float a, int64_t n) {
    nbt_kernels()->vexp_scale_f32(y, x, shift, a, n);
}
void nbt_vexp_scale_f64(double *y, const double *x, double shift, double a, int64_t n) {
    nbt_kernels()->vexp_scale_f64(y, x, shift, a, n);
}
