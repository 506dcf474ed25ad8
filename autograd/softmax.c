/* Softmax family: softmax and log_softmax over any dim, masked_fill, and the fused masked
 * softmax at the heart of attention. Forward and backward run on contiguous rows: the
 * reduced dim is swapped to the last place and made contiguous (free when it already is,
 * the attention case), exp runs through SLEEF on whole rows, sums accumulate in double. The
 * softmax and log_softmax rows run on the instruction set in use (softmax_isa.h, the softmax
 * rows shared with attention).
 *
 * Fully blocked rows. nb_masked_softmax gives zeros and zero gradient for a row whose
 * entries are all blocked (by the mask, the causal rule, or by being -inf already), where
 * PyTorch's softmax over a row of -inf gives NaN: a padded query then contributes nothing
 * instead of poisoning the whole batch. nb_softmax and nb_log_softmax keep PyTorch's result
 * (NaN) for an all -inf row, so they match it exactly; use nb_masked_softmax when rows may be
 * fully blocked. */
#include "node.h"
#include "../tensor/vecmath.h"
#include "softmax_isa.h"

#include <math.h>
#include <string.h>

/* ---- rows ---- */

/* t with dim d swapped into the last place, as contiguous rows (t itself when it already is). */
static nb_tensor *to_rows(const nb_tensor *t, int d) {
    if (d == t->ndim - 1) return nbt_contiguous(t);
    nb_tensor *swapped = nbt_transpose(t, d, -1);
    return swapped ? nbt_contiguous(swapped) : NULL;
}

/* Inverse of to_rows: the rows back in t's original dim order, contiguous. */
static nb_tensor *from_rows(nb_tensor *rows, int d) {
    if (d == rows->ndim - 1) return rows;
    nb_tensor *swapped = nbt_transpose(rows, d, -1);
    return swapped ? nbt_contiguous(swapped) : NULL;
}

static int64_t last_size(const nb_tensor *t) {
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}

/* Rows are independent, so slices of them run on separate threads with identical results.
 * A mask is read through a cursor that walks the rows in order, so masked plans stay on one
 * thread (the causal limit only needs the row index). */
#define ROW_GRAIN(n) (16384 / ((n) > 0 ? (n) : 1) + 1)

typedef struct {
    const softmax_plan *p;
    const char *x;
    char *y;
    nb_dtype dtype;
} softmax_job;

static void softmax_slice(int64_t begin, int64_t end, void *vjob) {
    const softmax_job *j = vjob;
    softmax_plan p = *j->p;
    p.rows = end - begin;
    p.row0 = j->p->row0 + begin;
    const size_t off = nbt_esize(j->dtype) * (size_t)(begin * p.n);
    nba_softmax_rows(&p, j->dtype, j->x + off, j->y + off);
}

static void run_softmax(const softmax_plan *p, const nb_tensor *x, nb_tensor *y) {
    softmax_job job = {p, nbt_ptr(x), nbt_ptr(y), x->dtype};
    if (p->mask)
        softmax_slice(0, p->rows, &job);
    else
        nbt_parallel_ranges(p->rows, ROW_GRAIN(p->n), softmax_slice, &job);
}

typedef struct {
    int64_t n;
    double scale;
    const char *y, *g;
    char *dx;
    nb_dtype dtype;
} softmax_backward_job;

static void softmax_backward_slice(int64_t begin, int64_t end, void *vjob) {
    const softmax_backward_job *j = vjob;
    const size_t off = nbt_esize(j->dtype) * (size_t)(begin * j->n);
    nba_softmax_backward_rows(j->dtype, end - begin, j->n, j->scale, false, 0, j->y + off,
                              j->g + off, j->dx + off);
}

/* dx (new, contiguous, y's layout) of a softmax whose output rows are y, for gradient g. */
static nb_tensor *softmax_backward_raw(const nb_tensor *y, const nb_tensor *gout, double scale) {
    nb_tensor *g = nbt_contiguous(gout);
    nb_tensor *dx = nbt_new("backward", y->dtype, y->ndim, y->shape);
    if (!g || !dx) return NULL;
    int64_t n = last_size(y), rows = n ? nbt_numel(y) / n : 0;
    softmax_backward_job job = {n, scale, nbt_ptr(y), nbt_ptr(g), nbt_ptr(dx), y->dtype};
    nbt_parallel_ranges(rows, ROW_GRAIN(n), softmax_backward_slice, &job);
    return dx;
}

