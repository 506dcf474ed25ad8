/* Unary elementwise kernels and their derivatives.
 *
 * Every kernel works on contiguous arrays: a contiguous tensor is handed over in one call,
 * and the runs nbt_iterate produces for a strided one are gathered into chunk buffers
 * first. That keeps exp, log, tanh and erf on SLEEF's vector loops for every layout.
 * Formulas and their operation order follow PyTorch's CPU kernels, so float results agree
 * to rounding. */
#include "elementwise_kernels.h"
#include "simd.h"
#include "vecmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define CHUNK 256

const char *nbt_unary_name(nbt_unary_op op) {
    switch (op) {
    case NBT_NEG:
        return "neg";
    case NBT_ADD_SCALAR:
        return "add_scalar";
    case NBT_MUL_SCALAR:
        return "mul_scalar";
    case NBT_POW_SCALAR:
        return "pow_scalar";
    case NBT_EXP:
        return "exp";
    case NBT_LOG:
        return "log";
    case NBT_SQRT:
        return "sqrt";
    case NBT_TANH:
        return "tanh";
    case NBT_SIGMOID:
        return "sigmoid";
    case NBT_RELU:
        return "relu";
    case NBT_GELU:
        return "gelu";
    case NBT_GELU_TANH:
        return "gelu_tanh";
    }
    return "unary";
}

/* sqrt(2 / pi) and the cubic coefficient of the tanh approximation of gelu. */
#define GELU_BETA 0.7978845608028654
#define GELU_KAPPA 0.044715
/* 1 / sqrt(2 pi), the standard normal density at 0. */
#define INV_SQRT_2PI 0.3989422804014327

/* ---- float32 gelu on AVX-512: erf from piecewise polynomials ----
 * SLEEF's erf costs more than everything else in a float32 gelu. Here erf(|t|) on [0, 4) is
 * one of 16 polynomials of degree 8, one per quarter of the range, in d = |t| - centre
 * (centre 0 on the first piece, whose polynomial is d times one in d, for relative accuracy
 * near 0; the middle of the piece elsewhere); the coefficients of the piece come from
 * 16-entry tables by one permute each. The two leading coefficients are each split into a
 * float and a small remainder, so the result is within 0.77 ulp of erf over every float
 * (99% correctly rounded; SLEEF's bound is 1 ulp). From |t| = 4 on, erf rounds to 1.
 * Coefficients: least-squares fits in double on 400 Chebyshev nodes per piece. */
