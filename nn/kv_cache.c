/* The key/value cache and the cached (incremental) forwards of attention, the transformer
 * block and TransformerLM. Everything but the attention itself goes through the ordinary ops
 * (linear, layer norm, GELU) with grad mode off; the attention of a few new queries against
 * the cached keys is a small kernel of its own below, one (sequence, head, query) row at a
 * time through the GEMM's row and dot kernels. */
#include "nabla/module.h"
#include "tensor/nbt.h"
#include "nabla/generate.h"
#include "tensor/gemm.h"
#include "tensor/vecmath.h"
#include "kv_cache_impl.h"
#include "lm_decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static nb_kv_cache *cache_new(int nslots, int64_t batch, int64_t max_len, nb_dtype dt) {
    if (batch < 1 || max_len < 1)
        return nbt_error("kv_cache", "batch %lld and max_len %lld must be positive",
                         (long long)batch, (long long)max_len);
    nb_kv_cache *c = calloc(1, sizeof *c + sizeof(kv_slot) * (size_t)nslots);
    if (!c || !(c->scope = nb_scope_create())) {
        free(c);
        return nbt_error("kv_cache", "out of memory");
    }
    c->dtype = dt;
    c->batch = batch;
    c->max_len = max_len;
    c->nslots = nslots;
    return c;
}

/* Allocates slot i for kv_heads heads of head_dim. */
static bool slot_init(nb_kv_cache *c, int i, int64_t kv_heads, int64_t head_dim) {
    kv_slot *s = &c->slots[i];
    s->kv_heads = kv_heads;
    s->head_dim = head_dim;
    nb_scope_push(c->scope);
    s->k = nb_zeros(c->dtype, NB_SHAPE(c->batch, kv_heads, head_dim, c->max_len));
    s->v = nb_zeros(c->dtype, NB_SHAPE(c->batch, kv_heads, c->max_len, head_dim));
    nb_scope_pop();
    return s->k && s->v;
}

/* The heads whose keys and values a layer stores (every query head, until grouped-query
 * attention gives a layer fewer key/value heads). */
static int64_t kv_heads_of(const nb_mha *m) {
    return m->num_heads;
}

nb_kv_cache *nb_kv_cache_for_mha(const nb_mha *m, int64_t batch, int64_t max_len) {
    if (!m) return nbt_error("kv_cache", "NULL module");
    nb_kv_cache *c = cache_new(1, batch, max_len, m->base.root->dtype);
    if (c && !slot_init(c, 0, kv_heads_of(m), m->head_dim)) {
        nb_kv_cache_free(c);
        return NULL;
    }
    return c;
}

nb_kv_cache *nb_kv_cache_for_lm(const nb_transformer_lm *lm, int64_t batch) {
    if (!lm) return nbt_error("kv_cache", "NULL module");
    nb_kv_cache *c = cache_new(lm->num_layers, batch, lm->max_len, lm->base.root->dtype);
    for (int i = 0; c && i < lm->num_layers; i++) {
        const nb_mha *a = lm->blocks[i]->attn;
        if (!slot_init(c, i, kv_heads_of(a), a->head_dim)) {
            nb_kv_cache_free(c);
            return NULL;
        }
    }
    return c;
}

void nb_kv_cache_reset(nb_kv_cache *c) {
    if (c)
        for (int i = 0; i < c->nslots; i++) c->slots[i].len = 0;
}

int64_t nb_kv_cache_len(const nb_kv_cache *c) {
    return c ? c->slots[0].len : -1;
}

int64_t nb_kv_cache_max_len(const nb_kv_cache *c) {
    return c ? c->max_len : -1;
}

void nb_kv_cache_free(nb_kv_cache *c) {
    if (!c) return;
    if (c->scope) nb_scope_destroy(c->scope);
    nbn_lm_decoder_free(c->decoder);
    free(c);
}

/* ---- attention of new queries against a slot ------------------------------------------ */

