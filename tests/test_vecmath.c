/* SLEEF-backed vector math against libm, over lengths that exercise the vector tails. */
#include "harness.h"
#include "tensor/isa.h"
#include "tensor/vecmath.h"

#include <stdio.h>

typedef void (*vf32)(float *, const float *, int64_t);
typedef void (*vf64)(double *, const double *, int64_t);

static void check(const char *name, vf32 f32, vf64 f64, double (*ref)(double), double lo,
                  double hi) {
    for (int64_t n = 0; n <= 37; n++) {
        float xf[40] = {0}, yf[40];
        double xd[40] = {0}, yd[40];
        for (int64_t i = 0; i < n; i++) {
            xd[i] = lo + (hi - lo) * (double)i / 37.0;
            xf[i] = (float)xd[i];
        }
        f32(yf, xf, n);
        f64(yd, xd, n);
        for (int64_t i = 0; i < n; i++) {
            double want_f = ref((double)xf[i]), want_d = ref(xd[i]);
            if (!(fabs(yf[i] - want_f) <= 1e-6 * fabs(want_f) + 1e-7) ||
                !(fabs(yd[i] - want_d) <= 1e-14 * fabs(want_d) + 1e-15)) {
                printf("  %s(%g): f32 %.9g f64 %.17g, libm %.17g (n=%lld)\n", name, xd[i], yf[i],
                       yd[i], want_d, (long long)n);
                CU_FAIL("mismatch against libm");
                return;
            }
        }
    }
    /* In place (y aliases x). */
    double v[5] = {0.1, 0.2, 0.3, 0.4, 0.5};
    f64(v, v, 5);
    CU_ASSERT_DOUBLE_EQUAL(v[4], ref(0.5), 1e-15);
}

static void test_exp(void) { check("exp", nbt_vexp_f32, nbt_vexp_f64, exp, -20, 20); }
static void test_log(void) { check("log", nbt_vlog_f32, nbt_vlog_f64, log, 1e-3, 50); }
static void test_tanh(void) { check("tanh", nbt_vtanh_f32, nbt_vtanh_f64, tanh, -6, 6); }
static void test_erf(void) { check("erf", nbt_verf_f32, nbt_verf_f64, erf, -4, 4); }

static void test_special_values(void) {
    float x[3] = {-INFINITY, 0.0f, INFINITY}, y[3];
    nbt_vexp_f32(y, x, 3);
    CU_ASSERT_EQUAL(y[0], 0.0f);
    CU_ASSERT_EQUAL(y[1], 1.0f);
    CU_ASSERT_TRUE(isinf(y[2]));
    printf("  vector math runs on %s\n", nbt_isa_name(nbt_isa_current()));
}

int main(void) {
    const nbtest_case cases[] = {
        {"exp", test_exp},   {"log", test_log},
        {"tanh", test_tanh}, {"erf", test_erf},
        {"exp(-inf) = 0, exp(0) = 1", test_special_values},
    };
    return nbtest_run("vecmath", cases, sizeof cases / sizeof cases[0]);
}
