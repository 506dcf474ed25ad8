/* The cache of incremental decoding: per layer, the keys and values of its heads (of any key
 * and value sizes, grouped-query slots) and/or named tensors of the layer's own choosing, with
 * one committed length for the whole cache. nb_kv_cache_attend is the attention of a few new
 * queries against a layer's keys, one (sequence, head, query) row at a time through the
 * attention-row kernel (float32) or the GEMM's row kernel (float64). */
#include "nabla/generate.h"
#include "tensor/gemm.h"
#include "tensor/isa.h"
#include "tensor/kernels/kernels.h"
#include "tensor/nbt.h"
#include "tensor/vecmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 4 /* named tensors per layer */
#define MAX_NAME 64

typedef struct {
    char name[MAX_NAME];
    int64_t width, written; /* written: positions [0, written) hold data */
    nb_tensor *t;           /* [batch, max_len, width] */
} rows_entry;

/* One layer. Keys transposed in blocks of NBK_KEY_BLOCK keys (kernels.h; key_at), [batch,
 * kv_heads, max_len * k_dim] in all, and values, [batch, kv_heads, max_len, v_dim]: a query's
 * scores q K^T and its context p V are then both one row times a row-major matrix (a block at
 * a time for the keys), which the row kernels compute along the keys (scores) or the value
 * dims (context) in whole vectors, with no per-key horizontal sums. kv_heads 0: no heads. */
typedef struct {
    int64_t kv_heads, k_dim, v_dim, written;
    nb_tensor *k, *v;
    int nrows;
    rows_entry rows[MAX_ROWS];
} cache_layer;

/* Where dim 0 of key p sits in one head's keys, for a capacity of L: in block p /
 * NBK_KEY_BLOCK, whose dims are rows as wide as the block (the last may be short); dim d is
 * that width further on for each d. */
static int64_t key_at(int64_t p, int64_t L, int64_t kd, int64_t *width) {
    const int64_t start = p / NBK_KEY_BLOCK * NBK_KEY_BLOCK;
    *width = L - start < NBK_KEY_BLOCK ? L - start : NBK_KEY_BLOCK;
    return start * kd + p - start;
}

struct nb_kv_cache {
    nb_scope *scope; /* holds every layer's tensors */
    nb_dtype dtype;
    int64_t batch, max_len, len;
    int nlayers;
    cache_layer layers[];
};

nb_kv_cache *nb_kv_cache_empty(int layers, int64_t batch, int64_t max_len, nb_dtype dt) {
    if (layers < 1 || batch < 1 || max_len < 1 || (dt != NB_F32 && dt != NB_F64))
        return nbt_error("kv_cache",
                         "needs layers, batch and max_len >= 1 and float32 or float64, got %d, "
                         "%lld, %lld and %s",
                         layers, (long long)batch, (long long)max_len, nb_dtype_name(dt));
    nb_kv_cache *c = calloc(1, sizeof *c + sizeof(cache_layer) * (size_t)layers);
    if (!c || !(c->scope = nb_scope_new())) {
        free(c);
        return nbt_error("kv_cache", "out of memory");
    }
    c->dtype = dt;
    c->batch = batch;
    c->max_len = max_len;
    c->nlayers = layers;
    return c;
}

/* The layer, or NULL with an error naming who asked. */
static cache_layer *layer_of(nb_kv_cache *c, int layer, const char *who) {
    if (!c) return nbt_error(who, "NULL cache");
    if (layer < 0 || layer >= c->nlayers)
        return nbt_error(who, "layer %d out of range (the cache has %d)", layer, c->nlayers);
    return &c->layers[layer];
}

/* A zeroed tensor of the given shape in the cache's own scope (whatever scope is current, so
 * it lives as long as the cache), or NULL with an error if its size overflows. */
