/* nb_f_qkv_attention: self-attention with its query, key and value projections as one node.
 * MultiHeadAttention's three bias-free nb_f_linear calls and nb_f_attention record four nodes
 * and make six tensors (q, k, v and their gradients); this records one and makes two. In the
 * tutorials' small models that bookkeeping is a large part of the step (the seed workload's
 * forward+backward is about 2 us).
 *
 * Two layouts of the one q/k/v buffer, chosen by the attention's path (shape only):
 * - side by side, [B, T, 3D] (the probabilities are kept): the three projections are one
 *   product with Wq, Wk, Wv stacked as [3D, D_in] (read in place when they already lie so,
 *   else copied), and so is dx (dqkv [M, 3D] times the stacked weights). On two threads every
 *   product is a pool job or two whose last piece the other thread waits for, and toy's step
 *   had 16 jobs, 9 of them products of 512 x 64 x 64. The weights' gradients are one
 *   [3D, D_in] product too where the GEMM packs anyway (one_weight_grad), else each a product
 *   of its own (dqkv's columns of that weight, straight into its gradient).
 * - blocks, [3, B, T, D] (the memory-efficient path, long sequences): three products into
 *   the blocks, dx as three products added in order q, k, v, each weight's gradient its own
 *   product straight into the gradient (nba_weight_grad). Side by side, the long workload was
 *   2-3% slower at 2 threads (its key packing read rows 3D apart), and at its sizes a job's
 *   start and end cost nothing.
 * Either way the attention reads its heads in place (attention.c) and writes dq, dk, dv into
 * a gradient buffer of the same layout.
 *
 * No mask input (a fifth input): nn/attention.c takes this path for causal or unmasked
 * self-attention only. */
#include "attention.h"
#include "gemm_operand.h"
#include "node.h"

#include <string.h>

/* q, k or v (i = 0, 1, 2) of the op's buffer qkv ([B, T, 3D] side by side or [3, B, T, D]
 * blocks) as a [B, T, D] view held by the caller. The attention only reads a block's layout
 * and data; a tensor of the scope for each block would be nine a step. Filled field by field:
 * a copy of the whole struct, then a change, stalled the loads that read it back. */
static void block_of(const nb_tensor *qkv, bool side_by_side, int i, nb_tensor *t) {
    const int64_t B = qkv->shape[side_by_side ? 0 : 1], T = qkv->shape[side_by_side ? 1 : 2];
    const int64_t D = side_by_side ? qkv->shape[2] / 3 : qkv->shape[3],
                  row = side_by_side ? 3 * D : D;
    t->dtype = qkv->dtype, t->ndim = 3;
    t->shape[0] = B, t->shape[1] = T, t->shape[2] = D;
    t->strides[0] = T * row, t->strides[1] = row, t->strides[2] = 1;
    t->offset = qkv->offset + (side_by_side ? i * D : i * B * T * D), t->storage = qkv->storage;
    t->requires_grad = t->graph_released = false;
    t->grad = NULL, t->node = NULL;
    t->scope = qkv->scope, t->scope_prev = t->scope_next = NULL;
}

/* The attention call reading q, k, v from qkv, their views kept in blocks. */
static nba_attention_call call_on(const nb_tensor *qkv, bool side_by_side, int64_t H, bool causal,
                                  double scale, nb_tensor blocks[3]) {
    for (int i = 0; i < 3; i++) block_of(qkv, side_by_side, i, &blocks[i]);
    return (nba_attention_call){.q = &blocks[0],
                                .k = &blocks[1],
                                .v = &blocks[2],
                                .packed = true,
                                .causal = causal,
                                .Hq = H,
                                .Hkv = H,
                                .scale = scale};
}

/* Wq, Wk, Wv (inputs 1-3 of the op) as one [3D, D_in] matrix: in place when they already lie
 * so (one contiguous run, in order), else from *copy, a new [3, D, D_in] tensor filled here
 * when fill is set (the forward), the forward's copy otherwise. False when the copy fails. */
