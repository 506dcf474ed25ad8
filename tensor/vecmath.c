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

void nbt_vgelu_f32(float *y, const float *x, int64_t n) {
    nbt_kernels()->gelu_f32(n, y, x);
}
void nbt_vgelu_f64(double *y, const double *x, int64_t n) {
    nbt_kernels()->gelu_f64(n, y, x);
}
void nbt_vgelu_derivative_f32(float *y, float *d, const float *x, int64_t n) {
    nbt_kernels()->gelu_derivative_f32(n, y, d, x);
}
void nbt_vgelu_derivative_f64(double *y, double *d, const double *x, int64_t n) {
    nbt_kernels()->gelu_derivative_f64(n, y, d, x);
}
