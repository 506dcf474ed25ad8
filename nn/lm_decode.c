/* The fused one-token path of nb_transformer_lm_forward_cached: decoding one token of one
 * sequence in float32, the case greedy and sampled generation spend their time in.
 *
 * The general cached forward makes about twenty tensors per block for a single row; here the
 * whole forward is straight loops over buffers made once per cache (nothing allocated per
 * token; nb_generate hands in a logits row made once per call, a cached forward one from the
 * scope's pool), with the matrix-vector products and the
 * attention rows in per-instruction-set kernels (tensor/kernels/decode_rows.c).
 *
 * Decoding reads every weight once per token (about 1.6 MB for the benchmark's model, and the
 * cached keys and values), so it is bound by moving bytes. With two threads every product is
 * split into two fixed halves, the same half always to the same thread (nbt_parallel_phases),
 * so each core moves half the bytes. In the model's own layout a half's reads are strided
 * column halves and short streams (about 58 GB/s measured); nb_generate has the path read a
 * copy laid out in reading order instead (lm_decode_weights.h, 80-90 GB/s).
 * A block is two phases of a token's round, and a run of tokens is one pool job (the threads
 * meet between phases on two counters, and between tokens on a third: nbt_parallel_phase_rounds;
 * a job per token cost about 1,000 more ticks between tokens). The attention phase: half h takes
 * heads h (norm1, their query, key and value rows, their attention) and multiplies its heads' part
 * of the context by its columns of out_proj, a partial sum of every output. The feed-forward phase:
 * each half adds both partial sums and the bias to its own copy of the residual stream (the same
 * sums in the same order in both), then norm2, its rows of fc1 with their GELU, and its columns of
 * fc2, partial sums that the next block's attention phase adds. Splitting the second product of
 * each pair by columns saves the two phases that splitting it by rows would need. A last phase adds
 * the last fc2 and computes the head, each half its rows after the final norm of its own copy
 * (measured about 1% faster per token than the caller doing it alone after the job while the other
 * thread waits). Which thread runs a half never changes what it computes, so 1 and 2 threads
 * give the same bits.
 *
 * Whether two threads pay depends on the machine: a busy neighbour on one core makes every
 * job wait for a thread that is not running. So the path measures: it starts on one thread,
 * keeps a running mean of the token time of the count in use, and now and then times a window
 * of tokens with the other count, switching when that window's mean is the lower; after each
 * trial that loses, the next waits twice as long (up to 8192 tokens), so where two threads do
 * not pay the trials soon cost nothing measurable. A home count that falls behind the other's
 * last mean (the machine changed) gets a trial at once. */
#include "lm_decode.h"

#include "lm_decode_impl.h"

#include "kv_cache_impl.h"
#include "nabla/module.h"
#include "tensor/isa.h"
#include "tensor/nbt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Tokens per timed window, tokens not timed after a change of thread count (a sleeping worker
 * wakes slowly), and the range of the gap between trials of the other count, in tokens. */
#define WINDOW NBN_DECODE_WINDOW
#define TRIMMED 4
#define WARM_UP 2
#define MIN_GAP 64
#define MAX_GAP 8192
/* Two threads' running mean must beat one thread's by this factor to replace it (one thread
 * replaces two when it is no slower): a second thread must clearly pay, since where it does
 * not (a busy neighbour) each trial of it costs. Each window of the home count moves its
 * running mean by AVG_WEIGHT (a single window is too noisy on a busy machine, where any token
 * can lose milliseconds to preemption). A trial's window is judged alone: the other count's
 * mean is from an earlier trial at least a gap ago, and blending with it let one slow first
 * window (the worker's first start, 102 us a token here) lose trial after trial while the gap
 * doubled, keeping decoding on one thread for 1,328 of a bench run's 2,369 windows. */
#define TWO_THREADS_MARGIN 0.9
#define AVG_WEIGHT 0.25

