/* nb_f_attention: multi-head scaled dot-product attention as one op.
 *
 * The tutorials' MultiHeadAttention splits heads with view + transpose, multiplies, applies
 * the masked softmax, multiplies again and merges heads with contiguous().view: about a dozen
 * nodes and two transposed copies per call. Here each (batch, head) pair reads its columns of
 * q, k and v in place (a head is a [T, head_dim] matrix whose rows are D apart), so the GEMMs
 * need no copies, the context is written straight into its merged [B, T, D] place, and the
 * graph has one node. The probabilities are kept for backward (they are also what
 * need_weights would show).
 *
 * Per pair, with P = softmax(scale * Q K^T) (masked) and G the context's gradient:
 *   forward   S = Q K^T, P = masked softmax rows of S (in place), ctx = P V
 *   backward  dP = G V^T, dS = scale * P * (dP - rowsum(P * dP)) (in place),
 *             dQ = dS K, dK = dS^T Q, dV = P^T G
 * Pairs are independent and each is computed the same way on any thread, so results are
 * bitwise identical for any thread count. The softmax rows are the masked softmax's own
 * kernels (softmax_rows.h), so a fully blocked row gives zeros and zero gradient here too. */
#include "node.h"
#include "../tensor/kernels/attention_small.h"
#include "softmax_rows.h"
#include "../tensor/gemm.h"

#include <string.h>

/* One call's layout. Element strides; q, k, v have unit stride along D. */
typedef struct {
    nb_dtype dtype;
    int64_t B, H, Tq, Tk, hd;
    const char *q, *k, *v;
    int64_t q_batch, q_row, k_batch, k_row, v_batch, v_row;
    char *probs; /* [B, H, Tq, Tk] contiguous */
    softmax_plan plan;
    char *ctx;                     /* forward output [B, Tq, D] contiguous */
    int64_t mask_batch, mask_head; /* the mask's strides along B and H (0 when broadcast) */
    /* backward only */
    const char *grad;   /* context gradient [B, Tq, D] contiguous */
    char *dscores;      /* [B, H, Tq, Tk] scratch */
    char *dq, *dk, *dv; /* [B, T, D] contiguous, or NULL when not needed */
    bool small;         /* heads small enough for the rows kernel (small_heads) */
    /* float32 heads with at most 16 keys and no mask: the vector kernels, else NULL */
    void (*small_forward)(const nba_small_head *h);
    void (*small_backward)(const nba_small_head *h);
} attention_job;

/* Element offset of head h of batch b in a [B, T, D] tensor with the given strides. */
static int64_t head_at(const attention_job *j, int64_t pair, int64_t batch_stride) {
    return (pair / j->H) * batch_stride + (pair % j->H) * j->hd;
}

/* Heads whose score tile takes at most this many multiply-adds go straight to the rows
 * kernel (nbt_*gemm_rows): a tiny product then costs a call, not a path choice and a
 * workspace. Either way every element comes out bit for bit the same (see gemm.h). */
#define SMALL_HEAD (64 * 64 * 64)

static bool small_heads(const attention_job *j) {
    return j->Tq * j->Tk * j->hd <= SMALL_HEAD;
}

/* Causal self-attention (Tq == Tk) computes its products in blocks of this many query rows:
 * block [r0, r1) needs only keys below r1, and keys s only queries from s on, so about a
 * quarter of the multiply-adds (the blocked upper triangle) are skipped at T = 64, more at
 * longer T. The skipped terms are exact zeros, so the sums are unchanged. */
#define CAUSAL_BLOCK 32

static int64_t causal_block(const attention_job *j) {
    return j->plan.causal && j->Tq == j->Tk && j->Tq > CAUSAL_BLOCK ? CAUSAL_BLOCK : j->Tq;
}

/* C = alpha A op(B) on the calling thread: A's element (i, k) at A[i*a_rs + k*a_cs], B read
 * along its rows (ldb), or across them with trans_b; C rows ldc apart. Inside the parallel
 * region the GEMM never splits further. */
