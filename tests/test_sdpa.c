/* nb_sdpa: heads as strided views, grouped-query and multi-query attention, the output's
 * merged layout, empty dims and errors, against the composed ops (matmul, masked softmax,
 * matmul, with key/value heads repeated for their query heads). */
#include "harness.h"
#include "tensor/isa.h"

/* k [B, H_kv, T, hd] with each head repeated `group` times: [B, H_kv * group, T, hd], head h
 * being k's head h / group, as grouped-query attention reads it. */
static nb_tensor *repeat_heads(const nb_tensor *k, int64_t group) {
    int64_t B = k->shape[0], H = k->shape[1], T = k->shape[2], hd = k->shape[3];
    nb_tensor *e = nb_expand(nb_unsqueeze(k, 2), NB_SHAPE(B, H, group, T, hd));
    return nb_reshape(e, NB_SHAPE(B, H * group, T, hd));
}

static nb_tensor *composed(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                           const nb_tensor *mask, bool causal, double scale) {
    int64_t group = q->shape[1] / k->shape[1];
    nb_tensor *kk = repeat_heads(k, group), *vv = repeat_heads(v, group);
    nb_tensor *p = nb_masked_softmax(nb_matmul(q, nb_transpose(kk, -2, -1)), mask, causal, scale);
    return nb_matmul(p, vv);
}

/* Heads as the tutorials make them: a [B, T, H * hd] projection viewed as [B, T, H, hd] and
 * transposed to [B, H, T, hd] (strided, not copied). */
static nb_tensor *split(nb_tensor *x, int64_t H) {
    int64_t B = x->shape[0], T = x->shape[1], hd = x->shape[2] / H;
    return nb_transpose(nb_view(x, NB_SHAPE(B, T, H, hd)), 1, 2);
}

typedef struct {
    nb_tensor *out, *dq, *dk, *dv;
} result;

/* Output and the projections' gradients of sum(out * w), q, k and v being split heads of fresh
 * leaves [B, T, H * hd] with the given values. */
static result run(bool fused, const nb_tensor *xq, const nb_tensor *xk, const nb_tensor *xv,
                  int64_t Hq, int64_t Hkv, const nb_tensor *w, const nb_tensor *mask, bool causal) {
    nb_tensor *a = nb_requires_grad_(nb_clone(xq), true);
    nb_tensor *b = nb_requires_grad_(nb_clone(xk), true);
    nb_tensor *c = nb_requires_grad_(nb_clone(xv), true);
    nb_tensor *q = split(a, Hq), *k = split(b, Hkv), *v = split(c, Hkv);
    double scale = 1.0 / sqrt((double)q->shape[3]);
    nb_tensor *out =
        fused ? nb_sdpa(q, k, v, mask, causal, scale) : composed(q, k, v, mask, causal, scale);
    CU_ASSERT_FATAL(out != NULL);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(out, w)), NULL));
    return (result){nb_detach(out), a->grad, b->grad, c->grad};
}

static void check(nb_dtype dt, int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv,
                  int64_t hd, const nb_tensor *mask, bool causal, double tol) {
    nb_rng rng;
    nb_rng_seed(&rng, (uint64_t)(B * 1000 + Tq * 10 + Tk + Hkv));
    nb_tensor *xq = nb_randn(&rng, dt, NB_SHAPE(B, Tq, Hq * hd));
    nb_tensor *xk = nb_randn(&rng, dt, NB_SHAPE(B, Tk, Hkv * hd));
    nb_tensor *xv = nb_randn(&rng, dt, NB_SHAPE(B, Tk, Hkv * hd));
    nb_tensor *w = nb_randn(&rng, dt, NB_SHAPE(B, Hq, Tq, hd));
    result a = run(true, xq, xk, xv, Hq, Hkv, w, mask, causal);
    result b = run(false, xq, xk, xv, Hq, Hkv, w, mask, causal);
    NBT_ASSERT_CLOSE(a.out, b.out, tol, tol);
    NBT_ASSERT_CLOSE(a.dq, b.dq, tol, tol);
    NBT_ASSERT_CLOSE(a.dk, b.dk, tol, tol);
    NBT_ASSERT_CLOSE(a.dv, b.dv, tol, tol);
}