/* Checks a float tensor with at least one dim and normalises dim; -1 with an error if not. */
static int row_dim(const char *op, const nb_tensor *a, int dim) {
    if (!nba_check_float(op, a)) return -1;
    if (a->ndim == 0) {
        nbt_error(op, "expected a tensor with at least 1 dim, got a 0-d tensor");
        return -1;
    }
    int d = nbt_dim(op, dim, a->ndim);
    if (d < 0) nbt_error(op, "dim %d is out of range for a tensor of shape %s", dim, nbt_shape(a));
    return d;
}

/* ---- softmax ---- */

/* saved[0]: the output as rows (dim i[0] last). */
static void softmax_backward(nb_node *n, const nb_tensor *gout) {
    int d = (int)n->i[0];
    nb_tensor *g = to_rows(gout, d);
    nb_tensor *dx = g ? softmax_backward_raw(n->saved[0], g, 1.0) : NULL;
    if (dx) nba_accumulate(n, 0, from_rows(dx, d));
}

nb_tensor *nb_softmax(const nb_tensor *a, int dim) {
    int d = row_dim("softmax", a, dim);
    if (d < 0) return NULL;
    nb_tensor *x = to_rows(a, d);
    nb_tensor *y = x ? nbt_new("softmax", a->dtype, x->ndim, x->shape) : NULL;
    if (!y) return NULL;
    int64_t n = last_size(x);
    softmax_plan plan = {.rows = n ? nbt_numel(x) / n : 0, .n = n, .scale = 1.0};
    run_softmax(&plan, x, y);
    nb_tensor *out = from_rows(y, d);
    nb_node *node = nba_record("softmax", out, 1, &a, softmax_backward);
    if (node) node->saved[0] = y, node->i[0] = d;
    return out;
}

/* ---- log_softmax ---- */

/* saved[0]: the output as rows (dim i[0] last). */
static void log_softmax_backward(nb_node *n, const nb_tensor *gout) {
    int d = (int)n->i[0];
    const nb_tensor *y = n->saved[0];
    nb_tensor *g = to_rows(gout, d);
    nb_tensor *dx = nbt_new("backward", y->dtype, y->ndim, y->shape);
    int64_t len = last_size(y), rows = len ? nbt_numel(y) / len : 0;
    nb_tensor *scratch = nbt_new("backward", y->dtype, 1, &len);
    if (!g || !dx || !scratch) return;
    nba_log_softmax_backward_rows(y->dtype, rows, len, nbt_ptr(y), nbt_ptr(g), nbt_ptr(dx),
                                  nbt_ptr(scratch));
    nba_accumulate(n, 0, from_rows(dx, d));
}

nb_tensor *nb_log_softmax(const nb_tensor *a, int dim) {
    int d = row_dim("log_softmax", a, dim);
    if (d < 0) return NULL;
    nb_tensor *x = to_rows(a, d);
    nb_tensor *y = x ? nbt_new("log_softmax", a->dtype, x->ndim, x->shape) : NULL;
    if (!y) return NULL;
    int64_t n = last_size(x), rows = n ? nbt_numel(x) / n : 0;
    nb_tensor *scratch = nbt_new("log_softmax", a->dtype, 1, &n);
    if (!scratch) return NULL;
    nba_log_softmax_rows(a->dtype, rows, n, nbt_ptr(x), nbt_ptr(y), nbt_ptr(scratch));
    nb_tensor *out = from_rows(y, d);
    nb_node *node = nba_record("log_softmax", out, 1, &a, log_softmax_backward);
    if (node) node->saved[0] = y, node->i[0] = d;
    return out;
}

/* ---- masked_fill ---- */

typedef struct {
    double value;
} fill_ctx;

/* operands: out, a, mask */
static void fill_f32(int64_t n, char **p, const int64_t *s, void *ctx) {
    const float v = (float)((const fill_ctx *)ctx)->value;
    for (int64_t i = 0; i < n; i++)
        *(float *)(p[0] + i * s[0]) =
            *(const uint8_t *)(p[2] + i * s[2]) ? v : *(const float *)(p[1] + i * s[1]);
}