static bool stacked_weights(const nb_tensor *const w[3], nb_tensor **copy, bool fill,
                            nba_matrix *m) {
    const int64_t D = w[0]->shape[0], Din = w[0]->shape[1];
    const size_t bytes = nbt_esize(w[0]->dtype) * (size_t)(D * Din);
    bool adjacent = true;
    for (int i = 0; i < 3; i++)
        adjacent = adjacent && nb_is_contiguous(w[i]) && w[i]->storage == w[0]->storage &&
                   (const char *)nbt_ptr(w[i]) == (const char *)nbt_ptr(w[0]) + i * bytes;
    const char *ptr = nbt_ptr(w[0]);
    if (!adjacent) {
        if (fill) {
            *copy = nbt_new("qkv_attention", w[0]->dtype, 3, (int64_t[]){3, D, Din});
            for (int i = 0; *copy && i < 3; i++) {
                if (nb_is_contiguous(w[i])) { /* the usual case: one copy of the bytes */
                    memcpy((char *)nbt_ptr(*copy) + i * bytes, nbt_ptr(w[i]), bytes);
                    continue;
                }
                nb_tensor *block = nbt_select(*copy, 0, i);
                if (!block || !nbt_copy(block, w[i])) *copy = NULL;
            }
        }
        if (!*copy) return false;
        ptr = nbt_ptr(*copy);
    }
    *m = (nba_matrix){.ptr = ptr, .rows = 3 * D, .cols = Din, .ld = Din, .trans = false};
    return true;
}

/* Whether the side-by-side layout's three weight gradients [D, D_in] over M tokens are one
 * product into a new [3, D, D_in] tensor, then added to each weight's gradient: when all three
 * are wanted and the GEMM would pack for each one anyway (nbt_gemm_weight_grad_packs), so that
 * x is packed once, not three times. Timed in turns in one process on Zen 3 (AVX2, where
 * mid's 256 x 256 x 1024 packs), mid's step took 0.958 of the time at one thread and 0.930 at
 * two (medians of 66 and 63 blocks); fused always, toy, lm and lmbig took 0.994-0.995 at two.
 * Where each gradient is read in place (lm's 128 x 128 on AVX2; on AVX-512 up to 128 x 1024
 * elements of C), one [3D, D_in] product would pack what three did not (pack_n was 10% of
 * mid's samples on AVX-512). */
static bool one_weight_grad(const nb_node *n, nb_dtype dt, int64_t D, int64_t Din, int64_t M) {
    return nba_input_needs_grad(n, 1) && nba_input_needs_grad(n, 2) && nba_input_needs_grad(n, 3) &&
           nbt_gemm_weight_grad_packs(dt, D, Din, M);
}

/* inputs: x, Wq, Wk, Wv. saved[0]: the attention's probabilities or row stats; saved[1]: qkv;
 * saved[2]: the stacked weights' copy (side by side, when they were not stacked already).
 * f[0]: scale; i[0]: heads; i[1]: causal; i[2]: memory-efficient; i[3]: side by side. */
