/* The fused attention's products on tiles (attention_tiles.h), for one (batch, query head)
 * pair: the kept path runs its whole head as one block, the memory-efficient path blocks of
 * ME_ROWS queries. A block is queries [r0, r0 + rows) against keys [0, keys):
 *   forward   S = scale Q K^T, P = softmax rows of S, ctx = P V
 *   backward  dV += P^T G, dP = G V^T, dS = scale * P * (dP - rowsum(P * dP)),
 *             dQ = dS K, dK += dS^T Q
 * The keys and values are packed as the products' B once per pair (K^T and V for the forward;
 * K^T, V^T and K for the backward), and the block's context gradient and queries as the B of
 * dV and dK once per block; A operands (queries, probabilities, their gradient) are read
 * where they lie (queries packed only for a block shorter than a tile). With
 * causal attention each product skips what the diagonal blocks (nba_cut). */
#include "attention_job.h"
#include "attention_tiles.h"

#include <string.h>

/* A worker's scratch: the memory-efficient path's probabilities P, and dS for both paths
 * (tiles of `rows` rows `ld` apart; kept: P is the kept probabilities, dS [T_q, T_k]), the
 * block's queries and context gradient packed as A when the block is shorter than a tile (qa,
 * ga), and the packed B operands. */
typedef struct {
    nba_tiles t;
    int64_t rows, ld;
    char *P, *dS, *qa, *ga, *kt, *vt, *vp, *kp, *gp, *qp;
} block_scratch;

/* Elements a chunk of n takes: whole cache lines. */
static int64_t chunk(int64_t n) {
    return nba_round_up(n, 16);
}

/* Lays out a worker's scratch from `at` (pointers NULL when at is NULL, or for a chunk the
 * path does not use); returns the elements it takes. */
static int64_t layout(const attention_job *j, bool backward, char *at, block_scratch *m) {
    *m = (block_scratch){.t = nba_tiles_for(j->dtype)};
    const bool me = j->memory_efficient;
    m->rows = me ? nba_round_up(ME_ROWS, m->t.mr) : j->Tq;
    /* a padded row keeps a strip's rows off one cache set (rows 8 KB apart at T_k = 2048) */
    m->ld = me ? nba_round_up(nba_round_up(j->Tk, m->t.mr), 16) + 16 : j->Tk;
    const int64_t tile = chunk(m->rows * m->ld);
    const int64_t block = chunk(nba_round_up(m->rows, m->t.mr) * j->hd);
    const int64_t head = chunk(nba_tiles_packed_size(&m->t, j->Tk, j->hd));
    const int64_t rows = chunk(nba_tiles_packed_size(&m->t, m->rows, j->hd));
    struct {
        char **at;
        int64_t size;
        bool used;
    } chunks[] = {
        {&m->P, tile, me},         {&m->dS, tile, backward},        {&m->qa, block, true},
        {&m->ga, block, backward}, {&m->kt, head, me || !backward}, {&m->vt, head, backward},
        {&m->vp, head, !backward}, {&m->kp, head, backward},        {&m->gp, rows, backward},
        {&m->qp, rows, backward}};
    int64_t total = 0;
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        if (!chunks[i].used) continue;
        if (at) *chunks[i].at = at + j->es * (size_t)total;
        total += chunks[i].size;
    }
    return total;
}

int64_t nba_blocks_scratch(const attention_job *j, bool backward) {
    block_scratch m;
    return layout(j, backward, NULL, &m);
}

/* One block of queries against its keys. */
typedef struct {
    int64_t b, h, r0, rows, keys;
    /* its queries and context gradient as A: in place (rows q_row, g_row apart) or packed
     * (row 0) */
    const char *q, *g;
    int64_t q_row, g_row;
    char *P, *dS; /* its rows of the probabilities and their gradient, ld apart */
    int64_t ld;
} block_t;

/* One of the block's three kinds of product, named by its causal cut, with B packed and, for
 * COLUMNS, A's rows a_row apart (0: packed; the others' A is a tile). B is always packed: read
 * in place (rows a head's row apart), ctx = P V ran at 72-78% of packed's speed and dV = P^T G
 * at 80-90% (tile products alone at the long workload's shapes, AVX2 and AVX-512):
 *   NBA_CUT_COLUMNS  C (rows x keys, ld apart) = alpha A B over head_dim, A the block's
 *                    queries or context gradient, B keys or values packed as rows
 *                    (S = scale Q K^T, dP = G V^T);
 *   NBA_CUT_SUM_TO   C (rows x hd) = A B over the keys, A a tile (ctx = P V, dQ = dS K);
 *   NBA_CUT_SUM_FROM C (keys x hd) = A^T B + beta C over the block's queries, A a tile and B
 *                    the block's rows (dV = P^T G, dK = dS^T Q).
 * Without causal attention nothing is cut. */
