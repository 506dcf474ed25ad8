/* SGD with momentum, dampening, Nesterov and L2 weight decay, step for step as
 * torch.optim.SGD (single-tensor path): d = g + wd p; buf = d on the first step, else
 * buf = momentum buf + (1 - dampening) d; d = nesterov ? d + momentum buf : buf; p += -lr d. */
#include "optim_impl.h"
#include "param_list.h"

enum { BUF = 0, STEP = 1 };

typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool nesterov, first; /* first: the momentum buffer starts as d */
} sgd_consts;
_Static_assert(sizeof(sgd_consts) <= NBO_CTX_DOUBLES * sizeof(double), "nbo_segment.ctx holds it");

/* One element, written as torch's sequence of tensor ops so the roundings match. */
#define SGD_ELEMENT(T, p, g, buf)                                                                  \
    do {                                                                                           \
        T d = (g);                                                                                 \
        if (wd != 0) d = d + wd * (p);                                                             \
        if (has_momentum) {                                                                        \
            (buf) = c->first ? d : (buf)*momentum + keep * d;                                      \
            d = c->nesterov ? d + momentum * (buf) : (buf);                                        \
        }                                                                                          \
        (p) = (p) + neg_lr * d;                                                                    \
    } while (0)

/* Kernels over one run of nbt_iterate: ptr = {param, grad, momentum buffer (if any)}. */
#define SGD_KERNEL(NAME, T)                                                                        \
    static void NAME(int64_t n, char **ptr, const int64_t *bs, void *vctx) {                       \
        const sgd_consts *c = vctx;                                                                \
        const T neg_lr = (T)-c->lr, wd = (T)c->weight_decay, momentum = (T)c->momentum,            \
                keep = (T)(1 - c->dampening);                                                      \
        const bool has_momentum = c->momentum != 0;                                                \
        T dummy = 0;                                                                               \
        if (bs[0] == sizeof(T) && bs[1] == sizeof(T) && (!has_momentum || bs[2] == sizeof(T))) {   \
            T *p = (T *)ptr[0], *buf = has_momentum ? (T *)ptr[2] : &dummy;                        \
            const T *g = (const T *)ptr[1];                                                        \
            for (int64_t i = 0; i < n; i++) SGD_ELEMENT(T, p[i], g[i], buf[has_momentum ? i : 0]); \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T *buf = has_momentum ? (T *)(ptr[2] + i * bs[2]) : &dummy;                            \
            SGD_ELEMENT(T, *(T *)(ptr[0] + i * bs[0]), *(const T *)(ptr[1] + i * bs[1]), *buf);    \
        }                                                                                          \
    }

SGD_KERNEL(sgd_f32, float)
SGD_KERNEL(sgd_f64, double)

static void sgd_update(nb_optimizer *o, int i) {
    nb_tensor *p = o->params[i];
    const nbo_group *g = nbo_group_of(o, i);
    sgd_consts c = {g->lr,           o->sgd.momentum, o->sgd.dampening,
                    g->weight_decay, o->sgd.nesterov, false};
    int nstate = 0;
    nb_tensor *buf = NULL;
    if (o->nstate > 0) {
        int64_t *step = (int64_t *)nbt_ptr(nbo_state(o, i, STEP));
        c.first = *step == 0;
        ++*step;
        buf = nbo_state(o, i, BUF);
        nstate = 1;
    }
    nbo_run(o, p, p->grad, nstate, &buf, p->dtype == NB_F32 ? sgd_f32 : sgd_f64, &c, sizeof c);
}

nb_sgd_opts nb_sgd_defaults(double lr) {
    return (nb_sgd_opts){
        .lr = lr, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false};
}

nb_optimizer *nb_sgd_new(int n, nb_tensor *const *params, nb_sgd_opts opts) {
    const char *op = "nb_sgd_new";
    if (!nbn_check_param_list(op, params, n, 1, false, 0)) return NULL;
    if (!nbo_check_nonneg(op, "momentum", opts.momentum) ||
        !nbo_check_nonneg(op, "weight_decay", opts.weight_decay))
        return NULL;
    if (!(opts.dampening >= 0 && opts.dampening <= 1))
        return nbt_error(op, "dampening is %g, expected a value in [0, 1]", opts.dampening);
    if (opts.nesterov && (opts.momentum <= 0 || opts.dampening != 0))
        return nbt_error(op,
                         "Nesterov momentum requires a momentum > 0 and zero dampening "
                         "(got momentum %g, dampening %g)",
                         opts.momentum, opts.dampening);
    static const nbo_state_kind kinds[] = {{"momentum_buffer", false}, {"step", true}};
    int nstate = opts.momentum != 0 ? 2 : 0;
    nb_optimizer *o =
        nbo_create(op, params, n, opts.lr, opts.weight_decay, nstate, kinds, sgd_update);
    if (o) o->sgd = opts;
    return o;
}