static const float gelu_erf_table[11][16] = {
    /* c0_hi */ {0x0p+0, 0x1.9dd0d2p-2, 0x1.3f196ep-1, 0x1.91724ap-1, 0x1.c6dad2p-1, 0x1.e5768cp-1,
                 0x1.f4f694p-1, 0x1.fbe61ep-1, 0x1.fea422p-1, 0x1.ff996p-1, 0x1.ffe514p-1,
                 0x1.fff9bap-1, 0x1.fffeb4p-1, 0x1.ffffc4p-1, 0x1.fffff6p-1, 0x1.fffffep-1},
    /* c0_lo */
    {0x0p+0, 0x1.6e43ep-27, -0x1.97876ap-28, -0x1.5c8e04p-26, 0x1.053d9p-26, 0x1.da5204p-28,
     -0x1.2610a2p-27, 0x1.de99eep-26, -0x1.ca69acp-27, 0x1.e7d666p-26, 0x1.77b834p-26,
     0x1.083a1p-27, -0x1.44d98p-29, -0x1.d24c24p-26, 0x1.8c3dacp-29, 0x1.259db4p-26},
    /* c1_hi */
    {0x1.20dd76p+0, 0x1.f5f0cep-1, 0x1.86e96ap-1, 0x1.0cab62p-1, 0x1.45e99cp-2, 0x1.5ce596p-3,
     0x1.499d48p-4, 0x1.12ceb4p-5, 0x1.94624ep-7, 0x1.06918cp-8, 0x1.2ce898p-10, 0x1.30539p-12,
     0x1.0f9e1cp-14, 0x1.abe09ep-17, 0x1.296a7p-19, 0x1.6ce1aap-22},
    /* c1_lo */
    {-0x1.f7ac92p-25, -0x1.43ad9cp-27, -0x1.7d755p-26, -0x1.ed8ae4p-30, -0x1.a2287ap-29,
     -0x1.de394cp-30, -0x1.d1a584p-30, -0x1.004272p-30, 0x1.e4d4b4p-33, -0x1.37c91cp-33,
     0x1.03f218p-35, -0x1.0fc83ap-38, -0x1.6bef18p-39, 0x1.db7a8ep-43, 0x1.829a0ep-44,
     -0x1.9a709ep-48},
    /* c2 */
    {0x1.b37764p-31, -0x1.78749ap-2, -0x1.e8a3c4p-2, -0x1.d62becp-2, -0x1.6ea6dp-2, -0x1.dfbbaep-3,
     -0x1.0bcfcap-3, -0x1.01a1c8p-4, -0x1.ada874p-6, -0x1.37ccd6p-7, -0x1.8af148p-9,
     -0x1.b5781ep-11, -0x1.a8670ap-13, -0x1.690586p-15, -0x1.0d8876p-17, -0x1.617a9ep-20},
    /* c3 */
    {-0x1.81274cp-2, -0x1.e106c6p-3, -0x1.c81054p-5, 0x1.7c9d74p-4, 0x1.4cb3cep-3, 0x1.4374d8p-3,
     0x1.d6631ep-4, 0x1.143d1cp-4, 0x1.0ea476p-5, 0x1.c1ec0ep-7, 0x1.407fbcp-8, 0x1.89e17cp-10,
     0x1.a37382p-12, 0x1.84523ap-14, 0x1.394b34p-16, 0x1.b95fe4p-19},
    /* c4 */
    {0x1.72c8cep-19, 0x1.5529acp-3, 0x1.6963c8p-3, 0x1.cc6058p-4, 0x1.ca5086p-6, -0x1.f3b8d4p-6,
     -0x1.974c04p-5, -0x1.5a3166p-5, -0x1.afe554p-6, -0x1.ae596p-7, -0x1.62d4c6p-8, -0x1.ed4ac6p-10,
     -0x1.24544ep-11, -0x1.298f8ap-13, -0x1.057604p-15, -0x1.8e1f7cp-18},
    /* c5 */
    {0x1.cdff9ap-4, 0x1.74889cp-5, -0x1.c11dfp-6, -0x1.134f8ep-4, -0x1.f65cc6p-5, -0x1.f5757ap-6,
     -0x1.17e7a4p-9, 0x1.7799dcp-7, 0x1.9974b2p-7, 0x1.11dc0ep-7, 0x1.146d5ap-8, 0x1.c11f9ap-10,
     0x1.2e7d0ep-11, 0x1.5770a6p-13, 0x1.4c16acp-15, 0x1.13639p-17},
    /* c6 */
    {0x1.a2bd38p-12, -0x1.9a770ap-5, -0x1.52b196p-5, -0x1.53bf4cp-7, 0x1.fd173ep-7, 0x1.6b163ap-6,
     0x1.d85986p-7, 0x1.0d0d0cp-8, -0x1.dd74b2p-10, -0x1.982c32p-9, -0x1.2680aap-9, -0x1.2ade7ep-10,
     -0x1.da4a82p-12, -0x1.330b8ap-13, -0x1.4b997ep-15, -0x1.2ec1e4p-17},
    /* c7 */
    {-0x1.d806cep-6, -0x1.657638p-8, 0x1.c3a2e6p-7, 0x1.2ecd48p-6, 0x1.3a6114p-7, -0x1.6587b6p-10,
     -0x1.920c64p-8, -0x1.4225eep-8, -0x1.eca9aap-10, 0x1.d363a4p-14, 0x1.622862p-11,
     0x1.14d294p-11, 0x1.185ce8p-12, 0x1.afc5aep-14, 0x1.0b6166p-15, 0x1.11e9f8p-17},
    /* c8 */
    {0x1.448852p-8, 0x1.6e0b28p-7, 0x1.b44fb8p-8, -0x1.daca9ap-10, -0x1.884fe8p-8, -0x1.166ad8p-8,
     -0x1.357fcp-11, 0x1.7309f2p-10, 0x1.69668ap-10, 0x1.38a2ap-11, 0x1.3bc426p-15, -0x1.1971ep-13,
     -0x1.d1bd4cp-14, -0x1.cc56bcp-15, -0x1.51dfc4p-16, -0x1.861ea8p-18},
};

static bool gelu_avx512_allowed = true;

void nbt_gelu_allow_avx512(bool allow) {
    gelu_avx512_allowed = allow;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* y = x Phi(x) and, when cdf is not NULL, cdf = Phi(x) = (1 + erf(x / sqrt 2)) / 2, with the
 * roundings of gelu_cdf_f32 around erf. */
__attribute__((target("avx512f"))) static void gelu_erf_avx512(int64_t n, float *y, float *cdf,
                                                               const float *x) {
    __m512 tab[11];
    for (int k = 0; k < 11; k++) tab[k] = _mm512_loadu_ps(gelu_erf_table[k]);
    const __m512 centres =
        _mm512_setr_ps(0, 0.375f, 0.625f, 0.875f, 1.125f, 1.375f, 1.625f, 1.875f, 2.125f, 2.375f,
                       2.625f, 2.875f, 3.125f, 3.375f, 3.625f, 3.875f);
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f),
                 four = _mm512_set1_ps(4.0f), rsqrt2 = _mm512_set1_ps((float)M_SQRT1_2);
    const __m512i sign = _mm512_set1_epi32(INT32_MIN);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
        __m512 t = _mm512_mul_ps(xv, rsqrt2), a = _mm512_abs_ps(t);
        /* NaN and infinity convert to INT32_MIN: piece 0, and infinity is caught below */
        __m512i idx = _mm512_cvttps_epi32(_mm512_mul_ps(a, four));
        idx =
            _mm512_min_epi32(_mm512_max_epi32(idx, _mm512_setzero_si512()), _mm512_set1_epi32(15));
        __m512 d = _mm512_sub_ps(a, _mm512_permutexvar_ps(idx, centres));
        __m512 p = _mm512_permutexvar_ps(idx, tab[10]);
        for (int k = 9; k >= 4; k--) p = _mm512_fmadd_ps(p, d, _mm512_permutexvar_ps(idx, tab[k]));
        p = _mm512_fmadd_ps(p, d, _mm512_permutexvar_ps(idx, tab[3]));   /* c1_lo */
        p = _mm512_fmadd_ps(p, d, _mm512_permutexvar_ps(idx, tab[1]));   /* c0_lo */
        p = _mm512_fmadd_ps(d, _mm512_permutexvar_ps(idx, tab[2]), p);   /* c1_hi */
        __m512 e = _mm512_add_ps(p, _mm512_permutexvar_ps(idx, tab[0])); /* c0_hi */
        e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, four, _CMP_GE_OQ), e, one);
        e = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(e),
                                                _mm512_and_si512(_mm512_castps_si512(t), sign)));
        __m512 c = _mm512_mul_ps(half, _mm512_add_ps(one, e));
        if (cdf) _mm512_mask_storeu_ps(cdf + i, m, c);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(xv, c));
    }
}