static nb_tensor *cache_tensor(nb_kv_cache *c, const char *who, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] > INT64_MAX / 16 / n) {
            char dims[128];
            int at = 0;
            for (int j = 0; j < ndim && at < (int)sizeof dims; j++)
                at += snprintf(dims + at, sizeof dims - (size_t)at, j ? " x %lld" : "%lld",
                               (long long)shape[j]);
            return nbt_error(who, "%s numbers overflow", dims);
        }
        n *= shape[i];
    }
    nb_scope_push(c->scope);
    nb_tensor *t = nb_zeros(c->dtype, ndim, shape);
    nb_scope_pop();
    return t;
}

bool nb_kv_cache_add_heads(nb_kv_cache *c, int layer, int64_t kv_heads, int64_t k_dim,
                           int64_t v_dim) {
    cache_layer *l = layer_of(c, layer, "kv_cache_add_heads");
    if (!l) return false;
    if (l->kv_heads)
        return nbt_error("kv_cache_add_heads", "layer %d already has heads", layer), false;
    if (kv_heads < 1 || k_dim < 1 || v_dim < 1)
        return nbt_error("kv_cache_add_heads",
                         "kv_heads, k_dim and v_dim must be >= 1, got %lld, %lld and %lld",
                         (long long)kv_heads, (long long)k_dim, (long long)v_dim),
               false;
    nb_tensor *k =
        cache_tensor(c, "kv_cache_add_heads", NB_SHAPE(c->batch, kv_heads, c->max_len, k_dim));
    nb_tensor *v =
        k ? cache_tensor(c, "kv_cache_add_heads", NB_SHAPE(c->batch, kv_heads, c->max_len, v_dim))
          : NULL;
    if (!v) return false; /* k stays in the cache's scope until it is freed */
    l->kv_heads = kv_heads;
    l->k_dim = k_dim;
    l->v_dim = v_dim;
    l->k = k;
    l->v = v;
    l->written = 0;
    return true;
}

static rows_entry *find_rows(cache_layer *l, const char *name) {
    for (int i = 0; i < l->nrows; i++)
        if (strcmp(l->rows[i].name, name) == 0) return &l->rows[i];
    return NULL;
}

bool nb_kv_cache_add_rows(nb_kv_cache *c, int layer, const char *name, int64_t width) {
    cache_layer *l = layer_of(c, layer, "kv_cache_add_rows");
    if (!l) return false;
    if (!name || !name[0] || strlen(name) >= MAX_NAME)
        return nbt_error("kv_cache_add_rows", "a name needs 1 to %d bytes", MAX_NAME - 1), false;
    if (find_rows(l, name))
        return nbt_error("kv_cache_add_rows", "layer %d already has '%s'", layer, name), false;
    if (l->nrows == MAX_ROWS)
        return nbt_error("kv_cache_add_rows", "layer %d already has %d tensors, the most", layer,
                         MAX_ROWS),
               false;
    if (width < 1)
        return nbt_error("kv_cache_add_rows", "'%s': width must be >= 1, got %lld", name,
                         (long long)width),
               false;
    nb_tensor *t = cache_tensor(c, "kv_cache_add_rows", NB_SHAPE(c->batch, c->max_len, width));
    if (!t) return false;
    rows_entry *e = &l->rows[l->nrows++];
    *e = (rows_entry){.width = width, .t = t};
    strcpy(e->name, name);
    return true;
}

nb_kv_cache *nb_kv_cache_new(int layers, int64_t batch, int64_t max_len, int64_t kv_heads,
                             int64_t head_dim, nb_dtype dt) {
    nb_kv_cache *c = nb_kv_cache_empty(layers, batch, max_len, dt);
    for (int i = 0; c && i < layers; i++)
        if (!nb_kv_cache_add_heads(c, i, kv_heads, head_dim, head_dim)) {
            nb_kv_cache_free(c);
            return NULL;
        }
    return c;
}