static void block_product(const attention_job *j, const block_scratch *m, const block_t *blk,
                          nba_cut kind, double alpha, double beta, const char *A, int64_t a_row,
                          const char *B, char *C, int64_t ldc) {
    const int64_t nr = m->t.nr;
    nba_tile_product p = {.alpha = alpha,
                          .beta = beta,
                          .A = A,
                          .B = B,
                          .C = C,
                          .ldc = ldc,
                          .cut = j->plan.causal ? kind : NBA_CUT_NONE,
                          .diag = blk->r0};
    if (kind == NBA_CUT_COLUMNS) {
        p.M = blk->rows, p.N = blk->keys, p.K = j->hd, p.b_panel = j->hd * nr;
        p.a_rs = a_row, p.a_cs = 1, p.a_packed = a_row == 0;
    } else if (kind == NBA_CUT_SUM_TO) {
        p.M = blk->rows, p.N = j->hd, p.K = blk->keys, p.b_panel = j->Tk * nr;
        p.a_rs = blk->ld, p.a_cs = 1;
    } else {
        p.M = blk->keys, p.N = j->hd, p.K = blk->rows, p.b_panel = blk->rows * nr;
        p.a_rs = 1, p.a_cs = blk->ld;
    }
    nba_tiles_multiply(&m->t, &p);
}

/* dV += P^T G or dK += dS^T Q: X (the block's rows of G or Q, x_row apart) packed into `pack`
 * first. */
static void sum_queries(const attention_job *j, const block_scratch *m, const block_t *blk,
                        const char *A, const char *X, int64_t x_row, char *pack, double beta,
                        char *C, int64_t ldc) {
    nba_tiles_pack_cols(&m->t, pack, X, x_row, blk->rows, j->hd);
    block_product(j, m, blk, NBA_CUT_SUM_FROM, 1.0, beta, A, 0, pack, C, ldc);
}

typedef enum { SOFTMAX_KEEP, SOFTMAX_SAVE, SOFTMAX_REPLAY } softmax_mode;

/* The block's softmax rows in place (kept, saving each row's max and 1/sum in stats, or
 * replaying them from stats: the same operations, so the same bits) on the rows of the
 * instruction set in use (softmax_isa.h). */
static void softmax_block(const attention_job *j, const block_t *blk, char *stats,
                          softmax_mode mode) {
    /* Rows one after another (the kept path's P, ld == keys) take one call: a call a row cost
     * mid's step 1-2% (plan copies, dispatch), one per block gave 0.980 of its time at one
     * thread, 0.983-0.988 at two (2026-11-29, in turns). The same rows, the same bits. */
    const int64_t rows = blk->ld == blk->keys ? blk->rows : 1; /* a call's */
    for (int64_t r = 0; r < blk->rows; r += rows) {
        /* the product's alpha rounded scale * sum as the softmax's own scaling would */
        softmax_plan plan = rows_plan(j, blk->b, blk->h, blk->r0 + r, rows, blk->keys);
        plan.scale = 1.0;
        char *row = blk->P + j->es * (size_t)(r * blk->ld);
        if (mode == SOFTMAX_KEEP)
            nba_softmax_rows(&plan, j->dtype, row, row);
        else
            nba_softmax_rows_saved(&plan, j->dtype, row, stats + j->es * (size_t)(2 * r),
                                   mode == SOFTMAX_REPLAY);
    }
}

/* dS from P and dP in place; reads only what the causal cut computed. */
static void softmax_block_backward(const attention_job *j, const block_t *blk) {
    const int64_t rows = blk->ld == blk->keys ? blk->rows : 1; /* a call's, as softmax_block */
    for (int64_t r = 0; r < blk->rows; r += rows) {
        char *ds = blk->dS + j->es * (size_t)(r * blk->ld);
        nba_softmax_backward_rows(j->dtype, rows, blk->keys, j->plan.scale, j->plan.causal,
                                  blk->r0 + r, blk->P + j->es * (size_t)(r * blk->ld), ds, ds);
    }
}

/* The block's scores into P, then its softmax rows in place. */
static void probabilities(const attention_job *j, const block_scratch *m, const block_t *blk,
                          const char *kt, char *stats, softmax_mode mode) {
    block_product(j, m, blk, NBA_CUT_COLUMNS, j->plan.scale, 0.0, blk->q, blk->q_row, kt, blk->P,
                  blk->ld);
    softmax_block(j, blk, stats, mode);
}

/* Block [r0, r0 + rows) of pair pr. Its queries (and context gradient) are read in place as A,
 * or packed when the block is shorter than a tile (a strip may not read past the head). */
