#!/usr/bin/python3
"""Fits the two polynomials of float32 GELU's normal CDF (tensor/kernels/normal_cdf_f32.h) and
prints them as C, with the error of the whole float32 formula emulated in numpy.

Phi(x) = 1/2 + x R(x^2) for |x| < B, and otherwise Phi(-|x|) = exp(-x^2/2) t Q(t) with
t = 1 / (1 + |x|) (so that t's rounding is one addition and one division: the formula's
sensitivity to t stays near 1), Phi(x) = 1 - Phi(-|x|) for x > 0. Both are fitted in double for
the least maximum relative error (Lawson's reweighted least squares), against scipy's erfcx and
ndtr. Needs python3-numpy and python3-scipy; run it again after changing B or a degree.
"""
import numpy as np
import scipy.special as sp

B = 0.8  # the small branch's bound on |x|
DEG_Q, DEG_R = 9, 5
X_MAX = 14.9  # beyond, exp(-x^2/2) underflows in float32 and Q no longer matters
f32 = np.float32


def lawson(xs, ys, degree, iterations=400):
    """Coefficients c (increasing powers) minimising max |sum c_k xs^k / ys - 1|."""
    a = np.vander(xs, degree + 1, increasing=True) / ys[:, None]
    w = np.full(len(xs), 1.0 / len(xs))
    for _ in range(iterations):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * sw[:, None], sw, rcond=None)
        err = a @ c - 1
        w = w * np.abs(err) + 1e-300
        w /= w.sum()
    return c, np.max(np.abs(err))


def nodes(lo, hi, n=4000):
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (np.arange(n) + 0.5) / n)


def horner(c, v):
    acc = np.full_like(v, c[-1])
    for k in range(len(c) - 2, -1, -1):
        acc = acc * v + c[k]
    return acc


def float32_formula(x, q_coef, r_coef):
    """The kernel's float32 operations in its order (exp rounded correctly; SLEEF is within
    one ulp). Returns Phi(x) and gelu'(x)."""
    ax = np.abs(x)
    p = ax * ax
    xd = ax.astype(np.float64)
    err = (xd * xd - p.astype(np.float64)).astype(f32)  # Dekker's exact remainder
    e = np.exp((p * f32(-0.5)).astype(np.float64)).astype(f32)
    e = e + e * (err * f32(-0.5))
    t = f32(1) / (f32(1) + ax)
    q = e * (t * horner(q_coef, t))
    large = np.where(x < 0, q, f32(1) - q)
    small = f32(0.5) + x * horner(r_coef, p)
    cdf = np.where(ax < f32(B), small, large)
    return cdf, cdf + x * (f32(0.3989422804014327) * e)


def ulps(got, want):
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want.astype(f32)))


def main():
    t = nodes(1 / (1 + X_MAX), 1 / (1 + B))
    x = 1 / t - 1
    q_coef, q_err = lawson(t, sp.erfcx(x / np.sqrt(2)) / (2 * t), DEG_Q)
    s = nodes(0, B * B)
    r_coef, r_err = lawson(s, (sp.ndtr(np.sqrt(s)) - 0.5) / np.sqrt(s), DEG_R)
    q32, r32 = q_coef.astype(f32), r_coef.astype(f32)

    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.uniform(-15, 15, 400000), rng.normal(0, 3, 400000),
                         rng.uniform(-1, 1, 200000)]).astype(f32)
    xd = xs.astype(np.float64)
    cdf_want = sp.ndtr(xd)
    gelu_want = xd * cdf_want
    d_want = cdf_want + xd * np.exp(-xd * xd / 2) / np.sqrt(2 * np.pi)
    cdf, d = float32_formula(xs, q32, r32)
    seen = np.abs(gelu_want) > 1e-30
    print("/* fitted relative errors: Q %.1e, R %.1e; float32 gelu within %.1f ulp, gelu' within "
          "%.1e */" % (q_err, r_err, ulps(xs * cdf, gelu_want)[seen].max(),
                       np.abs(d - d_want).max()))
    for name, c in (("Q", q32), ("R", r32)):
        print("static const float %s[%d] = {%s};" % (name, len(c), ", ".join(
            "%.9gf" % v for v in c)))


if __name__ == "__main__":
    main()