/* Multi-head (one key/value head per query head), heads read in place through view +
 * transpose, on each path of the kept probabilities: vector kernels (f32, 16 keys), the rows
 * kernel, causal blocks of 32 rows. */
static void test_mha_views(void) {
    check(NB_F32, 2, 16, 16, 4, 4, 16, NULL, true, 2e-5);
    check(NB_F64, 2, 16, 16, 4, 4, 16, NULL, true, 1e-12);
    check(NB_F64, 2, 40, 40, 2, 2, 8, NULL, true, 1e-12);
    check(NB_F32, 1, 7, 45, 3, 3, 8, NULL, false, 2e-5);
}

/* Grouped-query (2 and 4 query heads per key/value head) and multi-query (one key/value
 * head) attention, with masks: dK and dV sum over each group. */
static void test_grouped_query(void) {
    uint8_t pad[2 * 9] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(2, 1, 1, 9), pad); /* batch 1 all padded */
    check(NB_F64, 2, 9, 9, 4, 2, 8, mask, true, 1e-12);
    check(NB_F32, 2, 9, 9, 4, 2, 8, NULL, true, 2e-5);
    /* Heads that fit the vector kernels (their dK and dV summed through scratch), on every
     * instruction set this CPU can run. */
    for (nbtest_isa_loop s = nbtest_isa_begin(); nbtest_isa_next(&s);) {
        check(NB_F32, 2, 12, 12, 8, 2, 16, NULL, true, 2e-5);
        check(NB_F32, 1, 5, 9, 2, 1, 8, NULL, false, 2e-5);
    }
    check(NB_F64, 2, 6, 11, 6, 1, 4, NULL, false, 1e-12); /* multi-query, cross */
    check(NB_F64, 1, 37, 37, 4, 1, 8, NULL, true, 1e-12); /* causal blocks */
    uint8_t am[5 * 7];
    for (int i = 0; i < 5 * 7; i++) am[i] = (uint8_t)(i % 4 == 1);
    check(NB_F64, 2, 5, 7, 4, 2, 4, nb_from_array(NB_BOOL, NB_SHAPE(5, 7), am), false, 1e-12);
}

/* One head of width 2 by hand, read through strides: keys [1, 0] and [0, 1] against query
 * [1, 0] with scale 1 give weights e/(e+1) and 1/(e+1) over value rows [1, 2] and [3, 4]; two
 * query heads share the one key/value head, and head 1's query [0, 0] weighs them equally. */
static void test_by_hand(void) {
    nb_tensor *q = nb_from_array(NB_F64, NB_SHAPE(1, 2, 1, 2), (const double[]){1, 0, 0, 0});
    nb_tensor *k = nb_from_array(NB_F64, NB_SHAPE(1, 1, 2, 2), (const double[]){1, 0, 0, 1});
    nb_tensor *v = nb_from_array(NB_F64, NB_SHAPE(1, 1, 2, 2), (const double[]){1, 2, 3, 4});
    double e = exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
    nb_tensor *out = nb_sdpa(q, k, v, NULL, false, 1.0);
    NBT_ASSERT_SHAPE(out, 1, 2, 1, 2);
    NBT_ASSERT_VALUES(out, 1e-15, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4, 2, 3);
    /* The context is stored as [B, T_q, H, hd]: merging heads is a free view. */
    nb_tensor *merged = nb_transpose(out, 1, 2);
    CU_ASSERT_TRUE(nb_is_contiguous(merged));
    /* k read transposed (hd stride 2, copied) gives the same. */
    nb_tensor *kt = nb_transpose(
        nb_from_array(NB_F64, NB_SHAPE(1, 1, 2, 2), (const double[]){1, 0, 0, 1}), 2, 3);
    NBT_ASSERT_VALUES(nb_sdpa(q, kt, v, NULL, false, 1.0), 1e-15, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4,
                      2, 3);
}