/* gx = g (Phi(x) + x phi(x)) from the saved Phi, as gelu_grad_cdf_f32 computes it, in one
 * pass. phi's exp(-x^2 / 2) is 2^n p(r) with n = round(y / ln 2), r = y - n ln 2 (ln 2 in two
 * parts) and p the degree-7 Taylor polynomial of exp on |r| <= ln 2 / 2 (truncation under
 * 1e-8 relative); scalef applies 2^n and underflows to 0 below float's range. */
__attribute__((target("avx512f"))) static void
gelu_grad_avx512(int64_t n, float *gx, const float *g, const float *x, const float *cdf) {
    const __m512 neg_half = _mm512_set1_ps(-0.5f), lowest = _mm512_set1_ps(-200.0f),
                 log2e = _mm512_set1_ps(1.44269504088896341f),
                 ln2_hi = _mm512_set1_ps(0.693145751953125f),
                 ln2_lo = _mm512_set1_ps(1.42860682030941723212e-6f),
                 inv_sqrt_2pi = _mm512_set1_ps((float)INV_SQRT_2PI);
    static const float taylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                    1.0f / 6,    0.5f,       1.0f,       1.0f};
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
        /* max keeps a NaN y (its second operand) */
        __m512 y = _mm512_max_ps(lowest, _mm512_mul_ps(_mm512_mul_ps(xv, xv), neg_half));
        __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(y, log2e), _MM_FROUND_TO_NEAREST_INT);
        __m512 r = _mm512_fnmadd_ps(k, ln2_hi, y);
        r = _mm512_fnmadd_ps(k, ln2_lo, r);
        __m512 e = _mm512_set1_ps(taylor[0]);
        for (int t = 1; t < 8; t++) e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(taylor[t]));
        e = _mm512_scalef_ps(e, k);
        __m512 d = _mm512_mul_ps(inv_sqrt_2pi, e);
        __m512 c = _mm512_maskz_loadu_ps(m, cdf + i), gv = _mm512_maskz_loadu_ps(m, g + i);
        _mm512_mask_storeu_ps(gx + i, m, _mm512_mul_ps(gv, _mm512_add_ps(c, _mm512_mul_ps(xv, d))));
    }
}

static bool gelu_use_avx512(void) {
    static int known; /* 0 unknown, 1 no, 2 yes; a race only computes the same answer twice */
    if (!known) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") ? 2 : 1;
    }
    return known == 2 && gelu_avx512_allowed;
}
#else
static bool gelu_use_avx512(void) {
    return false;
}
static void gelu_erf_avx512(int64_t n, float *y, float *cdf, const float *x) {
    (void)n, (void)y, (void)cdf, (void)x;
}
static void gelu_grad_avx512(int64_t n, float *gx, const float *g, const float *x,
                             const float *cdf) {
    (void)n, (void)gx, (void)g, (void)x, (void)cdf;
}
#endif

/* ---- forward kernels: y[i] = f(x[i]) on contiguous arrays; y may alias x ---------------- */
/* S: dtype suffix; T: element type; FN(name): the libm function for T. V(S, p) loads a
 * vector, ST(S, p, v) stores one, SPLAT(S, x) broadcasts a scalar. */
