/* Rotary position embeddings, rotate-half convention (Hugging Face's Llama layout). */
#include <nabla/blocks.h>
#include "errors.h"
#include "rope_head.h"

#include <math.h>

/* cos and sin of every position's angles, [T, hd / 2] each: pair i of position offset + t
 * turns by (offset + t) * base^(-2i/hd). Computed in double and rounded to dt as stored (two
 * tensors, where a double pair converted to dt took four). */
#define FILL_TABLES(T_)                                                                            \
    static void fill_tables_##T_(T_ *cd, T_ *sd, int64_t T, int64_t hd, int64_t offset,            \
                                 double base) {                                                    \
        const int64_t half = hd / 2;                                                               \
        for (int64_t i = 0; i < half; i++) {                                                       \
            double inv_freq = pow(base, -(double)(2 * i) / (double)hd);                            \
            for (int64_t t = 0; t < T; t++) {                                                      \
                double angle = (double)(offset + t) * inv_freq;                                    \
                cd[t * half + i] = (T_)cos(angle);                                                 \
                sd[t * half + i] = (T_)sin(angle);                                                 \
            }                                                                                      \
        }                                                                                          \
    }
FILL_TABLES(float)
FILL_TABLES(double)

bool blk_rope_tables_make(nb_dtype dt, int64_t T, int64_t hd, int64_t offset, double base,
                          blk_rope_tables *out) {
    if (dt != NB_F32 && dt != NB_F64)
        return nb_error("rope", "tables are float32 or float64, not %s", nb_dtype_name(dt)), false;
    out->cos = nb_empty(dt, NB_SHAPE(T, hd / 2));
    out->sin = nb_empty(dt, NB_SHAPE(T, hd / 2));
    if (!out->cos || !out->sin) return false;
    if (dt == NB_F32)
        fill_tables_float(nb_data(out->cos), nb_data(out->sin), T, hd, offset, base);
    else
        fill_tables_double(nb_data(out->cos), nb_data(out->sin), T, hd, offset, base);
    return true;
}

/* The rotation as one node (nabla's function API); op by op (two narrows, a concat, two
 * products and a sum) it kept four copies of x for backward. A contiguous x is rows of hd;
 * row r holds position (r / inner) % T, inner being the rows between two positions. With
 * (a, b) a pair and (c, s) its cos and sin:
 *   out = (a c - b s, b c + a s),  d(a, b) = (g_a c + g_b s, g_b c - g_a s)
 * (the backward is the rotation by minus the angle). */
typedef struct {
    const void *x, *cos_t, *sin_t;
    void *y;
    int64_t inner, T, half;
    double sign; /* -1 rotates backwards (the backward) */
} rope_job;

/* Rows begin..end-1 of the rotation, on nabla's threads (nb_parallel_for): each row its own. */
#define ROPE_ROWS(T_)                                                                              \
    static void rope_rows_##T_(void *ctx, int64_t begin, int64_t end) {                            \
        const rope_job *j = ctx;                                                                   \
        const int64_t half = j->half;                                                              \
        const T_ *x = (const T_ *)j->x + begin * 2 * half, *cos_t = j->cos_t, *sin_t = j->sin_t;   \
        T_ *y = (T_ *)j->y + begin * 2 * half, sign = (T_)j->sign;                                 \
        for (int64_t r = begin; r < end; r++, x += 2 * half, y += 2 * half) {                      \
            int64_t pos = (r / j->inner) % j->T;                                                   \
            rope_head_##T_(x, y, cos_t + pos * half, sin_t + pos * half, half, sign);              \
        }                                                                                          \
    }
ROPE_ROWS(float)
ROPE_ROWS(double)

/* Rotates x's rows into a new tensor; sign -1 rotates backwards (the backward). */
static nb_tensor *rotate(const nb_tensor *x, const nb_tensor *c, const nb_tensor *s, int64_t inner,
                         double sign) {
    nb_tensor *y = nb_empty(x->dtype, x->ndim, x->shape);
    if (!y) return NULL;
    int64_t hd = x->shape[x->ndim - 1], rows = hd ? nb_numel(x) / hd : 0;
    rope_job job = {nb_data(x), nb_data(c),  nb_data(s), nb_data(y),
                    inner,      c->shape[0], hd / 2,     sign};
    int64_t grain = hd < 8192 ? 8192 / (hd ? hd : 1) : 1; /* rows: about 8K elements */
    if (!nb_parallel_for(rows, grain, x->dtype == NB_F32 ? rope_rows_float : rope_rows_double,
                         &job))
        return NULL;
    return y;
}

