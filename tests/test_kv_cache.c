/* The cache API on its own (nabla/generate.h): nb_kv_cache_attend against attention computed
 * op by op with public ops (keys and values of different head sizes, grouped-query heads,
 * new queries aligned bottom-right after the cached positions), named row tensors, commit,
 * truncate and reset, the accessors, and the errors (each leaving the cache as it was). */
#include "harness.h"

#include <nabla/generate.h>
#include <stdlib.h>
#include <string.h>

/* The shapes most tests use: 4 query heads reading 2 key/value heads (query head h reads
 * key/value head h / 2), keys of 5 and values of 3, so a mix-up of the two sizes or of the
 * head grouping changes the numbers or the shapes. */
enum { B = 2, N = 7, H = 4, KVH = 2, KD = 5, VD = 3 };

/* Attention of the queries q [b, T, heads * kd] at positions [offset, offset + T) to keys k
 * [b, S, kv_heads * kd] and values v [b, S, kv_heads * vd] at positions [0, S), computed op by
 * op: per head a matmul for the scores, a mask built here by hand (query i sees key j <=
 * offset + i: the bottom-right alignment), masked_fill with -inf, softmax, a matmul with the
 * values, and the heads concatenated. Independent of the cache's row kernels. */
static nb_tensor *reference_attention(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                                      int64_t heads, int64_t kv_heads, int64_t kd, int64_t vd,
                                      int64_t offset) {
    const int64_t T = q->shape[1], S = k->shape[1];
    uint8_t *blocked = malloc((size_t)(T * S));
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < S; j++) blocked[i * S + j] = j > offset + i;
    nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(T, S), blocked);
    free(blocked);
    nb_tensor *ctx[16];
    const int64_t group = heads / kv_heads;
    for (int64_t h = 0; h < heads; h++) {
        nb_tensor *qh = nb_narrow(q, 2, h * kd, kd);
        nb_tensor *kh = nb_narrow(k, 2, (h / group) * kd, kd);
        nb_tensor *vh = nb_narrow(v, 2, (h / group) * vd, vd);
        nb_tensor *scores = nb_mul_scalar(nb_matmul(qh, nb_transpose(kh, 1, 2)), 1 / sqrt(kd));
        nb_tensor *p = nb_softmax(nb_masked_fill(scores, mask, -INFINITY), -1);
        ctx[h] = nb_matmul(p, vh);
    }
    return nb_concat((int)heads, ctx, 2);
}

typedef struct {
    nb_tensor *q, *k, *v;
} qkv;

/* Random queries, keys and values for N positions of B sequences. */
static qkv random_qkv(nb_dtype dt, uint64_t seed) {
    nb_rng rng;
    nb_rng_seed(&rng, seed);
    return (qkv){nb_randn(&rng, dt, NB_SHAPE(B, N, H * KD)),
                 nb_randn(&rng, dt, NB_SHAPE(B, N, KVH * KD)),
                 nb_randn(&rng, dt, NB_SHAPE(B, N, KVH * VD))};
}

/* Positions [at, at + n) of x (a [B, n, .] view; not contiguous for B > 1). */
static nb_tensor *span(const nb_tensor *x, int64_t at, int64_t n) {
    return nb_narrow(x, 1, at, n);
}

/* Feeds x (of dtype dt) to a fresh cache in the chunks listed (summing to N), committing after
 * each, and checks each chunk's contexts against the float64 op-by-op reference of the queries
 * at [at, at + n) over keys [0, at + n). */
static void check_chunks(nb_dtype dt, double tol, const int64_t *chunks, int nchunks) {
    const qkv x64 = random_qkv(NB_F64, 21);
    const qkv x = {nb_to_dtype(x64.q, dt), nb_to_dtype(x64.k, dt), nb_to_dtype(x64.v, dt)};
    nb_kv_cache *c = nb_kv_cache_empty(1, B, N, dt);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_heads(c, 0, KVH, KD, VD));
    int64_t at = 0;
    for (int i = 0; i < nchunks; i++) {
        const int64_t n = chunks[i];
        nb_tensor *got =
            nb_kv_cache_attend(c, 0, span(x.q, at, n), span(x.k, at, n), span(x.v, at, n), H);
        NBT_ASSERT_SHAPE(got, B, n, H * VD);
        CU_ASSERT_TRUE(got && got->dtype == dt);
        nb_tensor *want = reference_attention(span(x64.q, at, n), span(x64.k, 0, at + n),
                                              span(x64.v, 0, at + n), H, KVH, KD, VD, at);
        NBT_ASSERT_CLOSE(got, want, tol, tol);
        CU_ASSERT_EQUAL(nb_kv_cache_len(c), at); /* the attend alone does not advance it */
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, n));
        at += n;
    }
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), N);
    nb_kv_cache_free(c);
}

