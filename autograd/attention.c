/* Scaled dot-product attention as one op, with two entries: nb_sdpa on heads
 * [B, H, T, head_dim] given as any strided views (grouped-query attention included) and
 * nb_f_attention on heads packed side by side in [B, T, D]. Both record the same node.
 *
 * The tutorials' MultiHeadAttention splits heads with view + transpose, multiplies, applies
 * the masked softmax, multiplies again and merges heads with contiguous().view: about a dozen
 * nodes and two transposed copies per call. Here each (batch, head) pair is a [T, head_dim]
 * matrix read in place through its strides (only head_dim must have unit stride), so the
 * GEMMs need no copies, and the context is written straight into a [B, T_q, H, head_dim]
 * buffer: the merged heads, which nb_sdpa returns as a transposed view.
 *
 * Per pair, with P = softmax(scale * Q K^T) (masked) and G the context's gradient:
 *   forward   S = Q K^T, P = masked softmax rows of S (in place), ctx = P V
 *   backward  dP = G V^T, dS = scale * P * (dP - rowsum(P * dP)) (in place),
 *             dQ = dS K, dK = dS^T Q, dV = P^T G
 * Query head h reads key/value head h / group (group = H_q / H_kv), so dK and dV of a
 * key/value head sum over its group's query heads: one task does a whole group, in head
 * order, so the sum's order is fixed. Every output is computed by one task the same way on
 * any thread, so results are bitwise identical for any thread count.
 *
 * Two ways to get P to the backward (too_large_to_keep, set_path):
 * - kept: the forward keeps P [B, H, T_q, T_k] (also what need_weights would show);
 * - memory-efficient, when P would take more than the keep limit (16 MB): the forward runs
 *   blocks of ME_ROWS query rows through a per-thread scratch tile and saves only each row's
 *   max and 1/sum; the backward recomputes the block's scores and replays the softmax from
 *   them (the same operations, so the same bits as the forward's P), then forms dS and
 *   accumulates dK and dV block by block, as FlashAttention does. Memory is O(T) per row
 *   block and thread instead of O(T^2) per head.
 * Large heads and the memory-efficient path's blocks run their products on tiles of the
 * GEMM's microkernel (attention_blocks.c); small heads the rows kernel or, in float32 with
 * at most 16 keys, the vector kernels of attention_small.c.
 * The softmax rows are the masked softmax's own, built per instruction set (softmax_isa.h), so
 * a fully blocked row gives zeros and zero gradient on both paths. */
#include "node.h"
#include "../tensor/isa.h"
#include "attention.h"
#include "attention_job.h"
#include "softmax_isa.h"
#include "../tensor/gemm.h"
#include "../tensor/pool.h"

#include <string.h>

/* Heads whose score tile takes at most this many multiply-adds go straight to the rows
 * kernel (nbt_*gemm_rows): a tiny product then costs a call, not a path choice and a
 * workspace. Either way every element comes out bit for bit the same (see gemm.h). */
#define SMALL_HEAD (64 * 64 * 64)

/* Causal self-attention (Tq == Tk) computes its products in blocks of this many query rows:
 * block [r0, r1) needs only keys below r1, and keys s only queries from s on, so about a
 * quarter of the multiply-adds (the blocked upper triangle) are skipped at T = 64, more at
 * longer T. The skipped terms are exact zeros, so the sums are unchanged. */
#define CAUSAL_BLOCK 32

/* Changed only by a test hook (nba_attention_keep_limit), in the test build. */
static size_t keep_limit = NBA_ATTENTION_KEEP_LIMIT;
/* Kept in every build (one thread-local store per call); read by a test hook only. */
static _Thread_local bool last_memory_efficient;

#ifdef NABLA_TESTS /* test hooks: in the test build only (tests/meson.build) */
bool nba_attention_last_memory_efficient(void) {
    return last_memory_efficient;
}

size_t nba_attention_keep_limit(size_t bytes) {
    size_t old = keep_limit;
    keep_limit = bytes;
    return old;
}
#endif

static int64_t causal_block(const attention_job *j) {
    return j->plan.causal && j->Tq == j->Tk && j->Tq > CAUSAL_BLOCK ? CAUSAL_BLOCK : j->Tq;
}

/* C = alpha A op(B) + beta C on the calling thread: A's element (i, k) at A[i*a_rs + k*a_cs],
 * B read along its rows (ldb), or across them with trans_b; C rows ldc apart. Inside the
 * parallel region the GEMM never splits further. */
static void mul(const attention_job *j, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                const char *A, int64_t a_rs, int64_t a_cs, const char *B, int64_t ldb, double beta,
                char *C, int64_t ldc) {
    bool f32 = j->dtype == NB_F32;
    if (j->small) {
        if (f32)
            nbt_sgemm_rows(trans_b, M, N, K, (float)alpha, (const float *)A, a_rs, a_cs,
                           (const float *)B, ldb, (float)beta, (float *)C, ldc);
        else
            nbt_dgemm_rows(trans_b, M, N, K, alpha, (const double *)A, a_rs, a_cs,
                           (const double *)B, ldb, beta, (double *)C, ldc);
        return;
    }
    bool ta = a_cs != 1;
    int64_t lda = ta ? a_cs : a_rs;
    if (f32)
        nbt_sgemm(ta, trans_b, M, N, K, (float)alpha, (const float *)A, lda, (const float *)B, ldb,
                  (float)beta, (float *)C, ldc);
    else
        nbt_dgemm(ta, trans_b, M, N, K, alpha, (const double *)A, lda, (const double *)B, ldb, beta,
                  (double *)C, ldc);
}