#define V(S, p) nbt_vload_##S(p)
#define ST(S, p, v) nbt_vstore_##S(p, v)
#define SPLAT(S, x) nbt_vsplat_##S(x)
#define FORWARD_KERNELS(S, T, FN)                                                                  \
    static void neg_##S(int64_t n, T *y, const T *x, T p) {                                        \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, y + i, -V(S, x + i)), y[i] = -x[i]);                               \
    }                                                                                              \
    static void add_scalar_##S(int64_t n, T *y, const T *x, T p) {                                 \
        const nbt_v##S vp = SPLAT(S, p);                                                           \
        NBT_VFOR(S, i, n, ST(S, y + i, V(S, x + i) + vp), y[i] = x[i] + p);                        \
    }                                                                                              \
    static void mul_scalar_##S(int64_t n, T *y, const T *x, T p) {                                 \
        const nbt_v##S vp = SPLAT(S, p);                                                           \
        NBT_VFOR(S, i, n, ST(S, y + i, V(S, x + i) * vp), y[i] = x[i] * p);                        \
    }                                                                                              \
    static void pow_scalar_##S(int64_t n, T *y, const T *x, T p) {                                 \
        if (p == 2) { /* squares are common and x * x is exactly rounded */                        \
            NBT_VFOR(S, i, n, ST(S, y + i, V(S, x + i) * V(S, x + i)), y[i] = x[i] * x[i]);        \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++) y[i] = FN(pow)(x[i], p);                                   \
    }                                                                                              \
    static void exp_##S(int64_t n, T *y, const T *x, T p) {                                        \
        (void)p;                                                                                   \
        nbt_vexp_##S(y, x, n);                                                                     \
    }                                                                                              \
    static void log_##S(int64_t n, T *y, const T *x, T p) {                                        \
        (void)p;                                                                                   \
        nbt_vlog_##S(y, x, n);                                                                     \
    }                                                                                              \
    static void sqrt_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        for (int64_t i = 0; i < n; i++) y[i] = FN(sqrt)(x[i]);                                     \
    }                                                                                              \
    static void tanh_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        nbt_vtanh_##S(y, x, n);                                                                    \
    }                                                                                              \
    /* 1 / (1 + exp(-x)): exp overflows to inf for very negative x, giving exactly 0. */           \
    static void sigmoid_##S(int64_t n, T *y, const T *x, T p) {                                    \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, y + i, -V(S, x + i)), y[i] = -x[i]);                               \
        nbt_vexp_##S(y, y, n);                                                                     \
        NBT_VFOR(S, i, n, ST(S, y + i, 1 / (1 + V(S, y + i))), y[i] = 1 / (1 + y[i]));             \
    }                                                                                              \
    /* Keeps x unless x < 0, so NaN and -0 pass through. */                                        \
    static void relu_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, nbt_v##S v = V(S, x + i);                                                \
                 ST(S, y + i, nbt_vselect_##S(~(nbt_vmask_##S)(v < 0), v)),                        \
                 y[i] = x[i] < 0 ? 0 : x[i]);                                                      \
    }                                                                                              \
    /* x / 2 * (1 + erf(x / sqrt 2)); t holds erf's argument so y may alias x. */                  \
    static void gelu_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        if (sizeof(T) == sizeof(float) && gelu_use_avx512()) {                                     \
            gelu_erf_avx512(n, (float *)y, NULL, (const float *)x);                                \
            return;                                                                                \
        }                                                                                          \
        T t[CHUNK];                                                                                \
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {                                                \
            int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;                                           \
            const T *xc = x + i0;                                                                  \
            T *yc = y + i0;                                                                        \
            NBT_VFOR(S, i, m, ST(S, t + i, V(S, xc + i) * (T)M_SQRT1_2),                           \
                     t[i] = xc[i] * (T)M_SQRT1_2);                                                 \
            nbt_verf_##S(t, t, m);                                                                 \
            NBT_VFOR(S, i, m, ST(S, yc + i, V(S, xc + i) * (T)0.5 * (1 + V(S, t + i))),            \
                     yc[i] = xc[i] * (T)0.5 * (1 + t[i]));                                         \
        }                                                                                          \
    }                                                                                              \
    static void gelu_tanh_##S(int64_t n, T *y, const T *x, T p) {                                  \
        (void)p;                                                                                   \
        T t[CHUNK];                                                                                \
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {                                                \
            int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;                                           \
            const T *xc = x + i0;                                                                  \
            T *yc = y + i0;                                                                        \
            NBT_VFOR(S, i, m, nbt_v##S v = V(S, xc + i);                                           \
                     ST(S, t + i, (T)GELU_BETA * (v + (T)GELU_KAPPA * (v * v * v))),               \
                     t[i] = (T)GELU_BETA * (xc[i] + (T)GELU_KAPPA * (xc[i] * xc[i] * xc[i])));     \
            nbt_vtanh_##S(t, t, m);                                                                \
            NBT_VFOR(S, i, m, ST(S, yc + i, (T)0.5 * V(S, xc + i) * (1 + V(S, t + i))),            \
                     yc[i] = (T)0.5 * xc[i] * (1 + t[i]));                                         \
        }                                                                                          \
    }

#define FN_F32(name) name##f
#define FN_F64(name) name
FORWARD_KERNELS(f32, float, FN_F32)
FORWARD_KERNELS(f64, double, FN_F64)

