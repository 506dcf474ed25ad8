/* Comparisons returning bool tensors, counting, argmax and accuracy: what evaluation code
 * reaches for (PyTorch's ==, <, count_nonzero, argmax). None of them records autograd. */
#include "nbt.h"
#include "reduce_kernels.h"

#include <math.h>

typedef enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_COUNT } cmp_op;
static const char *const cmp_names[] = {[CMP_EQ] = "eq", [CMP_NE] = "ne", [CMP_LT] = "lt",
                                        [CMP_LE] = "le", [CMP_GT] = "gt", [CMP_GE] = "ge"};
_Static_assert(sizeof cmp_names / sizeof cmp_names[0] == CMP_COUNT, "a name per cmp_op");

#define APPLY(op, x, y)                                                                            \
    ((op) == CMP_EQ   ? (x) == (y)                                                                 \
     : (op) == CMP_NE ? (x) != (y)                                                                 \
     : (op) == CMP_LT ? (x) < (y)                                                                  \
     : (op) == CMP_LE ? (x) <= (y)                                                                 \
     : (op) == CMP_GT ? (x) > (y)                                                                  \
                      : (x) >= (y))

typedef struct {
    cmp_op op;
    nb_dtype a, b;
} cmp_ctx;

/* Same dtype T on both sides: compared as T (NaN compares false except with ne). */
#define DEFINE_SAME(T, SUF)                                                                        \
    static void cmp_##SUF(int64_t n, char **p, const int64_t *s, void *vctx) {                     \
        const cmp_op op = ((const cmp_ctx *)vctx)->op;                                             \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T x = *(const T *)(p[1] + i * s[1]), y = *(const T *)(p[2] + i * s[2]);                \
            *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)APPLY(op, x, y);                              \
        }                                                                                          \
    }
DEFINE_SAME(float, f32)
DEFINE_SAME(double, f64)
DEFINE_SAME(int64_t, i64)
DEFINE_SAME(uint8_t, bool)

static void cmp_mixed(int64_t n, char **p, const int64_t *s, void *vctx) {
    const cmp_ctx *c = vctx;
    for (int64_t i = 0; i < n; i++) {
        double x = nbt_load_double(p[1] + i * s[1], c->a),
               y = nbt_load_double(p[2] + i * s[2], c->b);
        *(uint8_t *)(p[0] + i * s[0]) = (uint8_t)APPLY(c->op, x, y);
    }
}

static nb_tensor *compare(cmp_op op, const nb_tensor *a, const nb_tensor *b) {
    const char *name = cmp_names[op];
    if (!a || !b) return nbt_error(name, "NULL input");
    if (!nbt_check_live(name, a) || !nbt_check_live(name, b)) return NULL;
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (!nbt_broadcast_shape(name, a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) return NULL;
    nb_tensor *out = nbt_new(name, NB_BOOL, nd, shape);
    if (!out) return NULL;
    nbt_operands ops = {.nops = 3,
                        .base = {nbt_ptr(out), nbt_ptr(a), nbt_ptr(b)},
                        .elem = {1, nbt_esize(a->dtype), nbt_esize(b->dtype)}};
    for (int i = 0; i < nd; i++) ops.strides[0][i] = out->strides[i];
    nbt_broadcast_strides(a, nd, shape, ops.strides[1]);
    nbt_broadcast_strides(b, nd, shape, ops.strides[2]);
    cmp_ctx ctx = {op, a->dtype, b->dtype};
    static const nbt_inner_fn same[] = {
        [NB_F32] = cmp_f32, [NB_F64] = cmp_f64, [NB_I64] = cmp_i64, [NB_BOOL] = cmp_bool};
    _Static_assert(sizeof same / sizeof same[0] == NB_BOOL + 1, "a loop per dtype");
    nbt_iterate(nd, shape, &ops, a->dtype == b->dtype ? same[a->dtype] : cmp_mixed, &ctx);
    return out;
}

nb_tensor *nb_eq(const nb_tensor *a, const nb_tensor *b) {
    return compare(CMP_EQ, a, b);
}
nb_tensor *nb_ne(const nb_tensor *a, const nb_tensor *b) {
    return compare(CMP_NE, a, b);
}
nb_tensor *nb_lt(const nb_tensor *a, const nb_tensor *b) {
    return compare(CMP_LT, a, b);
}
nb_tensor *nb_le(const nb_tensor *a, const nb_tensor *b) {
    return compare(CMP_LE, a, b);
}
nb_tensor *nb_gt(const nb_tensor *a, const nb_tensor *b) {
    return compare(CMP_GT, a, b);
}
nb_tensor *nb_ge(const nb_tensor *a, const nb_tensor *b) {
    return compare(CMP_GE, a, b);
}

typedef struct {
    nb_dtype dtype;
    int64_t total;
} count_ctx;

static void count_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    count_ctx *c = vctx;
    for (int64_t i = 0; i < n; i++) c->total += nbt_load_double(p[0] + i * s[0], c->dtype) != 0;
}