/* C = alpha A op(B) block by block of query rows (causal_block): A's rows are queries (a_row
 * apart), B's rows are keys (b_row apart), C's rows c_row apart, and a causal block of rows
 * reads only the keys below its end. With trans_b the keys are C's columns (S = Q K^T,
 * dP = G V^T); without, they are the summed dim and C's columns the head dims (ctx = P V,
 * dQ = dS K). */
static void query_blocks(const attention_job *j, bool trans_b, double alpha, const char *A,
                         int64_t a_row, const char *B, int64_t b_row, char *C, int64_t c_row) {
    const size_t es = j->es;
    const int64_t cb = causal_block(j), Tq = j->Tq;
    for (int64_t r0 = 0; r0 < Tq; r0 += cb) {
        int64_t rows = Tq - r0 < cb ? Tq - r0 : cb, keys = cb < Tq ? r0 + rows : j->Tk;
        mul(j, trans_b, rows, trans_b ? keys : j->hd, trans_b ? j->hd : keys, alpha,
            A + es * (size_t)(r0 * a_row), a_row, 1, B, b_row, 0.0, C + es * (size_t)(r0 * c_row),
            c_row);
    }
}

/* C = S^T B + beta C block by block of key rows, for S a pair's [Tq, Tk] tile of scores (or
 * their gradient) and B's rows queries (b_row apart): dV = P^T G, dK = dS^T Q. A causal block
 * of keys reads only the queries from its start on (S is zero above the diagonal). */
static void key_blocks(const attention_job *j, const char *S, const char *B, int64_t b_row,
                       double beta, char *C, int64_t c_row) {
    const size_t es = j->es;
    const int64_t cb = causal_block(j), Tq = j->Tq, Tk = j->Tk, cut = cb < Tq;
    const int64_t kb = cut ? cb : Tk;
    for (int64_t s0 = 0; s0 < Tk; s0 += kb) {
        int64_t rows = Tk - s0 < kb ? Tk - s0 : kb, from = cut ? s0 : 0;
        mul(j, false, rows, j->hd, Tq - from, 1.0, S + es * (size_t)(from * Tk + s0), 1, Tk,
            B + es * (size_t)(from * b_row), b_row, beta, C + es * (size_t)(s0 * c_row), c_row);
    }
}

/* The vector kernels' view of one pair. */
static nba_small_head small_head(const attention_job *j, const pair_t *pr, char *probs) {
    return (nba_small_head){.Tq = j->Tq,
                            .Tk = j->Tk,
                            .hd = j->hd,
                            .scale = (float)j->plan.scale,
                            .causal = j->plan.causal,
                            .q = (const float *)pr->q,
                            .k = (const float *)pr->k,
                            .v = (const float *)pr->v,
                            .q_row = j->q.r,
                            .k_row = j->k.r,
                            .v_row = j->v.r,
                            .probs = (float *)probs};
}

/* The vector kernels of the instruction set in use, when the job fits them. */
static void choose_small_kernels(attention_job *j, bool masked) {
    j->small_forward = NULL, j->small_backward = NULL;
    if (j->dtype != NB_F32 || masked || j->memory_efficient ||
        !nba_small_head_fits(j->Tq, j->Tk, j->hd))
        return;
    j->small_forward = nbt_kernels()->small_head_forward;
    j->small_backward = nbt_kernels()->small_head_backward;
}

static void kept_forward(const attention_job *j, int64_t p) {
    const pair_t pr = pair_at(j, p);
    char *probs = j->probs + j->es * (size_t)(p * j->Tq * j->Tk);
    if (j->small_forward) {
        nba_small_head h = small_head(j, &pr, probs);
        h.ctx = (float *)pr.ctx, h.ctx_row = j->out.r;
        j->small_forward(&h);
        return;
    }
    /* S = scale Q K^T: the product's alpha rounds scale * sum exactly as the softmax's own
     * scaling would, so the plan's scale is 1. */
    query_blocks(j, true, j->plan.scale, pr.q, j->q.r, pr.k, j->k.r, probs, j->Tk);
    softmax_plan plan = rows_plan(j, pr.b, pr.h, 0, j->Tq, j->Tk);
    plan.scale = 1.0;
    nba_softmax_rows(&plan, j->dtype, probs, probs);
    query_blocks(j, false, 1.0, probs, j->Tk, pr.v, j->v.r, pr.ctx, j->out.r); /* ctx = P V */
}

static void forward_task(int64_t p, int worker, void *vjob) {
    const attention_job *j = vjob;
    if (j->tiled)
        nba_blocks_forward(j, p, j->scratch + j->es * (size_t)(worker * j->scratch_per_worker));
    else
        kept_forward(j, p);
}

/* dst = src (first) or dst += src for a [T_k, hd] float32 head, rows src_row and dst_row
 * apart. */
static void fold_head(const attention_job *j, const float *src, int64_t src_row, float *dst,
                      int64_t dst_row, bool first) {
    for (int64_t t = 0; t < j->Tk; t++, src += src_row, dst += dst_row)
        for (int64_t i = 0; i < j->hd; i++) dst[i] = first ? src[i] : dst[i] + src[i];
}

/* The vector kernels' backward for pair p. They write dq, dk and dv with one row stride
 * (dq's): with one query head per key/value head and equal strides, straight into place
 * (scratch NULL); otherwise dk and dv go to scratch (2 T_k rows of that stride) and are
 * folded into the group's sum. */
