/* The prompt's path of nb_generate: up to PREFILL_ROWS tokens of one sequence at once through
 * the phases of the fused one-token path (lm_decode.c), the same halves on the same threads,
 * with each row of the weight copy read once for all the tokens (matmul_rows_f32, one lane a
 * token) where the general cached forward packs every weight for the prompt's few rows and
 * makes tensors op by op. Only the last token's logits are computed: sampling needs no more.
 *
 * The products sum in another order than the one-token path's (one chain per output in
 * order of k, against two interleaved chains), so a prompt's keys and values differ from
 * feeding its tokens one by one in the last bits, as the general path's do. */
#include "lm_decode_impl.h"

#include "nabla/module.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PREFILL_ROWS NBN_PREFILL_ROWS

struct nbn_prefill_buffers {
    int64_t D, F;
    float *x[2], *norm[2];            /* each half's residual streams and norms [ROWS][D] */
    float *q, *k, *v, *ctx;           /* [ROWS][D], each half writing its heads' columns */
    float *hidden;                    /* [ROWS][F], each half writing its rows' columns */
    float *attn_part[2], *ff_part[2]; /* each half's partial sums [ROWS][D] */
    float *xt[2];                     /* each half's inputs transposed [max(D, F)][ROWS] */
};

void nbn_prefill_buffers_free(struct nbn_prefill_buffers *b) {
    if (!b) return;
    free(b->x[0]);
    free(b);
}

/* d's prompt buffers, made on first use (sized as d is); NULL with an error when memory runs
 * out. */
static struct nbn_prefill_buffers *buffers_for(struct nbn_lm_decoder *d) {
    if (d->prefill) return d->prefill;
    const int64_t D = d->D, F = d->F, rows = PREFILL_ROWS, K = D > F ? D : F;
    const size_t floats = (size_t)((12 * D + F) * rows + 2 * K * rows);
    struct nbn_prefill_buffers *b = calloc(1, sizeof *b);
    float *p = b ? aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64) : NULL;
    if (!p) {
        free(b);
        return nbt_error("TransformerLM", "out of memory for the prompt's buffers");
    }
    *b = (struct nbn_prefill_buffers){.D = D, .F = F};
    float **of_d[] = {
        &b->x[0], &b->x[1], &b->norm[0],      &b->norm[1],      &b->q,          &b->k,
        &b->v,    &b->ctx,  &b->attn_part[0], &b->attn_part[1], &b->ff_part[0], &b->ff_part[1]};
    for (int i = 0; i < 12; i++) *of_d[i] = p + i * D * rows;
    b->hidden = p + 12 * D * rows;
    b->xt[0] = b->hidden + F * rows;
    b->xt[1] = b->xt[0] + K * rows;
    return d->prefill = b;
}

typedef struct {
    struct nbn_lm_decoder *d;
    struct nbn_prefill_buffers *b;
    const nb_transformer_lm *m;
    nb_kv_cache *c;
    const nbn_decode_weights *w;
    int64_t pos, T; /* the first token's position, the tokens */
    float *logits;  /* the last token's, in the last phase */
} prefill_job;

/* xt[k][t] = x[t * ldx + k] for k < K, t < T: the kernel's inputs, one lane a token. */
static void transpose_in(const float *x, int64_t ldx, int64_t T, int64_t K, float *xt) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++) xt[k * PREFILL_ROWS + t] = x[t * ldx + k];
}

/* y[t][r0 + i] = W[i] . x_t (+ bias[r0 + i]) for the n rows of W (row stride K) and the T rows
 * of x (row stride ldx, K used), through this half's transposed inputs. */
static void rows_times(const prefill_job *j, int half, const float *W, int64_t n, int64_t K,
                       const float *x, int64_t ldx, const float *bias, float *y, int64_t ldy) {
    float *xt = j->b->xt[half];
    transpose_in(x, ldx, j->T, K, xt);
    nbt_kernels()->matmul_rows_f32(n, K, W, K, xt, j->T, bias, y, ldy);
}

