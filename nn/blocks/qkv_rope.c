/* The attention's queries, keys and values out of one product: x [w_q; w_k; w_v]^T gives a
 * [B, T, (H + 2 KV) hd] tensor, and one node splits it into q [B, T, H, hd] and k [B, T, KV, hd]
 * rotated by RoPE and v [B, T, KV, hd]. Three products (each with its own job, its own packing
 * of x, and in backward two gradient sums of x) and two rotations (a job each way) were one
 * product and one job each way. The backward writes the projection's gradient [B, T, (H + 2 KV)
 * hd] whole: q's and k's gradients rotated back, v's copied, so the three heads' gradients
 * reach the product as one tensor (through views, each would be summed into a tensor of
 * zeros). */
#include <nabla/blocks.h>
#include "errors.h"
#include "qkv_rope.h"
#include "rope_head.h"

#include <string.h>

/* The rows (tokens) of the packed projection and the three outputs; forward reads p and writes
 * q, k, v; backward (sign -1) reads q, k, v (their gradients) and writes p. */
typedef struct {
    void *p, *q, *k, *v;
    const void *cos_t, *sin_t;
    int64_t T, H, KV, hd;
    double sign;
} qkv_rope_job;

/* Token rows begin..end-1 (each its own, on nabla's threads). */
#define QKV_ROPE_ROWS(T_, SET)                                                                     \
    static void qkv_rope_rows_##T_##_##SET(void *ctx, int64_t begin, int64_t end) {                \
        const qkv_rope_job *j = ctx;                                                               \
        const int64_t hd = j->hd, half = hd / 2, width = (j->H + 2 * j->KV) * hd;                  \
        const bool forward = j->sign > 0;                                                          \
        const T_ sign = (T_)j->sign;                                                               \
        for (int64_t r = begin; r < end; r++) {                                                    \
            const int64_t pos = r % j->T;                                                          \
            const T_ *c = (const T_ *)j->cos_t + pos * half,                                       \
                     *s = (const T_ *)j->sin_t + pos * half;                                       \
            T_ *p = (T_ *)j->p + r * width, *q = (T_ *)j->q + r * j->H * hd,                       \
               *k = (T_ *)j->k + r * j->KV * hd, *v = (T_ *)j->v + r * j->KV * hd;                 \
            for (int64_t h = 0; h < j->H + j->KV; h++) {                                           \
                T_ *head = h < j->H ? q + h * hd : k + (h - j->H) * hd;                            \
                if (forward)                                                                       \
                    rope_head_##T_(p + h * hd, head, c, s, half, sign);                            \
                else                                                                               \
                    rope_head_##T_(head, p + h * hd, c, s, half, sign);                            \
            }                                                                                      \
            T_ *packed_v = p + (j->H + j->KV) * hd;                                                \
            if (forward)                                                                           \
                memcpy(v, packed_v, sizeof(T_) * (size_t)(j->KV * hd));                            \
            else                                                                                   \
                memcpy(packed_v, v, sizeof(T_) * (size_t)(j->KV * hd));                            \
        }                                                                                          \
    }
/* built once per instruction set (simd_sets.h), the same bits in each */
#define BLK_SET_BODIES(SET) QKV_ROPE_ROWS(float, SET) QKV_ROPE_ROWS(double, SET)
#include "simd_sets.h"

/* Runs the job over rows token rows, about 8K elements a piece. */
static bool run_rows(qkv_rope_job *job, nb_dtype dt, int64_t rows) {
    const int64_t width = (job->H + 2 * job->KV) * job->hd;
    return nb_parallel_for(
        rows, width < 8192 ? 8192 / width : 1,
        dt == NB_F32 ? BLK_PICK(qkv_rope_rows_float) : BLK_PICK(qkv_rope_rows_double), job);
}

/* inputs: the packed projection, cos, sin; user: the head counts, {H, KV} */
static bool qkv_rope_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                             nb_tensor **out) {
    (void)nin, (void)nout;
    const int64_t *heads = nb_ctx_user(ctx);
    const nb_tensor *p = nb_contiguous(in[0]), *c = in[1];
    if (!p) return false;
    const int64_t B = p->shape[0], T = p->shape[1], hd = 2 * c->shape[1];
    if (!(out[0] = nb_empty(p->dtype, NB_SHAPE(B, T, heads[0], hd))) ||
        !(out[1] = nb_empty(p->dtype, NB_SHAPE(B, T, heads[1], hd))) ||
        !(out[2] = nb_empty(p->dtype, NB_SHAPE(B, T, heads[1], hd))))
        return false;
    qkv_rope_job job = {nb_data(p),
                        nb_data(out[0]),
                        nb_data(out[1]),
                        nb_data(out[2]),
                        nb_data(c),
                        nb_data(in[2]),
                        T,
                        heads[0],
                        heads[1],
                        hd,
                        1};
    return run_rows(&job, p->dtype, B * T) && nb_ctx_save(ctx, c) && nb_ctx_save(ctx, in[2]) &&
           nb_ctx_save_scalar(ctx, (double)heads[0]) && nb_ctx_save_scalar(ctx, (double)heads[1]);
}

static bool qkv_rope_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                              nb_tensor **gin) {
    (void)nout, (void)nin;
    const nb_tensor *gq = nb_contiguous(gout[0]), *gk = nb_contiguous(gout[1]),
                    *gv = nb_contiguous(gout[2]);
    const nb_tensor *c = nb_ctx_saved(ctx, 0), *s = nb_ctx_saved(ctx, 1);
    if (!gq || !gk || !gv || !c || !s) return false;
    const int64_t B = gq->shape[0], T = gq->shape[1], H = (int64_t)nb_ctx_scalar(ctx, 0),
                  KV = (int64_t)nb_ctx_scalar(ctx, 1), hd = 2 * c->shape[1];
    if (!(gin[0] = nb_empty(gq->dtype, NB_SHAPE(B, T, (H + 2 * KV) * hd)))) return false;
    qkv_rope_job job = {nb_data(gin[0]),
                        (void *)nb_data(gq),
                        (void *)nb_data(gk),
                        (void *)nb_data(gv),
                        nb_data(c),
                        nb_data(s),
                        T,
                        H,
                        KV,
                        hd,
                        -1};
    return run_rows(&job, gq->dtype, B * T);
}

static const nb_function qkv_rope_fn = {"qkv_rope", qkv_rope_forward, qkv_rope_backward};

bool blk_qkv_rope(const nb_tensor *x, nb_tensor *wq, nb_tensor *wk, nb_tensor *wv, int64_t n_heads,
                  int64_t n_kv_heads, const blk_rope_tables *rope, nb_tensor **q, nb_tensor **k,
                  nb_tensor **v) {
    /* [(H + 2 KV) hd, D]: a copy of the weights each step, small beside the products */
    nb_tensor *w = nb_concat(3, (nb_tensor *[]){wq, wk, wv}, 0);
    nb_tensor *packed = w ? nb_f_linear(x, w, NULL) : NULL; /* [B, T, (H + 2 KV) hd] */
    if (!packed) return false;
    int64_t heads[2] = {n_heads, n_kv_heads}; /* read by forward only, before this returns */
    nb_tensor *out[3];
    if (!nb_function_apply(&qkv_rope_fn, 3, (const nb_tensor *[]){packed, rope->cos, rope->sin}, 3,
                           out, heads))
        return false;
    *q = out[0], *k = out[1], *v = out[2];
    return true;
}