static void small_backward(const attention_job *j, const pair_t *pr, const char *probs, bool first,
                           char *scratch) {
    nba_small_head h = small_head(j, pr, (char *)probs);
    h.grad = (const float *)pr->grad, h.grad_row = j->grad.r;
    h.d_row = j->dq.p ? j->dq.r : j->hd;
    h.dq = (float *)pr->dq, h.dk = (float *)pr->dk, h.dv = (float *)pr->dv;
    if (!scratch) {
        j->small_backward(&h);
        return;
    }
    float *sk = (float *)scratch, *sv = sk + j->Tk * h.d_row;
    h.dk = pr->dk ? sk : NULL, h.dv = pr->dv ? sv : NULL;
    j->small_backward(&h);
    if (pr->dk) fold_head(j, sk, h.d_row, (float *)pr->dk, j->dk.r, first);
    if (pr->dv) fold_head(j, sv, h.d_row, (float *)pr->dv, j->dv.r, first);
}

/* One pair's backward from kept probabilities; first says it is the first of its group, whose
 * dK and dV overwrite rather than add. scratch: a [T_q, T_k] tile for dS, or what
 * small_backward needs (NULL when it writes in place). */
static void kept_backward(const attention_job *j, int64_t p, bool first, char *ds) {
    const pair_t pr = pair_at(j, p);
    const char *probs = j->probs + j->es * (size_t)(p * j->Tq * j->Tk);
    if (j->small_backward) {
        small_backward(j, &pr, probs, first, ds);
        return;
    }
    const double beta = first ? 0.0 : 1.0;
    if (pr.dv) key_blocks(j, probs, pr.grad, j->grad.r, beta, pr.dv, j->dv.r); /* dV = P^T G */
    if (!pr.dq && !pr.dk) return;
    query_blocks(j, true, 1.0, pr.grad, j->grad.r, pr.v, j->v.r, ds, j->Tk); /* dP = G V^T */
    /* Causal blocks leave dP unset above the diagonal: the softmax backward then reads only
     * each row's first t + 1 entries and zeroes the rest. */
    nba_softmax_backward_rows(j->dtype, j->Tq, j->Tk, j->plan.scale, causal_block(j) < j->Tq, 0,
                              probs, ds, ds);
    if (pr.dq) query_blocks(j, false, 1.0, ds, j->Tk, pr.k, j->k.r, pr.dq, j->dq.r); /* dS K */
    if (pr.dk) key_blocks(j, ds, pr.q, j->q.r, beta, pr.dk, j->dk.r);                /* dS^T Q */
}

/* Zeroes a [rows, hd] head with rows `row` elements apart. */
static void zero_head(const attention_job *j, char *at, int64_t rows, int64_t row) {
    for (int64_t t = 0; t < rows; t++)
        memset(at + j->es * (size_t)(t * row), 0, j->es * (size_t)j->hd);
}

/* Task g: key/value head g % H_kv of batch g / H_kv and its group of query heads, in order. */
static void backward_task(int64_t g, int worker, void *vjob) {
    const attention_job *j = vjob;
    char *scratch =
        j->scratch ? j->scratch + j->es * (size_t)(worker * j->scratch_per_worker) : NULL;
    const int64_t b = g / j->Hkv, kh = g % j->Hkv, p0 = b * j->Hq + kh * j->group;
    if (j->memory_efficient) {
        if (j->dk.p) zero_head(j, head_ptr(j, j->dk, b, kh), j->Tk, j->dk.r);
        if (j->dv.p) zero_head(j, head_ptr(j, j->dv, b, kh), j->Tk, j->dv.r);
    }
    for (int64_t i = 0; i < j->group; i++) {
        if (j->tiled)
            nba_blocks_backward(j, p0 + i, i == 0, scratch);
        else
            kept_backward(j, p0 + i, i == 0, scratch);
    }
}

/* Consecutive tasks of fn run as one pool task (the same worker's scratch for all): toy's 128
 * heads as 128 pool tasks of about 1,000 TSC ticks each spent a good part of that claiming
 * them, the claim counter's cache line passing between the cores at every claim. */
typedef struct {
    nbt_task_fn fn;
    attention_job *j;
    int64_t n, per;
} task_group;

static void run_task_group(int64_t g, int worker, void *arg) {
    const task_group *s = arg;
    const int64_t end = (g + 1) * s->per < s->n ? (g + 1) * s->per : s->n;
    for (int64_t t = g * s->per; t < end; t++) s->fn(t, worker, s->j);
}

/* Runs fn on tasks [0, n), each `work` multiply-adds, on as many threads as have at least
 * ~64k multiply-adds each, with the job's scratch (per_worker elements per thread) allocated
 * for them. False when the scratch could not be allocated. */
static bool run_tasks(attention_job *j, int64_t n, int64_t work, int64_t per_worker,
                      nbt_task_fn fn) {
    int threads = nbt_threads_for(n, 65536 / (work > 0 ? work : 1) + 1);
    nb_tensor *scratch = NULL;
    if (per_worker > 0) {
        scratch = nbt_new("attention", j->dtype, 2, (int64_t[]){threads, per_worker});
        if (!scratch) return false;
        j->scratch = nbt_ptr(scratch), j->scratch_per_worker = per_worker;
    }
    if (threads <= 1) {
        for (int64_t t = 0; t < n; t++) fn(t, 0, j);
    } else {
        const int64_t groups = (int64_t)threads * NBT_PIECES_PER_THREAD;
        task_group s = {fn, j, n, (n + groups - 1) / groups};
        nbt_run_tasks((n + s.per - 1) / s.per, threads, run_task_group, &s);
    }
    return true;
}

/* Head layout of t: packed heads [B, T, H * hd] (head h at column h * hd) or [B, H, T, hd]. */
static heads_t heads_of(const nb_tensor *t, bool packed, int64_t hd) {
    if (!t) return (heads_t){0};
    if (packed) return (heads_t){nbt_ptr(t), t->strides[0], hd, t->strides[1]};
    return (heads_t){nbt_ptr(t), t->strides[0], t->strides[1], t->strides[2]};
}