/* Everything one call of the kernel needs; q, k_new, v_new and ctx are contiguous
 * [batch, T_new, heads * head_dim] (k_new, v_new with kv_heads). scores has a row of max_len
 * for every (sequence, head) pair, so pairs can run on different threads. */
typedef struct {
    const kv_slot *slot;
    int64_t batch, t_new, heads, max_len;
    double scale;
    const void *q, *k_new, *v_new;
    void *ctx, *scores;
} cached_attention;

/* append: writes the new keys (transposed) and values at positions len... pairs: for pairs
 * [p0, p1) of (sequence b, head h) and each new query i (position len + i):
 * s = scale * q K[0..len+i]^T, e = exp(s - max s), ctx = (e V[0..len+i]) / sum(e). Query head
 * h reads key/value head h / (heads / kv_heads). */
#define DEFINE_CACHED_ATTENTION(T, SUF, ROWS, VEXP)                                                \
    static void append_##SUF(const cached_attention *a) {                                          \
        const kv_slot *s = a->slot;                                                                \
        const int64_t hd = s->head_dim, kvh = s->kv_heads, L = a->max_len, len = s->len;           \
        T *K = nb_data(s->k), *V = nb_data(s->v);                                                  \
        const T *kn = a->k_new, *vn = a->v_new;                                                    \
        for (int64_t b = 0; b < a->batch; b++)                                                     \
            for (int64_t i = 0; i < a->t_new; i++)                                                 \
                for (int64_t h = 0; h < kvh; h++) {                                                \
                    const size_t from = (size_t)((b * a->t_new + i) * kvh * hd + h * hd);          \
                    const size_t kt = (size_t)((b * kvh + h) * hd * L + len + i);                  \
                    for (int64_t d = 0; d < hd; d++)                                               \
                        K[kt + (size_t)(d * L)] = kn[from + (size_t)d];                            \
                    memcpy(V + (size_t)(((b * kvh + h) * L + len + i) * hd), vn + from,            \
                           sizeof(T) * (size_t)hd);                                                \
                }                                                                                  \
    }                                                                                              \
    static void pairs_##SUF(int64_t p0, int64_t p1, void *va) {                                    \
        const cached_attention *a = va;                                                            \
        const kv_slot *s = a->slot;                                                                \
        const int64_t hd = s->head_dim, kvh = s->kv_heads, L = a->max_len, len = s->len;           \
        const int64_t q_row = a->heads * hd, group = a->heads / kvh;                               \
        const T *K = nb_data(s->k), *V = nb_data(s->v), *q = a->q;                                 \
        T *ctx = a->ctx;                                                                           \
        for (int64_t pair = p0; pair < p1; pair++) {                                               \
            const int64_t b = pair / a->heads, h = pair % a->heads;                                \
            const size_t head = (size_t)((b * kvh + h / group) * L * hd);                          \
            T *sc = (T *)a->scores + pair * L;                                                     \
            for (int64_t i = 0; i < a->t_new; i++) {                                               \
                const int64_t n = len + i + 1; /* keys 0..p */                                     \
                const size_t row = (size_t)((b * a->t_new + i) * q_row + h * hd);                  \
                ROWS(false, 1, n, hd, (T)a->scale, q + row, hd, 1, K + head, L, 0, sc, n);         \
                T max = sc[0];                                                                     \
                for (int64_t j = 1; j < n; j++) max = sc[j] > max ? sc[j] : max;                   \
                for (int64_t j = 0; j < n; j++) sc[j] -= max;                                      \
                VEXP(sc, sc, n);                                                                   \
                double sum = 0;                                                                    \
                for (int64_t j = 0; j < n; j++) sum += sc[j];                                      \
                ROWS(false, 1, hd, n, (T)(1.0 / sum), sc, n, 1, V + head, hd, 0, ctx + row, hd);   \
            }                                                                                      \
        }                                                                                          \
    }
