/* The seeded generator: pinned raw outputs, reproducibility, ranges and rough moments.
 *
 * The pinned values were computed with an independent Python model of the algorithms
 * (splitmix64 stepping a 64-bit state by 0x9e3779b97f4a7c15 and mixing with the usual
 * 30/27/31 shifts and two multipliers; xoshiro256** returning rotl(s1 * 5, 7) * 9), all
 * arithmetic mod 2^64. The splitmix64 value for seed 0 (0xe220a8397b1dcdaf) and the
 * xoshiro256** outputs for state {1, 2, 3, 4} (11520, 0, 1509978240, 1215971899390074240)
 * also agree with the widely published reference outputs of those generators. */
#include "harness.h"

#include <stdio.h>

static void test_seeding_is_splitmix64(void) {
    nb_rng r;
    nb_rng_seed(&r, 0);
    CU_ASSERT_EQUAL(r.s[0], 0xe220a8397b1dcdafULL);
    CU_ASSERT_EQUAL(r.s[1], 0x6e789e6aa1b965f4ULL);
    CU_ASSERT_EQUAL(r.s[2], 0x06c45d188009454fULL);
    CU_ASSERT_EQUAL(r.s[3], 0xf88bb8a8724c81ecULL);
    nb_rng_seed(&r, 42);
    CU_ASSERT_EQUAL(r.s[0], 0xbdd732262feb6e95ULL);
    CU_ASSERT_EQUAL(r.s[3], 0x581ce1ff0e4ae394ULL);
}

static void test_raw_outputs_pinned(void) {
    static const struct {
        uint64_t seed;
        uint64_t out[4];
    } pinned[] = {
        {0,
         {0x99ec5f36cb75f2b4ULL, 0xbf6e1f784956452aULL, 0x1a5f849d4933e6e0ULL,
          0x6aa594f1262d2d2cULL}},
        {42,
         {0x15780b2e0c2ec716ULL, 0x6104d9866d113a7eULL, 0xae17533239e499a1ULL,
          0xecb8ad4703b360a1ULL}},
        {UINT64_MAX,
         {0x8f5520d52a7ead08ULL, 0xc476a018caa1802dULL, 0x81de31c0d260469eULL,
          0xbf658d7e065f3c2fULL}},
    };
    for (size_t k = 0; k < sizeof pinned / sizeof pinned[0]; k++) {
        nb_rng r;
        nb_rng_seed(&r, pinned[k].seed);
        for (int i = 0; i < 4; i++) {
            uint64_t v = nb_rng_next(&r);
            if (v != pinned[k].out[i])
                fprintf(stderr, "seed %llu output %d: %016llx\n",
                        (unsigned long long)pinned[k].seed, i, (unsigned long long)v);
            CU_ASSERT_EQUAL(v, pinned[k].out[i]);
        }
    }
    /* The generator itself from an explicit state. */
    nb_rng r = {{1, 2, 3, 4}};
    CU_ASSERT_EQUAL(nb_rng_next(&r), 11520ULL);
    CU_ASSERT_EQUAL(nb_rng_next(&r), 0ULL);
    CU_ASSERT_EQUAL(nb_rng_next(&r), 1509978240ULL);
    CU_ASSERT_EQUAL(nb_rng_next(&r), 1215971899390074240ULL);
}

/* uniform = (next >> 11) * 2^-53; for seed 7 the model gives these (shortest repr). */
static void test_uniform_pinned(void) {
    nb_rng r;
    nb_rng_seed(&r, 7);
    CU_ASSERT_EQUAL(nb_rng_uniform(&r), 0.7005764821796896);
    CU_ASSERT_EQUAL(nb_rng_uniform(&r), 0.2787512294737843);
    CU_ASSERT_EQUAL(nb_rng_uniform(&r), 0.8396274618764198);
    /* nb_rand in f64 draws the same stream in row-major order. */
    nb_rng_seed(&r, 7);
    NBT_ASSERT_VALUES(nb_rand(&r, NB_F64, NB_SHAPE(3)), 0, 0.7005764821796896, 0.2787512294737843,
                      0.8396274618764198);
}

static bool same_values(const nb_tensor *a, const nb_tensor *b) {
    return nbtest_close(a, b, 0, 0);
}