static void qkv_attention_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *x = n->inputs[0], *qkv = n->saved[1];
    const bool side = n->i[3];
    const int64_t D = n->inputs[1]->shape[0], M = x->shape[0] * x->shape[1], Din = x->shape[2];
    nb_tensor blocks[3], dblocks[3];
    nba_attention_call c = call_on(qkv, side, n->i[0], n->i[1], n->f[0], blocks);
    c.memory_efficient = n->i[2], c.saved = n->saved[0];
    nb_tensor *dqkv = nbt_new("qkv_attention", qkv->dtype, qkv->ndim, qkv->shape);
    if (!dqkv) return;
    nb_tensor *d[3];
    for (int i = 0; i < 3; i++) block_of(dqkv, side, i, &dblocks[i]), d[i] = &dblocks[i];
    if (!nba_attention_grads(&c, gout, d)) return;

    nba_matrix xm, w;
    if (!nba_matrix_of(x, &xm)) return;
    if (side) {
        const nba_matrix g = {.ptr = nbt_ptr(dqkv), .rows = M, .cols = 3 * D, .ld = 3 * D};
        if (one_weight_grad(n, x->dtype, D, Din, M)) { /* [dWq; dWk; dWv] = dqkv^T x */
            nb_tensor *dw = nbt_new("qkv_attention", x->dtype, 3, (int64_t[]){3, D, Din});
            if (dw && nba_gemm(&g, true, &xm, false, x->dtype, nbt_ptr(dw), Din, 3 * D, Din, false))
                for (int i = 0; i < 3; i++) nba_accumulate(n, 1 + i, nbt_select(dw, 0, i));
        } else {
            for (int i = 0; i < 3; i++) { /* dWi = g_i^T x, g_i: g's columns [iD, (i+1)D) */
                const nba_matrix gi = {.ptr = g.ptr + nbt_esize(x->dtype) * (size_t)(i * D),
                                       .rows = M,
                                       .cols = D,
                                       .ld = 3 * D};
                if (nba_input_needs_grad(n, 1 + i))
                    nba_weight_grad(n, 1 + i, "qkv_attention", &gi, &xm, x->dtype, D, Din);
            }
        }
        if (nba_input_needs_grad(n, 0)) { /* dx = dqkv [Wq; Wk; Wv] */
            nb_tensor *dx = nbt_new("qkv_attention", x->dtype, x->ndim, x->shape);
            nb_tensor *copy = n->saved[2];
            if (dx && stacked_weights((const nb_tensor *const *)&n->inputs[1], &copy, false, &w) &&
                nba_gemm(&g, false, &w, false, x->dtype, nbt_ptr(dx), Din, M, Din, false))
                nba_accumulate(n, 0, dx);
        }
        return;
    }
    for (int i = 0; i < 3; i++) {
        const nba_matrix g = {.ptr = nbt_ptr(d[i]), .rows = M, .cols = D, .ld = D};
        if (nba_input_needs_grad(n, 1 + i))
            nba_weight_grad(n, 1 + i, "qkv_attention", &g, &xm, x->dtype, D, Din); /* g^T x */
    }
    if (nba_input_needs_grad(n, 0)) { /* dx = sum of g_i Wi, in order q, k, v */
        nb_tensor *dx = nbt_new("qkv_attention", x->dtype, x->ndim, x->shape);
        bool ok = dx != NULL;
        for (int i = 0; ok && i < 3; i++) {
            const nba_matrix g = {.ptr = nbt_ptr(d[i]), .rows = M, .cols = D, .ld = D};
            ok = nba_matrix_of(n->inputs[1 + i], &w) &&
                 nba_gemm(&g, false, &w, false, x->dtype, nbt_ptr(dx), Din, M, Din, i > 0);
        }
        if (ok) nba_accumulate(n, 0, dx);
    }
}

nb_tensor *nb_f_qkv_attention(const nb_tensor *x, const nb_tensor *wq, const nb_tensor *wk,
                              const nb_tensor *wv, int64_t num_heads, bool causal, double scale) {
    const char *op = "qkv_attention";
    const nb_tensor *w[3] = {wq, wk, wv};
    if (!nba_check_inputs(op, 4, (const nb_tensor *[]){x, wq, wk, wv})) return NULL;
    for (int i = 0; i < 3; i++)
        if (!nba_check_same_float(op, x, w[i])) return NULL;
    if (x->ndim != 3 || wq->ndim != 2 || !nb_same_shape(wq, wk) || !nb_same_shape(wq, wv) ||
        wq->shape[1] != x->shape[2])
        return nbt_error(op,
                         "expected x [B, T, D_in] and Wq, Wk, Wv [D, D_in], got x %s, Wq %s, "
                         "Wk %s, Wv %s",
                         nbt_shape(x), nbt_shape(wq), nbt_shape(wk), nbt_shape(wv));
    const int64_t B = x->shape[0], T = x->shape[1], D = wq->shape[0];
    if (num_heads <= 0 || D % num_heads != 0)
        return nbt_error(op, "num_heads %lld must be positive and divide D = %lld (Wq %s)",
                         (long long)num_heads, (long long)D, nbt_shape(wq));
    const bool side = nba_attention_keeps(x->dtype, B, num_heads, T, T);
    nba_matrix xm, wm;
    if (!nba_matrix_of(x, &xm)) return NULL;
    nb_tensor *qkv = side ? nbt_new(op, x->dtype, 3, (int64_t[]){B, T, 3 * D})
                          : nbt_new(op, x->dtype, 4, (int64_t[]){3, B, T, D});
    if (!qkv) return NULL;
    nb_tensor *copy = NULL;
    if (side) { /* qkv = x [Wq; Wk; Wv]^T */
        if (!stacked_weights(w, &copy, true, &wm) ||
            !nba_gemm(&xm, false, &wm, true, x->dtype, nbt_ptr(qkv), 3 * D, xm.rows, 3 * D, false))
            return NULL;
    } else {
        for (int i = 0; i < 3; i++) /* block i = x Wi^T */
            if (!nba_matrix_of(w[i], &wm) ||
                !nba_gemm(&xm, false, &wm, true, x->dtype,
                          (char *)nbt_ptr(qkv) + nbt_esize(x->dtype) * (size_t)(i * xm.rows * D), D,
                          xm.rows, D, false))
                return NULL;
    }
    nb_tensor blocks[3];
    nba_attention_call c = call_on(qkv, side, num_heads, causal, scale, blocks);
    nb_tensor *out = nba_attention_forward(op, &c);
    if (!out) return NULL;
    nb_node *n =
        nba_record(op, out, 4, (const nb_tensor *[]){x, wq, wk, wv}, qkv_attention_backward);
    if (n) {
        n->saved[0] = c.saved, n->saved[1] = qkv, n->saved[2] = copy;
        n->f[0] = scale;
        n->i[0] = num_heads, n->i[1] = causal, n->i[2] = c.memory_efficient, n->i[3] = side;
    }
    return out;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h) ---- */