DEFINE_CACHED_ATTENTION(float, f32, nbt_sgemm_rows, nbt_vexp_f32)
DEFINE_CACHED_ATTENTION(double, f64, nbt_dgemm_rows, nbt_vexp_f64)

/* A (sequence, head) pair's work is about 2 * keys * head_dim multiply-adds per query; pairs
 * are split across threads only when each thread gets at least this many. */
#define PAIRS_GRAIN_MACS 16384

/* ---- one-row linear layers, split across threads by output features ------------------- */

/* Decoding one token multiplies a single row by every weight matrix: a matrix-vector product
 * that reads each weight once and is bound by moving the weights. Splitting a product's
 * output features between threads lets each core stream (and keep in its own cache) only its
 * share. Each output is the same dot product whoever computes it, so results do not depend
 * on the thread count. Up to three layers that read the same input (the query, key and value
 * projections) go as one job. */
#define MATVEC_MAX 3
/* Work below this many multiply-adds per thread is not worth waking a thread for. */
#define MATVEC_GRAIN_MACS 16384

typedef struct {
    int n;
    const nb_linear *lin[MATVEC_MAX];
    void *y[MATVEC_MAX];
    const void *x;
    int64_t K, N; /* in_features, out_features (the same for every layer of a job) */
    bool f32;
} matvec_job;

static void matvec_range(int64_t begin, int64_t end, void *vjob) {
    const matvec_job *j = vjob;
    for (int64_t r = begin; r < end;) { /* r indexes the layers' outputs back to back */
        const int l = (int)(r / j->N);
        const int64_t r0 = r % j->N, rows = (end - r < j->N - r0 ? end - r : j->N - r0);
        const void *W = nb_data(j->lin[l]->weight);
        const void *b = j->lin[l]->bias ? nb_data(j->lin[l]->bias) : NULL;
        if (j->f32) {
            float *y = (float *)j->y[l] + r0;
            const float *bias = b ? (const float *)b + r0 : NULL;
            nbt_sgemm_rows(true, 1, rows, j->K, 1.0f, j->x, j->K, 1, (const float *)W + r0 * j->K,
                           j->K, 0.0f, y, rows);
            for (int64_t i = 0; bias && i < rows; i++) y[i] += bias[i];
        } else {
            double *y = (double *)j->y[l] + r0;
            const double *bias = b ? (const double *)b + r0 : NULL;
            nbt_dgemm_rows(true, 1, rows, j->K, 1.0, j->x, j->K, 1, (const double *)W + r0 * j->K,
                           j->K, 0.0, y, rows);
            for (int64_t i = 0; bias && i < rows; i++) y[i] += bias[i];
        }
        r += rows;
    }
}

/* out[i] = lin[i](x) for n layers of equal shape. A single contiguous row of x whose dtype
 * and weights are plain goes through matvec_range; anything else through nb_linear_forward. */
static bool linears(int n, nb_linear *const *lin, const nb_tensor *x, nb_tensor **out) {
    const nb_linear *l0 = lin[0];
    bool plain = x && nbt_numel(x) == l0->in_features && nb_is_contiguous(x) &&
                 x->dtype == l0->weight->dtype;
    for (int i = 0; i < n && plain; i++)
        plain = nb_is_contiguous(lin[i]->weight) &&
                (!lin[i]->bias || nb_is_contiguous(lin[i]->bias)) &&
                lin[i]->in_features == l0->in_features && lin[i]->out_features == l0->out_features;
    if (!plain) {
        bool ok = true;
        for (int i = 0; i < n; i++) ok &= (out[i] = nb_linear_forward(lin[i], x)) != NULL;
        return ok;
    }
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape[0] * (size_t)x->ndim);
    shape[x->ndim - 1] = l0->out_features;
    matvec_job job = {.n = n,
                      .x = nb_data(x),
                      .K = l0->in_features,
                      .N = l0->out_features,
                      .f32 = x->dtype == NB_F32};
    for (int i = 0; i < n; i++) {
        if (!(out[i] = nbt_new("Linear", x->dtype, x->ndim, shape))) return false;
        job.lin[i] = lin[i];
        job.y[i] = nb_data(out[i]);
    }
    int64_t grain = MATVEC_GRAIN_MACS / job.K > 0 ? MATVEC_GRAIN_MACS / job.K : 1;
    nbt_parallel_ranges(n * job.N, grain, matvec_range, &job);
    return true;
}