static void mul(const attention_job *j, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                const char *A, int64_t a_rs, int64_t a_cs, const char *B, int64_t ldb, char *C,
                int64_t ldc) {
    bool f32 = j->dtype == NB_F32;
    if (j->small) {
        if (f32)
            nbt_sgemm_rows(trans_b, M, N, K, (float)alpha, (const float *)A, a_rs, a_cs,
                           (const float *)B, ldb, 0.0f, (float *)C, ldc);
        else
            nbt_dgemm_rows(trans_b, M, N, K, alpha, (const double *)A, a_rs, a_cs,
                           (const double *)B, ldb, 0.0, (double *)C, ldc);
        return;
    }
    bool ta = a_cs != 1;
    int64_t lda = ta ? a_cs : a_rs;
    if (f32)
        nbt_sgemm(ta, trans_b, M, N, K, (float)alpha, (const float *)A, lda, (const float *)B, ldb,
                  0.0f, (float *)C, ldc);
    else
        nbt_dgemm(ta, trans_b, M, N, K, alpha, (const double *)A, lda, (const double *)B, ldb, 0.0,
                  (double *)C, ldc);
}

/* C = alpha A op(B) block by block of query rows (causal_block): A's rows are queries (a_row
 * apart), B's rows are keys (b_row apart), C's rows c_row apart, and a causal block of rows
 * reads only the keys below its end. With trans_b the keys are C's columns (S = Q K^T,
 * dP = G V^T); without, they are the summed dim and C's columns the head dims (ctx = P V,
 * dQ = dS K). */
static void query_blocks(const attention_job *j, bool trans_b, double alpha, const char *A,
                         int64_t a_row, const char *B, int64_t b_row, char *C, int64_t c_row) {
    const size_t es = nbt_esize(j->dtype);
    const int64_t cb = causal_block(j), Tq = j->Tq;
    for (int64_t r0 = 0; r0 < Tq; r0 += cb) {
        int64_t rows = Tq - r0 < cb ? Tq - r0 : cb, keys = cb < Tq ? r0 + rows : j->Tk;
        mul(j, trans_b, rows, trans_b ? keys : j->hd, trans_b ? j->hd : keys, alpha,
            A + es * (size_t)(r0 * a_row), a_row, 1, B, b_row, C + es * (size_t)(r0 * c_row),
            c_row);
    }
}

/* C = S^T B block by block of key rows, for S a pair's [Tq, Tk] tile of scores (or their
 * gradient) and B's rows queries (b_row apart): dV = P^T G, dK = dS^T Q. A causal block of
 * keys reads only the queries from its start on (S is zero above the diagonal). */
static void key_blocks(const attention_job *j, const char *S, const char *B, int64_t b_row, char *C,
                       int64_t c_row) {
    const size_t es = nbt_esize(j->dtype);
    const int64_t cb = causal_block(j), Tq = j->Tq, Tk = j->Tk, cut = cb < Tq;
    const int64_t kb = cut ? cb : Tk;
    for (int64_t s0 = 0; s0 < Tk; s0 += kb) {
        int64_t rows = Tk - s0 < kb ? Tk - s0 : kb, from = cut ? s0 : 0;
        mul(j, false, rows, j->hd, Tq - from, 1.0, S + es * (size_t)(from * Tk + s0), 1, Tk,
            B + es * (size_t)(from * b_row), b_row, C + es * (size_t)(s0 * c_row), c_row);
    }
}

/* Pair p's heads of q, k and v, its [Tq, Tk] tile of probabilities, and where its head
 * starts in a contiguous [B, Tq, D] tensor (the context and its gradient, dq) and a
 * [B, Tk, D] one (dk, dv), in elements. */
typedef struct {
    const char *q, *k, *v;
    char *probs;
    int64_t at_q, at_k;
} pair_t;