static block_t block_at(const attention_job *j, const block_scratch *m, const pair_t *pr,
                        int64_t r0, int64_t rows, bool backward) {
    const size_t es = j->es;
    block_t blk = {.b = pr->b,
                   .h = pr->h,
                   .r0 = r0,
                   .rows = rows,
                   .keys = j->memory_efficient ? block_keys(j, r0 + rows) : j->Tk,
                   .q = pr->q + es * (size_t)(r0 * j->q.r),
                   .q_row = j->q.r,
                   .ld = m->ld};
    if (backward) blk.g = pr->grad + es * (size_t)(r0 * j->grad.r), blk.g_row = j->grad.r;
    if (rows >= m->t.mr) return blk;
    nba_tiles_pack_rows(&m->t, m->qa, blk.q, blk.q_row, rows, j->hd, m->t.mr);
    blk.q = m->qa, blk.q_row = 0;
    if (backward) {
        nba_tiles_pack_rows(&m->t, m->ga, blk.g, blk.g_row, rows, j->hd, m->t.mr);
        blk.g = m->ga, blk.g_row = 0;
    }
    return blk;
}

/* The block's probabilities P of pair p: the kept ones (computed by the forward), or the
 * memory-efficient path's tile, its rows' max and 1/sum saved by the forward and replayed by
 * the backward. */
static void block_probabilities(const attention_job *j, const block_scratch *m, block_t *blk,
                                int64_t p, bool backward) {
    if (!j->memory_efficient) {
        blk->P = j->probs + j->es * (size_t)(p * j->Tq * j->Tk);
        if (!backward) probabilities(j, m, blk, m->kt, NULL, SOFTMAX_KEEP);
        return;
    }
    blk->P = m->P;
    char *stats = j->stats + j->es * (size_t)(2 * (p * j->Tq + blk->r0));
    probabilities(j, m, blk, m->kt, stats, backward ? SOFTMAX_REPLAY : SOFTMAX_SAVE);
}

void nba_blocks_forward(const attention_job *j, int64_t p, char *scratch) {
    const pair_t pr = pair_at(j, p);
    const size_t es = j->es;
    block_scratch m;
    layout(j, false, scratch, &m);
    /* K^T and V packed once a pair */
    nba_tiles_pack_rows(&m.t, m.kt, pr.k, j->k.r, j->Tk, j->hd, m.t.nr);
    nba_tiles_pack_cols(&m.t, m.vp, pr.v, j->v.r, j->Tk, j->hd);
    const int64_t step = j->memory_efficient ? ME_ROWS : j->Tq;
    for (int64_t r0 = 0; r0 < j->Tq; r0 += step) {
        block_t blk = block_at(j, &m, &pr, r0, j->Tq - r0 < step ? j->Tq - r0 : step, false);
        block_probabilities(j, &m, &blk, p, false);
        block_product(j, &m, &blk, NBA_CUT_SUM_TO, 1.0, 0.0, blk.P, 0, m.vp,
                      pr.ctx + es * (size_t)(r0 * j->out.r), j->out.r);
    }
}

void nba_blocks_backward(const attention_job *j, int64_t p, bool first, char *scratch) {
    const pair_t pr = pair_at(j, p);
    const size_t es = j->es;
    block_scratch m;
    layout(j, true, scratch, &m);
    if (j->memory_efficient) nba_tiles_pack_rows(&m.t, m.kt, pr.k, j->k.r, j->Tk, j->hd, m.t.nr);
    /* V^T and K packed once a pair */
    nba_tiles_pack_rows(&m.t, m.vt, pr.v, j->v.r, j->Tk, j->hd, m.t.nr);
    nba_tiles_pack_cols(&m.t, m.kp, pr.k, j->k.r, j->Tk, j->hd);
    const int64_t step = j->memory_efficient ? ME_ROWS : j->Tq;
    /* the memory-efficient path's dK and dV are zeroed by the caller and add up its blocks */
    const double beta = first && !j->memory_efficient ? 0.0 : 1.0;
    for (int64_t r0 = 0; r0 < j->Tq; r0 += step) {
        block_t blk = block_at(j, &m, &pr, r0, j->Tq - r0 < step ? j->Tq - r0 : step, true);
        blk.dS = m.dS;
        block_probabilities(j, &m, &blk, p, true);
        const char *q = pr.q + es * (size_t)(r0 * j->q.r);
        const char *g = pr.grad + es * (size_t)(r0 * j->grad.r);
        if (pr.dv) sum_queries(j, &m, &blk, blk.P, g, j->grad.r, m.gp, beta, pr.dv, j->dv.r);
        if (!pr.dq && !pr.dk) continue;
        block_product(j, &m, &blk, NBA_CUT_COLUMNS, 1.0, 0.0, blk.g, blk.g_row, m.vt, blk.dS,
                      blk.ld); /* dP = G V^T */
        softmax_block_backward(j, &blk);
        if (pr.dq)
            block_product(j, &m, &blk, NBA_CUT_SUM_TO, 1.0, 0.0, blk.dS, 0, m.kp,
                          pr.dq + es * (size_t)(r0 * j->dq.r), j->dq.r);
        if (pr.dk) sum_queries(j, &m, &blk, blk.dS, q, j->q.r, m.qp, beta, pr.dk, j->dk.r);
    }
}
