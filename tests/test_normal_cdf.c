/* float32 gelu and its derivative (the normal CDF of tensor/kernels/normal_cdf_f32.h) against
 * double libm: Phi(x) = erfc(-x / sqrt 2) / 2, gelu = x Phi, gelu' = Phi + x exp(-x^2 / 2) /
 * sqrt(2 pi), over a dense sweep of [-16, 16], the branch bound and the tails, in whichever
 * instruction set this pass runs (scripts/test runs it under each). The bounds are the
 * header's: gelu within 6 ulps wherever Phi is a normal float (x > -13; below, within 1e-42),
 * gelu' within 2e-7. */
#include "harness.h"
#include "tensor/kernels/normal_cdf_f32.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#define N_SWEEP 400001

static double normal_cdf(double x) {
    return 0.5 * erfc(-x * 0.70710678118654752440);
}

/* |got - want| in units of the spacing of floats at want */
static double ulps(float got, double want) {
    float w = fabsf((float)want);
    return fabs((double)got - want) / (double)(nextafterf(w, INFINITY) - w);
}

/* The x's: the sweep, then both sides of the small branch's bound and of 0. */
static int64_t fill_inputs(float *x) {
    int64_t n = 0;
    for (int64_t i = 0; i < N_SWEEP; i++)
        x[n++] = (float)(-16.0 + 32.0 * (double)i / (N_SWEEP - 1));
    float edges[] = {NBK_CDF_SMALL, -NBK_CDF_SMALL, FLT_MIN, -FLT_MIN, 1e-20f, -1e-20f};
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) {
        float v = edges[k];
        for (int j = 0; j < 50; j++) {
            x[n++] = v;
            v = nextafterf(v, 0);
        }
        v = edges[k];
        for (int j = 0; j < 50; j++) x[n++] = v = nextafterf(v, v > 0 ? INFINITY : -INFINITY);
    }
    return n;
}

static void test_against_double(void) {
    float *xs = malloc(sizeof(float) * (N_SWEEP + 600));
    int64_t n = fill_inputs(xs);
    nb_tensor *x = nb_requires_grad_(nb_from_array(NB_F32, NB_SHAPE(n), xs), true);
    nb_tensor *y = nb_gelu(x);
    CU_ASSERT_FATAL(y && nb_backward(nb_sum(y), NULL));
    const float *py = nb_data(y), *pd = nb_data(nb_grad(x));
    double worst_y = 0, worst_d = 0;
    int64_t at_y = 0, at_d = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = xs[i], cdf = normal_cdf(v);
        double want_y = v * cdf, want_d = cdf + v * exp(-v * v / 2) / sqrt(2 * M_PI);
        /* where Phi itself is subnormal (x < -13) only a few of its bits are left */
        double ey = cdf >= FLT_MIN ? ulps(py[i], want_y) : 0;
        if (!(cdf >= FLT_MIN) && !(fabs((double)py[i] - want_y) <= 1e-42)) ey = INFINITY;
        double ed = fabs((double)pd[i] - want_d);
        if (!(ey <= worst_y)) worst_y = ey, at_y = i;
        if (!(ed <= worst_d)) worst_d = ed, at_d = i;
    }
    printf("  gelu within %.2f ulps (at x = %.9g), gelu' within %.2e (at x = %.9g), %lld x's\n",
           worst_y, xs[at_y], worst_d, xs[at_d], (long long)n);
    CU_ASSERT(worst_y <= 6);
    CU_ASSERT(worst_d <= 2e-7);
    free(xs);
}

/* The values that are not a sweep's: 0 and its sign, the tails past 16 where the density
 * underflows, and infinities and NaN as PyTorch's x / 2 (1 + erf(x / sqrt 2)) gives them. */
static void test_special_values(void) {
    const float v[] = {0, -0.0f, 16, -16, 40, -40, INFINITY, -INFINITY, NAN};
    nb_tensor *x = nb_requires_grad_(nb_from_array(NB_F32, NB_SHAPE(9), v), true);
    nb_tensor *y = nb_gelu(x);
    CU_ASSERT_FATAL(y && nb_backward(nb_sum(y), NULL));
    /* Phi(-16) = 6.4e-58 and Phi(-40) underflow in float32 */
    NBT_ASSERT_VALUES(y, 0, 0, 0, 16, 0, 40, 0, INFINITY, NBT_NAN, NBT_NAN);
    CU_ASSERT_TRUE(signbit(((const float *)nb_data(y))[1]));
    CU_ASSERT_TRUE(signbit(((const float *)nb_data(y))[3]));
    /* gelu'(0) = 1/2; past 16 the density term is 0: 1 above, 0 below; inf * 0 is NaN */
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0.5, 0.5, 1, 0, 1, 0, NBT_NAN, NBT_NAN, NBT_NAN);
}

int main(void) {
    const nbtest_case cases[] = {
        {"float32 gelu and gelu' against double libm", test_against_double},
        {"zeros, tails, infinities and NaN", test_special_values},
    };
    return nbtest_run("normal_cdf", cases, sizeof cases / sizeof cases[0]);
}