static void fill_f64(int64_t n, char **p, const int64_t *s, void *ctx) {
    const double v = ((const fill_ctx *)ctx)->value;
    for (int64_t i = 0; i < n; i++)
        *(double *)(p[0] + i * s[0]) =
            *(const uint8_t *)(p[2] + i * s[2]) ? v : *(const double *)(p[1] + i * s[1]);
}

/* A new contiguous tensor: a where mask is false, value where it is true. */
static nb_tensor *masked_fill_raw(const char *op, const nb_tensor *a, const nb_tensor *mask,
                                  double value) {
    nb_tensor *out = nbt_new(op, a->dtype, a->ndim, a->shape);
    if (!out) return NULL;
    nbt_operands ops = {.nops = 3,
                        .base = {nbt_ptr(out), nbt_ptr(a), nbt_ptr(mask)},
                        .elem = {nbt_esize(a->dtype), nbt_esize(a->dtype), 1}};
    memcpy(ops.strides[0], out->strides, sizeof(int64_t) * (size_t)a->ndim);
    memcpy(ops.strides[1], a->strides, sizeof(int64_t) * (size_t)a->ndim);
    nbt_broadcast_strides(mask, a->ndim, a->shape, ops.strides[2]);
    fill_ctx ctx = {value};
    nbt_iterate(a->ndim, a->shape, &ops, a->dtype == NB_F32 ? fill_f32 : fill_f64, &ctx);
    return out;
}

/* saved[0]: the mask; the gradient passes only where nothing was filled. */
static void masked_fill_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, masked_fill_raw("backward", gout, n->saved[0], 0.0));
}

nb_tensor *nb_masked_fill(const nb_tensor *a, const nb_tensor *mask, double value) {
    if (!nba_check_inputs("masked_fill", 2, (const nb_tensor *[]){a, mask})) return NULL;
    if (!nba_check_float("masked_fill", a) ||
        !nba_check_mask("masked_fill", mask, a->ndim, a->shape, "the input's"))
        return NULL;
    nb_tensor *out = masked_fill_raw("masked_fill", a, mask, value);
    nb_node *node = nba_record("masked_fill", out, 1, &a, masked_fill_backward);
    if (node) node->saved[0] = (nb_tensor *)mask;
    return out;
}

/* ---- masked_softmax ---- */

/* saved[0]: the output (contiguous, a's shape); f[0]: the scale. */
static void masked_softmax_backward(nb_node *n, const nb_tensor *gout) {
    nba_accumulate(n, 0, softmax_backward_raw(n->saved[0], gout, n->f[0]));
}

nb_tensor *nb_masked_softmax(const nb_tensor *a, const nb_tensor *mask, bool causal, double scale) {
    const char *op = "masked_softmax";
    if (!nba_check_inputs(op, 1, &a) || row_dim(op, a, -1) < 0) return NULL;
    if (mask && !nba_check_mask(op, mask, a->ndim, a->shape, "the input's")) return NULL;
    if (causal && a->ndim < 2)
        return nbt_error(op, "causal masking needs a [..., queries, keys] tensor, got shape %s",
                         nbt_shape(a));
    if (!isfinite(scale))
        return nbt_error(op, "scale must be finite, got %g (input %s)", scale, nbt_shape(a));
    nb_tensor *x = nbt_contiguous(a);
    nb_tensor *y = x ? nbt_new(op, a->dtype, a->ndim, a->shape) : NULL;
    if (!y) return NULL;
    int64_t n = last_size(a);
    softmax_plan plan = {.rows = n ? nbt_numel(a) / n : 0,
                         .n = n,
                         .scale = scale,
                         .causal = causal,
                         .queries = causal ? a->shape[a->ndim - 2] : 1,
                         .zero_blocked_rows = true};
    if (mask) {
        int64_t strides[NB_MAX_DIMS];
        nbt_broadcast_strides(mask, a->ndim, a->shape, strides);
        plan.mask = (const uint8_t *)nbt_ptr(mask);
        plan.mask_step = strides[a->ndim - 1];
        plan.mask_rows.nd = a->ndim - 1;
        memcpy(plan.mask_rows.shape, a->shape, sizeof(int64_t) * (size_t)(a->ndim - 1));
        memcpy(plan.mask_rows.stride, strides, sizeof(int64_t) * (size_t)(a->ndim - 1));
    }
    run_softmax(&plan, x, y);
    nb_node *node = nba_record(op, y, 1, &a, masked_softmax_backward);
    if (node) node->saved[0] = y, node->f[0] = scale;
    return y;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h). Masks are built inside each function, so they are
 * constants of the check. ---- */
