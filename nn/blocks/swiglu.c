/* SwiGLU feed-forward (Llama's MLP): w2(silu(w1 x) * w3 x), no biases. */
#include <nabla/blocks.h>
#include "errors.h"

/* silu(a) * b as one node (nabla's function API): op by op it took four nodes (sigmoid, two
 * products) and kept three [..., hidden] intermediates for backward. With s = sigmoid(a),
 * computed by nabla's vectorised nb_sigmoid and kept for backward:
 *   out = a s b,  da = g b s (1 + a (1 - s)),  db = g a s.
 * a and b are the two halves of each row of one product x [w1; w3]^T (one input
 * [..., 2 hidden], one gradient of it): two products packed x twice, and in backward made two
 * input gradients that autograd then added up, a pass over x's size. The loops run by rows on
 * nabla's threads (nb_parallel_for), each row its own, built once per instruction set
 * (simd_sets.h). */
typedef struct {
    const void *a, *s, *b, *g; /* s, g: [rows, h]; a, b: rows ld elements apart */
    void *out, *da, *db;       /* out [rows, h]; da, db as a and b */
    int64_t h, ld;
} silu_gate_job;

#define SILU_GATE(T, SET)                                                                          \
    static void silu_gate_##T##_##SET(void *ctx, int64_t begin, int64_t end) {                     \
        const silu_gate_job *j = ctx;                                                              \
        const int64_t h = j->h, ld = j->ld;                                                        \
        for (int64_t r = begin; r < end; r++) {                                                    \
            const T *a = (const T *)j->a + r * ld, *b = (const T *)j->b + r * ld,                  \
                    *s = (const T *)j->s + r * h;                                                  \
            T *out = (T *)j->out + r * h;                                                          \
            for (int64_t i = 0; i < h; i++) out[i] = a[i] * s[i] * b[i];                           \
        }                                                                                          \
    }                                                                                              \
    static void silu_gate_grad_##T##_##SET(void *ctx, int64_t begin, int64_t end) {                \
        const silu_gate_job *j = ctx;                                                              \
        const int64_t h = j->h, ld = j->ld;                                                        \
        for (int64_t r = begin; r < end; r++) {                                                    \
            const T *a = (const T *)j->a + r * ld, *b = (const T *)j->b + r * ld,                  \
                    *s = (const T *)j->s + r * h, *g = (const T *)j->g + r * h;                    \
            T *da = (T *)j->da + r * ld, *db = (T *)j->db + r * ld;                                \
            for (int64_t i = 0; i < h; i++) { /* one pass over g, a, s and b for both */           \
                da[i] = g[i] * b[i] * s[i] * (1 + a[i] * (1 - s[i]));                              \
                db[i] = g[i] * a[i] * s[i];                                                        \
            }                                                                                      \
        }                                                                                          \
    }
#define BLK_SET_BODIES(SET) SILU_GATE(float, SET) SILU_GATE(double, SET)
#include "simd_sets.h"

/* Rows per thread-worthy piece: about 16K elements, as nabla's own element-wise maps. */
static int64_t gate_grain(int64_t h) {
    return h < 16384 ? 16384 / (h ? h : 1) : 1;
}

static bool run_gate(silu_gate_job *job, nb_dtype dt, int64_t rows, bool backward) {
    nb_range_fn fn =
        dt == NB_F32 ? (backward ? BLK_PICK(silu_gate_grad_float) : BLK_PICK(silu_gate_float))
                     : (backward ? BLK_PICK(silu_gate_grad_double) : BLK_PICK(silu_gate_double));
    return nb_parallel_for(rows, gate_grain(job->h), fn, job);
}

/* input: the packed [..., 2h]. Saves it and s. */
static bool silu_gate_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                              nb_tensor **out) {
    (void)nin, (void)nout;
    const nb_tensor *p = nb_contiguous(in[0]);
    if (!p) return false;
    const int64_t width = p->shape[p->ndim - 1], h = width / 2;
    const int64_t rows = width ? nb_numel(p) / width : 0;
    int64_t shape[NB_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
    shape[p->ndim - 1] = h;
    /* sigmoid of the first half of each row (a view), written contiguous [..., h] */
    const nb_tensor *s = nb_sigmoid(nb_narrow(p, p->ndim - 1, 0, h));
    if (!s || !(out[0] = nb_empty(p->dtype, p->ndim, shape))) return false;
    silu_gate_job job = {.a = nb_data(p),
                         .s = nb_data(s),
                         .b = (const char *)nb_data(p) + (size_t)h * nb_dtype_size(p->dtype),
                         .out = nb_data(out[0]),
                         .h = h,
                         .ld = width};
    return run_gate(&job, p->dtype, rows, false) && nb_ctx_save(ctx, p) && nb_ctx_save(ctx, s);
}

static bool silu_gate_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                               nb_tensor **gin) {
    (void)nout, (void)nin;
    const nb_tensor *p = nb_ctx_saved(ctx, 0), *s = nb_ctx_saved(ctx, 1);
    const nb_tensor *g = nb_contiguous(gout[0]);
    if (!p || !s || !g) return false;
    if (!nb_ctx_needs_input_grad(ctx, 0)) return true;
    if (!(gin[0] = nb_empty(p->dtype, p->ndim, p->shape))) return false;
    const int64_t h = s->shape[s->ndim - 1];
    const size_t half = (size_t)h * nb_dtype_size(p->dtype); /* b's offset in a row */
    silu_gate_job job = {.a = nb_data(p),
                         .s = nb_data(s),
                         .b = (const char *)nb_data(p) + half,
                         .g = nb_data(g),
                         .da = nb_data(gin[0]),
                         .db = (char *)nb_data(gin[0]) + half,
                         .h = h,
                         .ld = p->shape[p->ndim - 1]};
    return run_gate(&job, p->dtype, h ? nb_numel(g) / h : 0, true);
}

static const nb_function silu_gate_fn = {"silu_gate", silu_gate_forward, silu_gate_backward};

/* w2(silu(a) * b) with a and b the halves of x [w1; w3]^T: one product and one gate node. */
static nb_tensor *swiglu_packed(const nb_tensor *x, nb_tensor *w1, nb_tensor *w3,
                                const nb_tensor *w2) {
    /* [2 hidden, D]: a copy of the weights each call, small beside the products */
    nb_tensor *w = nb_concat(2, (nb_tensor *[]){w1, w3}, 0);
    nb_tensor *packed = w ? nb_f_linear(x, w, NULL) : NULL; /* [..., 2 hidden] */
    if (!packed) return NULL;
    return nb_f_linear(nb_function_apply1(&silu_gate_fn, 1, (const nb_tensor *[]){packed}, NULL),
                       w2, NULL);
}

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
    return swiglu_packed(x, (nb_tensor *)w1, (nb_tensor *)w3, w2);
}

/* The module's forward: blk_f_swiglu's values. Training packs w1 and w3 into one product
 * (swiglu_packed). With no gradient to record (decoding), w1 and w3 and the gating are one
 * job (nb_linear_gated_forward), each thread gating the outputs it computed, with no copy of
 * the weights; its silu is a / (1 + exp(-a)), one rounding fewer than silu_gate's
 * a * sigmoid(a). */
static nb_tensor *swiglu_grouped(blk_swiglu *m, const nb_tensor *x) {
    if (!x) return blk_null_argument("swiglu");
    if (!nb_is_grad_enabled())
        return nb_f_linear(nb_linear_gated_forward(m->w1, m->w3, x, NB_ACT_SILU), m->w2->weight,
                           NULL);
    return blk_f_swiglu(x, m->w1->weight, m->w3->weight, m->w2->weight);
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