/* Row t of both halves' partial sums. */
static void add_parts_row(int64_t D, float *x, float *const part[2], int64_t t,
                          const nb_tensor *bias) {
    float *const row[2] = {part[0] + t * D, part[1] + t * D};
    add_parts(D, x + t * D, row, bias);
}

/* Block `layer`'s attention for half `half`: (the previous fc2 added,) norm1, its heads'
 * query, key and value rows, the keys and values into the cache, each token's attention over
 * the positions up to its own, and its columns of out_proj. */
static void attention_half(const prefill_job *j, int layer, int half) {
    const struct nbn_prefill_buffers *b = j->b;
    const nb_transformer_block *blk = j->m->blocks[layer];
    const nb_mha *a = blk->attn;
    const nbn_half_weights *hw = nbn_decode_weights_half(j->w, layer, half);
    const int64_t D = b->D, T = j->T, hd = a->head_dim, L = j->c->max_len;
    float *x = b->x[half], *nx = b->norm[half];
    if (layer > 0)
        for (int64_t t = 0; t < T; t++)
            add_parts_row(D, x, b->ff_part, t, j->m->blocks[layer - 1]->ff->fc2->bias);
    int64_t h0, h1;
    nbn_half_of(a->num_heads, 1, half, &h0, &h1);
    const int64_t q0 = h0 * hd, q1 = h1 * hd, n = (q1 - q0) * D;
    if (h0 < h1) {
        nbn_layer_norm_rows(blk->norm1, T, D, x, nx);
        const float *bq = f32(a->W_query->bias), *bk = f32(a->W_key->bias),
                    *bv = f32(a->W_value->bias);
        float *xt = b->xt[half];
        transpose_in(nx, D, T, D, xt);
        nbt_kernels()->matmul_rows_f32(q1 - q0, D, hw->qkv, D, xt, T, bq ? bq + q0 : NULL,
                                       b->q + q0, D);
        nbt_kernels()->matmul_rows_f32(q1 - q0, D, hw->qkv + n, D, xt, T, bk ? bk + q0 : NULL,
                                       b->k + q0, D);
        nbt_kernels()->matmul_rows_f32(q1 - q0, D, hw->qkv + 2 * n, D, xt, T, bv ? bv + q0 : NULL,
                                       b->v + q0, D);
    }
    for (int64_t h = h0; h < h1; h++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t at = t * D + h * hd; /* token t's head h */
            nbn_append_and_attend(&j->c->slots[layer], L, h, j->pos + t, b->q + at, b->k + at,
                                  b->v + at, j->d->scores + h * L, b->ctx + at);
        }
    rows_times(j, half, hw->out, D, q1 - q0, b->ctx + q0, D, NULL, b->attn_part[half], D);
}

/* Block `layer`'s feed-forward for half `half`: out_proj added, norm2, its rows of fc1 with
 * their GELU (as nb_gelu computes it), and its columns of fc2. */
static void feedforward_half(const prefill_job *j, int layer, int half) {
    const struct nbn_prefill_buffers *b = j->b;
    const nb_transformer_block *blk = j->m->blocks[layer];
    const nbn_half_weights *hw = nbn_decode_weights_half(j->w, layer, half);
    const int64_t D = b->D, F = b->F, T = j->T;
    float *x = b->x[half], *nx = b->norm[half], *erf_arg = j->d->erf_arg;
    for (int64_t t = 0; t < T; t++) add_parts_row(D, x, b->attn_part, t, blk->attn->out_proj->bias);
    int64_t r0, r1;
    nbn_half_of(blk->ff->fc1->out_features, 16, half, &r0, &r1);
    if (r0 < r1) {
        nbn_layer_norm_rows(blk->norm2, T, D, x, nx);
        const float *b1 = f32(blk->ff->fc1->bias);
        rows_times(j, half, hw->fc1, r1 - r0, D, nx, D, b1 ? b1 + r0 : NULL, b->hidden + r0, F);
        for (int64_t t = 0; t < T; t++) nbn_gelu_rows(b->hidden + t * F, erf_arg, r0, r1);
    }
    rows_times(j, half, hw->fc2, D, r1 - r0, b->hidden + r0, F, NULL, b->ff_part[half], D);
}

