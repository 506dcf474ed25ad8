/* The standard normal CDF Phi in float32 without erf, for GELU (kernels/activations.c):
 *
 *   |x| < NBK_CDF_SMALL:  Phi(x) = 1/2 + x R(x^2)
 *   otherwise:            Phi(-|x|) = e t Q(t),  e = exp(-x^2 / 2),  t = 1 / (1 + |x|),
 *                         and Phi(x) = 1 - Phi(-|x|) for x > 0
 *
 * with x^2's rounding error added back into e (Dekker's exact product). SLEEF's 1-ULP erff
 * took about 200 cycles a vector on Zen 3, most of GELU's time; this is one expf (which the
 * derivative needs anyway for the density e / sqrt(2 pi)), one division and two short
 * polynomials. Computing the lower tail directly, never as 1 + erf(x / sqrt 2) of a negative
 * x, keeps its relative error small where 1 + erf cancels (thousands of ulps at x = -4).
 * Measured against double (tests/test_normal_cdf.c): gelu within 6 ulps wherever Phi is a
 * normal float (x > -13), gelu' within 2e-7. scripts/fit_normal_cdf.py fitted the
 * coefficients (increasing powers). */
#ifndef NABLA_KERNELS_NORMAL_CDF_F32_H
#define NABLA_KERNELS_NORMAL_CDF_F32_H

#define NBK_CDF_SMALL 0.8f

static const float nbk_cdf_tail_q[10] = {0.398925543f, 0.399887115f, -0.0223321039f, -0.508042514f,
                                         -3.0628953f,  13.2193613f,  -22.9558048f,   21.2698517f,
                                         -10.0375156f, 1.75333405f};
static const float nbk_cdf_small_r[6] = {0.398942292f,    -0.0664903745f,  0.00997351576f,
                                         -0.00118705153f, 0.000114594717f, -8.25320876e-06f};

#endif