bool nb_kv_cache_commit(nb_kv_cache *c, int64_t n) {
    if (!c) return nbt_error("kv_cache_commit", "NULL cache"), false;
    if (n < 0 || n > c->max_len - c->len)
        return nbt_error("kv_cache_commit",
                         "%lld new positions after %lld do not fit the cache's %lld", (long long)n,
                         (long long)c->len, (long long)c->max_len),
               false;
    const int64_t end = c->len + n;
    for (int i = 0; i < c->nlayers; i++) {
        const cache_layer *l = &c->layers[i];
        if (l->kv_heads && l->written < end)
            return nbt_error("kv_cache_commit",
                             "layer %d's heads hold positions up to %lld, not %lld: commit "
                             "after the forward that wrote them",
                             i, (long long)l->written, (long long)end),
                   false;
        for (int r = 0; r < l->nrows; r++)
            if (l->rows[r].written < end)
                return nbt_error("kv_cache_commit",
                                 "layer %d's '%s' holds positions up to %lld, not %lld", i,
                                 l->rows[r].name, (long long)l->rows[r].written, (long long)end),
                       false;
    }
    c->len = end;
    return true;
}

bool nb_kv_cache_truncate(nb_kv_cache *c, int64_t len) {
    if (!c) return nbt_error("kv_cache_truncate", "NULL cache"), false;
    if (len < 0 || len > c->len)
        return nbt_error("kv_cache_truncate", "length %lld is outside [0, %lld]", (long long)len,
                         (long long)c->len),
               false;
    c->len = len;
    for (int i = 0; i < c->nlayers; i++) {
        cache_layer *l = &c->layers[i];
        l->written = l->written < len ? l->written : len;
        for (int r = 0; r < l->nrows; r++)
            l->rows[r].written = l->rows[r].written < len ? l->rows[r].written : len;
    }
    return true;
}

void nb_kv_cache_reset(nb_kv_cache *c) {
    if (c) nb_kv_cache_truncate(c, 0);
}

int64_t nb_kv_cache_len(const nb_kv_cache *c) {
    return c ? c->len : -1;
}

int64_t nb_kv_cache_max_len(const nb_kv_cache *c) {
    return c ? c->max_len : -1;
}

int nb_kv_cache_layer_count(const nb_kv_cache *c) {
    return c ? c->nlayers : 0;
}

int64_t nb_kv_cache_batch(const nb_kv_cache *c) {
    return c ? c->batch : 0;
}

nb_dtype nb_kv_cache_dtype(const nb_kv_cache *c) {
    return c ? c->dtype : NB_F32;
}

bool nb_kv_cache_heads(const nb_kv_cache *c, int layer, int64_t *kv_heads, int64_t *k_dim,
                       int64_t *v_dim) {
    const cache_layer *l = layer_of((nb_kv_cache *)c, layer, "kv_cache_heads");
    if (!l) return false;
    if (!l->kv_heads) return nbt_error("kv_cache_heads", "layer %d has no heads", layer), false;
    if (kv_heads) *kv_heads = l->kv_heads;
    if (k_dim) *k_dim = l->k_dim;
    if (v_dim) *v_dim = l->v_dim;
    return true;
}

int64_t nb_kv_cache_rows_width(const nb_kv_cache *c, int layer, const char *name) {
    cache_layer *l = layer_of((nb_kv_cache *)c, layer, "kv_cache_rows_width");
    if (!l) return -1;
    const rows_entry *e = name ? find_rows(l, name) : NULL;
    if (!e)
        return nbt_error("kv_cache_rows_width", "layer %d has no tensor '%s'", layer,
                         name ? name : "(NULL)"),
               -1;
    return e->width;
}

int64_t nb_kv_cache_bytes(const nb_kv_cache *c) {
    if (!c) return 0;
    int64_t bytes = 0;
    for (int i = 0; i < c->nlayers; i++) {
        const cache_layer *l = &c->layers[i];
        if (l->kv_heads)
            bytes += (int64_t)(nbt_numel(l->k) + nbt_numel(l->v)) * nb_dtype_size(c->dtype);
        for (int r = 0; r < l->nrows; r++)
            bytes += (int64_t)nbt_numel(l->rows[r].t) * nb_dtype_size(c->dtype);
    }
    return bytes;
}

