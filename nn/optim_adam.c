/* Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), step for
 * step as torch.optim.Adam / AdamW (single-tensor path, amsgrad off). */
#include "optim_impl.h"

#include "tensor/isa.h"
#include "tensor/simd.h"

#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum { EXP_AVG = 0, EXP_AVG_SQ = 1, STEP = 2 };

typedef struct {
    double beta1, beta2, eps;
    double l2;        /* Adam: weight_decay, added to the gradient */
    double decay;     /* AdamW: 1 - lr * weight_decay, multiplied into the parameter */
    double step_size; /* lr / (1 - beta1^t) */
    double bc2_sqrt;  /* sqrt(1 - beta2^t) */
} adam_consts;
_Static_assert(sizeof(adam_consts) <= NBO_CTX_DOUBLES * sizeof(double), "nbo_segment.ctx holds it");

/* One element, written as torch's sequence of tensor ops so the roundings match. */
#define ADAM_ELEMENT(T, SQRT, p, g, m, v)                                                          \
    do {                                                                                           \
        T grad = (g);                                                                              \
        if (l2 != 0) grad = grad + l2 * (p);                                                       \
        (p) = (p)*decay;                                                                           \
        (m) = (m)*beta1 + one_minus_beta1 * grad;                                                  \
        (v) = (v)*beta2 + one_minus_beta2 * grad * grad;                                           \
        T denom = SQRT((v)) / bc2_sqrt + eps;                                                      \
        (p) = (p) + neg_step_size * (m) / denom;                                                   \
    } while (0)

/* The same sequence on whole vectors (IEEE lane by lane, nothing fused, so every element
 * gets the scalar code's bits): a square root and a division per element cost several times
 * the memory traffic when done one at a time. */
#if defined(__SSE2__)
#define VSQRT_f32(x) ((nbt_vf32)_mm_sqrt_ps((__m128)(x)))
#define VSQRT_f64(x) ((nbt_vf64)_mm_sqrt_pd((__m128d)(x)))
#define ADAM_VECTORS(S, T, p, g, m, v, n, i)                                                       \
    do {                                                                                           \
        const nbt_v##S vbeta1 = nbt_vsplat_##S(beta1), vbeta2 = nbt_vsplat_##S(beta2),             \
                       veps = nbt_vsplat_##S(eps), vl2 = nbt_vsplat_##S(l2),                       \
                       vdecay = nbt_vsplat_##S(decay), vomb1 = nbt_vsplat_##S(one_minus_beta1),    \
                       vomb2 = nbt_vsplat_##S(one_minus_beta2),                                    \
                       vnss = nbt_vsplat_##S(neg_step_size), vbc2 = nbt_vsplat_##S(bc2_sqrt);      \
        for (; i + NBT_VW_##S <= n; i += NBT_VW_##S) {                                             \
            nbt_v##S vp = nbt_vload_##S(p + i), vm = nbt_vload_##S(m + i),                         \
                     vv = nbt_vload_##S(v + i), grad = nbt_vload_##S(g + i);                       \
            if (l2 != 0) grad = grad + vl2 * vp;                                                   \
            vp = vp * vdecay;                                                                      \
            vm = vm * vbeta1 + vomb1 * grad;                                                       \
            vv = vv * vbeta2 + vomb2 * grad * grad;                                                \
            nbt_v##S denom = VSQRT_##S(vv) / vbc2 + veps;                                          \
            vp = vp + vnss * vm / denom;                                                           \
            nbt_vstore_##S(p + i, vp), nbt_vstore_##S(m + i, vm), nbt_vstore_##S(v + i, vv);       \
        }                                                                                          \
    } while (0)
#else
#define ADAM_VECTORS(S, T, p, g, m, v, n, i) (void)0
#endif

/* Kernels over one run of nbt_iterate: ptr = {param, grad, exp_avg, exp_avg_sq}. CONTIGUOUS
 * handles a run whose four operands are all contiguous. */
#define ADAM_KERNEL(NAME, T, SQRT, CONTIGUOUS)                                                     \
    static void NAME(int64_t n, char **ptr, const int64_t *bs, void *vctx) {                       \
        const adam_consts *c = vctx;                                                               \
        if (bs[0] == sizeof(T) && bs[1] == sizeof(T) && bs[2] == sizeof(T) &&                      \
            bs[3] == sizeof(T)) {                                                                  \
            CONTIGUOUS(n, (T *)ptr[0], (const T *)ptr[1], (T *)ptr[2], (T *)ptr[3], c);            \
            return;                                                                                \
        }                                                                                          \
        ADAM_LOCALS(T, c);                                                                         \
        for (int64_t i = 0; i < n; i++)                                                            \
            ADAM_ELEMENT(T, SQRT, *(T *)(ptr[0] + i * bs[0]), *(const T *)(ptr[1] + i * bs[1]),    \
                         *(T *)(ptr[2] + i * bs[2]), *(T *)(ptr[3] + i * bs[3]));                  \
    }