static pair_t pair_at(const attention_job *j, int64_t p) {
    const size_t es = nbt_esize(j->dtype);
    const int64_t D = j->H * j->hd, b = p / j->H, h = p % j->H;
    return (pair_t){.q = j->q + es * (size_t)head_at(j, p, j->q_batch),
                    .k = j->k + es * (size_t)head_at(j, p, j->k_batch),
                    .v = j->v + es * (size_t)head_at(j, p, j->v_batch),
                    .probs = j->probs + es * (size_t)(p * j->Tq * j->Tk),
                    .at_q = b * j->Tq * D + h * j->hd,
                    .at_k = b * j->Tk * D + h * j->hd};
}

/* The vector kernels' view of one pair. */
static nba_small_head small_head(const attention_job *j, const char *q, const char *k,
                                 const char *v, char *probs) {
    return (nba_small_head){.Tq = j->Tq,
                            .Tk = j->Tk,
                            .hd = j->hd,
                            .scale = (float)j->plan.scale,
                            .causal = j->plan.causal,
                            .q = (const float *)q,
                            .k = (const float *)k,
                            .v = (const float *)v,
                            .q_row = j->q_row,
                            .k_row = j->k_row,
                            .v_row = j->v_row,
                            .probs = (float *)probs};
}

/* The build of the vector kernels for the instruction set the GEMM uses (so tests that force
 * one check both), when the job fits them. */
static void choose_small_kernels(attention_job *j, bool masked) {
    j->small_forward = NULL, j->small_backward = NULL;
    if (j->dtype != NB_F32 || masked || !nba_small_head_fits(j->Tq, j->Tk, j->hd)) return;
    switch (nbt_gemm_current_isa()) {
    case NBT_GEMM_AVX512:
        j->small_forward = nba_small_head_forward_avx512f;
        j->small_backward = nba_small_head_backward_avx512f;
        break;
    case NBT_GEMM_AVX2:
        j->small_forward = nba_small_head_forward_avx2;
        j->small_backward = nba_small_head_backward_avx2;
        break;
    default:
        j->small_forward = nba_small_head_forward_generic;
        j->small_backward = nba_small_head_backward_generic;
        break;
    }
}

static void attention_forward_pairs(int64_t begin, int64_t end, void *vjob) {
    const attention_job *j = vjob;
    const size_t es = nbt_esize(j->dtype);
    const int64_t D = j->H * j->hd;
    for (int64_t p = begin; p < end; p++) {
        const pair_t pr = pair_at(j, p);
        char *ctx = j->ctx + es * (size_t)pr.at_q;
        if (j->small_forward) {
            nba_small_head h = small_head(j, pr.q, pr.k, pr.v, pr.probs);
            h.ctx = (float *)ctx, h.ctx_row = D;
            j->small_forward(&h);
            continue;
        }
        /* S = scale Q K^T: the product's alpha rounds scale * sum exactly as the softmax's own
         * scaling would, so the plan's scale is 1. */
        query_blocks(j, true, j->plan.scale, pr.q, j->q_row, pr.k, j->k_row, pr.probs, j->Tk);
        softmax_plan plan = j->plan;
        plan.scale = 1.0;
        if (plan.mask) plan.mask += (p / j->H) * j->mask_batch + (p % j->H) * j->mask_head;
        bool short_rows = plan.n <= NBA_SHORT_ROW;
        if (j->dtype == NB_F32) {
            float *s = (float *)pr.probs;
            short_rows ? softmax_short_rows_f32(&plan, s, s) : softmax_rows_f32(&plan, s, s);
        } else {
            double *s = (double *)pr.probs;
            short_rows ? softmax_short_rows_f64(&plan, s, s) : softmax_rows_f64(&plan, s, s);
        }
        query_blocks(j, false, 1.0, pr.probs, j->Tk, pr.v, j->v_row, ctx, D); /* ctx = P V */
    }
}

