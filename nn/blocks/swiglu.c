/* SwiGLU feed-forward (Llama's MLP): w2(silu(w1 x) * w3 x), no biases. */
#include <nabla/blocks.h>
#include "errors.h"

/* silu(a) * b as one node (nabla's function API): op by op it took four nodes (sigmoid, two
 * products) and kept three [..., hidden] intermediates for backward. With s = sigmoid(a),
 * computed by nabla's vectorised nb_sigmoid and kept for backward:
 *   out = a s b,  da = g b s (1 + a (1 - s)),  db = g a s.
 * The element loops run on nabla's threads (nb_parallel_for); each element is its own. They are
 * built once per instruction set (simd_sets.h). */
typedef struct {
    const void *a, *s, *b, *g;
    void *out, *da, *db; /* da or db NULL: not needed */
} silu_gate_job;

#define SILU_GATE(T, SET)                                                                          \
    static void silu_gate_##T##_##SET(void *ctx, int64_t begin, int64_t end) {                     \
        const silu_gate_job *j = ctx;                                                              \
        const T *a = j->a, *s = j->s, *b = j->b;                                                   \
        T *out = j->out;                                                                           \
        for (int64_t i = begin; i < end; i++) out[i] = a[i] * s[i] * b[i];                         \
    }                                                                                              \
    static void silu_gate_grad_##T##_##SET(void *ctx, int64_t begin, int64_t end) {                \
        const silu_gate_job *j = ctx;                                                              \
        const T *a = j->a, *s = j->s, *b = j->b, *g = j->g;                                        \
        T *da = j->da, *db = j->db;                                                                \
        if (da && db) /* one pass over g, a, s and b for both */                                   \
            for (int64_t i = begin; i < end; i++) {                                                \
                da[i] = g[i] * b[i] * s[i] * (1 + a[i] * (1 - s[i]));                              \
                db[i] = g[i] * a[i] * s[i];                                                        \
            }                                                                                      \
        else if (da)                                                                               \
            for (int64_t i = begin; i < end; i++)                                                  \
                da[i] = g[i] * b[i] * s[i] * (1 + a[i] * (1 - s[i]));                              \
        else if (db)                                                                               \
            for (int64_t i = begin; i < end; i++) db[i] = g[i] * a[i] * s[i];                      \
    }
#define BLK_SET_BODIES(SET) SILU_GATE(float, SET) SILU_GATE(double, SET)
#include "simd_sets.h"

/* Elements per thread-worthy piece: as nabla's own element-wise maps. */
#define SILU_GATE_GRAIN 16384

static bool silu_gate_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                              nb_tensor **out) {
    (void)nin, (void)nout;
    const nb_tensor *a = nb_contiguous(in[0]), *b = nb_contiguous(in[1]);
    if (!a || !b) return false;
    if (!nb_same_shape(a, b) || a->dtype != b->dtype)
        return nb_error("silu_gate", "gate %s and up %s differ", nb_shape_text(a),
                        nb_shape_text(b)),
               false;
    const nb_tensor *s = nb_sigmoid(a); /* grad mode is off in forward: a plain tensor */
    if (!s || !(out[0] = nb_empty(a->dtype, a->ndim, a->shape))) return false;
    silu_gate_job job = {.a = nb_data(a), .s = nb_data(s), .b = nb_data(b), .out = nb_data(out[0])};
    return nb_parallel_for(
               nb_numel(a), SILU_GATE_GRAIN,
               a->dtype == NB_F32 ? BLK_PICK(silu_gate_float) : BLK_PICK(silu_gate_double), &job) &&
           nb_ctx_save(ctx, a) && nb_ctx_save(ctx, b) && nb_ctx_save(ctx, s);
}

static bool silu_gate_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                               nb_tensor **gin) {
    (void)nout, (void)nin;
    const nb_tensor *a = nb_ctx_saved(ctx, 0), *b = nb_ctx_saved(ctx, 1), *s = nb_ctx_saved(ctx, 2);
    const nb_tensor *g = nb_contiguous(gout[0]);
    if (!a || !b || !s || !g) return false;
    for (int i = 0; i < 2; i++)
        if (nb_ctx_needs_input_grad(ctx, i) && !(gin[i] = nb_empty(a->dtype, a->ndim, a->shape)))
            return false;
    silu_gate_job job = {.a = nb_data(a),
                         .s = nb_data(s),
                         .b = nb_data(b),
                         .g = nb_data(g),
                         .da = gin[0] ? nb_data(gin[0]) : NULL,
                         .db = gin[1] ? nb_data(gin[1]) : NULL};
    return nb_parallel_for(nb_numel(a), SILU_GATE_GRAIN,
                           a->dtype == NB_F32 ? BLK_PICK(silu_gate_grad_float)
                                              : BLK_PICK(silu_gate_grad_double),
                           &job);
}

