/* Memory-efficient attention (probabilities recomputed block by block in the backward)
 * against attention that keeps the probabilities, at every kind of mask, f32 and f64, and
 * bitwise the same for 1 and 2 threads. The keep limit is a test hook: 0 forces the
 * memory-efficient path at these small sizes, SIZE_MAX the kept probabilities. */
#include "harness.h"
#include "autograd/attention.h"

#include <stdint.h>
#include <stdlib.h>

typedef struct {
    nb_tensor *out, *dq, *dk, *dv;
} result;

typedef struct {
    int64_t B, Hq, Hkv, Tq, Tk, hd;
} dims;

/* Output and gradients of sum(out * w) for q [B, Hq, Tq, hd], k and v [B, Hkv, Tk, hd] drawn
 * from seed, with the keep limit set to `limit` for the call. */
static result run(nb_dtype dt, dims d, const nb_tensor *mask, bool causal, size_t limit) {
    nb_rng rng;
    nb_rng_seed(&rng, (uint64_t)(d.Tq * 100 + d.Tk));
    nb_tensor *q = nb_requires_grad_(nb_randn(&rng, dt, NB_SHAPE(d.B, d.Hq, d.Tq, d.hd)), true);
    nb_tensor *k = nb_requires_grad_(nb_randn(&rng, dt, NB_SHAPE(d.B, d.Hkv, d.Tk, d.hd)), true);
    nb_tensor *v = nb_requires_grad_(nb_randn(&rng, dt, NB_SHAPE(d.B, d.Hkv, d.Tk, d.hd)), true);
    nb_tensor *w = nb_randn(&rng, dt, NB_SHAPE(d.B, d.Hq, d.Tq, d.hd));
    size_t old = nba_attention_keep_limit(limit);
    nb_tensor *out = nb_sdpa(q, k, v, mask, causal, 1.0 / sqrt((double)d.hd));
    CU_ASSERT_EQUAL(nba_attention_last_memory_efficient(), limit == 0);
    nba_attention_keep_limit(old);
    CU_ASSERT_FATAL(out != NULL);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(out, w)), NULL));
    return (result){nb_detach(out), q->grad, k->grad, v->grad};
}

static void compare(result a, result b, double tol) {
    NBT_ASSERT_CLOSE(a.out, b.out, tol, tol);
    NBT_ASSERT_CLOSE(a.dq, b.dq, tol, tol);
    NBT_ASSERT_CLOSE(a.dk, b.dk, tol, tol);
    NBT_ASSERT_CLOSE(a.dv, b.dv, tol, tol);
}

/* Both paths at one mask, in f64 and f32. */
static void both_paths(dims d, const nb_tensor *mask, bool causal) {
    compare(run(NB_F64, d, mask, causal, 0), run(NB_F64, d, mask, causal, SIZE_MAX), 1e-12);
    compare(run(NB_F32, d, mask, causal, 0), run(NB_F32, d, mask, causal, SIZE_MAX), 2e-5);
}

/* 70 queries are one block of the memory-efficient path (ME_ROWS, 132 rows); grouped-query
 * heads. 137 queries make a whole block and one of 5 rows, fewer than a tile's. */
static const dims self = {2, 4, 2, 70, 70, 8}, cross = {2, 3, 3, 45, 38, 16};
static const dims blocks = {1, 2, 1, 137, 137, 20}, blocks_cross = {1, 2, 2, 150, 140, 8};

static nb_tensor *random_mask(int64_t n, int every, int ndim, const int64_t *shape) {
    uint8_t *m = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) m[i] = (uint8_t)(i * 7 % every == 1);
    nb_tensor *t = nb_from_array(NB_BOOL, ndim, shape, m);
    free(m);
    return t;
}

static void test_no_mask(void) {
    both_paths(self, NULL, false);
    both_paths(blocks_cross, NULL, false);
    both_paths(cross, NULL, false);
}

