/* The raw kernels that exist once per instruction set, and the table that hands them out.
 *
 * Every .c file in tensor/kernels/ is compiled once per set by one meson loop
 * (tensor/meson.build): "avx512" (-mavx512f -mavx512dq -mfma), "avx2" (-mavx2 -mfma) and
 * "generic" (the x86-64 baseline, SSE2). The build defines NBK_ISA as the set's name, and
 * every function a kernel file exports ends in _<set> (NBK_FN). A file tells the sets apart
 * by the compiler's own __AVX512F__ / __AVX2__; most are written once with vector types and
 * need not. Each set's table.c fills one nbt_kernel_table with that set's functions, and
 * tensor/isa.c chooses the table once per process (NABLA_ISA, see isa.h).
 *
 * No -ffast-math and no contraction (meson.build): each build rounds every operation as
 * written, so kernels written once with vector types give the same bits in every set. */
#ifndef NABLA_KERNELS_H
#define NABLA_KERNELS_H

#include "attention_small.h"
#include "gemm_kernels.h"

#include <stdint.h>

/* A key/value cache stores each head's keys in blocks of this many keys (nn/kv_cache.c): for a
 * capacity of L keys, block b holds keys [b * NBK_KEY_BLOCK, min((b + 1) * NBK_KEY_BLOCK, L))
 * transposed, as k_dim rows of that block's width, starting at element b * NBK_KEY_BLOCK *
 * k_dim. A query's scores then read each block as one contiguous stretch (one transposed
 * [k_dim, L] matrix had them in k_dim strided pieces, which the prefetchers did not follow). */
#define NBK_KEY_BLOCK 64

/* sqrt(2 / pi) and the cubic coefficient of the tanh approximation of gelu. */
#define NBK_GELU_BETA 0.7978845608028654
#define NBK_GELU_KAPPA 0.044715

/* Adam's constants for one parameter's update (nn/optim_adam.c), in double; each kernel
 * rounds them to its type once (NBK_ADAM_LOCALS). */
typedef struct {
    double beta1, beta2, eps;
    double l2;        /* Adam: weight_decay, added to the gradient */
    double decay;     /* AdamW: 1 - lr * weight_decay, multiplied into the parameter */
    double step_size; /* lr / (1 - beta1^t) */
    double bc2_sqrt;  /* sqrt(1 - beta2^t) */
} nbk_adam_consts;

/* c's constants as values of one type (SPLAT: a conversion to a scalar or a vector of it),
 * under the names NBK_ADAM_STEP uses. */
#define NBK_ADAM_LOCALS(T, SPLAT, c)                                                               \
    const T beta1 = SPLAT((c)->beta1), beta2 = SPLAT((c)->beta2), eps = SPLAT((c)->eps),           \
            l2 = SPLAT((c)->l2), decay = SPLAT((c)->decay),                                        \
            one_minus_beta1 = SPLAT(1 - (c)->beta1), one_minus_beta2 = SPLAT(1 - (c)->beta2),      \
            neg_step_size = SPLAT(-(c)->step_size), bc2_sqrt = SPLAT((c)->bc2_sqrt)

/* One Adam update of p, m and v (lvalues) from the gradient g (an lvalue it may change), as
 * torch's sequence of tensor ops so the roundings match; NBK_ADAM_LOCALS' names in scope and
 * has_l2 whether l2, in the type, is not 0. The one spelling of the update: every set's
 * contiguous kernels (adam_rows.c) and nn/optim_adam.c's strided loop expand it. */
#define NBK_ADAM_STEP(SQRT, has_l2, p, g, m, v)                                                    \
    do {                                                                                           \
        if (has_l2) g = g + l2 * p;                                                                \
        p = p * decay;                                                                             \
        m = m * beta1 + one_minus_beta1 * g;                                                       \
        v = v * beta2 + one_minus_beta2 * g * g;                                                   \
        p = p + neg_step_size * m / (SQRT(v) / bc2_sqrt + eps);                                    \
    } while (0)