/* A run of tokens (nbn_lm_decode_run): the token being decoded, and what follows it. */
typedef struct {
    struct nbn_lm_decoder *d;
    nb_transformer_lm *m;
    nb_kv_cache *c;
    const nbn_decode_weights *w; /* the copy in reading order, or NULL: the model's own */
    int64_t pos;                 /* the token's position */
    float *logits;
    int64_t token;    /* the token set up to be decoded next, or -1 */
    int budget;       /* threads allowed, as of the current pool job's start */
    int threads;      /* the thread count for it */
    bool choosing;    /* its time counts towards the choice of thread count */
    int64_t start_ns; /* when it was set up */
    bool failed;      /* a token was refused (the error is set) */
    nbn_next_token_fn next;
    void *next_ctx;
} decode_job;

/* t is float32, contiguous and holds n elements (or is NULL, when optional). */
static bool plain(const nb_tensor *t, int64_t n, bool optional) {
    if (!t) return optional;
    return t->dtype == NB_F32 && nb_is_contiguous(t) && nbt_numel(t) == n;
}

static bool plain_linear(const nb_linear *l, int64_t in, int64_t out) {
    return l && l->in_features == in && l->out_features == out &&
           plain(l->weight, in * out, false) && plain(l->bias, out, true);
}

static bool plain_norm(const nb_layernorm *n, int64_t D) {
    return n && plain(n->weight, D, true) && plain(n->bias, D, true);
}

/* Every parameter of m float32, contiguous and sized for the fused path, and c's slots shaped
 * for m's blocks. */
static bool model_plain(const nb_transformer_lm *m, const nb_kv_cache *c) {
    const int64_t D = m->dim;
    if (c->nslots != m->num_layers || !plain(m->tok_emb->weight, m->vocab * D, false) ||
        !plain(m->pos_emb->weight, m->max_len * D, false) || !plain_norm(m->norm_f, D) ||
        !plain(m->head_weight, m->out_features * D, false) ||
        !plain(m->head_bias, m->out_features, true))
        return false;
    for (int i = 0; i < m->num_layers; i++) {
        const nb_transformer_block *b = m->blocks[i];
        const nb_mha *a = b->attn;
        const kv_slot *s = &c->slots[i];
        if (a->d_in != D || a->d_out != D || a->num_heads * a->head_dim != D ||
            s->kv_heads != a->num_heads || s->head_dim != a->head_dim || !plain_norm(b->norm1, D) ||
            !plain_norm(b->norm2, D) || !plain_linear(a->W_query, D, D) ||
            !plain_linear(a->W_key, D, D) || !plain_linear(a->W_value, D, D) ||
            !plain_linear(a->out_proj, D, D) ||
            !plain_linear(b->ff->fc1, D, b->ff->fc1->out_features) ||
            !plain_linear(b->ff->fc2, b->ff->fc1->out_features, D))
            return false;
    }
    return true;
}

bool nbn_lm_decode_covers(const nb_transformer_lm *m, const nb_tensor *tokens,
                          const nb_kv_cache *c) {
    return tokens->ndim == 2 && tokens->shape[1] == 1 && nbn_lm_decode_covers_next(m, c);
}

bool nbn_lm_decode_covers_next(const nb_transformer_lm *m, const nb_kv_cache *c) {
    const int64_t len = c->slots[0].len;
    if (c->batch != 1 || c->dtype != NB_F32 || c->nslots != m->num_layers || len + 1 > c->max_len ||
        len + 1 > m->max_len)
        return false;
    for (int i = 1; i < c->nslots; i++)
        if (c->slots[i].len != len) return false;
    return c->decode_trusted == m || model_plain(m, c);
}

void nbn_lm_decoder_free(struct nbn_lm_decoder *d) {
    if (!d) return;
    nbn_decode_weights_free(d->weights);
    nbn_prefill_buffers_free(d->prefill);
    free(d->x[0]);
    free(d);
}

bool nbn_lm_decode_prefers_one_thread(const nb_kv_cache *c) {
    const struct nbn_lm_decoder *d = c->decoder;
    return d && !c->decode_threads && d->home == 1 && d->avg_ns[2] > 0;
}

void nbn_kv_cache_force_decode_threads(nb_kv_cache *c, int threads) {
    if (c) c->decode_threads = threads == 1 || threads == 2 ? threads : 0;
}