/* Sizes and the operands' layout from q, k, v as read (unit stride along head_dim). */
static void job_layout(attention_job *j, const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                       bool packed, int64_t Hq, int64_t Hkv) {
    j->dtype = q->dtype, j->es = nbt_esize(q->dtype);
    j->B = q->shape[0], j->Hq = Hq, j->Hkv = Hkv, j->group = Hkv > 0 ? Hq / Hkv : 0;
    j->Tq = q->shape[packed ? 1 : 2], j->Tk = k->shape[packed ? 1 : 2];
    j->hd = packed ? (Hq > 0 ? q->shape[2] / Hq : 0) : q->shape[3];
    j->q = heads_of(q, packed, j->hd), j->k = heads_of(k, packed, j->hd);
    j->v = heads_of(v, packed, j->hd);
}

bool nba_attention_keeps(nb_dtype dt, int64_t B, int64_t Hq, int64_t Tq, int64_t Tk) {
    double bytes = (double)nbt_esize(dt) * (double)B * (double)Hq * (double)Tq * (double)Tk;
    return bytes <= (double)keep_limit;
}

/* True when the kept probabilities would take more than the keep limit. */
static bool too_large_to_keep(const attention_job *j) {
    return !nba_attention_keeps(j->dtype, j->B, j->Hq, j->Tq, j->Tk);
}

/* Sets the path (memory-efficient or kept) and whether its products take the rows kernel. */
static void set_path(attention_job *j, bool memory_efficient, bool masked) {
    j->memory_efficient = memory_efficient;
    j->small = j->Tq * j->Tk * j->hd <= SMALL_HEAD;
    choose_small_kernels(j, masked);
    /* the tiles read a tile of queries and keys (at most 16 x 16) in place */
    j->tiled = memory_efficient || (!j->small && j->Tq >= 16 && j->Tk >= 16);
}

/* The mask's strides along B, H and T_q and along the row, broadcast to the scores' shape. */
static void mask_layout(attention_job *j, const nb_tensor *mask) {
    const int64_t shape[4] = {j->B, j->Hq, j->Tq, j->Tk};
    int64_t strides[4];
    nbt_broadcast_strides(mask, 4, shape, strides);
    j->plan.mask = (const uint8_t *)nbt_ptr(mask);
    j->mask_batch = strides[0], j->mask_head = strides[1], j->mask_row = strides[2];
    j->plan.mask_step = strides[3];
    j->plan.mask_rows.nd = 1;
    j->plan.mask_rows.shape[0] = j->Tq;
    j->plan.mask_rows.stride[0] = strides[2];
}

/* True when nothing is multiplied: no queries, no keys or empty heads. */
static bool no_work(const attention_job *j) {
    return j->B * j->Hq * j->Tq == 0 || j->Tk == 0 || j->hd == 0;
}

/* A new tensor shaped like t whose memory follows t's stride order when t is a permutation of
 * a dense layout (so the gradient of a transposed view of a projection comes out in the
 * projection's layout, and the views' backwards copy nothing), else contiguous. */
static nb_tensor *grad_like(const nb_tensor *t) {
    int order[NB_MAX_DIMS], nd = t->ndim;
    for (int i = 0; i < nd; i++) {
        int d = i;
        while (d > 0 && t->strides[order[d - 1]] < t->strides[i]) order[d] = order[d - 1], d--;
        order[d] = i;
    }
    int64_t shape[NB_MAX_DIMS], expect = 1;
    bool dense = true;
    for (int d = nd - 1; d >= 0; d--) {
        if (t->shape[order[d]] != 1 && t->strides[order[d]] != expect) dense = false;
        expect *= t->shape[order[d]];
        shape[d] = t->shape[order[d]];
    }
    if (!dense) return nbt_new("backward", t->dtype, nd, t->shape);
    nb_tensor *buf = nbt_new("backward", t->dtype, nd, shape);
    int inverse[NB_MAX_DIMS];
    for (int d = 0; d < nd; d++) inverse[order[d]] = d;
    return buf ? nbt_permute(buf, inverse) : NULL;
}

bool nba_attention_grads(const nba_attention_call *c, const nb_tensor *gout,
                         nb_tensor *const d[3]) {
    attention_job j = {0};
    job_layout(&j, c->q, c->k, c->v, c->packed, c->Hq, c->Hkv);
    j.plan = (softmax_plan){
        .scale = c->scale, .causal = c->causal, .queries = j.Tq, .zero_blocked_rows = true};
    if (c->mask) mask_layout(&j, c->mask);
    set_path(&j, c->memory_efficient, c->mask != NULL);
    (j.memory_efficient ? &j.stats : &j.probs)[0] = nbt_ptr(c->saved);

    const int last = gout->ndim - 1;
    const nb_tensor *g = gout->strides[last] == 1 || gout->shape[last] == 1
                             ? gout
                             : nbt_contiguous_as(gout, gout->dtype);
    if (!g) return false;
    j.grad = heads_of(g, c->packed, j.hd);
    j.dq = heads_of(d[0], c->packed, j.hd), j.dk = heads_of(d[1], c->packed, j.hd);
    j.dv = heads_of(d[2], c->packed, j.hd);
    if (no_work(&j)) {
        for (int i = 0; i < 3; i++)
            if (d[i]) nb_fill_(d[i], 0.0);
        return true;
    }
    int64_t per = j.tiled ? nba_blocks_scratch(&j, true) : j.Tq * j.Tk;
    if (j.small_backward) { /* in place, or scratch for dk and dv (small_backward) */
        const int64_t drow = d[0] ? j.dq.r : j.hd;
        bool in_place = j.group == 1 && (!d[1] || j.dk.r == drow) && (!d[2] || j.dv.r == drow);
        per = in_place ? 0 : 2 * j.Tk * drow;
    }
    return run_tasks(&j, j.B * j.Hkv, j.group * j.Tq * j.Tk * j.hd, per, backward_task);
}

