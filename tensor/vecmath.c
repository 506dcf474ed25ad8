/* Run-time choice among the per-ISA loops of vecmath_isa.c. */
#include "vecmath.h"

#include <stdbool.h>

#define DECLARE(fn, isa)                                                                           \
    void nbt_v##fn##_f32_##isa(float *y, const float *x, int64_t n);                               \
    void nbt_v##fn##_f64_##isa(double *y, const double *x, int64_t n);
#define DECLARE_ALL(isa) DECLARE(exp, isa) DECLARE(log, isa) DECLARE(tanh, isa) DECLARE(erf, isa)
DECLARE_ALL(avx512f)
DECLARE_ALL(avx2)
DECLARE_ALL(sse2)

typedef enum { ISA_UNKNOWN, ISA_SSE2, ISA_AVX2, ISA_AVX512 } isa_level;
static isa_level level;

static isa_level detect(void) {
    if (level == ISA_UNKNOWN) {
        __builtin_cpu_init();
        level = __builtin_cpu_supports("avx512f")                                      ? ISA_AVX512
                : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")     ? ISA_AVX2
                                                                                      : ISA_SSE2;
    }
    return level;
}

const char *nbt_vecmath_isa(void) {
    switch (detect()) {
    case ISA_AVX512: return "avx512f";
    case ISA_AVX2: return "avx2";
    default: return "sse2";
    }
}

#define DISPATCH(fn, T, suffix)                                                                    \
    void nbt_v##fn##_##suffix(T *y, const T *x, int64_t n) {                                       \
        switch (detect()) {                                                                        \
        case ISA_AVX512: nbt_v##fn##_##suffix##_avx512f(y, x, n); break;                           \
        case ISA_AVX2: nbt_v##fn##_##suffix##_avx2(y, x, n); break;                                \
        default: nbt_v##fn##_##suffix##_sse2(y, x, n); break;                                      \
        }                                                                                          \
    }
#define DISPATCH_BOTH(fn) DISPATCH(fn, float, f32) DISPATCH(fn, double, f64)
DISPATCH_BOTH(exp)
DISPATCH_BOTH(log)
DISPATCH_BOTH(tanh)
DISPATCH_BOTH(erf)