/* The constants as T, the names ADAM_ELEMENT and ADAM_VECTORS use. */
#define ADAM_LOCALS(T, c)                                                                          \
    const T beta1 = (T)(c)->beta1, beta2 = (T)(c)->beta2, eps = (T)(c)->eps, l2 = (T)(c)->l2,      \
            decay = (T)(c)->decay, one_minus_beta1 = (T)(1 - (c)->beta1),                          \
            one_minus_beta2 = (T)(1 - (c)->beta2), neg_step_size = (T) - (c)->step_size,           \
            bc2_sqrt = (T)(c)->bc2_sqrt

/* float32: the instruction set's kernel (tensor/kernels/adam_rows.c), the same sequence on
 * vectors as wide as the set has. */
static void contiguous_f32(int64_t n, float *p, const float *g, float *m, float *v,
                           const adam_consts *c) {
    ADAM_LOCALS(float, c);
    const nbk_adam_consts k = {beta1,           beta2,           eps,           l2,      decay,
                               one_minus_beta1, one_minus_beta2, neg_step_size, bc2_sqrt};
    nbt_kernels()->adam_f32(n, p, g, m, v, &k);
}

/* float64 (gradchecks and tests, not speed): 2-wide vectors, then the tail. */
static void contiguous_f64(int64_t n, double *p, const double *g, double *m, double *v,
                           const adam_consts *c) {
    ADAM_LOCALS(double, c);
    int64_t i = 0;
    ADAM_VECTORS(f64, double, p, g, m, v, n, i);
    for (; i < n; i++) ADAM_ELEMENT(double, sqrt, p[i], g[i], m[i], v[i]);
}

ADAM_KERNEL(adam_f32, float, sqrtf, contiguous_f32)
ADAM_KERNEL(adam_f64, double, sqrt, contiguous_f64)

static void adam_update(nb_optimizer *o, int i) {
    nb_tensor *p = o->params[i];
    int64_t *step = (int64_t *)nbt_ptr(nbo_state(o, i, STEP));
    ++*step;
    const nb_adam_opts *a = &o->adam;
    double t = (double)*step;
    adam_consts c = {
        .beta1 = a->beta1,
        .beta2 = a->beta2,
        .eps = a->eps,
        .l2 = o->decoupled ? 0 : a->weight_decay,
        .decay = o->decoupled ? 1 - o->lr * a->weight_decay : 1,
        .step_size = o->lr / (1 - pow(a->beta1, t)),
        .bc2_sqrt = sqrt(1 - pow(a->beta2, t)),
    };
    nb_tensor *states[2] = {nbo_state(o, i, EXP_AVG), nbo_state(o, i, EXP_AVG_SQ)};
    nbo_run(o, p, p->grad, 2, states, p->dtype == NB_F32 ? adam_f32 : adam_f64, &c, sizeof c);
}

nb_adam_opts nb_adam_defaults(double lr) {
    return (nb_adam_opts){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0};
}

nb_adam_opts nb_adamw_defaults(double lr) {
    nb_adam_opts o = nb_adam_defaults(lr);
    o.weight_decay = 0.01;
    return o;
}

static nb_optimizer *create(const char *op, nb_tensor *const *params, int n, nb_adam_opts opts,
                            bool decoupled) {
    if (!nbo_check_beta(op, "beta1", opts.beta1) || !nbo_check_beta(op, "beta2", opts.beta2) ||
        !nbo_check_nonneg(op, "eps", opts.eps) ||
        !nbo_check_nonneg(op, "weight_decay", opts.weight_decay))
        return NULL;
    static const nbo_state_kind kinds[] = {
        {"exp_avg", false}, {"exp_avg_sq", false}, {"step", true}};
    nb_optimizer *o = nbo_create(op, params, n, opts.lr, 3, kinds, adam_update);
    if (o) {
        o->adam = opts;
        o->decoupled = decoupled;
    }
    return o;
}

nb_optimizer *nb_adam_new(nb_tensor *const *params, int n, nb_adam_opts opts) {
    return create("nb_adam_new", params, n, opts, false);
}

nb_optimizer *nb_adamw_new(nb_tensor *const *params, int n, nb_adam_opts opts) {
    return create("nb_adamw_new", params, n, opts, true);
}