/* saved[0]: kept probabilities or the rows' stats; saved[1..3]: q, k, v as read (unit stride
 * along head_dim); inputs[3]: the mask, if any. f[0]: scale; i[0]: H_q; i[1]: H_kv;
 * i[2]: causal; i[3]: packed heads; i[4]: memory-efficient. */
static void attention_backward(nb_node *n, const nb_tensor *gout) {
    const nba_attention_call c = {.q = n->saved[1],
                                  .k = n->saved[2],
                                  .v = n->saved[3],
                                  .mask = n->ninputs > 3 ? n->inputs[3] : NULL,
                                  .packed = n->i[3],
                                  .causal = n->i[2],
                                  .memory_efficient = n->i[4],
                                  .Hq = n->i[0],
                                  .Hkv = n->i[1],
                                  .scale = n->f[0],
                                  .saved = n->saved[0]};
    nb_tensor *d[3] = {NULL, NULL, NULL};
    const nb_tensor *in[3] = {c.q, c.k, c.v};
    for (int i = 0; i < 3; i++) {
        if (!nba_input_needs_grad(n, i)) continue;
        d[i] = c.packed ? nbt_new("backward", in[i]->dtype, 3, in[i]->shape) : grad_like(in[i]);
        if (!d[i]) return;
    }
    if (!nba_attention_grads(&c, gout, d)) return;
    for (int i = 0; i < 3; i++)
        if (d[i]) nba_accumulate(n, i, d[i]);
}

/* t itself when its last dim has unit stride (the GEMMs read it in place), else a copy. */
static const nb_tensor *unit_stride_rows(const nb_tensor *t) {
    const int last = t->ndim - 1;
    if (t->strides[last] == 1 || t->shape[last] == 1) return t;
    return nbt_contiguous_as(t, t->dtype);
}

nb_tensor *nba_attention_forward(const char *op, nba_attention_call *c) {
    attention_job j = {0};
    job_layout(&j, c->q, c->k, c->v, c->packed, c->Hq, c->Hkv);
    const int64_t scores_shape[4] = {j.B, c->Hq, j.Tq, j.Tk};
    if (c->mask && !nba_check_mask(op, c->mask, 4, scores_shape, "the scores'")) return NULL;
    if (!isfinite(c->scale)) /* NaN everywhere otherwise */
        return nbt_error(op, "scale must be finite, got %g (q %s)", c->scale, nbt_shape(c->q));
    j.plan = (softmax_plan){
        .scale = c->scale, .causal = c->causal, .queries = j.Tq, .zero_blocked_rows = true};
    if (c->mask) mask_layout(&j, c->mask);
    set_path(&j, too_large_to_keep(&j), c->mask != NULL);
    last_memory_efficient = c->memory_efficient = j.memory_efficient;

    /* The context [B, T_q, H_q, hd]: nb_f_attention's [B, T_q, D], or nb_sdpa's
     * [B, H_q, T_q, hd] as its transposed view. */
    nb_tensor *ctx = c->packed ? nbt_new(op, c->q->dtype, 3, (int64_t[]){j.B, j.Tq, c->Hq * j.hd})
                               : nbt_new(op, c->q->dtype, 4, (int64_t[]){j.B, j.Tq, c->Hq, j.hd});
    c->saved = j.memory_efficient ? nbt_new(op, c->q->dtype, 4, (int64_t[]){j.B, c->Hq, j.Tq, 2})
                                  : nbt_new(op, c->q->dtype, 4, scores_shape);
    if (!ctx || !c->saved) return NULL;
    nb_tensor *out = c->packed ? ctx : nbt_transpose(ctx, 1, 2);
    if (!out) return NULL;
    j.out = (heads_t){nbt_ptr(ctx), j.Tq * c->Hq * j.hd, j.hd, c->Hq * j.hd};
    (j.memory_efficient ? &j.stats : &j.probs)[0] = nbt_ptr(c->saved);
    if (no_work(&j)) {
        nb_fill_(ctx, 0.0); /* no keys: every row fully blocked */
        nb_fill_(c->saved, 0.0);
    } else if (!run_tasks(&j, j.B * c->Hq, j.Tq * j.Tk * j.hd,
                          j.tiled ? nba_blocks_scratch(&j, false) : 0, forward_task)) {
        return NULL;
    }
    return out;
}

/* The op behind both entries: q, k, v checked, packed [B, T, H * hd] or [B, H, T, hd]. */
static nb_tensor *attention(const char *op, const nb_tensor *q, const nb_tensor *k,
                            const nb_tensor *v, bool packed, int64_t Hq, int64_t Hkv,
                            const nb_tensor *mask, bool causal, double scale) {
    nba_attention_call c = {.q = unit_stride_rows(q),
                            .k = unit_stride_rows(k),
                            .v = unit_stride_rows(v),
                            .mask = mask,
                            .packed = packed,
                            .causal = causal,
                            .Hq = Hq,
                            .Hkv = Hkv,
                            .scale = scale};
    if (!c.q || !c.k || !c.v) return NULL;
    nb_tensor *out = nba_attention_forward(op, &c);
    if (!out) return NULL;
    const nb_tensor *inputs[4] = {q, k, v, mask};
    nb_node *n = nba_record(op, out, mask ? 4 : 3, inputs, attention_backward);
    if (n) {
        n->saved[0] = c.saved;
        n->saved[1] = (nb_tensor *)c.q, n->saved[2] = (nb_tensor *)c.k;
        n->saved[3] = (nb_tensor *)c.v;
        n->f[0] = scale;
        n->i[0] = Hq, n->i[1] = Hkv, n->i[2] = causal, n->i[3] = packed;
        n->i[4] = c.memory_efficient;
    }
    return out;
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
    return attention(op, q, k, v, true, num_heads, num_heads, mask, causal, scale);
}