/* Token by token, in mixed chunks and in chunks of every size, float64 to 1e-12. */
static void test_attend_f64_matches_op_by_op(void) {
    const int64_t ones[N] = {1, 1, 1, 1, 1, 1, 1};
    check_chunks(NB_F64, 1e-12, ones, N);
    const int64_t mixed[] = {3, 1, 2, 1};
    check_chunks(NB_F64, 1e-12, mixed, 4);
    for (int64_t size = 1; size <= N; size++) {
        int64_t chunks[N];
        int n = 0;
        for (int64_t at = 0; at < N; at += size) chunks[n++] = at + size <= N ? size : N - at;
        check_chunks(NB_F64, 1e-12, chunks, n);
    }
}

/* float32 (the attention-row kernel) against the float64 reference, to float32 rounding. */
static void test_attend_f32_matches_f64(void) {
    const int64_t ones[N] = {1, 1, 1, 1, 1, 1, 1};
    check_chunks(NB_F32, 1e-5, ones, N);
    const int64_t mixed[] = {2, 4, 1};
    check_chunks(NB_F32, 1e-5, mixed, 3);
    const int64_t all[] = {N};
    check_chunks(NB_F32, 1e-5, all, 1);
}

/* The head layouts at their limits: one shared key/value head for every query head
 * (multi-query), as many as query heads (plain multi-head) and values wider than keys; and
 * queries that require grad give a context without history. */
static void test_attend_head_layouts(void) {
    const int64_t layouts[][4] = {{4, 1, 2, 6}, {3, 3, 4, 4}, {2, 2, 1, 7}}; /* H, KVH, kd, vd */
    for (int li = 0; li < 3; li++) {
        const int64_t h = layouts[li][0], kvh = layouts[li][1], kd = layouts[li][2],
                      vd = layouts[li][3];
        nb_rng rng;
        nb_rng_seed(&rng, 40 + (uint64_t)li);
        nb_tensor *q = nb_randn(&rng, NB_F64, NB_SHAPE(1, 5, h * kd));
        nb_tensor *k = nb_randn(&rng, NB_F64, NB_SHAPE(1, 5, kvh * kd));
        nb_tensor *v = nb_randn(&rng, NB_F64, NB_SHAPE(1, 5, kvh * vd));
        q->requires_grad = true;
        nb_kv_cache *c = nb_kv_cache_empty(1, 1, 5, NB_F64);
        CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_heads(c, 0, kvh, kd, vd));
        nb_tensor *got = nb_kv_cache_attend(c, 0, span(q, 0, 2), span(k, 0, 2), span(v, 0, 2), h);
        CU_ASSERT_TRUE(got && !got->requires_grad && !got->node);
        NBT_ASSERT_CLOSE(
            got,
            reference_attention(span(q, 0, 2), span(k, 0, 2), span(v, 0, 2), h, kvh, kd, vd, 0),
            1e-12, 1e-12);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, 2));
        NBT_ASSERT_CLOSE(nb_kv_cache_attend(c, 0, span(q, 2, 3), span(k, 2, 3), span(v, 2, 3), h),
                         reference_attention(span(q, 2, 3), k, v, h, kvh, kd, vd, 2), 1e-12, 1e-12);
        nb_kv_cache_free(c);
    }
}

/* Long enough that (sequence, head) pairs are split across threads: 1 and 2 threads give the
 * same bits, and both match the reference. */
static void test_attend_threads(void) {
    enum { L = 300, P = 296, TH = 8, TKV = 4, TKD = 32, TVD = 16 };
    nb_rng rng;
    nb_rng_seed(&rng, 77);
    nb_tensor *q = nb_randn(&rng, NB_F32, NB_SHAPE(1, L, TH * TKD));
    nb_tensor *k = nb_randn(&rng, NB_F32, NB_SHAPE(1, L, TKV * TKD));
    nb_tensor *v = nb_randn(&rng, NB_F32, NB_SHAPE(1, L, TKV * TVD));
    nb_tensor *got[2][L - P];
    const int before = nb_get_num_threads();
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        nb_kv_cache *c = nb_kv_cache_empty(1, 1, L, NB_F32);
        CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_heads(c, 0, TKV, TKD, TVD));
        CU_ASSERT_PTR_NOT_NULL(
            nb_kv_cache_attend(c, 0, span(q, 0, P), span(k, 0, P), span(v, 0, P), TH));
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, P));
        for (int64_t t = P; t < L; t++) {
            got[threads - 1][t - P] =
                nb_kv_cache_attend(c, 0, span(q, t, 1), span(k, t, 1), span(v, t, 1), TH);
            CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
        }
        nb_kv_cache_free(c);
    }
    nb_set_num_threads(before);
    nb_tensor *q64 = nb_to_dtype(q, NB_F64), *k64 = nb_to_dtype(k, NB_F64),
              *v64 = nb_to_dtype(v, NB_F64);
    for (int64_t t = P; t < L; t++) {
        NBT_ASSERT_CLOSE(got[0][t - P], got[1][t - P], 0, 0);
        NBT_ASSERT_CLOSE(got[0][t - P],
                         reference_attention(span(q64, t, 1), span(k64, 0, t + 1),
                                             span(v64, 0, t + 1), TH, TKV, TKD, TVD, t),
                         1e-5, 1e-5);
    }
}