struct nbn_lm_decoder *nbn_lm_decoder_for(const nb_transformer_lm *m, nb_kv_cache *c) {
    int64_t F = 0;
    for (int i = 0; i < m->num_layers; i++)
        F = m->blocks[i]->ff->fc1->out_features > F ? m->blocks[i]->ff->fc1->out_features : F;
    const int64_t D = m->dim, H = m->num_heads, L = c->max_len;
    struct nbn_lm_decoder *d = c->decoder;
    if (d && d->D == D && d->F >= F && d->H == H && d->L == L) return d;
    nbn_lm_decoder_free(d);
    c->decoder = NULL;
    /* each buffer starts on its own 64-byte line, so the halves never share one */
    const int64_t Dr = (D + 15) / 16 * 16, Fr = (F + 15) / 16 * 16, Sr = (H * L + 15) / 16 * 16;
    const size_t floats = (size_t)(12 * Dr + 2 * Fr + Sr);
    d = calloc(1, sizeof *d);
    float *buf = d ? aligned_alloc(64, floats * sizeof(float)) : NULL;
    if (!buf) {
        free(d);
        return nbt_error("TransformerLM", "out of memory for the decoding buffers");
    }
    *d = (struct nbn_lm_decoder){.D = D, .F = F, .H = H, .L = L};
    float **rows[] = {&d->x[0],
                      &d->x[1],
                      &d->q,
                      &d->k,
                      &d->v,
                      &d->ctx,
                      &d->norm[0],
                      &d->norm[1],
                      &d->attn_part[0],
                      &d->attn_part[1],
                      &d->ff_part[0],
                      &d->ff_part[1]};
    for (int i = 0; i < 12; i++) *rows[i] = buf + i * Dr;
    d->hidden = buf + 12 * Dr;
    d->erf_arg = d->hidden + Fr;
    d->scores = d->erf_arg + Fr;
    d->current = d->home = 1; /* the safe choice until two threads have shown they pay */
    d->until_trial = d->gap = MIN_GAP;
    d->skip = WARM_UP;
    c->decoder = d;
    return d;
}

void nbn_lm_decode_trust_model(nb_kv_cache *c, const nb_transformer_lm *m, bool copy_weights) {
    c->decode_trusted = m && model_plain(m, c) ? m : NULL;
    const bool copy = c->decode_trusted && copy_weights && c->batch == 1 && c->dtype == NB_F32;
    struct nbn_lm_decoder *d = copy ? nbn_lm_decoder_for(m, c) : c->decoder;
    if (d) d->weights_ready = copy && nbn_decode_weights_pack(&d->weights, m);
}

/* y[r0..r1) = l(x)[r0..r1), the rows of l's weight read from W (rows r0..r1 one after another:
 * the copy in reading order), or from l itself when W is NULL. */
static void linear_rows(const nb_linear *l, const float *W, int64_t r0, int64_t r1, const float *x,
                        float *y) {
    const int64_t K = l->in_features;
    nbn_weight_rows(W ? W : f32(l->weight) + r0 * K, l->bias, K, r0, r1, x, y);
}

/* part[h] = the share of l(in) that inputs [k[h], k[h + 1]) contribute, without the bias,
 * for halves h in [begin, end): every output, over that half's columns of the weight, read
 * from packed[h] ([N, k[h + 1] - k[h]], nbn_half_weights) when packed is not NULL. Both halves
 * at once go through one pass over the weight, with the same sums. */
static void linear_columns(const nb_linear *l, const int64_t k[3], int begin, int end,
                           const float *const *packed, const float *in, float *const part[2]) {
    const int64_t N = l->out_features, K = l->in_features;
    if (packed) {
        for (int h = begin; h < end; h++)
            nbt_kernels()->matvec_rows_f32(N, k[h + 1] - k[h], packed[h], k[h + 1] - k[h],
                                           in + k[h], NULL, part[h]);
        return;
    }
    const float *W = f32(l->weight);
    if (end - begin == 2) {
        nbt_kernels()->matvec_halves_f32(N, K, k[1], W, in, part[0], part[1]);
        return;
    }
    nbt_kernels()->matvec_rows_f32(N, k[end] - k[begin], W + k[begin], K, in + k[begin], NULL,
                                   part[begin]);
}