/* ---- derivative kernels: gx[i] = g[i] * f'(v[i]), v being x or y = f(x) ---------------- */
#define GRAD_KERNELS(S, T, FN)                                                                     \
    static void neg_grad_##S(int64_t n, T *gx, const T *g, const T *v, T p) {                      \
        (void)v, (void)p;                                                                          \
        NBT_VFOR(S, i, n, ST(S, gx + i, -V(S, g + i)), gx[i] = -g[i]);                             \
    }                                                                                              \
    static void add_scalar_grad_##S(int64_t n, T *gx, const T *g, const T *v, T p) {               \
        (void)v, (void)p;                                                                          \
        memmove(gx, g, sizeof(T) * (size_t)n);                                                     \
    }                                                                                              \
    static void mul_scalar_grad_##S(int64_t n, T *gx, const T *g, const T *v, T p) {               \
        (void)v;                                                                                   \
        const nbt_v##S vp = SPLAT(S, p);                                                           \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * vp), gx[i] = g[i] * p);                      \
    }                                                                                              \
    /* p x^(p-1); PyTorch makes the gradient of x^0 zero everywhere, even at x = 0. */             \
    static void pow_scalar_grad_##S(int64_t n, T *gx, const T *g, const T *x, T p) {               \
        if (p == 0) {                                                                              \
            for (int64_t i = 0; i < n; i++) gx[i] = 0;                                             \
            return;                                                                                \
        }                                                                                          \
        if (p == 2) {                                                                              \
            NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * (2 * V(S, x + i))),                      \
                     gx[i] = g[i] * (2 * x[i]));                                                   \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++) gx[i] = g[i] * (p * FN(pow)(x[i], p - 1));                 \
    }                                                                                              \
    static void exp_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                      \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * V(S, y + i)), gx[i] = g[i] * y[i]);          \
    }                                                                                              \
    static void log_grad_##S(int64_t n, T *gx, const T *g, const T *x, T p) {                      \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) / V(S, x + i)), gx[i] = g[i] / x[i]);          \
    }                                                                                              \
    static void sqrt_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                     \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) / (2 * V(S, y + i))),                          \
                 gx[i] = g[i] / (2 * y[i]));                                                       \
    }                                                                                              \
    static void tanh_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                     \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * (1 - V(S, y + i) * V(S, y + i))),            \
                 gx[i] = g[i] * (1 - y[i] * y[i]));                                                \
    }                                                                                              \
    static void sigmoid_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                  \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, gx + i, V(S, g + i) * (1 - V(S, y + i)) * V(S, y + i)),            \
                 gx[i] = g[i] * (1 - y[i]) * y[i]);                                                \
    }                                                                                              \
    /* Passes the gradient where y > 0 (and where y is NaN, as PyTorch does). */                   \
    static void relu_grad_##S(int64_t n, T *gx, const T *g, const T *y, T p) {                     \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n,                                                                          \
                 ST(S, gx + i, nbt_vselect_##S(~(nbt_vmask_##S)(V(S, y + i) <= 0), V(S, g + i))),  \
                 gx[i] = y[i] <= 0 ? 0 : g[i]);                                                    \
    }                                                                                              \
    /* Phi(x) + x phi(x), Phi the normal CDF and phi its density. */                               \
    static void gelu_grad_##S(int64_t n, T *gx, const T *g, const T *x, T p) {                     \
        (void)p;                                                                                   \
        T cdf[CHUNK], pdf[CHUNK];                                                                  \
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {                                                \
            int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;                                           \
            const T *xc = x + i0, *gc = g + i0;                                                    \
            T *gxc = gx + i0;                                                                      \
            NBT_VFOR(S, i, m, nbt_v##S v = V(S, xc + i); ST(S, cdf + i, v * (T)M_SQRT1_2);         \
                     ST(S, pdf + i, v * v * (T)-0.5), cdf[i] = xc[i] * (T)M_SQRT1_2;               \
                     pdf[i] = xc[i] * xc[i] * (T)-0.5);                                            \
            nbt_verf_##S(cdf, cdf, m);                                                             \
            nbt_vexp_##S(pdf, pdf, m);                                                             \
            NBT_VFOR(S, i, m, nbt_v##S c = (T)0.5 * (1 + V(S, cdf + i));                           \
                     nbt_v##S d = (T)INV_SQRT_2PI * V(S, pdf + i);                                 \
                     ST(S, gxc + i, V(S, gc + i) * (c + V(S, xc + i) * d)),                        \
                     T c = (T)0.5 * (1 + cdf[i]);                                                  \
                     T d = (T)INV_SQRT_2PI * pdf[i]; gxc[i] = gc[i] * (c + xc[i] * d));            \
        }                                                                                          \
    }                                                                                              \
    /* d/dx of x/2 (1 + tanh(u)), u = beta (x + kappa x^3), in PyTorch's operation order. */       \
    static void gelu_tanh_grad_##S(int64_t n, T *gx, const T *g, const T *x, T p) {                \
        (void)p;                                                                                   \
        T t[CHUNK];                                                                                \
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {                                                \
            int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;                                           \
            const T *xc = x + i0, *gc = g + i0;                                                    \
            T *gxc = gx + i0;                                                                      \
            NBT_VFOR(S, i, m, nbt_v##S v = V(S, xc + i);                                           \
                     ST(S, t + i, (T)GELU_BETA * (v + (T)GELU_KAPPA * (v * v * v))),               \
                     t[i] = (T)GELU_BETA * (xc[i] + (T)GELU_KAPPA * (xc[i] * xc[i] * xc[i])));     \
            nbt_vtanh_##S(t, t, m);                                                                \
            NBT_VFOR(S, i, m, nbt_v##S v = V(S, xc + i); nbt_v##S th = V(S, t + i);                \
                     nbt_v##S dright = (T)0.5 * v * (1 - th * th) * (T)GELU_BETA *                 \
                                       (1 + 3 * (T)GELU_KAPPA * v * v);                            \
                     ST(S, gxc + i, V(S, gc + i) * ((T)0.5 * (1 + th) + dright)), T v = xc[i];     \
                     T th = t[i]; T dright = (T)0.5 * v * (1 - th * th) * (T)GELU_BETA *           \
                                             (1 + 3 * (T)GELU_KAPPA * v * v);                      \
                     gxc[i] = gc[i] * ((T)0.5 * (1 + th) + dright));                               \
        }                                                                                          \
    }