static void test_same_seed_same_numbers(void) {
    nb_rng a, b;
    nb_rng_seed(&a, 1234);
    nb_rng_seed(&b, 1234);
    CU_ASSERT(
        same_values(nb_rand(&a, NB_F32, NB_SHAPE(4, 5)), nb_rand(&b, NB_F32, NB_SHAPE(4, 5))));
    CU_ASSERT(same_values(nb_randn(&a, NB_F64, NB_SHAPE(7)), nb_randn(&b, NB_F64, NB_SHAPE(7))));
    CU_ASSERT(same_values(nb_randint(&a, -5, 5, NB_SHAPE(9)), nb_randint(&b, -5, 5, NB_SHAPE(9))));
    CU_ASSERT(same_values(nb_uniform(&a, NB_F64, NB_SHAPE(3), -2, 2),
                          nb_uniform(&b, NB_F64, NB_SHAPE(3), -2, 2)));
    CU_ASSERT_EQUAL(nb_rng_next(&a), nb_rng_next(&b));
    /* Reseeding restarts the stream. */
    nb_rng_seed(&a, 99);
    nb_tensor *first = nb_randn(&a, NB_F32, NB_SHAPE(6));
    nb_rng_seed(&a, 99);
    CU_ASSERT(same_values(first, nb_randn(&a, NB_F32, NB_SHAPE(6))));
}

static void test_different_seeds_differ(void) {
    nb_rng a, b;
    nb_rng_seed(&a, 1);
    nb_rng_seed(&b, 2);
    nb_tensor *x = nb_rand(&a, NB_F64, NB_SHAPE(100));
    nb_tensor *y = nb_rand(&b, NB_F64, NB_SHAPE(100));
    int equal = 0;
    for (int64_t i = 0; i < 100; i++) equal += nb_get(x, &i) == nb_get(y, &i);
    CU_ASSERT_EQUAL(equal, 0);
    /* Successive draws from one generator differ too. */
    nb_tensor *z = nb_rand(&a, NB_F64, NB_SHAPE(100));
    equal = 0;
    for (int64_t i = 0; i < 100; i++) equal += nb_get(x, &i) == nb_get(z, &i);
    CU_ASSERT_EQUAL(equal, 0);
}

/* Sample mean and variance of n values. */
static void moments(const nb_tensor *t, double *mean, double *var) {
    int64_t n = nb_numel(t);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = nb_get(t, &i);
        s += v;
        s2 += v * v;
    }
    *mean = s / (double)n;
    *var = s2 / (double)n - *mean * *mean;
}

static void test_rand_range_and_moments(void) {
    nb_rng r;
    nb_rng_seed(&r, 5);
    const int64_t n = 100000;
    for (int k = 0; k < 2; k++) {
        nb_tensor *u = nb_rand(&r, k ? NB_F64 : NB_F32, 1, &n);
        double lo = 1, hi = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = nb_get(u, &i);
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        CU_ASSERT(lo >= 0 && hi < 1);
        CU_ASSERT(lo < 0.001 && hi > 0.999); /* 1e5 draws cover the range */
        double mean, var;
        moments(u, &mean, &var);
        /* mean 1/2 with standard error 0.29 / sqrt(1e5) ~ 0.0009; var 1/12 */
        CU_ASSERT_DOUBLE_EQUAL(mean, 0.5, 0.01);
        CU_ASSERT_DOUBLE_EQUAL(var, 1.0 / 12, 0.005);
    }
    nb_tensor *w = nb_uniform(&r, NB_F64, NB_SHAPE(1000), -3, -1);
    double mean, var;
    moments(w, &mean, &var);
    for (int64_t i = 0; i < 1000; i++) CU_ASSERT(nb_get(w, &i) >= -3 && nb_get(w, &i) < -1);
    CU_ASSERT_DOUBLE_EQUAL(mean, -2, 0.1); /* standard error 0.018 */
}

/* A state whose next output is all ones: the largest uniform the generator can produce.
 * In float32 it must still stay below 1 (1 - 2^-53 rounds to 1.0f). The state was found with
 * the Python model: s1 = 0x4fc71c71c71c71c7 makes rotl(s1 * 5, 7) * 9 == 2^64 - 1. */
static void test_rand_f32_never_one(void) {
    nb_rng r = {{0, 0x4fc71c71c71c71c7ULL, 0, 0}};
    nb_rng probe = r;
    CU_ASSERT_EQUAL(nb_rng_next(&probe), UINT64_MAX);
    nb_tensor *u = nb_rand(&r, NB_F32, NB_SHAPE(1));
    CU_ASSERT(nb_item(u) < 1.0);
    CU_ASSERT(nb_item(u) > 0.99999);
    /* The same for a uniform range: the top is excluded. */
    r = (nb_rng){{0, 0x4fc71c71c71c71c7ULL, 0, 0}};
    nb_tensor *w = nb_uniform(&r, NB_F32, NB_SHAPE(1), 2, 3);
    CU_ASSERT(nb_item(w) < 3.0);
    r = (nb_rng){{0, 0x4fc71c71c71c71c7ULL, 0, 0}};
    /* In float64 too: 2 + (1 - 2^-53) rounds to 3 (the spacing of doubles in [2, 4) is
     * 2^-51), so the top needs the same care. */
    nb_tensor *d = nb_uniform(&r, NB_F64, NB_SHAPE(1), 2, 3);
    CU_ASSERT(nb_item(d) < 3.0);
    CU_ASSERT(nb_item(d) > 2.99999);
}