static void attention_backward_pairs(int64_t begin, int64_t end, void *vjob) {
    const attention_job *j = vjob;
    const size_t es = nbt_esize(j->dtype);
    const int64_t D = j->H * j->hd, tile = j->Tq * j->Tk;
    for (int64_t p = begin; p < end; p++) {
        const pair_t pr = pair_at(j, p);
        char *ds = j->dscores + es * (size_t)(p * tile);
        const char *g = j->grad + es * (size_t)pr.at_q;
        char *dq = j->dq ? j->dq + es * (size_t)pr.at_q : NULL;
        char *dk = j->dk ? j->dk + es * (size_t)pr.at_k : NULL;
        char *dv = j->dv ? j->dv + es * (size_t)pr.at_k : NULL;
        if (j->small_backward) {
            nba_small_head h = small_head(j, pr.q, pr.k, pr.v, pr.probs);
            h.grad = (const float *)g, h.grad_row = D, h.d_row = D;
            h.dq = (float *)dq, h.dk = (float *)dk, h.dv = (float *)dv;
            j->small_backward(&h);
            continue;
        }
        if (dv) key_blocks(j, pr.probs, g, D, dv, D); /* dV = P^T G */
        if (!dq && !dk) continue;
        query_blocks(j, true, 1.0, g, D, pr.v, j->v_row, ds, j->Tk); /* dP = G V^T */
        /* Causal blocks leave dP unset above the diagonal: the softmax backward then reads
         * only each row's first t + 1 entries and zeroes the rest. */
        bool cut = causal_block(j) < j->Tq;
        if (j->dtype == NB_F32)
            softmax_backward_rows_f32(j->Tq, j->Tk, j->plan.scale, cut, (const float *)pr.probs,
                                      (const float *)ds, (float *)ds);
        else
            softmax_backward_rows_f64(j->Tq, j->Tk, j->plan.scale, cut, (const double *)pr.probs,
                                      (const double *)ds, (double *)ds);
        if (dq) query_blocks(j, false, 1.0, ds, j->Tk, pr.k, j->k_row, dq, D); /* dQ = dS K */
        if (dk) key_blocks(j, ds, pr.q, j->q_row, dk, D);                      /* dK = dS^T Q */
    }
}

/* Pairs per thread: at least ~64k multiply-adds each, so tiny calls stay on one thread. */
static int64_t pair_grain(const attention_job *j) {
    int64_t work = j->Tq * j->Tk * j->hd;
    return 65536 / (work > 0 ? work : 1) + 1;
}

/* Fills the layout part of a job from q, k, v (unit stride along D) and saved probs. */
static void job_layout(attention_job *j, const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                       int64_t H) {
    j->dtype = q->dtype;
    j->B = q->shape[0], j->H = H, j->Tq = q->shape[1], j->Tk = k->shape[1];
    j->hd = q->shape[2] / H;
    j->q = nbt_ptr(q), j->k = nbt_ptr(k), j->v = nbt_ptr(v);
    j->q_batch = q->strides[0], j->q_row = q->strides[1];
    j->k_batch = k->strides[0], j->k_row = k->strides[1];
    j->v_batch = v->strides[0], j->v_row = v->strides[1];
    j->small = small_heads(j);
}

/* saved[0]: probabilities [B, H, Tq, Tk]; saved[1..3]: q, k, v as read (unit stride along D);
 * f[0]: scale; i[0]: heads; i[1]: causal; i[2]: masked. */
static void attention_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *q = n->saved[1], *k = n->saved[2], *v = n->saved[3];
    attention_job j = {0};
    job_layout(&j, q, k, v, n->i[0]);
    j.plan.scale = n->f[0];
    j.plan.causal = n->i[1];
    choose_small_kernels(&j, n->i[2]);
    j.probs = nbt_ptr(n->saved[0]);
    nb_tensor *g = nbt_contiguous(gout);
    nb_tensor *ds = nbt_new("backward", q->dtype, 4, n->saved[0]->shape);
    nb_tensor *dq = nba_input_needs_grad(n, 0) ? nbt_new("backward", q->dtype, 3, q->shape) : NULL;
    nb_tensor *dk = nba_input_needs_grad(n, 1) ? nbt_new("backward", k->dtype, 3, k->shape) : NULL;
    nb_tensor *dv = nba_input_needs_grad(n, 2) ? nbt_new("backward", v->dtype, 3, v->shape) : NULL;
    if (!g || !ds || (nba_input_needs_grad(n, 0) && !dq) || (nba_input_needs_grad(n, 1) && !dk) ||
        (nba_input_needs_grad(n, 2) && !dv))
        return;
    j.grad = nbt_ptr(g), j.dscores = nbt_ptr(ds);
    j.dq = dq ? nbt_ptr(dq) : NULL, j.dk = dk ? nbt_ptr(dk) : NULL, j.dv = dv ? nbt_ptr(dv) : NULL;
    nbt_parallel_ranges(j.B * j.H, pair_grain(&j), attention_backward_pairs, &j);
    if (dq) nba_accumulate(n, 0, dq);
    if (dk) nba_accumulate(n, 1, dk);
    if (dv) nba_accumulate(n, 2, dv);
}