void nb_kv_cache_free(nb_kv_cache *c) {
    if (!c) return;
    if (c->scope) nb_scope_free(c->scope);
    free(c);
}

/* ---- attention of new queries against a layer ----------------------------------------- */

/* Everything one call needs; q, k_new, v_new and ctx are contiguous [batch, T_new, heads *
 * dims]. scores has a row of max_len for every (sequence, head) pair, so pairs can run on
 * different threads. */
typedef struct {
    const cache_layer *layer;
    int64_t batch, t_new, heads, max_len, len;
    double scale;
    const void *q, *k_new, *v_new;
    void *ctx, *scores;
} cached_attention;

/* Writes the new keys (into their blocks, transposed) and values at positions len... */
#define DEFINE_APPEND(T, SUF)                                                                      \
    static void append_##SUF(const cached_attention *a) {                                          \
        const cache_layer *l = a->layer;                                                           \
        const int64_t kd = l->k_dim, vd = l->v_dim, kvh = l->kv_heads, L = a->max_len;             \
        T *K = nb_data(l->k), *V = nb_data(l->v);                                                  \
        const T *kn = a->k_new, *vn = a->v_new;                                                    \
        for (int64_t b = 0; b < a->batch; b++)                                                     \
            for (int64_t i = 0; i < a->t_new; i++)                                                 \
                for (int64_t h = 0; h < kvh; h++) {                                                \
                    const int64_t row = b * a->t_new + i, p = a->len + i;                          \
                    const T *kr = kn + (size_t)((row * kvh + h) * kd);                             \
                    int64_t width;                                                                 \
                    T *kt = K + (size_t)((b * kvh + h) * kd * L + key_at(p, L, kd, &width));       \
                    for (int64_t d = 0; d < kd; d++) kt[(size_t)(d * width)] = kr[d];              \
                    memcpy(V + (size_t)(((b * kvh + h) * L + p) * vd),                             \
                           vn + (size_t)((row * kvh + h) * vd), sizeof(T) * (size_t)vd);           \
                }                                                                                  \
    }
DEFINE_APPEND(float, f32)
DEFINE_APPEND(double, f64)

/* One float64 query row against keys 0..n-1: what the float32 attention-row kernel computes,
 * through the GEMM's row kernel (scores along the keys a block at a time, then the context
 * along the value dims). */
static void attend_row_f64(int64_t n, int64_t L, int64_t kd, int64_t vd, double scale,
                           const double *q, const double *Kb, const double *V, double *sc,
                           double *ctx) {
    for (int64_t j = 0, width; j < n; j += NBK_KEY_BLOCK) {
        const int64_t at = key_at(j, L, kd, &width), w = n - j < width ? n - j : width;
        nbt_dgemm_rows(false, 1, w, kd, scale, q, kd, 1, Kb + at, width, 0, sc + j, w);
    }
    double max = sc[0];
    for (int64_t j = 1; j < n; j++) max = sc[j] > max ? sc[j] : max;
    for (int64_t j = 0; j < n; j++) sc[j] -= max;
    nbt_vexp_f64(sc, sc, n);
    double sum = 0;
    for (int64_t j = 0; j < n; j++) sum += sc[j];
    nbt_dgemm_rows(false, 1, vd, n, 1.0 / sum, sc, n, 1, V, vd, 0, ctx, vd);
}

/* For pairs [p0, p1) of (sequence b, head h) and each new query i (position len + i):
 * s = scale * q K[0..len+i]^T, e = exp(s - max s), ctx = (e V[0..len+i]) / sum(e). Query head
 * h reads key/value head h / (heads / kv_heads). float32 rows go through the attention-row
 * kernel of the instruction set in use, float64 rows through attend_row_f64. */