static void test_randn_moments(void) {
    nb_rng r;
    nb_rng_seed(&r, 11);
    const int64_t n = 200000;
    nb_tensor *x = nb_randn(&r, NB_F64, 1, &n);
    double mean, var;
    moments(x, &mean, &var);
    /* standard errors: mean 1/sqrt(n) ~ 0.0022, variance sqrt(2/n) ~ 0.0032 */
    CU_ASSERT_DOUBLE_EQUAL(mean, 0, 0.02);
    CU_ASSERT_DOUBLE_EQUAL(var, 1, 0.03);
    /* Shape, not just moments: P(|x| < 1) = 0.6827, P(|x| < 2) = 0.9545. */
    int64_t within1 = 0, within2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = fabs(nb_get(x, &i));
        within1 += v < 1;
        within2 += v < 2;
    }
    CU_ASSERT_DOUBLE_EQUAL((double)within1 / (double)n, 0.6827, 0.01);
    CU_ASSERT_DOUBLE_EQUAL((double)within2 / (double)n, 0.9545, 0.01);
    nb_tensor *f = nb_randn(&r, NB_F32, NB_SHAPE(2, 3));
    CU_ASSERT_EQUAL(f->dtype, NB_F32);
    CU_ASSERT_EQUAL(nb_numel(f), 6);
}

static void test_randint(void) {
    nb_rng r;
    nb_rng_seed(&r, 3);
    nb_tensor *t = nb_randint(&r, -3, 4, NB_SHAPE(10, 100));
    CU_ASSERT_EQUAL(t->dtype, NB_I64);
    int counts[7] = {0};
    bool in_range = true;
    for (int64_t k = 0; k < 1000; k++) {
        int64_t v = ((int64_t *)nb_data(t))[k];
        if (v < -3 || v >= 4)
            in_range = false;
        else
            counts[v + 3]++;
    }
    CU_ASSERT_TRUE(in_range);
    /* each value expected 1000/7 ~ 143 times (sd ~ 11) */
    for (int v = 0; v < 7; v++) CU_ASSERT(counts[v] > 90 && counts[v] < 200);
    /* A range of one value. */
    NBT_ASSERT_VALUES(nb_randint(&r, 5, 6, NB_SHAPE(3)), 0, 5, 5, 5);
    /* The widest range works without overflow (the sanitizer pass checks). */
    nb_tensor *wide = nb_randint(&r, INT64_MIN, INT64_MAX, NB_SHAPE(64));
    CU_ASSERT_PTR_NOT_NULL_FATAL(wide);
    int negative = 0;
    for (int k = 0; k < 64; k++) negative += ((int64_t *)nb_data(wide))[k] < 0;
    CU_ASSERT(negative > 10 && negative < 54);
    /* Empty ranges are errors. */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_randint(&r, 4, 4, NB_SHAPE(2)));
    NBT_ASSERT_ERROR("randint: ");
    NBT_ASSERT_ERROR("empty range [4, 4)");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_randint(&r, 5, -5, NB_SHAPE(2)));
    NBT_ASSERT_ERROR("randint: ");
}

static void test_random_errors(void) {
    nb_rng r;
    nb_rng_seed(&r, 0);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_rand(NULL, NB_F32, NB_SHAPE(2)));
    NBT_ASSERT_ERROR("rand: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_rand(&r, NB_I64, NB_SHAPE(2)));
    NBT_ASSERT_ERROR("rand: ");
    NBT_ASSERT_ERROR("int64");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_randn(&r, NB_BOOL, NB_SHAPE(2)));
    NBT_ASSERT_ERROR("randn: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_uniform(&r, NB_F64, NB_SHAPE(2), 1, 0));
    NBT_ASSERT_ERROR("uniform: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_randn(&r, NB_F64, NB_SHAPE(2, -1)));
    NBT_ASSERT_ERROR("randn: ");
    NBT_ASSERT_ERROR("negative size");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_randint(NULL, 0, 2, NB_SHAPE(2)));
    NBT_ASSERT_ERROR("randint: ");
    /* A failed call does not advance the generator. */
    nb_rng fresh;
    nb_rng_seed(&fresh, 0);
    CU_ASSERT_EQUAL(nb_rng_next(&r), nb_rng_next(&fresh));
}

int main(void) {
    const nbtest_case cases[] = {
        {"seeding is splitmix64", test_seeding_is_splitmix64},
        {"raw outputs pinned", test_raw_outputs_pinned},
        {"uniform pinned", test_uniform_pinned},
        {"same seed, same numbers", test_same_seed_same_numbers},
        {"different seeds differ", test_different_seeds_differ},
        {"rand range and moments", test_rand_range_and_moments},
        {"rand in float32 never reaches 1", test_rand_f32_never_one},
        {"randn moments", test_randn_moments},
        {"randint", test_randint},
        {"random errors", test_random_errors},
    };
    return nbtest_run("rng", cases, sizeof cases / sizeof cases[0]);
}