/* t itself when its last dim has unit stride (the GEMMs read it in place), else a copy. */
static const nb_tensor *unit_stride_rows(const nb_tensor *t) {
    if (t->strides[2] == 1 || t->shape[2] == 1) return t;
    return nbt_contiguous_as(t, t->dtype);
}

nb_tensor *nb_f_attention(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                          int64_t num_heads, const nb_tensor *mask, bool causal, double scale) {
    const char *op = "attention";
    if (!nba_check_inputs(op, 3, (const nb_tensor *[]){q, k, v})) return NULL;
    if (!nba_check_same_float(op, q, k) || !nba_check_same_float(op, q, v)) return NULL;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->shape[0] != q->shape[0] ||
        k->shape[2] != q->shape[2] || !nb_same_shape(k, v))
        return nbt_error(op, "expected q [B, T_q, D] and k, v [B, T_k, D], got q %s, k %s, v %s",
                         nbt_shape(q), nbt_shape(k), nbt_shape(v));
    if (num_heads <= 0 || q->shape[2] % num_heads != 0)
        return nbt_error(op, "num_heads %lld must be positive and divide D = %lld (q %s)",
                         (long long)num_heads, (long long)q->shape[2], nbt_shape(q));
    const int64_t B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1];
    const int64_t scores_shape[4] = {B, num_heads, Tq, Tk};
    if (mask && !nba_check_mask(op, mask, 4, scores_shape, "the scores'")) return NULL;

    const nb_tensor *qr = unit_stride_rows(q), *kr = unit_stride_rows(k), *vr = unit_stride_rows(v);
    nb_tensor *probs = nbt_new(op, q->dtype, 4, scores_shape);
    nb_tensor *out = nbt_new(op, q->dtype, 3, q->shape);
    if (!qr || !kr || !vr || !probs || !out) return NULL;

    attention_job j = {0};
    job_layout(&j, qr, kr, vr, num_heads);
    j.probs = nbt_ptr(probs);
    j.ctx = nbt_ptr(out);
    j.plan = (softmax_plan){.rows = Tq,
                            .n = Tk,
                            .scale = scale,
                            .causal = causal,
                            .queries = Tq,
                            .zero_blocked_rows = true};
    if (mask) {
        int64_t strides[4];
        nbt_broadcast_strides(mask, 4, scores_shape, strides);
        j.plan.mask = (const uint8_t *)nbt_ptr(mask);
        j.mask_batch = strides[0], j.mask_head = strides[1];
        j.plan.mask_step = strides[3];
        j.plan.mask_rows.nd = 1;
        j.plan.mask_rows.shape[0] = Tq;
        j.plan.mask_rows.stride[0] = strides[2];
    }
    choose_small_kernels(&j, mask != NULL);
    nbt_parallel_ranges(B * num_heads, pair_grain(&j), attention_forward_pairs, &j);

    nb_node *n = nba_record(op, out, 3, (const nb_tensor *[]){q, k, v}, attention_backward);
    if (n) {
        n->saved[0] = probs;
        n->saved[1] = (nb_tensor *)qr, n->saved[2] = (nb_tensor *)kr, n->saved[3] = (nb_tensor *)vr;
        n->f[0] = scale;
        n->i[0] = num_heads;
        n->i[1] = causal;
        n->i[2] = mask != NULL;
    }
    return out;
}