static void pairs(int64_t p0, int64_t p1, void *va) {
    const cached_attention *a = va;
    const cache_layer *l = a->layer;
    const int64_t kd = l->k_dim, vd = l->v_dim, L = a->max_len, group = a->heads / l->kv_heads;
    const bool f32 = l->k->dtype == NB_F32;
    const size_t es = f32 ? sizeof(float) : sizeof(double);
    const char *K = nb_data(l->k), *V = nb_data(l->v), *q = a->q;
    char *ctx = a->ctx, *scores = a->scores;
    for (int64_t pair = p0; pair < p1; pair++) {
        const int64_t b = pair / a->heads, h = pair % a->heads, kvh = b * l->kv_heads + h / group;
        const char *Kb = K + es * (size_t)(kvh * kd * L), *Vh = V + es * (size_t)(kvh * L * vd);
        char *sc = scores + es * (size_t)(pair * L);
        for (int64_t i = 0; i < a->t_new; i++) {
            const int64_t n = a->len + i + 1, row = (b * a->t_new + i) * a->heads + h;
            const char *qr = q + es * (size_t)(row * kd);
            char *out = ctx + es * (size_t)(row * vd);
            if (f32)
                nbt_kernels()->attend_row_f32(n, L, kd, vd, (float)a->scale, (const float *)qr,
                                              (const float *)Kb, (const float *)Vh, (float *)sc,
                                              (float *)out);
            else
                attend_row_f64(n, L, kd, vd, a->scale, (const double *)qr, (const double *)Kb,
                               (const double *)Vh, (double *)sc, (double *)out);
        }
    }
}

/* A (sequence, head) pair's work is about (k_dim + v_dim) * keys multiply-adds per query;
 * pairs are split across threads only when each thread gets at least this many. */
#define PAIRS_GRAIN_MACS 16384

/* Does q, k, v fit layer l of c (heads, sizes, dtype, batch) with room for them? */
static bool check_attend(const nb_kv_cache *c, int layer, const cache_layer *l, const nb_tensor *q,
                         const nb_tensor *k, const nb_tensor *v, int64_t heads) {
    if (!l->kv_heads)
        return nbt_error("kv_cache_attend", "layer %d has no heads (nb_kv_cache_add_heads)", layer),
               false;
    const int64_t kvh = l->kv_heads, kd = l->k_dim, vd = l->v_dim;
    bool ok = heads >= 1 && heads % kvh == 0 && heads <= INT64_MAX / kd &&
              heads <= INT64_MAX / vd && q->ndim == 3 && k->ndim == 3 && v->ndim == 3 &&
              q->shape[0] == c->batch && q->shape[2] == heads * kd;
    for (int d = 0; ok && d < 2; d++) ok = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
    ok = ok && k->shape[2] == kvh * kd && v->shape[2] == kvh * vd && q->dtype == c->dtype &&
         k->dtype == c->dtype && v->dtype == c->dtype;
    if (!ok)
        return nbt_error("kv_cache_attend",
                         "layer %d (%lld key/value heads, keys of %lld, values of %lld, batch "
                         "%lld, %s) expects q [%lld, T, heads * %lld] (heads a multiple of "
                         "%lld), k [%lld, T, %lld] and v [%lld, T, %lld]; got heads %lld, q %s "
                         "%s, k %s %s, v %s %s",
                         layer, (long long)kvh, (long long)kd, (long long)vd, (long long)c->batch,
                         nb_dtype_name(c->dtype), (long long)c->batch, (long long)kd,
                         (long long)kvh, (long long)c->batch, (long long)(kvh * kd),
                         (long long)c->batch, (long long)(kvh * vd), (long long)heads,
                         nb_dtype_name(q->dtype), nbt_shape(q), nb_dtype_name(k->dtype),
                         nbt_shape(k), nb_dtype_name(v->dtype), nbt_shape(v)),
               false;
    if (q->shape[1] > c->max_len - c->len)
        return nbt_error("kv_cache_attend",
                         "%lld new positions after %lld cached overflow the cache's %lld",
                         (long long)q->shape[1], (long long)c->len, (long long)c->max_len),
               false;
    return true;
}