#include "op_def.h"

/* x [B, T, D_in], Wq, Wk, Wv [D, D_in]; ctx: heads and causal as {H, causal}. */
typedef struct {
    int64_t heads;
    bool causal;
    size_t keep_limit; /* SIZE_MAX: keep the probabilities; 0: the memory-efficient path */
} qkv_case;

static nb_tensor *cat_qkv(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const qkv_case *c = ctx;
    size_t old = nba_attention_keep_limit(c->keep_limit);
    nb_tensor *out = nb_f_qkv_attention(in[0], in[1], in[2], in[3], c->heads, c->causal, 0.5);
    nba_attention_keep_limit(old);
    return out;
}

static int golden_qkv_attention(nba_golden_call *c, nb_tensor **out) {
    out[0] =
        nb_f_qkv_attention(c->input(c, "x", true), c->input(c, "wq", true), c->input(c, "wk", true),
                           c->input(c, "wv", true), c->integer(c, "num_heads"),
                           c->flag(c, "causal"), c->number(c, "scale"));
    return 1;
}

static const qkv_case two_causal = {2, true, SIZE_MAX}, one_full = {1, false, SIZE_MAX},
                      two_me = {2, true, 0};

/* clang-format off */
static const nba_entry qkv_attention_entries[] = {
    {"qkv_attention x [2,3,4] W [4,4] x3, 2 heads, causal", NBA_RANDOM, cat_qkv, 4,
     {IN(2, 3, 4), IN(4, 4), IN(4, 4), IN(4, 4)}, &two_causal},
    {"qkv_attention D_in 5 -> D 6, 1 head, constant Wk", NBA_RANDOM, cat_qkv, 4,
     {IN(1, 4, 5), IN(6, 5), IN_C(6, 5), IN(6, 5)}, &one_full},
    {"qkv_attention memory-efficient, 40 queries", NBA_RANDOM, cat_qkv, 4,
     {IN(1, 40, 4), IN(4, 4), IN(4, 4), IN(4, 4)}, &two_me},
    {"qkv_attention transposed x and Wq, sliced Wv (copied)", NBA_STRIDED, cat_qkv, 4,
     {IN_T(2, 3, 4), IN_T(4, 4), IN(4, 4), IN_S(4, 4)}, &two_causal},
};
/* clang-format on */
static const nba_golden_case qkv_attention_cases[] = {
    {"x: [2,3,4]; wq: [4,4]; wk: [4,4]; wv: [4,4]", "num_heads=2, causal=True, scale=0.5"},
    {"x: [1,5,6]; wq: [8,6]; wk: [8,6]; wv: [8,6]", "num_heads=4, causal=False, scale=0.7"}};
static const nba_golden qkv_attention_goldens[] = {NBA_GOLDEN(
    "f_qkv_attention", golden_qkv_attention,
    "attention_ref(F.linear(x, wq), F.linear(x, wk), F.linear(x, wv), None, num_heads, causal, "
    "scale)",
    qkv_attention_cases)};
NBA_OP_DEF(nba_op_qkv_attention, "qkv_attention", qkv_attention_entries, qkv_attention_goldens,
           .not_applicable = {[NBA_BROADCAST] = "x's leading dims are rows and the weights have "
                                                "fixed shapes [D, D_in]: nothing broadcasts"});
#endif /* NABLA_TESTS */