/* This half's heads: (the previous block's fc2 added,) norm1, their query, key and value rows,
 * the new key and value into the cache, and each head's attention over positions 0..pos. */
static void attention_half(const decode_job *j, int layer, int half) {
    struct nbn_lm_decoder *d = j->d;
    const nb_transformer_block *b = j->m->blocks[layer];
    const nb_mha *a = b->attn;
    const int64_t D = d->D, hd = a->head_dim, L = j->c->max_len, pos = j->pos;
    float *x = d->x[half], *nx = d->norm[half];
    if (layer > 0) add_parts(D, x, d->ff_part, j->m->blocks[layer - 1]->ff->fc2->bias);
    int64_t h0, h1;
    nbn_half_of(a->num_heads, 1, half, &h0, &h1);
    if (h0 < h1) {
        nbn_layer_norm_rows(b->norm1, 1, D, x, nx);
        /* in the copy, the three row blocks one after another */
        const float *W = j->w ? nbn_decode_weights_half(j->w, layer, half)->qkv : NULL;
        const int64_t q0 = h0 * hd, q1 = h1 * hd, n = (q1 - q0) * D;
        linear_rows(a->W_query, W, q0, q1, nx, d->q);
        linear_rows(a->W_key, W ? W + n : NULL, q0, q1, nx, d->k);
        linear_rows(a->W_value, W ? W + 2 * n : NULL, q0, q1, nx, d->v);
    }
    for (int64_t h = h0; h < h1; h++)
        nbn_append_and_attend(&j->c->slots[layer], L, h, pos, d->q + h * hd, d->k + h * hd,
                              d->v + h * hd, d->scores + h * L, d->ctx + h * hd);
}

/* out_proj added, norm2, this half's rows of fc1 and their GELU (x / 2 * (1 + erf(x / sqrt 2)),
 * as nb_gelu computes it). */
static void feedforward_half(const decode_job *j, int layer, int half) {
    struct nbn_lm_decoder *d = j->d;
    const nb_transformer_block *b = j->m->blocks[layer];
    float *x = d->x[half], *nx = d->norm[half], *h = d->hidden, *t = d->erf_arg;
    add_parts(d->D, x, d->attn_part, b->attn->out_proj->bias);
    int64_t r0, r1;
    nbn_half_of(b->ff->fc1->out_features, 16, half, &r0, &r1);
    if (r0 < r1) {
        nbn_layer_norm_rows(b->norm2, 1, d->D, x, nx);
        linear_rows(b->ff->fc1, j->w ? nbn_decode_weights_half(j->w, layer, half)->fc1 : NULL, r0,
                    r1, nx, h);
        nbn_gelu_rows(h, t, r0, r1);
    }
}

/* The last phase: each half adds the last fc2 to its copy of the residual stream, takes the
 * final norm of it (the same sums in both) and computes its rows of the head, rather than the
 * caller alone after the job while the other thread waits for the next token. */
static void head_half(const decode_job *j, int half) {
    struct nbn_lm_decoder *d = j->d;
    const nb_transformer_lm *m = j->m;
    int64_t r0, r1;
    nbn_half_of(m->out_features, 16, half, &r0, &r1);
    if (r0 == r1) return;
    add_parts(d->D, d->x[half], d->ff_part, m->blocks[m->num_layers - 1]->ff->fc2->bias);
    nbn_layer_norm_rows(m->norm_f, 1, d->D, d->x[half], d->norm[half]);
    nbn_weight_rows(f32(m->head_weight) + r0 * d->D, m->head_bias, d->D, r0, r1, d->norm[half],
                    j->logits);
}

/* Halves [begin, end) of phase p: block p / 2's attention (even p) or feed-forward (odd p),
 * each half's own part, then its columns of out_proj or of fc2; after the blocks, the head. */