/* Keys are kept in blocks of 64 (NBK_KEY_BLOCK), the last one of a capacity of 150 only 22
 * wide: float64 queries in a prompt of 130 and one at a time after it (two full blocks, then
 * the short one) match the op-by-op reference. */
static void test_attend_key_blocks_f64(void) {
    enum { L = 150, P = 130, TH = 4, TKV = 2, TKD = 6, TVD = 5 };
    nb_rng rng;
    nb_rng_seed(&rng, 78);
    nb_tensor *q = nb_randn(&rng, NB_F64, NB_SHAPE(2, L, TH * TKD));
    nb_tensor *k = nb_randn(&rng, NB_F64, NB_SHAPE(2, L, TKV * TKD));
    nb_tensor *v = nb_randn(&rng, NB_F64, NB_SHAPE(2, L, TKV * TVD));
    nb_kv_cache *c = nb_kv_cache_empty(1, 2, L, NB_F64);
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_heads(c, 0, TKV, TKD, TVD));
    nb_tensor *prompt = nb_kv_cache_attend(c, 0, span(q, 0, P), span(k, 0, P), span(v, 0, P), TH);
    NBT_ASSERT_CLOSE(
        prompt,
        reference_attention(span(q, 0, P), span(k, 0, P), span(v, 0, P), TH, TKV, TKD, TVD, 0),
        1e-12, 1e-12);
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, P));
    for (int64_t t = P; t < L; t++) {
        nb_tensor *got = nb_kv_cache_attend(c, 0, span(q, t, 1), span(k, t, 1), span(v, t, 1), TH);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
        NBT_ASSERT_CLOSE(got,
                         reference_attention(span(q, t, 1), span(k, 0, t + 1), span(v, 0, t + 1),
                                             TH, TKV, TKD, TVD, t),
                         1e-12, 1e-12);
    }
    nb_kv_cache_free(c);
}

/* Named row tensors: append writes x at [len, len + T) and returns rows [0, len + T) with the
 * values appended so far; before a commit, appending again rewrites the same positions. */
static void test_rows(void) {
    enum { W1 = 3, W2 = 2, L = 6 };
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_tensor *lat = nb_randn(&rng, NB_F64, NB_SHAPE(B, L, W1));
    nb_tensor *rope = nb_randn(&rng, NB_F64, NB_SHAPE(B, L, W2));
    nb_kv_cache *c = nb_kv_cache_empty(2, B, L, NB_F64);
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_rows(c, 1, "latent", W1));
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_rows(c, 1, "rope", W2));
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(c, 0, "latent", 1)); /* names are per layer */
    const int64_t chunks[] = {2, 1, 3};
    int64_t at = 0;
    for (int i = 0; i < 3; i++) {
        const int64_t n = chunks[i];
        /* first a wrong chunk (its negation), then the right one at the same positions */
        CU_ASSERT_PTR_NOT_NULL(nb_kv_cache_append(c, 1, "latent", nb_neg(span(lat, at, n))));
        nb_tensor *held = nb_kv_cache_append(c, 1, "latent", span(lat, at, n));
        NBT_ASSERT_SHAPE(held, B, at + n, W1);
        NBT_ASSERT_CLOSE(held, span(lat, 0, at + n), 0, 0);
        nb_tensor *held2 = nb_kv_cache_append(c, 1, "rope", span(rope, at, n));
        NBT_ASSERT_SHAPE(held2, B, at + n, W2);
        NBT_ASSERT_CLOSE(held2, span(rope, 0, at + n), 0, 0);
        CU_ASSERT_FALSE(held && held->requires_grad);
        /* layer 0's entry too, so the commit can pass */
        CU_ASSERT_PTR_NOT_NULL(
            nb_kv_cache_append(c, 0, "latent", nb_zeros(NB_F64, NB_SHAPE(B, n, 1))));
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, n));
        at += n;
    }
    /* the positions hold their values whatever was written there first */
    nb_tensor *all = nb_kv_cache_append(c, 1, "rope", nb_zeros(NB_F64, NB_SHAPE(B, 0, W2)));
    NBT_ASSERT_CLOSE(all, rope, 0, 0);
    nb_kv_cache_free(c);
}

/* The length moves only on commit, and only as far as every layer (heads and each named
 * tensor) was written; a refused commit names the layer and changes nothing. */
