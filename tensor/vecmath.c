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