typedef struct {
    /* y = f(x) over n contiguous elements through SLEEF's 1-ULP functions; y may be x. */
    void (*vexp_f32)(float *y, const float *x, int64_t n);
    void (*vexp_f64)(double *y, const double *x, int64_t n);
    void (*vlog_f32)(float *y, const float *x, int64_t n);
    void (*vlog_f64)(double *y, const double *x, int64_t n);
    void (*vtanh_f32)(float *y, const float *x, int64_t n);
    void (*vtanh_f64)(double *y, const double *x, int64_t n);
    void (*verf_f32)(float *y, const float *x, int64_t n);
    void (*verf_f64)(double *y, const double *x, int64_t n);
    /* A softmax row's shift and exp in one pass: y = exp(x + shift), returning sum(y) (vexp_sum)
     * or scaled, y = a exp(x + shift) (vexp_scale); the bits of the separate loops. */
    double (*vexp_sum_f32)(float *y, const float *x, float shift, int64_t n);
    double (*vexp_sum_f64)(double *y, const double *x, double shift, int64_t n);
    void (*vexp_scale_f32)(float *y, const float *x, float shift, float a, int64_t n);
    void (*vexp_scale_f64)(double *y, const double *x, double shift, double a, int64_t n);
    /* Activations over n contiguous elements in one pass (activations.c): y = f(x), y may be
     * x; the derivatives gx = g f'(x), gx may be g or x; gelu's y with its derivative d. */
    void (*vgelu_f32)(float *y, const float *x, int64_t n);
    void (*vgelu_f64)(double *y, const double *x, int64_t n);
    void (*vgelu_tanh_f32)(float *y, const float *x, int64_t n);
    void (*vgelu_tanh_f64)(double *y, const double *x, int64_t n);
    void (*vsilu_f32)(float *y, const float *x, int64_t n);
    void (*vsilu_f64)(double *y, const double *x, int64_t n);
    void (*vsigmoid_f32)(float *y, const float *x, int64_t n);
    void (*vsigmoid_f64)(double *y, const double *x, int64_t n);
    void (*vgelu_tanh_grad_f32)(float *gx, const float *g, const float *x, int64_t n);
    void (*vgelu_tanh_grad_f64)(double *gx, const double *g, const double *x, int64_t n);
    void (*vsilu_grad_f32)(float *gx, const float *g, const float *x, int64_t n);
    void (*vsilu_grad_f64)(double *gx, const double *g, const double *x, int64_t n);
    void (*vgelu_derivative_f32)(float *y, float *d, const float *x, int64_t n);
    void (*vgelu_derivative_f64)(double *y, double *d, const double *x, int64_t n);
    /* GEMM microkernels (gemm_kernels.h). */
    nbt_gemm_kernels_f32 gemm_f32;
    nbt_gemm_kernels_f64 gemm_f64;
    /* Attention heads of a few keys in float32 (attention_small.h). */
    void (*small_head_forward)(const nba_small_head *h);
    void (*small_head_backward)(const nba_small_head *h);
    /* Layer norm's float32 rows (layer_norm_rows.c): y, mean and rstd of rows of D (of x, or
     * with res of x + res, written to sum); then dx (may be NULL; plus g_sum unless NULL) and
     * dw, db added into (either may be NULL). w and b may be NULL. */
    void (*layer_norm_rows_f32)(int64_t rows, int64_t D, const float *x, const float *res,
                                const float *w, const float *b, double eps, float *y, float *sum,
                                float *mean, float *rstd);
    void (*layer_norm_backward_rows_f32)(int64_t rows, int64_t D, const float *x, const float *w,
                                         const float *mean, const float *rstd, const float *g,
                                         const float *g_sum, float *dx, double *dw, double *db);
    /* acc[k] += x[k] for k < n, in double (column_sums.c). */
    void (*add_row_f32)(double *acc, const float *x, int64_t n);
    /* The same for rows r < R of x (row stride ldx), row r into lane r % 8 of acc (lanes of
     * row stride ldacc), each lane's rows in order: the sums add_row_f32 row by row gives.
     * Needs R >= 8. */
    void (*add_rows_f32)(double *acc, int64_t ldacc, const float *x, int64_t ldx, int64_t R,
                         int64_t n);
    /* One query's attention over n cached keys (attend_row.c): keys in blocks of
     * NBK_KEY_BLOCK (Kb, for a capacity of L keys), values [n, vd]; scores has room for L
     * (keys past n up to the next multiple of 8 may be read and scored, where the block
     * holding key n - 1 has them). */
    void (*attend_row_f32)(int64_t n, int64_t L, int64_t kd, int64_t vd, float scale,
                           const float *q, const float *Kb, const float *V, float *scores,
                           float *ctx);
    /* Adam's update of n contiguous elements (adam_rows.c): p, m and v in place. */
    void (*adam_f32)(int64_t n, float *p, const float *g, float *m, float *v,
                     const nbk_adam_consts *c);
    void (*adam_f64)(int64_t n, double *p, const double *g, double *m, double *v,
                     const nbk_adam_consts *c);
} nbt_kernel_table;