GRAD_KERNELS(f32, float, FN_F32)
GRAD_KERNELS(f64, double, FN_F64)

/* ---- tables, indexed by nbt_unary_op ---- */
typedef void (*fwd_f32)(int64_t, float *, const float *, float);
typedef void (*fwd_f64)(int64_t, double *, const double *, double);
typedef void (*grad_f32)(int64_t, float *, const float *, const float *, float);
typedef void (*grad_f64)(int64_t, double *, const double *, const double *, double);

#define TABLE(S, SUFFIX)                                                                           \
    {                                                                                              \
        neg##SUFFIX##S, add_scalar##SUFFIX##S, mul_scalar##SUFFIX##S, pow_scalar##SUFFIX##S,       \
            exp##SUFFIX##S, log##SUFFIX##S, sqrt##SUFFIX##S, tanh##SUFFIX##S, sigmoid##SUFFIX##S,  \
            relu##SUFFIX##S, gelu##SUFFIX##S, gelu_tanh##SUFFIX##S                                 \
    }
static const fwd_f32 forward_f32[] = TABLE(f32, _);
static const fwd_f64 forward_f64[] = TABLE(f64, _);
static const grad_f32 backward_f32[] = TABLE(f32, _grad_);
static const grad_f64 backward_f64[] = TABLE(f64, _grad_);

bool nbt_unary_grad_uses_output(nbt_unary_op op) {
    return op == NBT_EXP || op == NBT_SQRT || op == NBT_TANH || op == NBT_SIGMOID || op == NBT_RELU;
}

/* ---- driver: out = kernel(in0[, in1]) over any layout ---- */
typedef struct {
    nb_dtype dtype;
    nbt_unary_op op;
    bool grad; /* backward kernel with inputs (g, v); else forward with input x */
    double param;
} map_ctx;

/* Runs the kernel on m contiguous elements. */
static void apply(const map_ctx *c, int64_t m, char *out, const char *in0, const char *in1) {
    if (c->dtype == NB_F32) {
        float p = (float)c->param;
        if (c->grad)
            backward_f32[c->op](m, (float *)out, (const float *)in0, (const float *)in1, p);
        else
            forward_f32[c->op](m, (float *)out, (const float *)in0, p);
    } else {
        if (c->grad)
            backward_f64[c->op](m, (double *)out, (const double *)in0, (const double *)in1,
                                c->param);
        else
            forward_f64[c->op](m, (double *)out, (const double *)in0, c->param);
    }
}

/* Contiguous runs this long are split across threads (each element is independent). */
#define PARALLEL_GRAIN 16384

typedef struct {
    const map_ctx *c;
    char *out;
    const char *in0, *in1;
    size_t es;
} apply_ctx;

static void apply_range(int64_t begin, int64_t end, void *vctx) {
    const apply_ctx *a = vctx;
    int64_t off = begin * (int64_t)a->es;
    apply(a->c, end - begin, a->out + off, a->in0 + off, a->in1 ? a->in1 + off : NULL);
}

/* Copies m elements of size es from a strided run into a contiguous buffer, or back. */
static void gather(char *dst, const char *src, int64_t stride, int64_t m, size_t es) {
    if (es == 4)
        for (int64_t i = 0; i < m; i++) ((float *)dst)[i] = *(const float *)(src + i * stride);
    else
        for (int64_t i = 0; i < m; i++) ((double *)dst)[i] = *(const double *)(src + i * stride);
}

static void scatter(char *dst, int64_t stride, const char *src, int64_t m, size_t es) {
    if (es == 4)
        for (int64_t i = 0; i < m; i++) *(float *)(dst + i * stride) = ((const float *)src)[i];
    else
        for (int64_t i = 0; i < m; i++) *(double *)(dst + i * stride) = ((const double *)src)[i];
}

/* One run from nbt_iterate: p[0] is the output, p[1] (and p[2] for grads) the inputs. */
static void map_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    const map_ctx *c = vctx;
    size_t es = nbt_esize(c->dtype);
    int nin = c->grad ? 2 : 1;
    bool unit = true;
    for (int k = 0; k <= nin; k++) unit = unit && s[k] == (int64_t)es;
    if (unit) {
        apply_ctx ac = {c, p[0], p[1], nin > 1 ? p[2] : NULL, es};
        nbt_parallel_ranges(n, PARALLEL_GRAIN, apply_range, &ac);
        return;
    }
    _Alignas(64) double buf[3][CHUNK]; /* room for CHUNK doubles or floats per operand */
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        const char *in[2] = {NULL, NULL};
        for (int k = 1; k <= nin; k++) {
            const char *src = p[k] + i0 * s[k];
            if (s[k] == (int64_t)es)
                in[k - 1] = src;
            else {
                gather((char *)buf[k], src, s[k], m, es);
                in[k - 1] = (const char *)buf[k];
            }
        }
        char *dst = p[0] + i0 * s[0];
        bool direct = s[0] == (int64_t)es;
        apply(c, m, direct ? dst : (char *)buf[0], in[0], in[1]);
        if (!direct) scatter(dst, s[0], (const char *)buf[0], m, es);
    }
}