#include "op_def.h"

/* A bool mask from a literal: MASK(NB_SHAPE(2, 2), U8(1, 0, 0, 1)). */
#define U8(...) ((const uint8_t[]){__VA_ARGS__})
#define MASK(...) nb_from_array(NB_BOOL, __VA_ARGS__)

static nb_tensor *cat_softmax_last(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_softmax(in[0], -1);
}
static nb_tensor *cat_softmax_first(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_softmax(in[0], 0);
}
static nb_tensor *cat_softmax_middle(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_softmax(in[0], 1);
}
/* Broadcast input: every row reads the same [1, 4] leaf, so row gradients must add up. */
static nb_tensor *cat_softmax_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_softmax(nb_expand(in[0], NB_SHAPE(3, 4)), -1);
}
static nb_tensor *cat_log_softmax_last(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log_softmax(in[0], -1);
}
static nb_tensor *cat_log_softmax_first(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log_softmax(in[0], 0);
}
static nb_tensor *cat_log_softmax_middle(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log_softmax(in[0], 1);
}
static nb_tensor *cat_log_softmax_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log_softmax(nb_expand(in[0], NB_SHAPE(2, 3)), -1);
}

/* [3, 4] input, [4] mask broadcast over rows; a finite fill keeps the output finite. */
static nb_tensor *cat_masked_fill_row_mask(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_fill(in[0], MASK(NB_SHAPE(4), U8(0, 1, 0, 1)), 0.75);
}
/* [3, 4] input, [3, 1] mask broadcast over columns. */
static nb_tensor *cat_masked_fill_col_mask(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_fill(in[0], MASK(NB_SHAPE(3, 1), U8(1, 0, 0)), -2.0);
}
/* The PyTorch idiom: fill with -inf, then softmax; blocked entries get 0 and no gradient. */
static nb_tensor *cat_masked_fill_then_softmax(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(3, 4), U8(0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0));
    return nb_softmax(nb_masked_fill(in[0], mask, -INFINITY), -1);
}

static nb_tensor *cat_causal(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_softmax(in[0], NULL, true, 0.5);
}
/* Key padding: mask [2, 1, 1, 4] over scores [2, 2, 3, 4] (batch, heads, queries, keys). */
static nb_tensor *cat_padding(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(2, 1, 1, 4), U8(0, 0, 0, 1, 0, 0, 1, 1));
    return nb_masked_softmax(in[0], mask, false, 0.5);
}
/* Padding and causal together, with the second batch's keys all padded: its rows are fully
 * blocked and must give zeros and zero gradient. */
static nb_tensor *cat_padding_causal_blocked(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(2, 1, 4), U8(0, 0, 1, 0, 1, 1, 1, 1));
    return nb_masked_softmax(in[0], mask, true, 0.7);
}
/* A [3, 4] mask whose middle row is all true. */
static nb_tensor *cat_blocked_row(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(3, 4), U8(1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0));
    return nb_masked_softmax(in[0], mask, false, 1.0);
}
/* A per-key mask broadcast along the keys' own dim ([3, 1]): the first query sees nothing. */
static nb_tensor *cat_query_mask(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_softmax(in[0], MASK(NB_SHAPE(3, 1), U8(1, 0, 0)), false, 2.0);
}
static nb_tensor *cat_masked_softmax_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_masked_softmax(nb_expand(in[0], NB_SHAPE(2, 3, 3)), NULL, true, 1.0);
}

/* Golden runners: input "a" (and "mask"), parameters "dim", "value", "causal", "scale". */
static int golden_softmax(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_softmax(c->input(c, "a", true), (int)c->integer(c, "dim"));
    return 1;
}
static int golden_log_softmax(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_log_softmax(c->input(c, "a", true), (int)c->integer(c, "dim"));
    return 1;
}
static int golden_masked_fill(nba_golden_call *c, nb_tensor **out) {
    out[0] =
        nb_masked_fill(c->input(c, "a", true), c->input(c, "mask", true), c->number(c, "value"));
    return 1;
}
static int golden_masked_softmax(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_masked_softmax(c->input(c, "a", true), c->input(c, "mask", false),
                               c->flag(c, "causal"), c->number(c, "scale"));
    return 1;
}