static void test_commit(void) {
    const qkv x = random_qkv(NB_F64, 3);
    nb_kv_cache *c = nb_kv_cache_empty(2, B, N, NB_F64);
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_heads(c, 0, KVH, KD, VD));
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_rows(c, 1, "latent", 4));
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 0)); /* nothing new: fine */
    CU_ASSERT_PTR_NOT_NULL(
        nb_kv_cache_attend(c, 0, span(x.q, 0, 3), span(x.k, 0, 3), span(x.v, 0, 3), H));
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 0);
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, 3));
    NBT_ASSERT_ERROR("layer 1's 'latent' holds positions up to 0, not 3");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 0);
    nb_tensor *lat = nb_ones(NB_F64, NB_SHAPE(B, 3, 4));
    CU_ASSERT_PTR_NOT_NULL(nb_kv_cache_append(c, 1, "latent", lat));
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, 4)); /* written 3, not 4 */
    NBT_ASSERT_ERROR("layer 0's heads hold positions up to 3, not 4");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 0);
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, -1));
    NBT_ASSERT_ERROR("kv_cache_commit");
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, N + 1));
    NBT_ASSERT_ERROR("do not fit the cache's 7");
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 2)); /* fewer than written is fine */
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 2);
    /* a forward of 1 at position 2 (already written once, rewritten now) then 1 more */
    CU_ASSERT_PTR_NOT_NULL(
        nb_kv_cache_attend(c, 0, span(x.q, 2, 1), span(x.k, 2, 1), span(x.v, 2, 1), H));
    CU_ASSERT_PTR_NOT_NULL(nb_kv_cache_append(c, 1, "latent", nb_narrow(lat, 1, 0, 1)));
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, N - 3 + 1)); /* past max_len */
    NBT_ASSERT_ERROR("5 new positions after 3 do not fit the cache's 7");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 3);
    /* the committed positions read as the reference at the next position */
    NBT_ASSERT_CLOSE(
        nb_kv_cache_attend(c, 0, span(x.q, 3, 1), span(x.k, 3, 1), span(x.v, 3, 1), H),
        reference_attention(span(x.q, 3, 1), span(x.k, 0, 4), span(x.v, 0, 4), H, KVH, KD, VD, 3),
        1e-12, 1e-12);
    CU_ASSERT_FALSE(nb_kv_cache_commit(NULL, 1));
    NBT_ASSERT_ERROR("NULL cache");
    nb_kv_cache_free(c);
}

/* Truncate forgets positions from len on (written ones too: committing them again needs a
 * new forward); re-feeding then gives the reference again. Reset starts over. */
static void test_truncate_and_reset(void) {
    const qkv x = random_qkv(NB_F64, 4);
    nb_kv_cache *c = nb_kv_cache_empty(1, B, N, NB_F64);
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_heads(c, 0, KVH, KD, VD));
    CU_ASSERT_PTR_NOT_NULL(nb_kv_cache_attend(c, 0, x.q, x.k, x.v, H));
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, N));
    CU_ASSERT_FALSE(nb_kv_cache_truncate(c, N + 1));
    NBT_ASSERT_ERROR("length 8 is outside [0, 7]");
    CU_ASSERT_FALSE(nb_kv_cache_truncate(c, -1));
    NBT_ASSERT_ERROR("outside [0, 7]");
    CU_ASSERT_FALSE(nb_kv_cache_truncate(NULL, 0));
    NBT_ASSERT_ERROR("NULL cache");
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), N);
    CU_ASSERT_TRUE(nb_kv_cache_truncate(c, N)); /* to its own length: nothing forgotten */
    CU_ASSERT_TRUE(nb_kv_cache_truncate(c, 3));
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 3);
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, 1)); /* position 3 was forgotten, not kept */
    NBT_ASSERT_ERROR("layer 0's heads hold positions up to 3, not 4");
    /* the prefix is reused: positions 3.. again, in two chunks */
    NBT_ASSERT_CLOSE(
        nb_kv_cache_attend(c, 0, span(x.q, 3, 2), span(x.k, 3, 2), span(x.v, 3, 2), H),
        reference_attention(span(x.q, 3, 2), span(x.k, 0, 5), span(x.v, 0, 5), H, KVH, KD, VD, 3),
        1e-12, 1e-12);
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 2));
    NBT_ASSERT_CLOSE(nb_kv_cache_attend(c, 0, span(x.q, 5, 2), span(x.k, 5, 2), span(x.v, 5, 2), H),
                     reference_attention(span(x.q, 5, 2), x.k, x.v, H, KVH, KD, VD, 5), 1e-12,
                     1e-12);
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 2));
    /* reset: position 0 again, and other tokens there give their own attention (a 1-key
     * softmax: the context is the values themselves) */
    nb_kv_cache_reset(c);
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 0);
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, 1));
    nb_tensor *first =
        nb_kv_cache_attend(c, 0, span(x.q, 6, 1), span(x.k, 6, 1), span(x.v, 6, 1), H);
    nb_tensor *v6 = span(x.v, 6, 1), *want[H];
    for (int h = 0; h < H; h++) want[h] = nb_narrow(v6, 2, (h / (H / KVH)) * VD, VD);
    NBT_ASSERT_CLOSE(first, nb_concat(H, want, 2), 1e-15, 1e-15);
    nb_kv_cache_reset(NULL); /* a no-op */
    nb_kv_cache_free(c);
    nb_kv_cache_free(NULL);
}

/* The accessors, with the bytes computed from the shapes: heads hold batch * kv_heads *
 * (k_dim + v_dim) * max_len numbers, a named tensor batch * max_len * width. */
