/* Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), step for
 * step as torch.optim.Adam / AdamW (single-tensor path, amsgrad off). */
#include "optim_impl.h"
#include "param_list.h"

#include "tensor/isa.h"

#include <math.h>

enum { EXP_AVG = 0, EXP_AVG_SQ = 1, STEP = 2 };

_Static_assert(sizeof(nbk_adam_consts) <= NBO_CTX_DOUBLES * sizeof(double),
               "nbo_segment.ctx holds it");

/* Kernels over one run of nbt_iterate: ptr = {param, grad, exp_avg, exp_avg_sq}, ctx the
 * nbk_adam_consts. A run whose four operands are contiguous goes to the instruction set's
 * kernel (tensor/kernels/adam_rows.c); a strided one element by element through the same
 * NBK_ADAM_STEP, so both give the same bits. */
#define ADAM_KERNEL(NAME, T, SQRT, SET_KERNEL)                                                     \
    static void NAME(int64_t n, char **ptr, const int64_t *bs, void *vctx) {                       \
        const nbk_adam_consts *c = vctx;                                                           \
        if (bs[0] == sizeof(T) && bs[1] == sizeof(T) && bs[2] == sizeof(T) &&                      \
            bs[3] == sizeof(T)) {                                                                  \
            nbt_kernels()->SET_KERNEL(n, (T *)ptr[0], (const T *)ptr[1], (T *)ptr[2], (T *)ptr[3], \
                                      c);                                                          \
            return;                                                                                \
        }                                                                                          \
        NBK_ADAM_LOCALS(T, (T), c);                                                                \
        const bool has_l2 = l2 != 0;                                                               \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T grad = *(const T *)(ptr[1] + i * bs[1]);                                             \
            NBK_ADAM_STEP(SQRT, has_l2, *(T *)(ptr[0] + i * bs[0]), grad,                          \
                          *(T *)(ptr[2] + i * bs[2]), *(T *)(ptr[3] + i * bs[3]));                 \
        }                                                                                          \
    }

ADAM_KERNEL(adam_f32, float, sqrtf, adam_f32)
ADAM_KERNEL(adam_f64, double, sqrt, adam_f64)

static void adam_update(nb_optimizer *o, int i) {
    nb_tensor *p = o->params[i];
    int64_t *step = (int64_t *)nbt_ptr(nbo_state(o, i, STEP));
    ++*step;
    const nb_adam_opts *a = &o->adam;
    const nbo_group *g = nbo_group_of(o, i);
    double t = (double)*step;
    nbk_adam_consts c = {
        .beta1 = a->beta1,
        .beta2 = a->beta2,
        .eps = a->eps,
        .l2 = o->decoupled ? 0 : g->weight_decay,
        .decay = o->decoupled ? 1 - g->lr * g->weight_decay : 1,
        .step_size = g->lr / (1 - pow(a->beta1, t)),
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

nb_optimizer *nbo_adam_create(const char *op, nb_tensor *const *params, int n, nb_adam_opts opts,
                              bool decoupled) {
    if (!nbo_check_beta(op, "beta1", opts.beta1) || !nbo_check_beta(op, "beta2", opts.beta2) ||
        !nbo_check_nonneg(op, "eps", opts.eps) ||
        !nbo_check_nonneg(op, "weight_decay", opts.weight_decay))
        return NULL;
    static const nbo_state_kind kinds[] = {
        {"exp_avg", false}, {"exp_avg_sq", false}, {"step", true}};
    nb_optimizer *o = nbo_create(op, params, n, opts.lr, opts.weight_decay, 3, kinds, adam_update);
    if (o) {
        o->adam = opts;
        o->decoupled = decoupled;
    }
    return o;
}

nb_optimizer *nb_adam_new(int n, nb_tensor *const *params, nb_adam_opts opts) {
    if (!nbn_check_param_list("nb_adam_new", params, n, 1, false, 0)) return NULL;
    return nbo_adam_create("nb_adam_new", params, n, opts, false);
}

nb_optimizer *nb_adamw_new(int n, nb_tensor *const *params, nb_adam_opts opts) {
    if (!nbn_check_param_list("nb_adamw_new", params, n, 1, false, 0)) return NULL;
    return nbo_adam_create("nb_adamw_new", params, n, opts, true);
}