/* The last token's logits: half `half` adds the last fc2 to its copy of that token's residual
 * stream, takes the final norm and computes its rows of the head. */
static void head_half(const prefill_job *j, int half) {
    const struct nbn_prefill_buffers *b = j->b;
    const nb_transformer_lm *m = j->m;
    const int64_t D = b->D, last = j->T - 1;
    int64_t r0, r1;
    nbn_half_of(m->out_features, 16, half, &r0, &r1);
    if (r0 == r1) return;
    float *x = b->x[half] + last * D, *nx = b->norm[half] + last * D;
    add_parts_row(D, b->x[half], b->ff_part, last, m->blocks[m->num_layers - 1]->ff->fc2->bias);
    nbn_layer_norm_rows(m->norm_f, 1, D, x, nx);
    nbn_weight_rows(f32(m->head_weight) + r0 * D, m->head_bias, D, r0, r1, nx, j->logits);
}

static void run_phase(int p, int begin, int end, void *vjob) {
    const prefill_job *j = vjob;
    const int layer = p / 2;
    for (int half = begin; half < end; half++) {
        if (layer == j->m->num_layers)
            head_half(j, half);
        else if (p % 2 == 0)
            attention_half(j, layer, half);
        else
            feedforward_half(j, layer, half);
    }
}

bool nbn_lm_prefill_covers(const nb_transformer_lm *m, const nb_kv_cache *c, int64_t n) {
    const struct nbn_lm_decoder *d = c->decoder;
    const int64_t len = c->slots[0].len;
    return n >= 1 && c->decode_trusted == m && d && d->weights_ready && len + n <= c->max_len &&
           len + n <= m->max_len && nbn_lm_decode_covers_next(m, c);
}

bool nbn_lm_prefill(nb_transformer_lm *m, const int64_t *tokens, int64_t n, nb_kv_cache *c,
                    float *logits) {
    for (int64_t i = 0; i < n; i++)
        if (!nbn_token_ok(m, tokens[i])) return false;
    if (!nbn_lm_prefill_covers(m, c, n))
        return nbt_error("TransformerLM",
                         "'%s': the prompt path does not cover %lld tokens after %lld here",
                         m->base.path, (long long)n, (long long)c->slots[0].len),
               false;
    struct nbn_lm_decoder *d = nbn_lm_decoder_for(m, c);
    struct nbn_prefill_buffers *b = d ? buffers_for(d) : NULL;
    if (!b) return false;
    bool choosing;
    const int threads = nbn_lm_decode_threads(d, c, nbt_threads_for(2, 1), &choosing);
    const int64_t D = m->dim;
    for (int64_t done = 0; done < n;) {
        const int64_t T = n - done < PREFILL_ROWS ? n - done : PREFILL_ROWS;
        prefill_job j = {.d = d,
                         .b = b,
                         .m = m,
                         .c = c,
                         .w = d->weights,
                         .pos = c->slots[0].len,
                         .T = T,
                         .logits = logits};
        for (int64_t t = 0; t < T; t++)
            nbn_embed(m, tokens[done + t], j.pos + t, b->x[0] + t * D, b->x[1] + t * D);
        done += T;
        /* the head only after the last chunk */
        const int phases = 2 * (int)m->num_layers + (done == n);
        if (threads > 1) {
            nbt_wake_workers();
            nbt_parallel_phases(phases, run_phase, &j);
        } else {
            for (int p = 0; p < phases; p++) run_phase(p, 0, 2, &j);
        }
        for (int layer = 0; layer < m->num_layers; layer++) c->slots[layer].len = j.pos + T;
    }
    return true;
}