/* inputs: x, cos, sin (tables do not need grad); user: the rows between two positions */
static bool rope_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                         nb_tensor **out) {
    (void)nin, (void)nout;
    int64_t inner = *(const int64_t *)nb_ctx_user(ctx);
    const nb_tensor *x = nb_contiguous(in[0]);
    return x && (out[0] = rotate(x, in[1], in[2], inner, 1)) && nb_ctx_save(ctx, in[1]) &&
           nb_ctx_save(ctx, in[2]) && nb_ctx_save_scalar(ctx, (double)inner);
}

static bool rope_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                          nb_tensor **gin) {
    (void)nout, (void)nin;
    const nb_tensor *g = nb_contiguous(gout[0]);
    const nb_tensor *c = nb_ctx_saved(ctx, 0), *s = nb_ctx_saved(ctx, 1);
    if (!g || !c || !s) return false;
    gin[0] = rotate(g, c, s, (int64_t)nb_ctx_scalar(ctx, 0), -1);
    return gin[0] != NULL;
}

static const nb_function rope_fn = {"rope", rope_forward, rope_backward};

/* Checks x, offset and base for a rotation along seq_dim; returns seq_dim as a dim index, or
 * -1 with an error. */
static int checked_seq_dim(const nb_tensor *x, int seq_dim, int64_t offset, double base) {
    int d = seq_dim < 0 ? seq_dim + x->ndim : seq_dim;
    if (!nb_is_float(x) || x->ndim < 2 || d < 0 || d >= x->ndim - 1)
        return nb_error("rope",
                        "expects a float tensor [..., T, ..., hd] with positions along a dim "
                        "before the last, got %s %s and seq_dim %d",
                        nb_dtype_name(x->dtype), nb_shape_text(x), seq_dim),
               -1;
    if (x->shape[x->ndim - 1] % 2 != 0)
        return nb_error("rope", "head dim (last of %s) must be even", nb_shape_text(x)), -1;
    if (offset < 0 || !(base > 0))
        return nb_error("rope", "needs offset >= 0 and base > 0, got %lld and %g",
                        (long long)offset, base),
               -1;
    return d;
}

/* Rotates x (checked) with tables made for it. */
static nb_tensor *rope_with(const nb_tensor *x, int d, const blk_rope_tables *tables) {
    int64_t inner = 1; /* rows of hd between two positions */
    for (int k = d + 1; k < x->ndim - 1; k++) inner *= x->shape[k];
    /* inner travels as the user pointer: only forward reads it, before this returns */
    return nb_function_apply1(&rope_fn, 3, (const nb_tensor *[]){x, tables->cos, tables->sin},
                              &inner);
}

nb_tensor *blk_rope(const nb_tensor *x, int seq_dim, int64_t offset, double base) {
    if (!x) return blk_null_argument("rope");
    int d = checked_seq_dim(x, seq_dim, offset, base);
    blk_rope_tables tables;
    if (d < 0 ||
        !blk_rope_tables_make(x->dtype, x->shape[d], x->shape[x->ndim - 1], offset, base, &tables))
        return NULL;
    return rope_with(x, d, &tables);
}

nb_tensor *blk_rope_apply(const nb_tensor *x, int seq_dim, const blk_rope_tables *tables) {
    if (!x || !tables || !tables->cos || !tables->sin) return blk_null_argument("rope");
    int d = checked_seq_dim(x, seq_dim, 0, 1);
    if (d < 0) return NULL;
    const nb_tensor *c = tables->cos;
    if (c->dtype != x->dtype || c->ndim != 2 || c->shape[0] != x->shape[d] ||
        2 * c->shape[1] != x->shape[x->ndim - 1])
        return nb_error("rope", "tables %s %s do not fit x %s %s along dim %d",
                        nb_dtype_name(c->dtype), nb_shape_text(c), nb_dtype_name(x->dtype),
                        nb_shape_text(x), seq_dim);
    return rope_with(x, d, tables);
}