/* One projection used as q, k and v: three gradients land on one leaf, each through the
 * transposes' and views' backwards. */
static void test_self(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_tensor *x0 = nb_randn(&rng, NB_F64, NB_SHAPE(2, 5, 8));
    nb_tensor *grads[2];
    for (int fused = 0; fused < 2; fused++) {
        nb_tensor *x = nb_requires_grad_(nb_clone(x0), true);
        nb_tensor *q = split(nb_mul_scalar(x, 1.5), 2);
        nb_tensor *out =
            fused ? nb_sdpa(q, q, q, NULL, true, 0.5) : composed(q, q, q, NULL, true, 0.5);
        CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(out, out)), NULL));
        grads[fused] = x->grad;
    }
    NBT_ASSERT_CLOSE(grads[1], grads[0], 1e-12, 1e-12);
}

/* Empty dims give empty results and gradients (zeros where the input is not empty), as
 * PyTorch's empty tensors do; no queries with causal used to divide by zero. */
static void test_zero_size(void) {
    nb_tensor *kv = nb_requires_grad_(nb_ones(NB_F32, NB_SHAPE(2, 3, 4)), true);
    nb_tensor *q0 = nb_requires_grad_(nb_ones(NB_F32, NB_SHAPE(2, 0, 4)), true);
    nb_tensor *out = nb_f_attention(q0, kv, kv, 2, NULL, true, 1.0);
    NBT_ASSERT_SHAPE(out, 2, 0, 4);
    CU_ASSERT_TRUE(nb_backward(nb_sum(out), NULL));
    NBT_ASSERT_SHAPE(kv->grad, 2, 3, 4);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_sum(nb_mul(kv->grad, kv->grad))), 0.0, 0.0);
    /* No keys: every row is fully blocked, so zeros and zero gradient. */
    nb_tensor *q = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(1, 2, 3, 4)), true);
    nb_tensor *k0 = nb_zeros(NB_F64, NB_SHAPE(1, 1, 0, 4));
    out = nb_sdpa(q, k0, k0, NULL, true, 1.0);
    NBT_ASSERT_SHAPE(out, 1, 2, 3, 4);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_sum(nb_mul(out, out))), 0.0, 0.0);
    CU_ASSERT_TRUE(nb_backward(nb_sum(out), NULL));
    CU_ASSERT_DOUBLE_EQUAL(nb_item(nb_sum(nb_mul(q->grad, q->grad))), 0.0, 0.0);
    /* No batch, no heads, empty heads. */
    nb_tensor *e = nb_zeros(NB_F64, NB_SHAPE(0, 2, 3, 4));
    NBT_ASSERT_SHAPE(nb_sdpa(e, e, e, NULL, true, 1.0), 0, 2, 3, 4);
    e = nb_zeros(NB_F64, NB_SHAPE(2, 0, 3, 4));
    NBT_ASSERT_SHAPE(nb_sdpa(e, e, e, NULL, true, 1.0), 2, 0, 3, 4);
    e = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(2, 2, 3, 0)), true);
    out = nb_sdpa(e, e, e, nb_zeros(NB_BOOL, NB_SHAPE(3, 3)), true, 1.0);
    NBT_ASSERT_SHAPE(out, 2, 2, 3, 0);
    CU_ASSERT_TRUE(nb_backward(nb_sum(out), NULL));
    NBT_ASSERT_SHAPE(e->grad, 2, 2, 3, 0);
}

