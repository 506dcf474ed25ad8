/* Inverted dropout with an explicit generator.
 *
 * In training with 0 < p < 1 it draws numel(x) uniforms from rng, in x's row-major order,
 * and keeps element k when the k-th draw is >= p, scaling kept elements by 1/(1-p): the same
 * seed gives the same mask, whatever x's dtype or layout. p = 1 is allowed, as in PyTorch,
 * and gives zeros with a zero gradient. p = 0 in training and every p in eval return x as a
 * differentiable view; these cases draw nothing and rng may be NULL. A p outside [0, 1], or
 * NaN, is an error. */
#include "node.h"

#include <math.h>
#include <string.h>

typedef struct {
    double scale;
} keep_ctx;

/* operands: out, in, keep mask: out = keep ? in * scale : 0 (never in * 0, which NaNs on inf). */
static void apply_f32(int64_t n, char **p, const int64_t *s, void *ctx) {
    const float scale = (float)((const keep_ctx *)ctx)->scale;
    for (int64_t i = 0; i < n; i++)
        *(float *)(p[0] + i * s[0]) =
            *(const uint8_t *)(p[2] + i * s[2]) ? *(const float *)(p[1] + i * s[1]) * scale : 0.0f;
}

static void apply_f64(int64_t n, char **p, const int64_t *s, void *ctx) {
    const double scale = ((const keep_ctx *)ctx)->scale;
    for (int64_t i = 0; i < n; i++)
        *(double *)(p[0] + i * s[0]) =
            *(const uint8_t *)(p[2] + i * s[2]) ? *(const double *)(p[1] + i * s[1]) * scale : 0.0;
}

/* A new contiguous tensor: in * scale where keep (contiguous, in's shape) is true, else 0. */
static nb_tensor *apply_mask(const char *op, const nb_tensor *in, const nb_tensor *keep,
                             double scale) {
    nb_tensor *out = nbt_new(op, in->dtype, in->ndim, in->shape);
    if (!out) return NULL;
    nbt_operands ops = {.nops = 3,
                        .base = {nbt_ptr(out), nbt_ptr(in), nbt_ptr(keep)},
                        .elem = {nbt_esize(in->dtype), nbt_esize(in->dtype), 1}};
    memcpy(ops.strides[0], out->strides, sizeof(int64_t) * (size_t)in->ndim);
    memcpy(ops.strides[1], in->strides, sizeof(int64_t) * (size_t)in->ndim);
    memcpy(ops.strides[2], keep->strides, sizeof(int64_t) * (size_t)in->ndim);
    keep_ctx ctx = {scale};
    nbt_iterate(in->ndim, in->shape, &ops, in->dtype == NB_F32 ? apply_f32 : apply_f64, &ctx);
    return out;
}

/* saved[0]: the keep mask; f[0]: the scale of kept elements. */
static void dropout_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, apply_mask("backward", gout, n->saved[0], n->f[0]));
}

static void identity_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, gout);
}

nb_tensor *nb_f_dropout(nb_rng *rng, const nb_tensor *x, double p, bool train) {
    const char *op = "dropout";
    if (!nba_check_inputs(op, 1, &x) || !nba_check_float(op, x)) return NULL;
    if (!(p >= 0 && p <= 1))
        return nbt_error(op, "probability p must be in [0, 1], got %g (input %s)", p, nbt_shape(x));
    if (!train || p == 0) {
        nb_tensor *out = nbt_alias(x, x->ndim, x->shape, x->strides, x->offset);
        nba_record(op, out, 1, &x, identity_backward);
        return out;
    }
    if (p < 1 && !rng)
        return nbt_error(op, "training with p = %g needs a generator, got NULL rng (input %s)", p,
                         nbt_shape(x));
    nb_tensor *keep = nbt_new(op, NB_BOOL, x->ndim, x->shape);
    if (!keep) return NULL;
    uint8_t *kv = (uint8_t *)nbt_ptr(keep);
    int64_t count = nbt_numel(x);
    if (p == 1)
        memset(kv, 0, (size_t)count);
    else
        for (int64_t k = 0; k < count; k++) kv[k] = nb_rng_uniform(rng) >= p;
    double scale = p == 1 ? 0.0 : 1.0 / (1.0 - p);
    nb_tensor *out = apply_mask(op, x, keep, scale);
    nb_node *n = nba_record(op, out, 1, &x, dropout_backward);
    if (n) n->saved[0] = keep, n->f[0] = scale;
    return out;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h): each call re-seeds its own generator, so every
 * finite-difference evaluation sees the same mask ---- */
#include "op_def.h"

static nb_tensor *cat_train(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_rng rng;
    nb_rng_seed(&rng, 99);
    return nb_f_dropout(&rng, in[0], 0.4, true);
}
static nb_tensor *cat_eval(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_dropout(NULL, in[0], 0.4, false);
}
static nb_tensor *cat_all(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_dropout(NULL, in[0], 1.0, true);
}

/* Only eval mode and p = 0 have goldens: nabla's generator is not PyTorch's. */
static int golden_dropout(nba_golden_call *c, nb_tensor **out) {
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    out[0] = nb_f_dropout(&rng, c->input(c, "a", true), c->number(c, "p"), c->flag(c, "train"));
    return 1;
}

/* clang-format off */
static const nba_entry dropout_entries[] = {
    {"dropout train p=0.4 fixed seed [4,5]", NBA_RANDOM, cat_train, 1, {IN(4, 5)}, NULL},
    {"dropout train p=0.4 fixed seed, transposed [4,5]", NBA_STRIDED, cat_train, 1, {IN_T(4, 5)}, NULL},
    {"dropout eval sliced [3,4]", NBA_STRIDED, cat_eval, 1, {IN_S(3, 4)}, NULL},
    {"dropout p=1 gives zeros [3]", NBA_RANDOM, cat_all, 1, {IN(3)}, NULL},
};
/* clang-format on */
static const nba_golden_case dropout_cases[] = {{"a: [3,4]", "p=0.5, train=False"},
                                                {"a: [3,4]", "p=0.0, train=True"}};
static const nba_golden dropout_goldens[] = {
    NBA_GOLDEN("f_dropout", golden_dropout, "F.dropout(a, p, train)", dropout_cases)};
NBA_OP_DEF(nba_op_dropout, "dropout", dropout_entries, dropout_goldens,
           .not_applicable = {[NBA_BROADCAST] = "one input: nothing to broadcast"});
#endif /* NABLA_TESTS */