nb_tensor *nb_kv_cache_attend(nb_kv_cache *c, int layer, const nb_tensor *q, const nb_tensor *k,
                              const nb_tensor *v, int64_t heads) {
    cache_layer *l = layer_of(c, layer, "kv_cache_attend");
    if (!l) return NULL;
    if (!q || !k || !v) return nbt_error("kv_cache_attend", "NULL tensor");
    if (!nbt_check_live("kv_cache_attend", q) || !nbt_check_live("kv_cache_attend", k) ||
        !nbt_check_live("kv_cache_attend", v) || !check_attend(c, layer, l, q, k, v, heads))
        return NULL;
    const int64_t B = q->shape[0], Tn = q->shape[1];
    /* No new positions: nothing to write or attend. The layer keeps what it holds (a forward
     * not yet committed stays committable), and no scratch is sized by heads, which an empty
     * q leaves unbounded. */
    if (Tn == 0) return nb_empty(c->dtype, NB_SHAPE(B, 0, heads * l->v_dim));
    const bool prev = nb_set_grad_enabled(false);
    q = nbt_contiguous(q), k = nbt_contiguous(k), v = nbt_contiguous(v);
    nb_tensor *ctx = nb_empty(c->dtype, NB_SHAPE(B, Tn, heads * l->v_dim));
    /* one row of scores per pair, always max_len long so the scope's pool reuses it */
    nb_tensor *scores = nb_empty(c->dtype, NB_SHAPE(B * heads, c->max_len));
    nb_set_grad_enabled(prev);
    if (!q || !k || !v || !ctx || !scores) return NULL;
    cached_attention a = {.layer = l,
                          .batch = B,
                          .t_new = Tn,
                          .heads = heads,
                          .max_len = c->max_len,
                          .len = c->len,
                          .scale = 1.0 / sqrt((double)l->k_dim),
                          .q = nb_data(q),
                          .k_new = nb_data(k),
                          .v_new = nb_data(v),
                          .ctx = nb_data(ctx),
                          .scores = nb_data(scores)};
    const int64_t macs = (c->len + Tn) * (l->k_dim + l->v_dim) * Tn;
    const int64_t grain = macs >= PAIRS_GRAIN_MACS ? 1 : PAIRS_GRAIN_MACS / (macs ? macs : 1);
    if (c->dtype == NB_F32)
        append_f32(&a);
    else
        append_f64(&a);
    nbt_parallel_ranges(B * heads, grain, pairs, &a);
    l->written = c->len + Tn;
    return ctx;
}

nb_tensor *nb_kv_cache_append(nb_kv_cache *c, int layer, const char *name, const nb_tensor *x) {
    cache_layer *l = layer_of(c, layer, "kv_cache_append");
    if (!l) return NULL;
    if (!name || !x) return nbt_error("kv_cache_append", "NULL argument");
    rows_entry *e = find_rows(l, name);
    if (!e) return nbt_error("kv_cache_append", "layer %d has no tensor '%s'", layer, name);
    if (!nbt_check_live("kv_cache_append", x)) return NULL;
    if (x->ndim != 3 || x->shape[0] != c->batch || x->shape[2] != e->width || x->dtype != c->dtype)
        return nbt_error("kv_cache_append", "layer %d's '%s' expects %s [%lld, T, %lld], got %s %s",
                         layer, name, nb_dtype_name(c->dtype), (long long)c->batch,
                         (long long)e->width, nb_dtype_name(x->dtype), nbt_shape(x));
    const int64_t Tn = x->shape[1];
    if (Tn > c->max_len - c->len)
        return nbt_error("kv_cache_append",
                         "%lld new positions after %lld cached overflow the cache's %lld",
                         (long long)Tn, (long long)c->len, (long long)c->max_len);
    const bool prev = nb_set_grad_enabled(false);
    nb_tensor *rows = nb_narrow(e->t, 1, c->len, Tn);
    bool ok = rows && nbt_copy(rows, x);
    nb_tensor *held = ok ? nb_narrow(e->t, 1, 0, c->len + Tn) : NULL;
    nb_set_grad_enabled(prev);
    if (held && Tn > 0) e->written = c->len + Tn; /* no new rows: it holds what it held */
    return held;
}
