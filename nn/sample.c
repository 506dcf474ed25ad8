/* Picking the next token from a row of logits: greedy, temperature, top-k and top-p (nucleus)
 * choices from a seeded generator. */
#include "sample.h"
#include "tensor/nbt.h"

#include <math.h>
#include <stdlib.h>

/* Candidate order for top-k / top-p: most likely first, ties by the lower token id. */
typedef struct {
    double logit; /* (logit - max) / temperature: <= 0, 0 for the most likely */
    int64_t id;
} candidate;

static int by_logit_desc(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit < b->logit ? 1 : -1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Index of the first maximum of x[0..n). */
static int64_t first_max(const double *x, int64_t n) {
    int64_t best = 0;
    for (int64_t j = 1; j < n; j++)
        if (x[j] > x[best]) best = j;
    return best;
}

/* The first maximum of float logits x[0..n), or -1 with an error at the first NaN: what the
 * general path below gives, without its copy to doubles (which are exact, so compare the same),
 * for greedy decoding. */
static int64_t greedy_f32(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t j = 0; j < n; j++) {
        if (isnan(x[j])) return nbt_error("sample_logits", "logit %lld is NaN", (long long)j), -1;
        if (x[j] > x[best]) best = j;
    }
    return best;
}

/* x scaled for sampling: (x - top) / temperature, which cannot overflow upwards. A logit equal
 * to the top one (also +inf against +inf, where the difference would be NaN) gets 0 and -inf
 * stays -inf (also at an infinite temperature, where -inf / inf would be NaN). */
static double scaled(double x, double top, double temperature) {
    if (x == top) return 0;
    if (x == -INFINITY) return -INFINITY;
    return (x - top) / temperature;
}

bool nbn_check_sampling(const nb_generate_opts *o, const char *who) {
    if (o->top_k < 0)
        return nbt_error(who, "top_k must be >= 0, got %lld", (long long)o->top_k), false;
    if (isnan(o->temperature) || isnan(o->top_p))
        return nbt_error(who, "temperature %g and top_p %g must not be NaN", o->temperature,
                         o->top_p),
               false;
    return true;
}

int64_t nb_sample_logits(nb_rng *rng, const nb_tensor *logits, const nb_generate_opts *o) {
    if (!logits || !o || !rng) return nbt_error("sample_logits", "NULL argument"), -1;
    if (!nbt_check_live("sample_logits", logits)) return -1; /* a released tensor */
    if (!nb_is_float(logits) || logits->ndim != 1 || logits->shape[0] < 1)
        return nbt_error("sample_logits", "expects float logits [V], got %s %s",
                         nb_dtype_name(logits->dtype), nbt_shape(logits)),
               -1;
    if (!nbn_check_sampling(o, "sample_logits")) return -1;
    const int64_t V = logits->shape[0];
    if (o->temperature <= 0 && logits->dtype == NB_F32 && nb_is_contiguous(logits))
        return greedy_f32((const float *)nbt_ptr(logits), V);
    /* Scratch in the current scope: pooled, so a loop of calls stops allocating. */
    nb_tensor *xs = nbt_new("sample_logits", NB_F64, NB_SHAPE(V));
    nb_tensor *cs = nbt_new("sample_logits", NB_F64, NB_SHAPE(2 * V)); /* V candidates */
    if (!xs || !cs || !nb_to_doubles(logits, nb_data(xs))) return -1;
    double *x = nb_data(xs);
    for (int64_t j = 0; j < V; j++)
        if (isnan(x[j])) return nbt_error("sample_logits", "logit %lld is NaN", (long long)j), -1;
    const int64_t best = first_max(x, V);
    if (o->temperature <= 0) return best;
    const double top = x[best];
    if (top == -INFINITY)
        return nbt_error("sample_logits",
                         "every one of the %lld logits is -inf: no token has a "
                         "probability to sample",
                         (long long)V),
               -1;

    candidate *cand = nb_data(cs);
    for (int64_t j = 0; j < V; j++) cand[j] = (candidate){scaled(x[j], top, o->temperature), j};
    int64_t n = V;
    const bool nucleus = o->top_p > 0 && o->top_p < 1;
    if ((o->top_k > 0 && o->top_k < V) || nucleus) {
        qsort(cand, (size_t)V, sizeof *cand, by_logit_desc);
        if (o->top_k > 0 && o->top_k < V) n = o->top_k;
    } else { /* the most likely first, the others in token order */
        cand[0] = (candidate){0, best};
        for (int64_t j = 0, w = 1; j < V; j++)
            if (j != best) cand[w++] = (candidate){scaled(x[j], top, o->temperature), j};
    }
    /* Probabilities relative to the most likely (cand[0], whose weight is exp(0) = 1). */
    double total = 0;
    for (int64_t j = 0; j < n; j++) total += exp(cand[j].logit);
    if (nucleus) { /* the fewest leading candidates whose probability reaches top_p */
        double acc = 0, kept = 0;
        int64_t m = 0;
        while (m < n && acc < o->top_p) {
            double p = exp(cand[m].logit);
            acc += p / total;
            kept += p;
            m++;
        }
        n = m;
        total = kept;
    }
    double u = nb_rng_uniform(rng) * total, acc = 0;
    int64_t last = 0; /* the last candidate with a probability */
    for (int64_t j = 0; j < n; j++) {
        const double p = exp(cand[j].logit);
        acc += p;
        if (p > 0) last = j;
        if (u < acc && p > 0) return cand[j].id;
    }
    return cand[last].id; /* u landed on the rounding slack of the last sum */
}