#define NO_BROADCAST_ONE_INPUT "one input: nothing to broadcast"

/* clang-format off */
static const nba_entry softmax_entries[] = {
    {"softmax dim -1 [3,5]", NBA_RANDOM, cat_softmax_last, 1, {IN(3, 5)}, NULL},
    {"softmax dim -1 [2,40] (rows longer than NBA_SHORT_ROW)", NBA_RANDOM, cat_softmax_last, 1, {IN(2, 40)}, NULL},
    {"softmax dim -1 of a sliced [2,4]", NBA_STRIDED, cat_softmax_last, 1, {IN_S(2, 4)}, NULL},
    {"softmax dim 0 of a transposed [4,3]", NBA_STRIDED, cat_softmax_first, 1, {IN_T(4, 3)}, NULL},
    {"softmax dim 1 [2,3,4]", NBA_RANDOM, cat_softmax_middle, 1, {IN(2, 3, 4)}, NULL},
    {"softmax dim 1 of a sliced [2,3,2]", NBA_STRIDED, cat_softmax_middle, 1, {IN_S(2, 3, 2)}, NULL},
    {"softmax of [1,4] expanded to [3,4]", NBA_BROADCAST, cat_softmax_expanded, 1, {IN(1, 4)}, NULL},
};
/* Large logits: only a max-subtracted softmax stays finite. */
static const nba_golden_case softmax_cases[] = {
    {"a: [5]", "dim=0"},     {"a: [3,4]", "dim=-1"},   {"a: [3,4]", "dim=0"},
    {"a: [2,3,4]", "dim=1"}, {"a: [2,3,4]", "dim=-1"}, {"a: [2,5] scale 100", "dim=-1"}};
static const nba_golden softmax_goldens[] = {
    NBA_GOLDEN("softmax", golden_softmax, "F.softmax(a, dim=dim)", softmax_cases)};
NBA_OP_DEF(nba_op_softmax, "softmax", softmax_entries, softmax_goldens);

static const nba_entry log_softmax_entries[] = {
    {"log_softmax dim -1 [3,4]", NBA_RANDOM, cat_log_softmax_last, 1, {IN(3, 4)}, NULL},
    {"log_softmax dim -1 [2,40] (rows longer than NBA_SHORT_ROW)", NBA_RANDOM, cat_log_softmax_last, 1, {IN(2, 40)}, NULL},
    {"log_softmax dim -1 of a transposed [3,4]", NBA_STRIDED, cat_log_softmax_last, 1, {IN_T(3, 4)}, NULL},
    {"log_softmax dim 0 of a sliced [3,4]", NBA_STRIDED, cat_log_softmax_first, 1, {IN_S(3, 4)}, NULL},
    {"log_softmax dim 1 of a transposed [2,4,3]", NBA_STRIDED, cat_log_softmax_middle, 1, {IN_T(2, 4, 3)}, NULL},
    {"log_softmax of [3] expanded to [2,3] dim -1", NBA_BROADCAST, cat_log_softmax_expanded, 1, {IN(3)}, NULL},
};
static const nba_golden log_softmax_goldens[] = {
    NBA_GOLDEN("log_softmax", golden_log_softmax, "F.log_softmax(a, dim=dim)", softmax_cases)};
NBA_OP_DEF(nba_op_log_softmax, "log_softmax", log_softmax_entries, log_softmax_goldens);