int64_t nb_count_nonzero(const nb_tensor *t) {
    if (!t) return nbt_error("count_nonzero", "NULL input"), -1;
    if (!nbt_check_live("count_nonzero", t)) return -1;
    count_ctx ctx = {t->dtype, 0};
    nbt_operands ops = {.nops = 1, .base = {nbt_ptr(t)}, .elem = {nbt_esize(t->dtype)}};
    for (int i = 0; i < t->ndim; i++) ops.strides[0][i] = t->strides[i];
    nbt_iterate(t->ndim, t->shape, &ops, count_inner, &ctx);
    return ctx.total;
}

nb_tensor *nb_argmax(const nb_tensor *a, int dim, bool keepdim) {
    if (!a) return nbt_error("argmax", "NULL input");
    if (!nbt_check_live("argmax", a)) return NULL;
    if (a->ndim == 0) return nbt_error("argmax", "needs at least one dim, got a 0-d tensor");
    int d = nbt_dim("argmax", dim, a->ndim);
    if (d < 0) return NULL;
    if (a->shape[d] == 0)
        return nbt_error("argmax", "cannot take the argmax over dim %d of size 0 (shape %s)", dim,
                         nbt_shape(a));
    /* Integers and bools compare as doubles (exact below 2^53). */
    const nb_tensor *x = nb_is_float(a) ? a : nbt_contiguous_as(a, NB_F64);
    nb_tensor *values, *indices;
    if (!x || !nbt_max_dim(x, d, keepdim, &values, &indices)) return NULL;
    return indices;
}

double nb_accuracy(const nb_tensor *logits, const nb_tensor *target, int64_t ignore_index) {
    if (!logits || !target) return nbt_error("accuracy", "NULL input"), -1;
    if (!nbt_check_live("accuracy", logits) || !nbt_check_live("accuracy", target)) return -1;
    if (!nb_is_float(logits) || logits->ndim < 1 || target->dtype != NB_I64 ||
        target->ndim != logits->ndim - 1)
        return nbt_error("accuracy",
                         "expects float logits [..., C] and int64 targets [...], got "
                         "%s %s and %s %s",
                         nb_dtype_name(logits->dtype), nbt_shape(logits),
                         nb_dtype_name(target->dtype), nbt_shape(target)),
               -1;
    for (int i = 0; i < target->ndim; i++)
        if (target->shape[i] != logits->shape[i])
            return nbt_error("accuracy", "logits %s and targets %s disagree in dim %d",
                             nbt_shape(logits), nbt_shape(target), i),
                   -1;
    nb_scope_begin();
    nb_tensor *pred = nb_argmax(logits, -1, false);
    if (pred) pred = nbt_contiguous(pred);
    nb_tensor *want = nbt_contiguous(target);
    int64_t right = 0, counted = 0, n = pred && want ? nbt_numel(want) : -1;
    const int64_t *p = pred ? nb_data(pred) : NULL, *w = want ? nb_data(want) : NULL;
    for (int64_t i = 0; i < n; i++) {
        counted += w[i] != ignore_index;
        right += w[i] != ignore_index && p[i] == w[i];
    }
    nb_scope_end();
    if (n < 0) return -1;
    return counted ? (double)right / (double)counted : NAN;
}