nb_tensor *nb_sdpa(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                   const nb_tensor *mask, bool causal, double scale) {
    const char *op = "attention";
    if (!nba_check_inputs(op, 3, (const nb_tensor *[]){q, k, v})) return NULL;
    if (!nba_check_same_float(op, q, k) || !nba_check_same_float(op, q, v)) return NULL;
    if (q->ndim != 4 || k->ndim != 4 || !nb_same_shape(k, v) || k->shape[0] != q->shape[0] ||
        k->shape[3] != q->shape[3])
        return nbt_error(op,
                         "expected q [B, H_q, T_q, hd] and k, v [B, H_kv, T_k, hd], got q %s, "
                         "k %s, v %s",
                         nbt_shape(q), nbt_shape(k), nbt_shape(v));
    const int64_t Hq = q->shape[1], Hkv = k->shape[1];
    if (Hkv == 0 ? Hq != 0 : Hq % Hkv != 0)
        return nbt_error(op, "key/value heads %lld must divide query heads %lld (q %s, k %s)",
                         (long long)Hkv, (long long)Hq, nbt_shape(q), nbt_shape(k));
    return attention(op, q, k, v, false, Hq, Hkv, mask, causal, scale);
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h): self and cross attention, causal and masked, fully blocked
 * rows, inputs read in place through strides (a narrowed row stride, a broadcast batch),
 * inputs that must be copied (transposed, sliced), one tensor as q, k and v, a constant v,
 * and the sizes on both sides of each kernel switch: in float32 the small-head kernels take
 * T_k <= NBA_SMALL_KEYS, T_q <= NBA_SMALL_QUERIES, head_dim <= NBA_SMALL_HEAD_DIM and no
 * bool mask; else the rows kernel, in blocks of CAUSAL_BLOCK queries when causal. ---- */
#include "op_def.h"

#define U8(...) ((const uint8_t[]){__VA_ARGS__})
#define MASK(...) nb_from_array(NB_BOOL, __VA_ARGS__)

/* q, k, v [B, T, D] with 2 heads (of D / 2), causal. */
static nb_tensor *cat_causal(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_attention(in[0], in[1], in[2], 2, NULL, true, 0.5);
}
/* One head, causal over a non-square score matrix when T_q != T_k. */
static nb_tensor *cat_one_head_causal(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_attention(in[0], in[1], in[2], 1, NULL, true, 0.7);
}
/* One head, no mask: at head_dim 64 a small scale keeps the scores O(1). */
static nb_tensor *cat_one_head(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_attention(in[0], in[1], in[2], 1, NULL, false, 0.125);
}
/* Key padding [2, 1, 1, 5]: batch 1 pads its last two keys. */
static nb_tensor *cat_padding(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *pad = MASK(NB_SHAPE(2, 1, 1, 5), U8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1));
    return nb_f_attention(in[0], in[1], in[2], 2, pad, false, 0.6);
}
/* An attention mask [3, 3] that blocks all of query row 1 (zeros, zero gradient) plus causal. */
static nb_tensor *cat_blocked_row(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(3, 3), U8(0, 0, 1, 1, 1, 1, 0, 1, 0));
    return nb_f_attention(in[0], in[1], in[2], 2, mask, true, 1.0);
}
/* A per-head mask [1, 2, 1, 3]: head 0 blocks key 2, head 1 blocks key 0. */
static nb_tensor *cat_head_mask(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(1, 2, 1, 3), U8(0, 0, 1, 1, 0, 0));
    return nb_f_attention(in[0], in[1], in[2], 2, mask, false, 0.8);
}
/* Self-attention of one tensor: q, k and v gradients all land on the same leaf. */
static nb_tensor *cat_self(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_attention(in[0], in[0], in[0], 2, NULL, true, 0.5);
}
/* Rows read in place with a row stride of 8: q is every other row of a [2, 6, 4] leaf. */
static nb_tensor *cat_strided_rows(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *q = nb_narrow(nb_view(in[0], NB_SHAPE(2, 3, 8)), 2, 0, 4);
    return nb_f_attention(q, in[1], in[2], 2, NULL, true, 0.5);
}
/* k and v broadcast over the batch (batch stride 0): their gradients sum over it. */
static nb_tensor *cat_broadcast_kv(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *k = nb_expand(in[1], NB_SHAPE(2, 4, 4));
    nb_tensor *v = nb_expand(in[2], NB_SHAPE(2, 4, 4));
    return nb_f_attention(in[0], k, v, 2, NULL, false, 0.5);
}

/* ---- nb_sdpa: heads [B, H, T, hd] ---- */

/* [B, T, H * hd] viewed as heads [B, H, T, hd] (strided: view + transpose). */
static nb_tensor *cat_heads(nb_tensor *x, int64_t H) {
    int64_t B = x->shape[0], T = x->shape[1], hd = x->shape[2] / H;
    return nb_transpose(nb_view(x, NB_SHAPE(B, T, H, hd)), 1, 2);
}

/* What an sdpa entry does: query and key/value heads, mask kind, and whether the call is
 * forced through the memory-efficient path (keep limit 0). */
typedef struct {
    int64_t Hq, Hkv;
    bool causal, memory_efficient;
    int mask; /* 0 none, 1 key padding with a fully padded batch, 2 attn_mask, 3 per-head */
} sdpa_case;