static const nb_function silu_gate_fn = {"silu_gate", silu_gate_forward, silu_gate_backward};

nb_tensor *blk_f_swiglu(const nb_tensor *x, const nb_tensor *w1, const nb_tensor *w3,
                        const nb_tensor *w2) {
    if (!x || !w1 || !w3 || !w2) return blk_null_argument("swiglu");
    if (x->ndim < 1 || w1->ndim != 2 || w3->ndim != 2 || w2->ndim != 2 ||
        w1->shape[1] != x->shape[x->ndim - 1] || !nb_same_shape(w1, w3) ||
        w2->shape[0] != w1->shape[1] || w2->shape[1] != w1->shape[0])
        return nb_error("swiglu",
                        "expects x [..., D], w1 and w3 [hidden, D], w2 [D, hidden], got x %s, "
                        "w1 %s, w3 %s, w2 %s",
                        nb_shape_text(x), nb_shape_text(w1), nb_shape_text(w3), nb_shape_text(w2));
    if (w1->dtype != w3->dtype)
        return nb_error("swiglu", "w1 %s and w3 %s differ in dtype", nb_dtype_name(w1->dtype),
                        nb_dtype_name(w3->dtype));
    const nb_tensor *gate_up[2] = {nb_f_linear(x, w1, NULL), nb_f_linear(x, w3, NULL)};
    if (!gate_up[0] || !gate_up[1]) return NULL;
    return nb_f_linear(nb_function_apply1(&silu_gate_fn, 2, gate_up, NULL), w2, NULL);
}

/* The module's forward: blk_f_swiglu's values, with w1 and w3 as one grouped product
 * (nb_linears_forward), so a decoded token's two products are one job split across threads,
 * not two. With no gradient to record, the gating too (nb_linear_gated_forward), each thread
 * gating the outputs it computed, where it was a pass of its own on the calling thread; its
 * silu is a / (1 + exp(-a)), one rounding fewer than silu_gate's a * sigmoid(a). */
static nb_tensor *swiglu_grouped(blk_swiglu *m, const nb_tensor *x) {
    if (!x) return blk_null_argument("swiglu");
    if (!nb_is_grad_enabled())
        return nb_f_linear(nb_linear_gated_forward(m->w1, m->w3, x, NB_ACT_SILU), m->w2->weight,
                           NULL);
    nb_tensor *gate_up[2];
    if (!nb_linears_forward(2, (nb_linear *[]){m->w1, m->w3}, x, gate_up)) return NULL;
    return nb_f_linear(
        nb_function_apply1(&silu_gate_fn, 2, (const nb_tensor *const *)gate_up, NULL),
        m->w2->weight, NULL);
}

blk_swiglu *blk_swiglu_new(nb_module *parent, const char *name, int64_t dim, int64_t hidden) {
    if (dim <= 0 || hidden <= 0)
        return nb_error("SwiGLU", "dim %lld and hidden %lld must be positive", (long long)dim,
                        (long long)hidden);
    blk_swiglu *m = nb_module_new(parent, name, "SwiGLU", sizeof *m);
    if (!m) return NULL;
    if (!(m->w1 = nb_linear_new(&m->base, "w1", dim, hidden, false)) ||
        !(m->w2 = nb_linear_new(&m->base, "w2", hidden, dim, false)) ||
        !(m->w3 = nb_linear_new(&m->base, "w3", dim, hidden, false)))
        return nb_module_discard(&m->base);
    return m;
}

nb_tensor *blk_swiglu_forward(blk_swiglu *m, const nb_tensor *x) {
    if (!m) return blk_null_argument("SwiGLU");
    nb_tensor *y = swiglu_grouped(m, x);
    if (!y && x) return blk_module_error(&m->base);
    return y;
}