static void run_phase(int p, int begin, int end, void *vjob) {
    const decode_job *j = vjob;
    struct nbn_lm_decoder *d = j->d;
    const int layer = p / 2;
    if (layer == j->m->num_layers) {
        for (int half = begin; half < end; half++) head_half(j, half);
        return;
    }
    const nb_transformer_block *b = j->m->blocks[layer];
    int64_t k[3];
    if (p % 2 == 0) {
        for (int half = begin; half < end; half++) attention_half(j, layer, half);
        const int64_t hd = b->attn->head_dim;
        nbn_half_of(b->attn->num_heads, 1, 0, &k[0], &k[1]);
        k[0] *= hd, k[1] *= hd, k[2] = b->attn->num_heads * hd;
        const float *packed[2] = {j->w ? nbn_decode_weights_half(j->w, layer, 0)->out : NULL,
                                  j->w ? nbn_decode_weights_half(j->w, layer, 1)->out : NULL};
        linear_columns(b->attn->out_proj, k, begin, end, j->w ? packed : NULL, d->ctx,
                       d->attn_part);
    } else {
        for (int half = begin; half < end; half++) feedforward_half(j, layer, half);
        nbn_half_of(b->ff->fc1->out_features, 16, 0, &k[0], &k[1]);
        k[2] = b->ff->fc1->out_features;
        const float *packed[2] = {j->w ? nbn_decode_weights_half(j->w, layer, 0)->fc2 : NULL,
                                  j->w ? nbn_decode_weights_half(j->w, layer, 1)->fc2 : NULL};
        linear_columns(b->ff->fc2, k, begin, end, j->w ? packed : NULL, d->hidden, d->ff_part);
    }
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int nbn_lm_decode_threads(const struct nbn_lm_decoder *d, const nb_kv_cache *c, int budget,
                          bool *choosing) {
    *choosing = budget >= 2 && !c->decode_threads;
    if (budget < 2) return 1;
    return c->decode_threads ? c->decode_threads : d->current;
}

/* The mean of a window's token times without its TRIMMED slowest: a host that takes a vCPU
 * away for a millisecond now and then stalls a two-thread token, and one such token in a window
 * had raised two threads' mean above one thread's (22 us against 33 us here), so decoding ran
 * on one thread for thousands of tokens. A slower second thread, or a neighbour taking it
 * often, still slows most tokens of the window and so shows. Sorts t in place. */
static double trimmed_mean(int64_t t[WINDOW]) {
    for (int i = 1; i < WINDOW; i++)
        for (int k = i; k > 0 && t[k - 1] > t[k]; k--) {
            const int64_t swap = t[k];
            t[k] = t[k - 1];
            t[k - 1] = swap;
        }
    int64_t sum = 0;
    for (int i = 0; i < WINDOW - TRIMMED; i++) sum += t[i];
    return (double)sum / (WINDOW - TRIMMED);
}

/* Counts one token's time ns towards the choice of thread count (see the top of the file). */
static void note_time(struct nbn_lm_decoder *d, int64_t ns) {
    if (d->skip > 0) {
        d->skip--;
        return;
    }
    d->window_ns[d->in_window] = ns;
    if (++d->in_window < WINDOW) return;
    const double mean = trimmed_mean(d->window_ns);
    double *avg = &d->avg_ns[d->current];
    const bool trial = d->current != d->home;
    *avg = *avg > 0 && !trial ? (1 - AVG_WEIGHT) * *avg + AVG_WEIGHT * mean : mean;
    d->in_window = 0;
    const int other = 3 - d->home;
    if (!trial) {
        /* the machine may have changed: look again once home falls behind the other's mark */
        if (d->avg_ns[other] > 0 && *avg > d->avg_ns[other]) d->until_trial = 0;
        if ((d->until_trial -= WINDOW) > 0) return;
        d->current = other;
    } else if (*avg <= (d->current == 2 ? TWO_THREADS_MARGIN : 1.0) * d->avg_ns[d->home]) {
        d->home = d->current; /* it won: keep it, and the gap */
    } else {
        d->current = d->home;
        d->gap = d->gap * 2 < MAX_GAP ? d->gap * 2 : MAX_GAP;
    }
    d->until_trial = d->gap;
    d->skip = WARM_UP;
}

int nbn_lm_decode_count_time(nb_kv_cache *c, int64_t ns) {
    struct nbn_lm_decoder *d = c ? c->decoder : NULL;
    if (!d) return 0;
    note_time(d, ns);
    return d->current;
}

/* Sets token up as j's next, its time counted from now_ns: checks it, and writes its embedding
 * into both halves' copies of the residual stream. False (with an error) for a token outside
 * the vocabulary or beyond the cache. */
static bool set_up_token(decode_job *j, int64_t token, int64_t now) {
    nb_transformer_lm *m = j->m;
    const int64_t pos = j->c->slots[0].len;
    j->token = -1;
    if (!nbn_token_ok(m, token)) return false;
    if (pos + 1 > j->c->max_len || pos + 1 > m->max_len) {
        nbt_error("TransformerLM",
                  "'%s': no room for position %lld (the cache holds %lld, the model %lld)",
                  m->base.path, (long long)pos, (long long)j->c->max_len, (long long)m->max_len);
        return false;
    }
    j->start_ns = now;
    nbn_embed(m, token, pos, j->d->x[0], j->d->x[1]);
    j->pos = pos;
    j->token = token;
    return true;
}

/* After a token's phases: its keys and values count in the cache, its time towards the
 * choice of thread count, and the next token (if any) is set up. Returns whether that token
 * may run in the same pool job: it exists, wants two threads, and the token just decoded had
 * them (helped). */
static bool next_token(bool helped, void *vjob) {
    decode_job *j = vjob;
    for (int64_t layer = 0; layer < j->m->num_layers; layer++) j->c->slots[layer].len = j->pos + 1;
    /* a token's time runs to the next one's (one clock read per token) */
    const int64_t now = now_ns();
    if (j->choosing) note_time(j->d, now - j->start_ns);
    const int64_t token = j->next ? j->next(j->next_ctx) : -1;
    j->token = -1;
    if (token < 0) return false;
    if (!set_up_token(j, token, now)) {
        j->failed = true;
        return false;
    }
    j->threads = nbn_lm_decode_threads(j->d, j->c, j->budget, &j->choosing);
    return helped && j->threads > 1;
}

bool nbn_lm_decode_run(nb_transformer_lm *m, int64_t token, nb_kv_cache *c, float *logits,
                       nbn_next_token_fn next, void *ctx) {
    struct nbn_lm_decoder *d = nbn_lm_decoder_for(m, c);
    if (!d) return false;
    const nbn_decode_weights *w = c->decode_trusted == m && d->weights_ready ? d->weights : NULL;
    decode_job job = {
        .d = d, .m = m, .c = c, .w = w, .logits = logits, .next = next, .next_ctx = ctx};
    if (!set_up_token(&job, token, now_ns())) return false;
    const int phases = 2 * (int)m->num_layers + 1;
    while (job.token >= 0) {
        /* asked here, outside the job: inside it (in a task) the answer is always one */
        job.budget = nbt_threads_for(2, 1);
        job.threads = nbn_lm_decode_threads(d, c, job.budget, &job.choosing);
        if (job.threads > 1) {
            /* a token's phases are each too short for the pool to wake a sleeping worker for */
            nbt_wake_workers();
            nbt_parallel_phase_rounds(phases, run_phase, next_token, &job);
        } else {
            for (int p = 0; p < phases; p++) run_phase(p, 0, 2, &job);
            next_token(false, &job);
        }
    }
    return !job.failed;
}

bool nbn_lm_decode_next(nb_transformer_lm *m, int64_t token, nb_kv_cache *c, float *logits) {
    return nbn_lm_decode_run(m, token, c, logits, NULL, NULL);
}

nb_tensor *nbn_lm_decode_token(nb_transformer_lm *m, const nb_tensor *tokens, nb_kv_cache *c) {
    nb_tensor *logits = nbt_new("TransformerLM", NB_F32, NB_SHAPE(1, 1, m->out_features));
    return logits && nbn_lm_decode_next(m, (int64_t)nb_item(tokens), c, nb_data(logits)) ? logits
                                                                                         : NULL;
}