/* Key padding pads batch 0's last key and all of batch 1 (fully blocked rows); the other
 * masks block a scattered pattern. */
static nb_tensor *sdpa_case_mask(const sdpa_case *c, int64_t B, int64_t Tq, int64_t Tk) {
    int64_t n = c->mask == 1 ? B * Tk : c->mask == 2 ? Tq * Tk : B * c->Hq * Tq * Tk;
    uint8_t m[4096];
    for (int64_t i = 0; i < n; i++) m[i] = (uint8_t)(c->mask == 1 ? i >= Tk - 1 : i * 5 % 7 == 2);
    if (c->mask == 1) return MASK(NB_SHAPE(B, 1, 1, Tk), m);
    if (c->mask == 2) return MASK(NB_SHAPE(Tq, Tk), m);
    return MASK(NB_SHAPE(B, c->Hq, Tq, Tk), m);
}

/* in[0] the query projection [B, T_q, H_q * hd], in[1] and in[2] the key and value ones. */
static nb_tensor *cat_sdpa(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const sdpa_case *c = ctx;
    nb_tensor *q = cat_heads(in[0], c->Hq), *k = cat_heads(in[1], c->Hkv);
    nb_tensor *v = cat_heads(in[2], c->Hkv);
    nb_tensor *mask = c->mask ? sdpa_case_mask(c, q->shape[0], q->shape[2], k->shape[2]) : NULL;
    size_t old = nba_attention_keep_limit(c->memory_efficient ? 0 : SIZE_MAX);
    nb_tensor *out = nb_sdpa(q, k, v, mask, c->causal, 0.6);
    nba_attention_keep_limit(old);
    return out;
}

static const sdpa_case sdpa_mha_causal = {2, 2, true, false, 0}, sdpa_gqa = {4, 2, true, false, 1},
                       sdpa_mqa = {3, 1, false, false, 2}, sdpa_me_none = {2, 2, false, true, 0},
                       sdpa_me_causal = {4, 2, true, true, 0}, sdpa_me_pad = {2, 1, true, true, 1},
                       sdpa_me_attn_mask = {2, 2, false, true, 2},
                       sdpa_me_head_mask = {2, 2, true, true, 3};

/* Golden runner: inputs "q", "k", "v" and an optional "mask". */
static int golden_f_attention(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_f_attention(c->input(c, "q", true), c->input(c, "k", true), c->input(c, "v", true),
                            c->integer(c, "num_heads"), c->input(c, "mask", false),
                            c->flag(c, "causal"), c->number(c, "scale"));
    return 1;
}

/* clang-format off */
static const nba_entry attention_entries[] = {
    {"attention causal, q k v [2,3,4], 2 heads", NBA_RANDOM, cat_causal, 3, {IN(2, 3, 4), IN(2, 3, 4), IN(2, 3, 4)}, NULL},
    {"attention causal over 40 queries (blocks of 32 rows)", NBA_STRIDED, cat_causal, 3,
     {IN(1, 40, 4), IN_T(1, 40, 4), IN(1, 40, 4)}, NULL},
    {"attention causal cross q [2,3,4] kv [2,5,4], 1 head", NBA_RANDOM, cat_one_head_causal, 3,
     {IN(2, 3, 4), IN(2, 5, 4), IN(2, 5, 4)}, NULL},
    {"attention 16 keys, head_dim 64, constant v (f32: small-head kernels)", NBA_RANDOM, cat_one_head, 3,
     {IN(1, 2, 64), IN(1, 16, 64), IN_C(1, 16, 64)}, NULL},
    {"attention 17 keys (f32: rows kernel)", NBA_RANDOM, cat_causal, 3,
     {IN(2, 3, 8), IN(2, 17, 8), IN(2, 17, 8)}, NULL},
    {"attention 64 queries, 16 keys (f32: small-head kernels)", NBA_RANDOM, cat_one_head_causal, 3,
     {IN(1, 64, 2), IN(1, 16, 2), IN(1, 16, 2)}, NULL},
    {"attention 65 queries, 16 keys (f32: rows kernel)", NBA_RANDOM, cat_one_head_causal, 3,
     {IN(1, 65, 2), IN(1, 16, 2), IN(1, 16, 2)}, NULL},
    {"attention key padding [2,1,1,5]", NBA_BROADCAST, cat_padding, 3, {IN(2, 3, 4), IN(2, 5, 4), IN(2, 5, 4)}, NULL},
    {"attention mask [3,3] with a fully blocked row", NBA_BROADCAST, cat_blocked_row, 3,
     {IN(2, 3, 4), IN(2, 3, 4), IN(2, 3, 4)}, NULL},
    {"attention per-head mask [1,2,1,3]", NBA_BROADCAST, cat_head_mask, 3, {IN(1, 3, 4), IN(1, 3, 4), IN(1, 3, 4)}, NULL},
    {"attention transposed q, sliced k and v (copied)", NBA_STRIDED, cat_causal, 3,
     {IN_T(2, 3, 4), IN_S(2, 3, 4), IN_S(2, 3, 4)}, NULL},
    {"attention of one tensor as q, k and v", NBA_RANDOM, cat_self, 1, {IN(2, 3, 4)}, NULL},
    {"attention q rows read in place with row stride 8", NBA_RANDOM, cat_strided_rows, 3,
     {IN(2, 6, 4), IN(2, 3, 4), IN(2, 3, 4)}, NULL},
    {"attention k v [1,4,4] broadcast over batch 2", NBA_BROADCAST, cat_broadcast_kv, 3,
     {IN(2, 3, 4), IN(1, 4, 4), IN(1, 4, 4)}, NULL},
    {"attention with a constant v", NBA_RANDOM, cat_causal, 3, {IN(2, 3, 4), IN(2, 3, 4), IN_C(2, 3, 4)}, NULL},
    {"sdpa causal, heads by view + transpose", NBA_RANDOM, cat_sdpa, 3, {IN(2, 5, 8), IN(2, 5, 8), IN(2, 5, 8)}, &sdpa_mha_causal},
    {"sdpa grouped-query 4/2 causal + key padding", NBA_BROADCAST, cat_sdpa, 3, {IN(2, 4, 8), IN(2, 4, 4), IN(2, 4, 4)}, &sdpa_gqa},
    {"sdpa multi-query 3/1 cross, attn_mask, transposed k", NBA_STRIDED, cat_sdpa, 3, {IN(1, 3, 6), IN_T(1, 5, 2), IN(1, 5, 2)}, &sdpa_mqa},
    {"sdpa memory-efficient, no mask, 2 row blocks", NBA_RANDOM, cat_sdpa, 3, {IN(1, 35, 4), IN(1, 6, 4), IN(1, 6, 4)}, &sdpa_me_none},
    {"sdpa memory-efficient causal 4/2 over 40 rows", NBA_RANDOM, cat_sdpa, 3, {IN(1, 40, 8), IN(1, 40, 4), IN(1, 40, 4)}, &sdpa_me_causal},
    {"sdpa memory-efficient causal + key padding, fully padded batch", NBA_BROADCAST, cat_sdpa, 3, {IN(2, 3, 4), IN(2, 3, 2), IN(2, 3, 2)}, &sdpa_me_pad},
    {"sdpa memory-efficient attn_mask", NBA_BROADCAST, cat_sdpa, 3, {IN(1, 4, 4), IN(1, 5, 4), IN(1, 5, 4)}, &sdpa_me_attn_mask},
    {"sdpa memory-efficient per-head mask, causal", NBA_RANDOM, cat_sdpa, 3, {IN(1, 4, 4), IN(1, 4, 4), IN(1, 4, 4)}, &sdpa_me_head_mask},
};
/* clang-format on */
/* Sizes on both sides of each kernel switch (see above). */
static const nba_golden_case attention_cases[] = {
    {"q: [2,3,4]; k: [2,3,4]; v: [2,3,4]", "num_heads=2, causal=True, scale=0.5"},
    {"q: [1,1,64]; k: [1,2,64]; v: [1,2,64]", "num_heads=1, causal=False, scale=0.125"},
    {"q: [1,2,2]; k: [1,17,2]; v: [1,17,2]", "num_heads=1, causal=False, scale=0.5"},
    {"q: [1,33,1]; k: [1,33,1]; v: [1,33,1]", "num_heads=1, causal=True, scale=0.7"},
    {"q: [2,3,4]; k: [2,5,4]; v: [2,5,4]; mask: bool [[[[0,0,0,1,1]]],[[[1,1,1,1,1]]]]",
     "num_heads=2, causal=False, scale=0.6"},
    {"q: [2,3,4]; k: [2,3,4]; v: [2,3,4]; mask: bool [[0,0,1],[1,1,1],[0,1,0]]",
     "num_heads=2, causal=True, scale=1.0"}};