/* out = f(ins) with each input broadcast to out's shape (already checked). */
static void map(nb_tensor *out, int nin, const nb_tensor *const *ins, const map_ctx *c) {
    int64_t n = nbt_numel(out);
    if (n == 0) return;
    bool flat = nb_is_contiguous(out);
    for (int k = 0; k < nin; k++) flat = flat && nb_is_contiguous(ins[k]) && nbt_numel(ins[k]) == n;
    if (flat) {
        apply_ctx ac = {c, nbt_ptr(out), nbt_ptr(ins[0]), nin > 1 ? nbt_ptr(ins[1]) : NULL,
                        nbt_esize(out->dtype)};
        nbt_parallel_ranges(n, PARALLEL_GRAIN, apply_range, &ac);
        return;
    }
    size_t es = nbt_esize(out->dtype);
    nbt_operands ops = {.nops = nin + 1, .base = {nbt_ptr(out)}, .elem = {es, es, es}};
    memcpy(ops.strides[0], out->strides, sizeof(int64_t) * (size_t)out->ndim);
    for (int k = 0; k < nin; k++) {
        ops.base[k + 1] = nbt_ptr(ins[k]);
        nbt_broadcast_strides(ins[k], out->ndim, out->shape, ops.strides[k + 1]);
    }
    nbt_iterate(out->ndim, out->shape, &ops, map_inner, (void *)c);
}

/* Checks t is a float tensor of out's dtype whose shape broadcasts to out's. */
static bool check_input(const char *name, const nb_tensor *t, const nb_tensor *out) {
    if (!t) return nbt_error(name, "NULL input"), false;
    if (!nb_is_float(t))
        return nbt_error(name, "expected a float32 or float64 tensor, got %s of shape %s",
                         nb_dtype_name(t->dtype), nbt_shape(t)),
               false;
    if (!out) return true;
    if (t->dtype != out->dtype)
        return nbt_error(name, "dtype mismatch: %s %s and %s %s", nbt_shape(t),
                         nb_dtype_name(t->dtype), nbt_shape(out), nb_dtype_name(out->dtype)),
               false;
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (!nbt_broadcast_shape(name, out->ndim, out->shape, t->ndim, t->shape, &nd, shape) ||
        nd != out->ndim || memcmp(shape, out->shape, sizeof(int64_t) * (size_t)nd) != 0)
        return nbt_error(name, "shape %s does not broadcast to %s", nbt_shape(t), nbt_shape(out)),
               false;
    return true;
}

bool nbt_unary_into(nb_tensor *out, nbt_unary_op op, const nb_tensor *a, double param) {
    const char *name = nbt_unary_name(op);
    if (!out) return nbt_error(name, "NULL output"), false;
    if (!check_input(name, a, out)) return false;
    map_ctx c = {out->dtype, op, false, param};
    map(out, 1, &a, &c);
    return true;
}

nb_tensor *nbt_unary(nbt_unary_op op, const nb_tensor *a, double param) {
    const char *name = nbt_unary_name(op);
    if (!check_input(name, a, NULL)) return NULL;
    nb_tensor *out = nbt_new(name, a->dtype, a->ndim, a->shape);
    if (!out || !nbt_unary_into(out, op, a, param)) return NULL;
    return out;
}

nb_tensor *nbt_unary_grad(nbt_unary_op op, const nb_tensor *gout, const nb_tensor *x,
                          const nb_tensor *y, double param) {
    const char *name = nbt_unary_name(op);
    const nb_tensor *v = nbt_unary_grad_uses_output(op) ? y : x;
    if (!check_input(name, gout, NULL)) return NULL;
    nb_tensor *gx = nbt_new(name, gout->dtype, gout->ndim, gout->shape);
    if (!gx || !check_input(name, v, gx)) return NULL;
    map_ctx c = {gx->dtype, op, true, param};
    map(gx, 2, (const nb_tensor *[]){gout, v}, &c);
    return gx;
}

/* ---- gelu with its normal CDF kept for the backward ---- */
/* y = x Phi(x) and cdf = Phi(x) = (1 + erf(x / sqrt 2)) / 2 on contiguous arrays, with y's
 * roundings those of gelu_##S (halving is exact, so x / 2 * (1 + e) = x * ((1 + e) / 2)). */