static void test_accessors(void) {
    nb_kv_cache *c = nb_kv_cache_empty(3, 2, 10, NB_F64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(nb_kv_cache_layer_count(c), 3);
    CU_ASSERT_EQUAL(nb_kv_cache_batch(c), 2);
    CU_ASSERT_EQUAL(nb_kv_cache_max_len(c), 10);
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 0);
    CU_ASSERT_EQUAL(nb_kv_cache_dtype(c), NB_F64);
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(c), 0);
    CU_ASSERT_TRUE(nb_kv_cache_add_heads(c, 0, 2, 5, 3));
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(c), 2 * 2 * (5 + 3) * 10 * 8); /* 2560 */
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(c, 1, "latent", 4));
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(c, 1, "rope", 1));
    CU_ASSERT_TRUE(nb_kv_cache_add_heads(c, 1, 1, 2, 2)); /* heads and rows in one layer */
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(c),
                    2560 + 2 * 10 * 4 * 8 + 2 * 10 * 1 * 8 + 2 * 1 * (2 + 2) * 10 * 8);
    /* what each layer keeps */
    int64_t kvh = 0, kd = 0, vd = 0;
    CU_ASSERT_TRUE(nb_kv_cache_heads(c, 0, &kvh, &kd, &vd));
    CU_ASSERT_TRUE(kvh == 2 && kd == 5 && vd == 3);
    CU_ASSERT_TRUE(nb_kv_cache_heads(c, 1, &kvh, NULL, NULL) && kvh == 1);
    CU_ASSERT_FALSE(nb_kv_cache_heads(c, 2, &kvh, &kd, &vd));
    NBT_ASSERT_ERROR("layer 2 has no heads");
    CU_ASSERT_FALSE(nb_kv_cache_heads(c, 3, &kvh, &kd, &vd));
    NBT_ASSERT_ERROR("layer 3 out of range");
    CU_ASSERT_EQUAL(nb_kv_cache_rows_width(c, 1, "latent"), 4);
    CU_ASSERT_EQUAL(nb_kv_cache_rows_width(c, 1, "rope"), 1);
    CU_ASSERT_EQUAL(nb_kv_cache_rows_width(c, 0, "latent"), -1);
    NBT_ASSERT_ERROR("layer 0 has no tensor 'latent'");
    CU_ASSERT_EQUAL(nb_kv_cache_rows_width(c, 1, NULL), -1);
    nb_kv_cache_free(c);
    /* nb_kv_cache_new: every layer the same heads; float32 numbers are 4 bytes */
    c = nb_kv_cache_new(2, 1, 8, 4, 4, NB_F32);
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(c), 2 * 1 * 4 * (4 + 4) * 8 * 4);
    CU_ASSERT_EQUAL(nb_kv_cache_dtype(c), NB_F32);
    CU_ASSERT_EQUAL(nb_kv_cache_layer_count(c), 2);
    nb_kv_cache_free(c);
    CU_ASSERT_EQUAL(nb_kv_cache_len(NULL), -1);
    CU_ASSERT_EQUAL(nb_kv_cache_max_len(NULL), -1);
    CU_ASSERT_EQUAL(nb_kv_cache_layer_count(NULL), 0);
    CU_ASSERT_EQUAL(nb_kv_cache_batch(NULL), 0);
    CU_ASSERT_EQUAL(nb_kv_cache_dtype(NULL), NB_F32);
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(NULL), 0);
}

/* Making caches and adding to them: every refusal has a message and leaves the cache's
 * layout (its bytes) as it was. */