/* nb_sdpa: multi-head, grouped-query (with a fully padded batch) and multi-query heads, on
 * the kept-probabilities path and forced through the memory-efficient one. */
static int golden_sdpa(nba_golden_call *c, nb_tensor **out) {
    size_t old = nba_attention_keep_limit(c->flag(c, "memory_efficient") ? 0 : SIZE_MAX);
    out[0] = nb_sdpa(c->input(c, "q", true), c->input(c, "k", true), c->input(c, "v", true),
                     c->input(c, "mask", false), c->flag(c, "causal"), c->number(c, "scale"));
    nba_attention_keep_limit(old);
    return 1;
}
#define GQA_PADDED                                                                                 \
    "q: [2,4,3,2]; k: [2,2,5,2]; v: [2,2,5,2]; mask: bool [[[[0,0,0,0,1]]],[[[1,1,1,1,1]]]]"
static const nba_golden_case sdpa_cases[] = {
    {"q: [1,2,3,4]; k: [1,2,3,4]; v: [1,2,3,4]", "causal=True, scale=0.5, memory_efficient=False"},
    {GQA_PADDED, "causal=False, scale=0.7, memory_efficient=False"},
    {GQA_PADDED, "causal=False, scale=0.7, memory_efficient=True"},
    {"q: [1,3,4,2]; k: [1,1,6,2]; v: [1,1,6,2]; "
     "mask: bool [[0,1,0,0,0,0],[0,0,0,1,0,0],[1,0,0,0,0,0],[0,0,0,0,0,0]]",
     "causal=True, scale=0.6, memory_efficient=False"},
    {"q: [1,2,35,1]; k: [1,1,35,1]; v: [1,1,35,1]",
     "causal=True, scale=0.7, memory_efficient=True"},
    {"q: [1,2,3,2]; k: [1,2,4,2]; v: [1,2,4,2]; "
     "mask: bool [[[[0,1,0,0],[0,0,1,0],[1,1,1,1]],[[1,0,0,0],[0,0,0,1],[0,1,0,0]]]]",
     "causal=False, scale=0.8, memory_efficient=True"}};
static const nba_golden attention_goldens[] = {
    NBA_GOLDEN("f_attention", golden_f_attention,
               "attention_ref(q, k, v, mask, num_heads, causal, scale)", attention_cases),
    NBA_GOLDEN("sdpa", golden_sdpa, "sdpa_ref(q, k, v, mask, causal, scale)", sdpa_cases)};
NBA_OP_DEF(nba_op_attention, "attention", attention_entries, attention_goldens);
#endif /* NABLA_TESTS */