/* Fills k with one set's kernels (each set's table.c). */
void nbt_kernels_avx512(nbt_kernel_table *k);
void nbt_kernels_avx2(nbt_kernel_table *k);
void nbt_kernels_generic(nbt_kernel_table *k);

#ifdef NBK_ISA
#define NBK_CAT2(name, isa) name##_##isa
#define NBK_CAT(name, isa) NBK_CAT2(name, isa)
/* name_<set> for the set being built. */
#define NBK_FN(name) NBK_CAT(name, NBK_ISA)

#define NBK_DECLARE_VECMATH(fn)                                                                    \
    void NBK_FN(nbt_v##fn##_f32)(float *y, const float *x, int64_t n);                             \
    void NBK_FN(nbt_v##fn##_f64)(double *y, const double *x, int64_t n);
NBK_DECLARE_VECMATH(exp)
NBK_DECLARE_VECMATH(log)
NBK_DECLARE_VECMATH(tanh)
NBK_DECLARE_VECMATH(erf)
NBK_DECLARE_VECMATH(gelu)
NBK_DECLARE_VECMATH(gelu_tanh)
NBK_DECLARE_VECMATH(silu)
NBK_DECLARE_VECMATH(sigmoid)
double NBK_FN(nbt_vexp_sum_f32)(float *y, const float *x, float shift, int64_t n);
double NBK_FN(nbt_vexp_sum_f64)(double *y, const double *x, double shift, int64_t n);
void NBK_FN(nbt_vexp_scale_f32)(float *y, const float *x, float shift, float a, int64_t n);
void NBK_FN(nbt_vexp_scale_f64)(double *y, const double *x, double shift, double a, int64_t n);
#define NBK_DECLARE_GRAD(fn)                                                                       \
    void NBK_FN(nbt_v##fn##_f32)(float *gx, const float *g, const float *x, int64_t n);            \
    void NBK_FN(nbt_v##fn##_f64)(double *gx, const double *g, const double *x, int64_t n);
NBK_DECLARE_GRAD(gelu_tanh_grad)
NBK_DECLARE_GRAD(silu_grad)
void NBK_FN(nbt_vgelu_derivative_f32)(float *y, float *d, const float *x, int64_t n);
void NBK_FN(nbt_vgelu_derivative_f64)(double *y, double *d, const double *x, int64_t n);
void NBK_FN(nbt_gemm_kernels)(nbt_gemm_kernels_f32 *f32, nbt_gemm_kernels_f64 *f64);
void NBK_FN(nbk_layer_norm_rows_f32)(int64_t rows, int64_t D, const float *x, const float *res,
                                     const float *w, const float *b, double eps, float *y,
                                     float *sum, float *mean, float *rstd);
void NBK_FN(nbk_layer_norm_backward_rows_f32)(int64_t rows, int64_t D, const float *x,
                                              const float *w, const float *mean, const float *rstd,
                                              const float *g, const float *g_sum, float *dx,
                                              double *dw, double *db);
void NBK_FN(nbk_add_row_f32)(double *acc, const float *x, int64_t n);
void NBK_FN(nbk_add_rows_f32)(double *acc, int64_t ldacc, const float *x, int64_t ldx, int64_t R,
                              int64_t n);
void NBK_FN(nbk_attend_row_f32)(int64_t n, int64_t L, int64_t kd, int64_t vd, float scale,
                                const float *q, const float *Kb, const float *V, float *scores,
                                float *ctx);
void NBK_FN(nba_small_head_forward)(const nba_small_head *h);
void NBK_FN(nba_small_head_backward)(const nba_small_head *h);
void NBK_FN(nbk_adam_f32)(int64_t n, float *p, const float *g, float *m, float *v,
                          const nbk_adam_consts *c);
void NBK_FN(nbk_adam_f64)(int64_t n, double *p, const double *g, double *m, double *v,
                          const nbk_adam_consts *c);
#endif

#endif