static void test_bad_input(void) {
    nb_tensor *q = nb_zeros(NB_F32, NB_SHAPE(2, 4, 3, 8));
    nb_tensor *kv = nb_zeros(NB_F32, NB_SHAPE(2, 3, 5, 8));
    CU_ASSERT_PTR_NULL(nb_sdpa(q, kv, kv, NULL, false, 1));
    NBT_ASSERT_ERROR("attention: key/value heads 3 must divide query heads 4 (q [2, 4, 3, 8], k "
                     "[2, 3, 5, 8])");
    CU_ASSERT_PTR_NULL(nb_sdpa(q, nb_zeros(NB_F32, NB_SHAPE(2, 2, 5, 4)), kv, NULL, false, 1));
    NBT_ASSERT_ERROR("attention: expected q [B, H_q, T_q, hd] and k, v [B, H_kv, T_k, hd], got q "
                     "[2, 4, 3, 8], k [2, 2, 5, 4], v [2, 3, 5, 8]");
    CU_ASSERT_PTR_NULL(nb_sdpa(nb_zeros(NB_F32, NB_SHAPE(2, 3, 8)), kv, kv, NULL, false, 1));
    NBT_ASSERT_ERROR("attention: expected q [B, H_q, T_q, hd]");
    nb_tensor *kv2 = nb_zeros(NB_F32, NB_SHAPE(2, 2, 5, 8));
    CU_ASSERT_PTR_NULL(nb_sdpa(q, kv2, kv2, nb_zeros(NB_BOOL, NB_SHAPE(3, 4)), false, 1));
    NBT_ASSERT_ERROR("attention: mask of shape [3, 4] does not broadcast to the scores' shape "
                     "[2, 4, 3, 5]");
    CU_ASSERT_PTR_NULL(nb_sdpa(q, nb_zeros(NB_F64, NB_SHAPE(2, 2, 5, 8)), kv2, NULL, false, 1));
    NBT_ASSERT_ERROR("attention");
    nb_clear_error(); /* a NULL input keeps an earlier error: the NULL came from it */
    CU_ASSERT_PTR_NULL(nb_sdpa(q, NULL, kv2, NULL, false, 1));
    NBT_ASSERT_ERROR("attention: input 1 is NULL");
}

/* A NaN or infinite scale has no defined result (every score NaN, or inf - inf in the
 * softmax): refused, by nb_sdpa and by the other entries to the same kernels. */
static void test_bad_scale(void) {
    nb_tensor *q = nb_ones(NB_F32, NB_SHAPE(1, 2, 3, 4));
    nb_tensor *kv = nb_ones(NB_F32, NB_SHAPE(1, 1, 5, 4));
    const double bad[] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        nb_clear_error();
        CU_ASSERT_PTR_NULL(nb_sdpa(q, kv, kv, NULL, false, bad[i]));
        NBT_ASSERT_ERROR("attention: scale must be finite");
        NBT_ASSERT_ERROR("q [1, 2, 3, 4]");
        nb_clear_error();
        nb_tensor *x = nb_ones(NB_F32, NB_SHAPE(1, 3, 4));
        CU_ASSERT_PTR_NULL(nb_f_attention(x, x, x, 2, NULL, true, bad[i]));
        NBT_ASSERT_ERROR("scale must be finite");
        nb_clear_error();
        CU_ASSERT_PTR_NULL(nb_masked_softmax(nb_ones(NB_F32, NB_SHAPE(2, 3)), NULL, false, bad[i]));
        NBT_ASSERT_ERROR("masked_softmax: scale must be finite");
    }
    /* Zero and negative scales are numbers (PyTorch takes them): uniform weights for 0. */
    nb_tensor *v = nb_view(nb_arange(NB_F32, 0, 5, 1), NB_SHAPE(1, 1, 5, 1));
    nb_tensor *k = nb_ones(NB_F32, NB_SHAPE(1, 1, 5, 1));
    NBT_ASSERT_VALUES(nb_sdpa(nb_ones(NB_F32, NB_SHAPE(1, 1, 1, 1)), k, v, NULL, false, 0), 1e-6,
                      2);
}

int main(void) {
    const nbtest_case cases[] = {
        {"one shared key/value head by hand, merged layout", test_by_hand},
        {"multi-head through view + transpose matches the composed ops", test_mha_views},
        {"grouped-query and multi-query match repeated heads", test_grouped_query},
        {"one projection as q, k and v", test_self},
        {"zero-size dims: empty results and gradients", test_zero_size},
        {"bad input is an error naming op and shapes", test_bad_input},
        {"a NaN or infinite scale is refused", test_bad_scale},
    };
    return nbtest_run("sdpa", cases, sizeof cases / sizeof cases[0]);
}