static nb_tensor *linear(nb_linear *lin, const nb_tensor *x) {
    nb_tensor *y;
    return linears(1, &lin, x, &y) ? y : NULL;
}

/* Checks that x fits m and slot `layer` of c with room for its tokens; names m's path. */
static bool check_cached(const nb_mha *m, const nb_tensor *x, const nb_kv_cache *c, int layer) {
    if (!m || !x || !c) return nbt_error("MultiHeadAttention", "NULL argument"), false;
    if (layer < 0 || layer >= c->nslots)
        return nbt_error("MultiHeadAttention", "'%s': cache slot %d out of range (cache has %d)",
                         m->base.path, layer, c->nslots),
               false;
    const kv_slot *s = &c->slots[layer];
    if (x->ndim != 3 || x->shape[0] != c->batch || x->shape[2] != m->d_in || x->dtype != c->dtype)
        return nbt_error("MultiHeadAttention",
                         "'%s' with a cache for batch %lld expects %s [%lld, T, %lld], got %s %s",
                         m->base.path, (long long)c->batch, nb_dtype_name(c->dtype),
                         (long long)c->batch, (long long)m->d_in, nb_dtype_name(x->dtype),
                         nbt_shape(x)),
               false;
    if (s->head_dim != m->head_dim || m->num_heads % s->kv_heads != 0 ||
        kv_heads_of(m) != s->kv_heads)
        return nbt_error("MultiHeadAttention",
                         "'%s' (%lld heads of %lld) does not match cache slot %d (%lld key/value "
                         "heads of %lld)",
                         m->base.path, (long long)m->num_heads, (long long)m->head_dim, layer,
                         (long long)s->kv_heads, (long long)s->head_dim),
               false;
    if (s->len + x->shape[1] > c->max_len)
        return nbt_error("MultiHeadAttention",
                         "'%s': %lld new positions after %lld cached overflow the cache's %lld",
                         m->base.path, (long long)x->shape[1], (long long)s->len,
                         (long long)c->max_len),
               false;
    return true;
}

/* Appends k and v to slot `layer` and attends q to it (shapes checked by the caller); ctx
 * [B, T_new, heads * head_dim] in the current scope. */
static nb_tensor *attend(nb_kv_cache *c, int layer, const nb_tensor *q, const nb_tensor *k,
                         const nb_tensor *v, int64_t heads) {
    kv_slot *s = &c->slots[layer];
    const int64_t B = q->shape[0], Tn = q->shape[1], hd = s->head_dim;
    q = nbt_contiguous(q), k = nbt_contiguous(k), v = nbt_contiguous(v);
    nb_tensor *ctx = nb_empty(c->dtype, NB_SHAPE(B, Tn, heads * hd));
    /* one row of scores per pair, always max_len long so the scope's pool reuses it */
    nb_tensor *scores = nb_empty(c->dtype, NB_SHAPE(B * heads, c->max_len));
    if (!q || !k || !v || !ctx || !scores) return NULL;
    cached_attention a = {.slot = s,
                          .batch = B,
                          .t_new = Tn,
                          .heads = heads,
                          .max_len = c->max_len,
                          .scale = 1.0 / sqrt((double)hd),
                          .q = nb_data(q),
                          .k_new = nb_data(k),
                          .v_new = nb_data(v),
                          .ctx = nb_data(ctx),
                          .scores = nb_data(scores)};
    const int64_t macs = 2 * (s->len + Tn) * hd * Tn;
    const int64_t grain = macs >= PAIRS_GRAIN_MACS ? 1 : PAIRS_GRAIN_MACS / (macs ? macs : 1);
    if (c->dtype == NB_F32) {
        append_f32(&a);
        nbt_parallel_ranges(B * heads, grain, pairs_f32, &a);
    } else {
        append_f64(&a);
        nbt_parallel_ranges(B * heads, grain, pairs_f64, &a);
    }
    s->len += Tn;
    return ctx;
}

