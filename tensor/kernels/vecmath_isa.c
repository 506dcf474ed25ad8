/* One instruction set's SLEEF loops over contiguous arrays (kernels.h, sleef_vectors.h). */
#include "kernels.h"
#include "sleef_vectors.h"

#include <stdint.h>

/* Full vectors, then the tail through a zero-padded buffer (no scalar libm mix). */
#define LOOPS(fn)                                                                                  \
    void NBK_FN(nbt_v##fn##_f32)(float *y, const float *x, int64_t n) {                            \
        int64_t i = 0;                                                                             \
        for (; i + WF <= n; i += WF) SF(y + i, F(fn)(LF(x + i)));                                  \
        if (i < n) {                                                                               \
            float buf[WF] = {0};                                                                   \
            for (int64_t k = i; k < n; k++) buf[k - i] = x[k];                                     \
            SF(buf, F(fn)(LF(buf)));                                                               \
            for (int64_t k = i; k < n; k++) y[k] = buf[k - i];                                     \
        }                                                                                          \
    }                                                                                              \
    void NBK_FN(nbt_v##fn##_f64)(double *y, const double *x, int64_t n) {                          \
        int64_t i = 0;                                                                             \
        for (; i + WD <= n; i += WD) SD(y + i, D(fn)(LD(x + i)));                                  \
        if (i < n) {                                                                               \
            double buf[WD] = {0};                                                                  \
            for (int64_t k = i; k < n; k++) buf[k - i] = x[k];                                     \
            SD(buf, D(fn)(LD(buf)));                                                               \
            for (int64_t k = i; k < n; k++) y[k] = buf[k - i];                                     \
        }                                                                                          \
    }

LOOPS(exp)
LOOPS(log)
LOOPS(tanh)
LOOPS(erf)
