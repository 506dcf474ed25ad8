/* xoshiro256** seeded through splitmix64: portable, fast, and the same stream everywhere. */
#include "nbt.h"

#include <float.h>
#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void nb_rng_seed(nb_rng *rng, uint64_t seed) {
    if (!rng) {
        nbt_error("nb_rng_seed", "NULL generator");
        return;
    }
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t nb_rng_next(nb_rng *rng) {
    if (!rng) return nbt_error("nb_rng_next", "NULL generator"), 0;
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double nb_rng_uniform(nb_rng *rng) {
    if (!rng) return nbt_error("nb_rng_uniform", "NULL generator"), NAN;
    return (double)(nb_rng_next(rng) >> 11) * 0x1.0p-53;
}

double nb_rng_normal(nb_rng *rng) {
    if (!rng) return nbt_error("nb_rng_normal", "NULL generator"), NAN;
    /* Box-Muller with u1 in (0, 1] so log never sees 0. */
    double u1 = 1.0 - nb_rng_uniform(rng), u2 = nb_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static nb_tensor *fill_random(const char *op, nb_rng *rng, nb_dtype dt, int ndim,
                              const int64_t *shape, double a, double b, bool normal) {
    if (!rng) return nbt_error(op, "NULL generator");
    if (dt != NB_F32 && dt != NB_F64)
        return nbt_error(op, "expected dtype float32 or float64, got %s", nb_dtype_name(dt));
    nb_tensor *t = nbt_new(op, dt, ndim, shape);
    if (!t) return NULL;
    int64_t n = nbt_numel(t);
    /* a + (b - a) * u can round up to b (in float32 even for [0, 1)); such draws become the
     * largest value below b, so the range stays half-open without changing other draws. */
    float top32 = b > a ? nextafterf((float)b, (float)a) : (float)a;
    double top64 = b > a ? nextafter(b, a) : a;
    for (int64_t i = 0; i < n; i++) {
        double v = normal ? nb_rng_normal(rng) : a + (b - a) * nb_rng_uniform(rng);
        if (dt == NB_F32) {
            float f = (float)v;
            ((float *)t->storage->data)[i] = !normal && f >= (float)b ? top32 : f;
        } else {
            ((double *)t->storage->data)[i] = !normal && v >= b ? top64 : v;
        }
    }
    return t;
}

nb_tensor *nb_rand(nb_rng *rng, nb_dtype dt, int ndim, const int64_t *shape) {
    return fill_random("rand", rng, dt, ndim, shape, 0.0, 1.0, false);
}

nb_tensor *nb_uniform(nb_rng *rng, nb_dtype dt, int ndim, const int64_t *shape, double low,
                      double high) {
    /* high - low must be finite, or every draw is NaN or infinite; both bounds must be
     * representable in the dtype. */
    if (!(low <= high) || !isfinite(high - low))
        return nbt_error("uniform", "cannot sample [%g, %g): %s", low, high,
                         low > high ? "low is above high" : "the range is not finite");
    if (dt == NB_F32 && (fabs(low) > FLT_MAX || fabs(high) > FLT_MAX))
        return nbt_error("uniform", "[%g, %g) is beyond the range of float32", low, high);
    return fill_random("uniform", rng, dt, ndim, shape, low, high, false);
}

nb_tensor *nb_randn(nb_rng *rng, nb_dtype dt, int ndim, const int64_t *shape) {
    return fill_random("randn", rng, dt, ndim, shape, 0, 0, true);
}

/* Uniform in [0, span) for span >= 1: rejection sampling keeps every value equally likely. */
static uint64_t below(nb_rng *rng, uint64_t span) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % span, r;
    do r = nb_rng_next(rng);
    while (r >= limit);
    return r % span;
}

nb_tensor *nb_randint(nb_rng *rng, int64_t low, int64_t high, int ndim, const int64_t *shape) {
    if (!rng) return nbt_error("randint", "NULL generator");
    if (low >= high)
        return nbt_error("randint", "empty range [%lld, %lld)", (long long)low, (long long)high);
    nb_tensor *t = nbt_new("randint", NB_I64, ndim, shape);
    if (!t) return NULL;
    /* Unsigned arithmetic: high - low and low + offset may not fit in int64. */
    uint64_t span = (uint64_t)high - (uint64_t)low, n = (uint64_t)nbt_numel(t);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = (uint64_t)low + below(rng, span); /* wraps mod 2^64 to the right value */
        ((int64_t *)t->storage->data)[i] =
            v <= (uint64_t)INT64_MAX ? (int64_t)v : -(int64_t)(UINT64_MAX - v) - 1;
    }
    return t;
}

void nbt_randperm_into(nb_rng *rng, int64_t n, int64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = i;
    /* Fisher-Yates from the top: position i swaps with one of [0, i], each equally likely. */
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)below(rng, (uint64_t)i + 1), t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

nb_tensor *nb_randperm(nb_rng *rng, int64_t n) {
    if (!rng) return nbt_error("randperm", "NULL generator");
    if (n < 0) return nbt_error("randperm", "n must be >= 0, got %lld", (long long)n);
    nb_tensor *t = nbt_new("randperm", NB_I64, 1, &n);
    if (t) nbt_randperm_into(rng, n, (int64_t *)t->storage->data);
    return t;
}