static void test_layout_errors(void) {
    CU_ASSERT_PTR_NULL(nb_kv_cache_empty(0, 1, 4, NB_F32));
    NBT_ASSERT_ERROR("got 0, 1, 4 and float32");
    CU_ASSERT_PTR_NULL(nb_kv_cache_empty(1, 0, 4, NB_F32));
    NBT_ASSERT_ERROR("got 1, 0, 4");
    CU_ASSERT_PTR_NULL(nb_kv_cache_empty(1, 1, 0, NB_F32));
    NBT_ASSERT_ERROR("got 1, 1, 0");
    CU_ASSERT_PTR_NULL(nb_kv_cache_empty(1, 1, 4, NB_I64));
    NBT_ASSERT_ERROR("int64");
    CU_ASSERT_PTR_NULL(nb_kv_cache_new(1, 1, 4, 2, 0, NB_F32));
    NBT_ASSERT_ERROR("must be >= 1");

    nb_kv_cache *c = nb_kv_cache_empty(2, 2, 4, NB_F32);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_TRUE(nb_kv_cache_add_heads(c, 0, 2, 3, 3));
    const int64_t bytes = nb_kv_cache_bytes(c);
    CU_ASSERT_FALSE(nb_kv_cache_add_heads(c, 0, 2, 3, 3));
    NBT_ASSERT_ERROR("layer 0 already has heads");
    CU_ASSERT_FALSE(nb_kv_cache_add_heads(c, 2, 2, 3, 3));
    NBT_ASSERT_ERROR("layer 2 out of range (the cache has 2)");
    CU_ASSERT_FALSE(nb_kv_cache_add_heads(c, -1, 2, 3, 3));
    NBT_ASSERT_ERROR("layer -1 out of range");
    CU_ASSERT_FALSE(nb_kv_cache_add_heads(c, 1, 0, 3, 3));
    NBT_ASSERT_ERROR("got 0, 3 and 3");
    CU_ASSERT_FALSE(nb_kv_cache_add_heads(c, 1, 1, 3, -2));
    NBT_ASSERT_ERROR("got 1, 3 and -2");
    CU_ASSERT_FALSE(nb_kv_cache_add_heads(NULL, 0, 1, 1, 1));
    NBT_ASSERT_ERROR("NULL cache");
    /* sizes whose product overflows int64: an error, not a wrapped size */
    CU_ASSERT_FALSE(nb_kv_cache_add_heads(c, 1, (int64_t)1 << 62, 3, 3));
    NBT_ASSERT_ERROR("overflow");
    CU_ASSERT_FALSE(nb_kv_cache_add_heads(c, 1, 1, 3, INT64_MAX));
    NBT_ASSERT_ERROR("overflow");
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(c, 1, "big", INT64_MAX / 2));
    NBT_ASSERT_ERROR("overflow");
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(c), bytes);

    /* names: 1..63 bytes, unique within a layer, at most 4 per layer */
    char name63[64], name64[65];
    memset(name63, 'a', 63);
    name63[63] = 0;
    memset(name64, 'b', 64);
    name64[64] = 0;
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(c, 1, "", 2));
    NBT_ASSERT_ERROR("a name needs 1 to 63 bytes");
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(c, 1, NULL, 2));
    NBT_ASSERT_ERROR("a name needs 1 to 63 bytes");
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(c, 1, name64, 2));
    NBT_ASSERT_ERROR("a name needs 1 to 63 bytes");
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(c, 1, "w", 0));
    NBT_ASSERT_ERROR("'w': width must be >= 1, got 0");
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(c, 5, "w", 1));
    NBT_ASSERT_ERROR("layer 5 out of range");
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(NULL, 0, "w", 1));
    NBT_ASSERT_ERROR("NULL cache");
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(c), bytes);
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(c, 1, name63, 1));
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(c, 1, name63, 1));
    NBT_ASSERT_ERROR("layer 1 already has 'aaaa");
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(c, 1, "b", 1));
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(c, 1, "c", 1));
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(c, 1, "d", 1));
    CU_ASSERT_FALSE(nb_kv_cache_add_rows(c, 1, "e", 1));
    NBT_ASSERT_ERROR("layer 1 already has 4 tensors");
    CU_ASSERT_EQUAL(nb_kv_cache_bytes(c), bytes + 4 * 2 * 4 * 1 * 4);
    /* the long name works as a key */
    CU_ASSERT_PTR_NOT_NULL(nb_kv_cache_append(c, 1, name63, nb_ones(NB_F32, NB_SHAPE(2, 1, 1))));
    nb_kv_cache_free(c);
}

/* Wrong arguments to attend, append and commit: an error naming the problem, and nothing
 * changes (the length, what the layer holds, what the next forward computes). */