static const nba_entry masked_fill_entries[] = {
    {"masked_fill [3,4] with a [4] mask", NBA_BROADCAST, cat_masked_fill_row_mask, 1, {IN(3, 4)}, NULL},
    {"masked_fill transposed [3,4] with a [3,1] mask", NBA_STRIDED, cat_masked_fill_col_mask, 1, {IN_T(3, 4)}, NULL},
    {"masked_fill sliced [3,4] with a [4] mask", NBA_STRIDED, cat_masked_fill_row_mask, 1, {IN_S(3, 4)}, NULL},
    {"masked_fill -inf then softmax [3,4]", NBA_RANDOM, cat_masked_fill_then_softmax, 1, {IN(3, 4)}, NULL},
};
static const nba_golden_case masked_fill_cases[] = {
    {"a: [3,4]; mask: bool [[0,1,0,0],[1,1,0,1],[0,0,0,0]]", "value=-1.5"},
    {"a: [2,3,4]; mask: bool [0,1,1,0]", "value=-inf"},
    {"a: [2,3,4]; mask: bool [[[1,0,0,1]],[[0,0,1,0]]]", "value=0.0"}};
static const nba_golden masked_fill_goldens[] = {
    NBA_GOLDEN("masked_fill", golden_masked_fill, "a.masked_fill(mask, value)", masked_fill_cases)};
NBA_OP_DEF(nba_op_masked_fill, "masked_fill", masked_fill_entries, masked_fill_goldens);

static const nba_entry masked_softmax_entries[] = {
    {"masked_softmax causal [2,4,4] scale 0.5", NBA_RANDOM, cat_causal, 1, {IN(2, 4, 4)}, NULL},
    {"masked_softmax causal [8,40] (rows longer than NBA_SHORT_ROW)", NBA_RANDOM, cat_causal, 1, {IN(8, 40)}, NULL},
    {"masked_softmax causal non-square [3,5]", NBA_STRIDED, cat_causal, 1, {IN_T(3, 5)}, NULL},
    {"masked_softmax padding mask [2,1,1,4] on [2,2,3,4]", NBA_BROADCAST, cat_padding, 1, {IN(2, 2, 3, 4)}, NULL},
    {"masked_softmax padding on a sliced [2,2,3,4]", NBA_STRIDED, cat_padding, 1, {IN_S(2, 2, 3, 4)}, NULL},
    {"masked_softmax padding + causal, fully blocked batch", NBA_STRIDED, cat_padding_causal_blocked, 1, {IN_T(2, 4, 4)}, NULL},
    {"masked_softmax with a fully blocked row [3,4]", NBA_RANDOM, cat_blocked_row, 1, {IN(3, 4)}, NULL},
    {"masked_softmax [3,1] mask broadcast over keys", NBA_STRIDED, cat_query_mask, 1, {IN_S(3, 4)}, NULL},
    {"masked_softmax causal of [3] expanded to [2,3,3]", NBA_BROADCAST, cat_masked_softmax_expanded, 1, {IN(3)}, NULL},
};
/* Key padding [B,1,1,T_k] as in attention (a fully padded batch), an attention mask [T_q,T_k]
 * with a fully blocked row, every row blocked. */
static const nba_golden_case masked_softmax_cases[] = {
    {"a: [3,5]", "causal=False, scale=1.0"},
    {"a: [2,4,4]", "causal=True, scale=0.5"},
    {"a: [2,3,5]", "causal=True, scale=1.0"},
    {"a: [2,5,3]", "causal=True, scale=1.0"},
    {"a: [2,2,3,4]; mask: bool [[[[0,0,1,1]]],[[[1,1,1,1]]]]", "causal=False, scale=0.7"},
    {"a: [2,2,4,4]; mask: bool [[[[0,0,0,1]]],[[[1,0,0,0]]]]", "causal=True, scale=0.7"},
    {"a: [2,3,4]; mask: bool [[0,1,0,0],[1,1,1,1],[0,0,0,0]]", "causal=False, scale=1.3"},
    {"a: [2,3,4]; mask: bool [[0,1,0,0],[1,1,0,1],[0,0,0,0]]", "causal=False, scale=1.0"},
    {"a: [3,4]; mask: bool [[1,1,1,1],[1,1,1,1],[1,1,1,1]]", "causal=False, scale=1.0"}};
static const nba_golden masked_softmax_goldens[] = {
    NBA_GOLDEN("masked_softmax", golden_masked_softmax, "masked_softmax_ref(a, mask, causal, scale)",
               masked_softmax_cases)};
NBA_OP_DEF(nba_op_masked_softmax, "masked_softmax", masked_softmax_entries, masked_softmax_goldens);
/* clang-format on */
#endif /* NABLA_TESTS */