static void test_causal(void) {
    both_paths(self, NULL, true);
    both_paths(cross, NULL, true);                      /* T_q > T_k: the last rows see every key */
    both_paths((dims){1, 2, 1, 70, 90, 8}, NULL, true); /* T_q < T_k: 20 keys never seen */
    both_paths(blocks, NULL, true);
    both_paths(blocks_cross, NULL, true);
    both_paths((dims){1, 1, 1, 140, 150, 4}, NULL, true);
}

/* Key padding [B, 1, 1, T_k]; batch 1 is padded entirely (fully blocked rows: zeros). */
static void test_key_padding(void) {
    uint8_t pad[2 * 70];
    for (int i = 0; i < 2 * 70; i++) pad[i] = (uint8_t)(i < 70 ? i >= 60 : 1);
    nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(2, 1, 1, 70), pad);
    both_paths(self, mask, false);
    both_paths(self, mask, true);
}

/* An attention mask [T_q, T_k], and a full boolean mask [B, H_q, T_q, T_k]. */
static void test_attn_mask(void) {
    both_paths(cross, random_mask(45 * 38, 5, NB_SHAPE(45, 38)), false);
    both_paths(self, random_mask(70 * 70, 3, NB_SHAPE(70, 70)), true);
    both_paths(blocks, random_mask(137 * 137, 3, NB_SHAPE(137, 137)), true);
}

static void test_bool_mask(void) {
    both_paths(cross, random_mask(2 * 3 * 45 * 38, 4, NB_SHAPE(2, 3, 45, 38)), false);
}

/* Every output is computed by one task the same way, whichever thread runs it. */
static void test_threads_bitwise(void) {
    const dims d = {2, 4, 2, 137, 137, 32};
    int before = nb_get_num_threads();
    nb_set_num_threads(1);
    result one = run(NB_F32, d, NULL, true, 0);
    nb_set_num_threads(2);
    result two = run(NB_F32, d, NULL, true, 0);
    nb_set_num_threads(before);
    compare(one, two, 0);
}

/* The path follows the probabilities' size against the keep limit, 16 MB by default: here a
 * limit of 4096 bytes keeps [1, 1, 32, 32] float32 (4096 bytes) and not [1, 1, 33, 32]. */
static void test_automatic_choice(void) {
    size_t old = nba_attention_keep_limit(4096);
    CU_ASSERT_EQUAL(old, (size_t)16 << 20);
    for (int64_t Tq = 32; Tq <= 33; Tq++) {
        nb_tensor *q = nb_requires_grad_(nb_ones(NB_F32, NB_SHAPE(1, 1, Tq, 2)), true);
        nb_tensor *k = nb_ones(NB_F32, NB_SHAPE(1, 1, 32, 2));
        nb_tensor *out = nb_sdpa(q, k, k, NULL, true, 1.0);
        CU_ASSERT_FATAL(out != NULL);
        CU_ASSERT_EQUAL(nba_attention_last_memory_efficient(), Tq == 33);
        /* Equal keys: every query averages the values it sees, all ones. */
        CU_ASSERT_DOUBLE_EQUAL(nb_get(out, NB_IDX(0, 0, Tq - 1, 1)), 1.0, 1e-6);
        CU_ASSERT_TRUE(nb_backward(nb_sum(out), NULL));
    }
    nba_attention_keep_limit(old);
}

int main(void) {
    const nbtest_case cases[] = {
        {"memory-efficient = kept: no mask", test_no_mask},
        {"memory-efficient = kept: causal", test_causal},
        {"memory-efficient = kept: key padding, fully padded rows", test_key_padding},
        {"memory-efficient = kept: attention mask", test_attn_mask},
        {"memory-efficient = kept: per-head bool mask", test_bool_mask},
        {"memory-efficient: 1 and 2 threads bitwise equal", test_threads_bitwise},
        {"the path follows the probabilities' size", test_automatic_choice},
    };
    return nbtest_run("attention_memory", cases, sizeof cases / sizeof cases[0]);
}