#define GELU_CDF_KERNELS(S, T)                                                                     \
    /* In chunks that stay in L1, so x is read from memory once and y and cdf written once. */     \
    static void gelu_cdf_##S(int64_t n, T *y, T *cdf, const T *x) {                                \
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {                                                \
            int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;                                           \
            const T *xc = x + i0;                                                                  \
            T *yc = y + i0, *cc = cdf + i0;                                                        \
            NBT_VFOR(S, i, m, ST(S, cc + i, V(S, xc + i) * (T)M_SQRT1_2),                          \
                     cc[i] = xc[i] * (T)M_SQRT1_2);                                                \
            nbt_verf_##S(cc, cc, m);                                                               \
            NBT_VFOR(S, i, m, nbt_v##S c = (T)0.5 * (1 + V(S, cc + i)); ST(S, cc + i, c);          \
                     ST(S, yc + i, V(S, xc + i) * c), T c = (T)0.5 * (1 + cc[i]); cc[i] = c;       \
                     yc[i] = xc[i] * c);                                                           \
        }                                                                                          \
    }                                                                                              \
    /* gx = g (Phi(x) + x phi(x)) from the saved Phi: only the density's exp is left. */           \
    static void gelu_grad_cdf_##S(int64_t n, T *gx, const T *g, const T *x, const T *cdf) {        \
        T pdf[CHUNK];                                                                              \
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {                                                \
            int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;                                           \
            const T *xc = x + i0, *gc = g + i0, *cc = cdf + i0;                                    \
            T *gxc = gx + i0;                                                                      \
            NBT_VFOR(S, i, m, nbt_v##S v = V(S, xc + i);                                           \
                     ST(S, pdf + i, v * v * (T)-0.5), pdf[i] = xc[i] * xc[i] * (T)-0.5);           \
            nbt_vexp_##S(pdf, pdf, m);                                                             \
            NBT_VFOR(S, i, m, nbt_v##S d = (T)INV_SQRT_2PI * V(S, pdf + i);                        \
                     ST(S, gxc + i, V(S, gc + i) * (V(S, cc + i) + V(S, xc + i) * d)),             \
                     T d = (T)INV_SQRT_2PI * pdf[i];                                               \
                     gxc[i] = gc[i] * (cc[i] + xc[i] * d));                                        \
        }                                                                                          \
    }

GELU_CDF_KERNELS(f32, float)
GELU_CDF_KERNELS(f64, double)

/* Contiguous operands of the fused gelu kernels: [0] the output, then the inputs. */
typedef struct {
    nb_dtype dtype;
    bool grad;
    char *p[4];
} gelu_job;

static void gelu_range(int64_t begin, int64_t end, void *vjob) {
    const gelu_job *j = vjob;
    int64_t n = end - begin;
    if (j->dtype == NB_F32) {
        float *p[4];
        for (int k = 0; k < 4; k++) p[k] = j->p[k] ? (float *)j->p[k] + begin : NULL;
        if (j->grad && gelu_use_avx512())
            gelu_grad_avx512(n, p[0], p[1], p[2], p[3]);
        else if (j->grad)
            gelu_grad_cdf_f32(n, p[0], p[1], p[2], p[3]);
        else if (gelu_use_avx512())
            gelu_erf_avx512(n, p[0], p[1], p[2]);
        else
            gelu_cdf_f32(n, p[0], p[1], p[2]);
    } else {
        double *p[4];
        for (int k = 0; k < 4; k++) p[k] = j->p[k] ? (double *)j->p[k] + begin : NULL;
        if (j->grad)
            gelu_grad_cdf_f64(n, p[0], p[1], p[2], p[3]);
        else
            gelu_cdf_f64(n, p[0], p[1], p[2]);
    }
}

nb_tensor *nbt_gelu_with_cdf(const nb_tensor *x, nb_tensor **cdf) {
    if (!check_input("gelu", x, NULL)) return NULL;
    const nb_tensor *xc = nbt_contiguous(x);
    nb_tensor *y = nbt_new("gelu", x->dtype, x->ndim, x->shape);
    nb_tensor *c = nbt_new("gelu", x->dtype, x->ndim, x->shape);
    if (!xc || !y || !c) return NULL;
    gelu_job j = {x->dtype, false, {nbt_ptr(y), nbt_ptr(c), nbt_ptr(xc), NULL}};
    nbt_parallel_ranges(nbt_numel(y), PARALLEL_GRAIN, gelu_range, &j);
    *cdf = c;
    return y;
}

nb_tensor *nbt_gelu_grad_from_cdf(const nb_tensor *gout, const nb_tensor *x, const nb_tensor *cdf) {
    if (!check_input("gelu", gout, NULL) || !check_input("gelu", x, gout) ||
        !check_input("gelu", cdf, gout))
        return NULL;
    if (nbt_numel(x) != nbt_numel(gout) || nbt_numel(cdf) != nbt_numel(gout))
        return nbt_error("gelu", "gradient %s, input %s and cdf %s differ in shape",
                         nbt_shape(gout), nbt_shape(x), nbt_shape(cdf)),
               NULL;
    const nb_tensor *g = nbt_contiguous(gout), *xc = nbt_contiguous(x), *cc = nbt_contiguous(cdf);
    nb_tensor *gx = nbt_new("gelu", gout->dtype, gout->ndim, gout->shape);
    if (!g || !xc || !cc || !gx) return NULL;
    gelu_job j = {gout->dtype, true, {nbt_ptr(gx), nbt_ptr(g), nbt_ptr(xc), nbt_ptr(cc)}};
    nbt_parallel_ranges(nbt_numel(gx), PARALLEL_GRAIN, gelu_range, &j);
    return gx;
}
