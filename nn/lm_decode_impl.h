/* The fused decoding path's state and the small pieces its one-token path (lm_decode.c) and
 * its prompt path (lm_prefill.c) share. Internal to nn/. */
#ifndef NABLA_LM_DECODE_IMPL_H
#define NABLA_LM_DECODE_IMPL_H

#include "lm_decode.h"
#include "lm_decode_weights.h"

#include "kv_cache_impl.h"
#include "tensor/isa.h"
#include "tensor/nbt.h"

#include <math.h>
#include <string.h>

/* Token times per window of the choice of thread count (lm_decode.c). */
#define NBN_DECODE_WINDOW 16

struct nbn_lm_decoder {
    int64_t D, F, H, L;      /* sized for: dim, widest hidden layer, heads, max_len */
    float *x[2];             /* each half's copy of the residual stream [D] */
    float *q, *k, *v, *ctx;  /* [D] each, each half writing its heads' part */
    float *hidden, *erf_arg; /* [F], each half writing its rows */
    float *scores;           /* a row of L per head */
    float *norm[2];          /* each half's layer-norm output [D] */
    /* each half's partial out_proj and fc2 outputs [D] (two sets, so a job reads the one the
     * job before wrote while it writes the other) */
    float *attn_part[2], *ff_part[2];
    /* the thread count: the one in use, the one preferred, the timing window */
    int current, home, skip, in_window;
    int64_t window_ns[NBN_DECODE_WINDOW], until_trial, gap; /* the window's token times */
    double avg_ns[3]; /* per thread count: a running mean of its windows' mean token times */
    /* the weights in reading order (nbn_lm_decode_trust_model), current while weights_ready */
    nbn_decode_weights *weights;
    bool weights_ready;
    struct nbn_prefill_buffers *prefill; /* the prompt path's, made on its first use */
};

/* c's decoder for m, made (or remade, for a model of other sizes) here; NULL with an error
 * when memory runs out. Owned by c. */
struct nbn_lm_decoder *nbn_lm_decoder_for(const nb_transformer_lm *m, nb_kv_cache *c);
/* The thread count the next token (or prompt) should use: 1 when budget (nbt_threads_for)
 * allows one, else the forced count or the running choice (*choosing then says it is one). */
int nbn_lm_decode_threads(const struct nbn_lm_decoder *d, const nb_kv_cache *c, int budget,
                          bool *choosing);
/* Frees the prompt path's buffers (NULL is a no-op). */
void nbn_prefill_buffers_free(struct nbn_prefill_buffers *b);

/* A parameter's floats (nbn_lm_decode_covers has checked it: live, float32, contiguous). */
static inline const float *f32(const nb_tensor *t) {
    return t ? (const float *)nbt_ptr(t) : NULL;
}

/* x += (part[0] + part[1]) + bias: both halves' shares of a product, then its bias. Each half
 * adds into its own copy of the residual stream, the same sums in the same order. */
static inline void add_parts(int64_t D, float *x, float *const part[2], const nb_tensor *bias) {
    const float *b = f32(bias);
    for (int64_t i = 0; i < D; i++) {
        float y = part[0][i] + part[1][i];
        if (b) y += b[i];
        x[i] += y;
    }
}

/* Tokens the prompt path (lm_prefill.c) takes at once: the lanes of matmul_rows_f32. */
#define NBN_PREFILL_ROWS 16

/* True if token is in m's vocabulary; else false with an error naming the module. */
static inline bool nbn_token_ok(const nb_transformer_lm *m, int64_t token) {
    if (token >= 0 && token < m->vocab) return true;
    nbt_error("TransformerLM", "'%s': token %lld is outside [0, %lld)", m->base.path,
              (long long)token, (long long)m->vocab);
    return false;
}

/* y = n(x) for `rows` (at most NBN_PREFILL_ROWS) rows of D floats. */
static inline void nbn_layer_norm_rows(const nb_layernorm *n, int64_t rows, int64_t D,
                                       const float *x, float *y) {
    float mean[NBN_PREFILL_ROWS], rstd[NBN_PREFILL_ROWS];
    nbt_kernels()->layer_norm_rows_f32(rows, D, x, f32(n->weight), f32(n->bias), n->eps, y, mean,
                                       rstd);
}

/* y[r0..r1) = W x + bias[r0..r1) for rows r0..r1 of a weight with K columns, W pointing at
 * row r0 (of the model's weight, or of the copy in reading order); bias may be NULL. */
static inline void nbn_weight_rows(const float *W, const nb_tensor *bias, int64_t K, int64_t r0,
                                   int64_t r1, const float *x, float *y) {
    const float *b = f32(bias);
    nbt_kernels()->matvec_rows_f32(r1 - r0, K, W, K, x, b ? b + r0 : NULL, y + r0);
}

/* x0 = x1 = token's embedding + position pos's: both halves' copies of the residual stream. */
static inline void nbn_embed(const nb_transformer_lm *m, int64_t token, int64_t pos, float *x0,
                             float *x1) {
    const int64_t D = m->dim;
    const float *te = f32(m->tok_emb->weight) + token * D, *pe = f32(m->pos_emb->weight) + pos * D;
    for (int64_t i = 0; i < D; i++) x0[i] = x1[i] = te[i] + pe[i];
}

/* Head h's key k and value v [hd] into the cache slot (of a cache of L positions) at position
 * pos (keys transposed, [heads, hd, L]; values [heads, L, hd]), then query q's attention over
 * positions 0..pos into ctx [hd], with scores room for L. */
static inline void nbn_append_and_attend(const kv_slot *s, int64_t L, int64_t h, int64_t pos,
                                         const float *q, const float *k, const float *v,
                                         float *scores, float *ctx) {
    const int64_t hd = s->head_dim;
    float *Kt = (float *)nb_data(s->k) + h * hd * L, *Vh = (float *)nb_data(s->v) + h * L * hd;
    for (int64_t i = 0; i < hd; i++) Kt[i * L + pos] = k[i];
    memcpy(Vh + pos * hd, v, sizeof(float) * (size_t)hd);
    nbt_kernels()->attend_row_f32(pos + 1, hd, L, (float)(1.0 / sqrt((double)hd)), q, Kt, Vh,
                                  scores, ctx);
}

/* h[r0..r1) = GELU(h[r0..r1)) as nb_gelu computes it, x / 2 * (1 + erf(x / sqrt 2)), with
 * t[r0..r1) as scratch. */
static inline void nbn_gelu_rows(float *h, float *t, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) t[r] = h[r] * (float)M_SQRT1_2;
    nbt_kernels()->verf_f32(t + r0, t + r0, r1 - r0);
    for (int64_t r = r0; r < r1; r++) h[r] = h[r] * 0.5f * (1 + t[r]);
}

#endif