static void test_call_errors(void) {
    const qkv x = random_qkv(NB_F64, 9);
    nb_kv_cache *c = nb_kv_cache_empty(3, B, N, NB_F64);
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_heads(c, 0, KVH, KD, VD));
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_rows(c, 1, "latent", 2));
    /* two positions in, committed */
    CU_ASSERT_PTR_NOT_NULL(
        nb_kv_cache_attend(c, 0, span(x.q, 0, 2), span(x.k, 0, 2), span(x.v, 0, 2), H));
    nb_tensor *lat = nb_ones(NB_F64, NB_SHAPE(B, N, 2));
    CU_ASSERT_PTR_NOT_NULL(nb_kv_cache_append(c, 1, "latent", span(lat, 0, 2)));
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 2));

    nb_tensor *q = span(x.q, 2, 1), *k = span(x.k, 2, 1), *v = span(x.v, 2, 1);
    /* wrong values everywhere a refused call might have written them */
    nb_tensor *bad_k = nb_full(NB_F64, NB_SHAPE(B, 1, KVH * KD), 100);
    nb_tensor *bad_v = nb_full(NB_F64, NB_SHAPE(B, 1, KVH * VD), 100);
    nb_tensor *q32 = nb_to_dtype(q, NB_F32);
    struct {
        nb_tensor *q, *k, *v;
        int64_t heads;
        int layer;
        const char *error;
    } bad[] = {
        {q, bad_k, bad_v, 3, 0, "heads a multiple of 2"},
        {q, bad_k, bad_v, 0, 0, "got heads 0"},
        {q, bad_k, bad_v, -4, 0, "got heads -4"},
        {q, bad_k, bad_v, (int64_t)1 << 62, 0, "got heads 4611686018427387904"},
        {q, bad_k, bad_v, INT64_MAX - 1, 0, "kv_cache_attend"},
        {q32, nb_to_dtype(bad_k, NB_F32), nb_to_dtype(bad_v, NB_F32), H, 0,
         "float64) expects q [2, T, heads * 5]"},
        {q, bad_k, nb_to_dtype(bad_v, NB_F32), H, 0, "v float32 [2, 1, 6]"},
        {nb_narrow(q, 0, 0, 1), nb_narrow(bad_k, 0, 0, 1), nb_narrow(bad_v, 0, 0, 1), H, 0,
         "q float64 [1, 1, 20]"},
        {q, nb_full(NB_F64, NB_SHAPE(B, 1, KVH * VD), 100), bad_v, H, 0, "k float64 [2, 1, 6]"},
        {q, bad_k, nb_full(NB_F64, NB_SHAPE(B, 1, KVH * KD), 100), H, 0, "v float64 [2, 1, 10]"},
        {q, bad_k, span(x.v, 2, 2), H, 0, "v float64 [2, 2, 6]"},
        {nb_select(q, 1, 0), bad_k, bad_v, H, 0, "q float64 [2, 20]"},
        {span(x.q, 0, 6), span(x.k, 0, 6), span(x.v, 0, 6), H, 0,
         "6 new positions after 2 cached overflow the cache's 7"},
        {q, bad_k, bad_v, H, 1, "layer 1 has no heads"},
        {q, bad_k, bad_v, H, 3, "layer 3 out of range (the cache has 3)"},
        {q, bad_k, bad_v, H, -1, "layer -1 out of range"},
        {NULL, bad_k, bad_v, H, 0, "NULL tensor"},
        {q, NULL, bad_v, H, 0, "NULL tensor"},
        {q, bad_k, NULL, H, 0, "NULL tensor"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        nb_clear_error();
        CU_ASSERT_PTR_NULL(
            nb_kv_cache_attend(c, bad[i].layer, bad[i].q, bad[i].k, bad[i].v, bad[i].heads));
        if (!strstr(nb_last_error(), bad[i].error))
            fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, nb_last_error(), bad[i].error);
        NBT_ASSERT_ERROR(bad[i].error);
    }
    CU_ASSERT_PTR_NULL(nb_kv_cache_attend(NULL, 0, q, k, v, H));
    NBT_ASSERT_ERROR("NULL cache");

    nb_tensor *row = span(lat, 2, 1);
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 1, "nope", row));
    NBT_ASSERT_ERROR("layer 1 has no tensor 'nope'");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 0, "latent", row));
    NBT_ASSERT_ERROR("layer 0 has no tensor 'latent'");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 1, "latent", nb_zeros(NB_F64, NB_SHAPE(B, 1, 3))));
    NBT_ASSERT_ERROR("layer 1's 'latent' expects float64 [2, T, 2], got float64 [2, 1, 3]");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 1, "latent", nb_zeros(NB_F32, NB_SHAPE(B, 1, 2))));
    NBT_ASSERT_ERROR("got float32 [2, 1, 2]");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 1, "latent", nb_zeros(NB_F64, NB_SHAPE(1, 1, 2))));
    NBT_ASSERT_ERROR("got float64 [1, 1, 2]");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 1, "latent", nb_zeros(NB_F64, NB_SHAPE(B, 2))));
    NBT_ASSERT_ERROR("got float64 [2, 2]");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 1, "latent", nb_zeros(NB_F64, NB_SHAPE(B, 6, 2))));
    NBT_ASSERT_ERROR("6 new positions after 2 cached overflow the cache's 7");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 1, NULL, row));
    NBT_ASSERT_ERROR("NULL argument");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 1, "latent", NULL));
    NBT_ASSERT_ERROR("NULL argument");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(c, 3, "latent", row));
    NBT_ASSERT_ERROR("layer 3 out of range");
    CU_ASSERT_PTR_NULL(nb_kv_cache_append(NULL, 1, "latent", row));
    NBT_ASSERT_ERROR("NULL cache");

    /* Nothing changed: the length is 2, no layer holds position 2 (a commit of 1 is refused),
     * the latent's rows are those appended, and position 2's attention is the reference's
     * (no key or value of 100 was stored). */
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), 2);
    CU_ASSERT_FALSE(nb_kv_cache_commit(c, 1));
    NBT_ASSERT_ERROR("layer 0's heads hold positions up to 2, not 3");
    NBT_ASSERT_CLOSE(nb_kv_cache_append(c, 1, "latent", row), span(lat, 0, 3), 0, 0);
    NBT_ASSERT_CLOSE(nb_kv_cache_attend(c, 0, q, k, v, H),
                     reference_attention(q, span(x.k, 0, 3), span(x.v, 0, 3), H, KVH, KD, VD, 2),
                     1e-12, 1e-12);
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
    nb_kv_cache_free(c);
}

/* A forward of no new positions writes nothing: it leaves what an uncommitted forward wrote
 * (so that forward can still be committed), and an empty q allows any number of heads, which
 * must not turn into per-head scratch (2^40 heads: 2^40 rows of scores) or a loop over them. */