nb_kv_cache *nb_kv_cache_new(int layers, int64_t batch, int64_t max_len, int64_t kv_heads,
                             int64_t head_dim, nb_dtype dt) {
    if (layers < 1 || kv_heads < 1 || head_dim < 1 || (dt != NB_F32 && dt != NB_F64))
        return nbt_error("kv_cache",
                         "needs layers, kv_heads and head_dim >= 1 and float32 or float64, got "
                         "%d, %lld, %lld and %s",
                         layers, (long long)kv_heads, (long long)head_dim, nb_dtype_name(dt));
    nb_kv_cache *c = cache_new(layers, batch, max_len, dt);
    for (int i = 0; c && i < layers; i++)
        if (!slot_init(c, i, kv_heads, head_dim)) {
            nb_kv_cache_free(c);
            return NULL;
        }
    return c;
}

nb_tensor *nb_kv_cache_attend(nb_kv_cache *c, int layer, const nb_tensor *q, const nb_tensor *k,
                              const nb_tensor *v, int64_t heads) {
    if (!c || !q || !k || !v) return nbt_error("kv_cache_attend", "NULL argument");
    if (layer < 0 || layer >= c->nslots)
        return nbt_error("kv_cache_attend", "slot %d out of range (cache has %d)", layer,
                         c->nslots);
    const kv_slot *s = &c->slots[layer];
    const int64_t hd = s->head_dim, kvh = s->kv_heads;
    bool ok = heads >= 1 && heads % kvh == 0 && q->ndim == 3 && k->ndim == 3 && v->ndim == 3 &&
              q->shape[0] == c->batch && q->shape[2] == heads * hd;
    for (int d = 0; ok && d < 3; d++)
        ok = k->shape[d] == v->shape[d] && k->shape[d] == (d == 2 ? kvh * hd : q->shape[d]);
    ok = ok && q->dtype == c->dtype && k->dtype == c->dtype && v->dtype == c->dtype;
    if (!ok)
        return nbt_error("kv_cache_attend",
                         "a slot of %lld key/value heads of %lld for batch %lld expects %s q "
                         "[%lld, T, heads * %lld] (heads a multiple of %lld) and k, v [%lld, T, "
                         "%lld]; got heads %lld, q %s, k %s, v %s",
                         (long long)kvh, (long long)hd, (long long)c->batch,
                         nb_dtype_name(c->dtype), (long long)c->batch, (long long)hd,
                         (long long)kvh, (long long)c->batch, (long long)(kvh * hd),
                         (long long)heads, nbt_shape(q), nbt_shape(k), nbt_shape(v));
    if (s->len + q->shape[1] > c->max_len)
        return nbt_error("kv_cache_attend",
                         "%lld new positions after %lld cached overflow the cache's %lld",
                         (long long)q->shape[1], (long long)s->len, (long long)c->max_len);
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *ctx = attend(c, layer, q, k, v, heads);
    nb_set_grad_enabled(prev);
    return ctx;
}

/* The cached attention with grad mode already off and x checked. */
static nb_tensor *mha_cached(nb_mha *m, const nb_tensor *x, nb_kv_cache *c, int layer) {
    nb_tensor *qkv[3];
    if (!linears(3, (nb_linear *const[]){m->W_query, m->W_key, m->W_value}, x, qkv)) return NULL;
    return linear(m->out_proj, attend(c, layer, qkv[0], qkv[1], qkv[2], m->num_heads));
}