static void test_empty_forward(void) {
    const qkv x = random_qkv(NB_F64, 12);
    nb_kv_cache *c = nb_kv_cache_empty(2, B, N, NB_F64);
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_heads(c, 0, KVH, KD, VD));
    CU_ASSERT_TRUE_FATAL(nb_kv_cache_add_rows(c, 1, "latent", 2));
    nb_tensor *lat = nb_ones(NB_F64, NB_SHAPE(B, 2, 2));
    CU_ASSERT_PTR_NOT_NULL(
        nb_kv_cache_attend(c, 0, span(x.q, 0, 2), span(x.k, 0, 2), span(x.v, 0, 2), H));
    CU_ASSERT_PTR_NOT_NULL(nb_kv_cache_append(c, 1, "latent", lat));
    /* the same forward again, with no new positions */
    nb_tensor *none =
        nb_kv_cache_attend(c, 0, span(x.q, 0, 0), span(x.k, 0, 0), span(x.v, 0, 0), H);
    NBT_ASSERT_SHAPE(none, B, 0, H * VD);
    NBT_ASSERT_SHAPE(nb_kv_cache_append(c, 1, "latent", nb_narrow(lat, 1, 0, 0)), B, 0, 2);
    const int64_t huge = (int64_t)1 << 40;
    nb_tensor *q0 = nb_empty(NB_F64, NB_SHAPE(B, 0, huge * KD));
    NBT_ASSERT_SHAPE(nb_kv_cache_attend(c, 0, q0, span(x.k, 0, 0), span(x.v, 0, 0), huge), B, 0,
                     huge * VD);
    CU_ASSERT_TRUE(nb_kv_cache_commit(c, 2)); /* the 2 positions written first */
    NBT_ASSERT_CLOSE(
        nb_kv_cache_attend(c, 0, span(x.q, 2, 1), span(x.k, 2, 1), span(x.v, 2, 1), H),
        reference_attention(span(x.q, 2, 1), span(x.k, 0, 3), span(x.v, 0, 3), H, KVH, KD, VD, 2),
        1e-12, 1e-12);
    nb_kv_cache_free(c);
}

/* A cache made inside a scope that has ended keeps working: its tensors live in the cache's
 * own scope, whatever scope was current when a layer was given them. */
static void test_made_in_an_ended_scope(void) {
    nb_scope_begin();
    nb_kv_cache *c = nb_kv_cache_empty(1, 1, 4, NB_F64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_TRUE(nb_kv_cache_add_rows(c, 0, "latent", 2));
    CU_ASSERT_TRUE(nb_kv_cache_add_heads(c, 0, 1, 2, 2));
    nb_scope_end();
    for (int t = 0; t < 3; t++) {
        nb_scope_begin();
        nb_tensor *x = nb_full(NB_F64, NB_SHAPE(1, 1, 2), t + 1);
        nb_tensor *rows = nb_kv_cache_append(c, 0, "latent", x);
        CU_ASSERT_PTR_NOT_NULL(rows);
        NBT_ASSERT_SHAPE(rows, 1, t + 1, 2);
        if (rows) CU_ASSERT_EQUAL(nb_get(rows, NB_IDX(0, t, 1)), t + 1);
        /* keys and values j + 1 in both dims, query t + 1: scores sqrt(2) (t + 1)(j + 1) over
         * j <= t (scale 1/sqrt(2)), the context their softmax-weighted mean of j + 1 */
        nb_tensor *ctx = nb_kv_cache_attend(c, 0, x, x, x, 1);
        double num = 0, den = 0;
        for (int j = 0; j <= t; j++) {
            const double w = exp(sqrt(2.0) * (t + 1) * (j - t));
            num += w * (j + 1);
            den += w;
        }
        NBT_ASSERT_CLOSE(ctx, nb_full(NB_F64, NB_SHAPE(1, 1, 2), num / den), 1e-12, 1e-12);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
        nb_scope_end();
    }
    nb_kv_cache_free(c);
}

int main(void) {
    const nbtest_case cases[] = {
        {"attend equals op-by-op attention (f64, k_dim != v_dim, grouped)",
         test_attend_f64_matches_op_by_op},
        {"attend in float32 equals the float64 reference", test_attend_f32_matches_f64},
        {"attend: multi-query, multi-head, wider values", test_attend_head_layouts},
        {"attend on 1 and 2 threads", test_attend_threads},
        {"keys past one block, float64", test_attend_key_blocks_f64},
        {"named row tensors", test_rows},
        {"commit", test_commit},
        {"truncate and reset", test_truncate_and_reset},
        {"accessors and bytes", test_accessors},
        {"layout errors", test_layout_errors},
        {"call errors leave the cache unchanged", test_call_errors},
        {"a forward of no new positions writes nothing", test_empty_forward},
        {"a cache made in a scope that has ended", test_made_in_an_ended_scope},
    };
    return nbtest_run("kv_cache", cases, (int)(sizeof cases / sizeof cases[0]));
}