nb_tensor *nb_mha_forward_cached(nb_mha *m, const nb_tensor *x, nb_kv_cache *c, int layer) {
    if (!check_cached(m, x, c, layer)) return NULL;
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *y = mha_cached(m, x, c, layer);
    nb_set_grad_enabled(prev);
    return y;
}

/* The block with grad mode off, x checked against its attention. */
static nb_tensor *block_cached(nb_transformer_block *m, const nb_tensor *x, nb_kv_cache *c,
                               int layer) {
    nb_tensor *h = nb_add(x, mha_cached(m->attn, nb_layernorm_forward(m->norm1, x), c, layer));
    nb_tensor *hidden = nb_gelu(linear(m->ff->fc1, nb_layernorm_forward(m->norm2, h)));
    return nb_add(h, linear(m->ff->fc2, hidden));
}

nb_tensor *nb_transformer_block_forward_cached(nb_transformer_block *m, const nb_tensor *x,
                                               nb_kv_cache *c, int layer) {
    if (!m) return nbt_error("TransformerBlock", "NULL module");
    if (!check_cached(m->attn, x, c, layer)) return NULL;
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *y = block_cached(m, x, c, layer);
    nb_set_grad_enabled(prev);
    return y;
}

nb_tensor *nb_transformer_lm_forward_cached(nb_transformer_lm *m, const nb_tensor *tokens,
                                            nb_kv_cache *c) {
    if (!m || !tokens || !c) return nbt_error("TransformerLM", "NULL argument");
    if (c->nslots != m->num_layers)
        return nbt_error("TransformerLM", "'%s' has %d blocks but the cache has %d slots",
                         m->base.path, m->num_layers, c->nslots);
    const int64_t len = c->slots[0].len;
    if (tokens->ndim != 2 || tokens->dtype != NB_I64 || tokens->shape[0] != c->batch ||
        len + tokens->shape[1] > (c->max_len < m->max_len ? c->max_len : m->max_len))
        return nbt_error("TransformerLM",
                         "'%s' with %lld cached positions expects int64 tokens [%lld, T] with "
                         "%lld + T <= %lld, got %s %s",
                         m->base.path, (long long)len, (long long)c->batch, (long long)len,
                         (long long)(c->max_len < m->max_len ? c->max_len : m->max_len),
                         nb_dtype_name(tokens->dtype), nbt_shape(tokens));
    const int64_t Tn = tokens->shape[1];
    for (int i = 0; i < m->num_layers; i++) {
        const kv_slot *s = &c->slots[i];
        if (s->len != len || s->head_dim != m->blocks[i]->attn->head_dim ||
            s->kv_heads != kv_heads_of(m->blocks[i]->attn))
            return nbt_error("TransformerLM",
                             "'%s': cache slot %d (%lld positions, %lld heads of %lld) does not "
                             "match block %d",
                             m->base.path, i, (long long)s->len, (long long)s->kv_heads,
                             (long long)s->head_dim, i);
    }
    if (nbn_lm_decode_covers(m, tokens, c)) return nbn_lm_decode_token(m, tokens, c);
    /* A prompt after decoding that found a second thread does not pay (a busy machine) stays
     * on this thread too: the same results, without waiting for a descheduled worker. */
    const bool was_serial = nbt_set_serial(nbn_lm_decode_prefers_one_thread(c));
    bool prev = nb_set_grad_enabled(false);
    nb_tensor *positions = nb_arange(NB_I64, (double)len, (double)(len + Tn), 1);
    nb_tensor *x = nb_add(nb_embedding_forward(m->tok_emb, tokens),
                          nb_embedding_forward(m->pos_emb, positions));
    for (int i = 0; i < m->num_layers && x; i++) x = block_cached(m->blocks[i], x, c, i);
    nb_tensor *logits =
        nb_f_linear(nb_layernorm_forward(m->norm_f, x), m->head_weight, m->head_bias);
    nb_set_grad_enabled(prev);
    nbt_set_serial(was_serial);
    return logits;
}
