/* nb_f_attention: by hand, against the composed ops it replaces (split heads, matmul, masked
 * softmax, matmul, merge heads) on values and gradients, and its errors; nb_f_qkv_attention
 * against nb_f_attention of three nb_f_linear calls. */
#include "harness.h"
#include "tensor/gemm.h"
#include "tensor/isa.h"

/* The tutorials' composition, op by op: the reference the fused op must reproduce. */
static nb_tensor *composed(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v, int64_t H,
                           const nb_tensor *mask, bool causal, double scale) {
    int64_t B = q->shape[0], Tq = q->shape[1], Tk = k->shape[1], D = q->shape[2];
    nb_tensor *qh = nb_transpose(nb_view(q, NB_SHAPE(B, Tq, H, D / H)), 1, 2);
    nb_tensor *kh = nb_transpose(nb_view(k, NB_SHAPE(B, Tk, H, D / H)), 1, 2);
    nb_tensor *vh = nb_transpose(nb_view(v, NB_SHAPE(B, Tk, H, D / H)), 1, 2);
    nb_tensor *p = nb_masked_softmax(nb_matmul(qh, nb_transpose(kh, -2, -1)), mask, causal, scale);
    nb_tensor *ctx = nb_transpose(nb_matmul(p, vh), 1, 2);
    return nb_view(nb_contiguous(ctx), NB_SHAPE(B, Tq, D));
}

typedef struct {
    nb_tensor *out, *dq, *dk, *dv;
} result;

/* Output and input gradients of sum(out * w) for fresh leaves with the given values. */
static result run(bool fused, const nb_tensor *q0, const nb_tensor *k0, const nb_tensor *v0,
                  const nb_tensor *w, int64_t H, const nb_tensor *mask, bool causal, double scale) {
    nb_tensor *q = nb_requires_grad_(nb_clone(q0), true),
              *k = nb_requires_grad_(nb_clone(k0), true);
    nb_tensor *v = nb_requires_grad_(nb_clone(v0), true);
    nb_tensor *out = fused ? nb_f_attention(q, k, v, H, mask, causal, scale)
                           : composed(q, k, v, H, mask, causal, scale);
    CU_ASSERT_FATAL(out != NULL);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(out, w)), NULL));
    return (result){nb_detach(out), q->grad, k->grad, v->grad};
}

static void check_against_composed(nb_dtype dt, int64_t B, int64_t Tq, int64_t Tk, int64_t D,
                                   int64_t H, const nb_tensor *mask, bool causal, double tol) {
    nb_rng rng;
    nb_rng_seed(&rng, (uint64_t)(B * 1000 + Tq * 10 + Tk));
    nb_tensor *q = nb_randn(&rng, dt, NB_SHAPE(B, Tq, D));
    nb_tensor *k = nb_randn(&rng, dt, NB_SHAPE(B, Tk, D));
    nb_tensor *v = nb_randn(&rng, dt, NB_SHAPE(B, Tk, D));
    nb_tensor *w = nb_randn(&rng, dt, NB_SHAPE(B, Tq, D));
    double scale = 1.0 / sqrt((double)(D / H));
    result a = run(true, q, k, v, w, H, mask, causal, scale);
    result b = run(false, q, k, v, w, H, mask, causal, scale);
    NBT_ASSERT_CLOSE(a.out, b.out, tol, tol);
    NBT_ASSERT_CLOSE(a.dq, b.dq, tol, tol);
    NBT_ASSERT_CLOSE(a.dk, b.dk, tol, tol);
    NBT_ASSERT_CLOSE(a.dv, b.dv, tol, tol);
}

/* One head, scale 1: q = [1, 0] against keys [1, 0] and [0, 1] scores 1 and 0, so the weights
 * are e/(e+1) and 1/(e+1) and the context mixes the value rows [1, 2] and [3, 4]. */
static void test_by_hand(void) {
    nb_tensor *q = nb_from_array(NB_F64, NB_SHAPE(1, 1, 2), (const double[]){1, 0});
    nb_tensor *k = nb_from_array(NB_F64, NB_SHAPE(1, 2, 2), (const double[]){1, 0, 0, 1});
    nb_tensor *v = nb_from_array(NB_F64, NB_SHAPE(1, 2, 2), (const double[]){1, 2, 3, 4});
    double e = exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
    nb_tensor *out = nb_f_attention(q, k, v, 1, NULL, false, 1.0);
    NBT_ASSERT_SHAPE(out, 1, 1, 2);
    NBT_ASSERT_VALUES(out, 1e-15, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4);
    /* Two heads of width 1 over the same numbers: head 0 sees q 1 against keys 1 and 0, head 1
     * sees q 0 (uniform weights); causal blocks key 1 for query 0, so both heads take row 0. */
    out = nb_f_attention(q, k, v, 2, NULL, false, 1.0);
    NBT_ASSERT_VALUES(out, 1e-15, p0 * 1 + p1 * 3, 0.5 * 2 + 0.5 * 4);
    out = nb_f_attention(q, k, v, 2, NULL, true, 1.0);
    NBT_ASSERT_VALUES(out, 1e-15, 1, 2);
}

/* Causal self-attention with key padding (batch 2 fully padded: its rows give zeros). */
static void test_matches_composed_masked(void) {
    int64_t B = 3, T = 5;
    uint8_t pad[3 * 5] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1};
    nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(B, 1, 1, T), pad);
    check_against_composed(NB_F64, B, T, T, 8, 2, mask, true, 1e-12);
    check_against_composed(NB_F32, B, T, T, 8, 2, mask, true, 2e-5);
}

/* A mask [rows, cols] blocking entry i where i % every == hit. */
static nb_tensor *pattern_mask(int64_t rows, int64_t cols, int every, int hit) {
    uint8_t m[70 * 90];
    for (int64_t i = 0; i < rows * cols; i++) m[i] = (uint8_t)(i % every == hit);
    return nb_from_array(NB_BOOL, NB_SHAPE(rows, cols), m);
}

/* Cross attention with an attention mask [T_q, T_k]; long rows (T_k > 32) take the row-by-row
 * softmax, and 32 (batch, head) pairs of real work may be split across threads. */
static void test_matches_composed_long_rows(void) {
    nb_tensor *mask = pattern_mask(6, 40, 7, 3);
    check_against_composed(NB_F64, 4, 6, 40, 64, 8, mask, false, 1e-12);
    check_against_composed(NB_F32, 4, 6, 40, 64, 8, NULL, true, 2e-5);
    check_against_composed(NB_F32, 2, 48, 48, 64, 4, NULL, true, 2e-5);
    /* Causal self-attention longer than a block of 32 query rows takes the products block by
     * block (the last block partial here), with and without a mask on top. */
    nb_tensor *self_mask = pattern_mask(37, 37, 11, 5);
    check_against_composed(NB_F64, 2, 37, 37, 24, 3, self_mask, true, 1e-12);
    check_against_composed(NB_F64, 2, 37, 37, 24, 3, NULL, true, 1e-12);
    check_against_composed(NB_F32, 3, 33, 33, 32, 2, NULL, true, 2e-5);
}

/* Heads of more than 64^3 multiply-adds take the tiled products (autograd/attention_blocks.c,
 * the GEMM's microkernel of each instruction set): causal self and cross attention (T_q > T_k
 * and T_q < T_k, keys never seen), a head_dim that is not a whole number of tile columns
 * (40, 20) and one that is (32: whole panels on every set), and a mask. */
static void tiled_head_cases(void) {
    check_against_composed(NB_F64, 2, 70, 90, 96, 2, pattern_mask(70, 90, 13, 4), true, 1e-12);
    check_against_composed(NB_F64, 1, 100, 90, 80, 2, NULL, true, 1e-12);
    check_against_composed(NB_F32, 1, 130, 130, 80, 2, NULL, true, 2e-5);
    check_against_composed(NB_F32, 1, 130, 140, 60, 3, NULL, false, 2e-5);
    check_against_composed(NB_F32, 2, 96, 96, 64, 2, NULL, true, 2e-5); /* head 32 */
}

static void test_tiled_heads_every_isa(void) {
    for (nbtest_isa_loop s = nbtest_isa_begin(); nbtest_isa_next(&s);) tiled_head_cases();
}

/* Float32 heads with at most 16 keys, head_dim up to 64 and no mask take the vector
 * kernels (autograd/attention_small.c): checked here on every build this CPU can run (the
 * kernels follow the GEMM's instruction set). */
static void small_head_cases(void) {
    check_against_composed(NB_F32, 3, 16, 16, 64, 4, NULL, true, 2e-5);  /* the toy shape */
    check_against_composed(NB_F32, 2, 20, 12, 64, 2, NULL, false, 2e-5); /* cross, head 32 */
    check_against_composed(NB_F32, 2, 20, 12, 64, 2, NULL, true, 2e-5);  /* T_q > T_k causal */
    check_against_composed(NB_F32, 1, 5, 9, 16, 1, NULL, true, 2e-5);    /* T_q < T_k causal */
    check_against_composed(NB_F32, 2, 64, 16, 128, 2, NULL, true, 2e-5); /* the largest fit */
    check_against_composed(NB_F32, 1, 1, 1, 16, 1, NULL, false, 2e-5);   /* one key */
    check_against_composed(NB_F32, 1, 3, 3, 6, 2, NULL, true, 2e-5);     /* the tutorials' d=6 */
    check_against_composed(NB_F32, 2, 7, 5, 40, 2, NULL, true, 2e-5);    /* head 20: 16 + 4 */
}

static void test_small_heads_every_isa(void) {
    for (nbtest_isa_loop s = nbtest_isa_begin(); nbtest_isa_next(&s);) small_head_cases();
}

/* A 16-wide head by hand: q = e0 meets keys e0 and 0 (scores 1 and 0, scale 1), so the
 * weights are e/(e+1) and 1/(e+1) of value rows all 1 and all 3. With a gradient of ones on
 * the context, each value row's gradient is its weight, in every lane. */
static void test_small_head_by_hand(void) {
    float q[16] = {1}, k[32] = {1}, v[32], w[16];
    for (int i = 0; i < 16; i++) v[i] = 1, v[16 + i] = 3, w[i] = 1;
    nb_tensor *tq = nb_from_array(NB_F32, NB_SHAPE(1, 1, 16), q);
    nb_tensor *tk = nb_from_array(NB_F32, NB_SHAPE(1, 2, 16), k);
    nb_tensor *tv = nb_requires_grad_(nb_from_array(NB_F32, NB_SHAPE(1, 2, 16), v), true);
    double e = exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
    nb_tensor *out = nb_f_attention(tq, tk, tv, 1, NULL, false, 1.0);
    NBT_ASSERT_SHAPE(out, 1, 1, 16);
    for (int i = 0; i < 16; i++)
        CU_ASSERT_DOUBLE_EQUAL(nb_get(out, NB_IDX(0, 0, i)), p0 + 3 * p1, 1e-6);
    CU_ASSERT_TRUE(
        nb_backward(nb_sum(nb_mul(out, nb_from_array(NB_F32, NB_SHAPE(1, 1, 16), w))), NULL));
    for (int i = 0; i < 16; i++) {
        CU_ASSERT_DOUBLE_EQUAL(nb_get(tv->grad, NB_IDX(0, 0, i)), p0, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(nb_get(tv->grad, NB_IDX(0, 1, i)), p1, 1e-6);
    }
}

static void test_bad_input(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3, 4));
    nb_tensor *kv = nb_zeros(NB_F32, NB_SHAPE(2, 5, 4));
    CU_ASSERT_PTR_NULL(nb_f_attention(x, nb_zeros(NB_F32, NB_SHAPE(2, 5, 6)), kv, 2, NULL, 0, 1));
    NBT_ASSERT_ERROR("attention: expected q [B, T_q, D] and k, v [B, T_k, D], got q [2, 3, 4], k "
                     "[2, 5, 6], v [2, 5, 4]");
    CU_ASSERT_PTR_NULL(nb_f_attention(nb_zeros(NB_F32, NB_SHAPE(3, 4)), kv, kv, 2, NULL, 0, 1));
    NBT_ASSERT_ERROR("attention: expected q [B, T_q, D]");
    CU_ASSERT_PTR_NULL(nb_f_attention(x, kv, kv, 3, NULL, false, 1));
    NBT_ASSERT_ERROR("attention: num_heads 3 must be positive and divide D = 4 (q [2, 3, 4])");
    CU_ASSERT_PTR_NULL(nb_f_attention(x, kv, kv, 0, NULL, false, 1));
    NBT_ASSERT_ERROR("attention: num_heads 0 must be positive");
    CU_ASSERT_PTR_NULL(nb_f_attention(x, nb_zeros(NB_F64, NB_SHAPE(2, 5, 4)), kv, 2, NULL, 0, 1));
    NBT_ASSERT_ERROR("attention");
    CU_ASSERT_PTR_NULL(nb_f_attention(x, kv, kv, 2, nb_zeros(NB_BOOL, NB_SHAPE(3, 3)), false, 1));
    NBT_ASSERT_ERROR("attention: mask of shape [3, 3] does not broadcast to the scores' shape "
                     "[2, 2, 3, 5]");
    CU_ASSERT_PTR_NULL(nb_f_attention(x, kv, kv, 2, nb_zeros(NB_F32, NB_SHAPE(5)), false, 1));
    NBT_ASSERT_ERROR("attention: mask must be bool, got float32");
    nb_clear_error(); /* a NULL input keeps an earlier error: the NULL came from it */
    CU_ASSERT_PTR_NULL(nb_f_attention(x, NULL, kv, 2, NULL, false, 1));
    NBT_ASSERT_ERROR("attention: input 1 is NULL");
}

/* nb_f_qkv_attention's output and the gradients of x, Wq, Wk, Wv (sum(out * w)); with
 * `twice`, two backward passes, the second adding into the gradients the first made. When
 * shared_qk, Wk is Wq. When stacked, Wq, Wk and Wv are the slices of one [3, D, D_in] leaf,
 * lying one after another as the op reads them in place (their gradients: that leaf's). */
typedef struct {
    nb_tensor *out, *dx, *dw[3];
} qkv_result;

static qkv_result run_qkv(bool fused, bool twice, bool shared_qk, bool stacked, const nb_tensor *x0,
                          nb_tensor *const w0[3], const nb_tensor *w, int64_t H, bool causal) {
    nb_tensor *x = nb_requires_grad_(nb_clone(x0), true), *ws[3];
    for (int i = 0; i < 3; i++) ws[i] = nb_requires_grad_(nb_clone(w0[i]), true);
    if (shared_qk) ws[1] = ws[0];
    nb_tensor *all = stacked ? nb_requires_grad_(nb_stack(3, w0, 0), true) : NULL;
    if (stacked)
        for (int i = 0; i < 3; i++) ws[i] = nb_select(all, 0, i);
    nb_tensor *out = NULL;
    for (int pass = 0; pass < (twice ? 2 : 1); pass++) {
        double scale = 1.0 / sqrt((double)(w0[0]->shape[0] / H));
        out = fused ? nb_f_qkv_attention(x, ws[0], ws[1], ws[2], H, causal, scale)
                    : nb_f_attention(nb_f_linear(x, ws[0], NULL), nb_f_linear(x, ws[1], NULL),
                                     nb_f_linear(x, ws[2], NULL), H, NULL, causal, scale);
        CU_ASSERT_FATAL(out != NULL);
        CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(out, w)), NULL));
    }
    if (stacked)
        return (qkv_result){
            nb_detach(out),
            x->grad,
            {nb_select(all->grad, 0, 0), nb_select(all->grad, 0, 1), nb_select(all->grad, 0, 2)}};
    return (qkv_result){nb_detach(out), x->grad, {ws[0]->grad, ws[1]->grad, ws[2]->grad}};
}

static void test_qkv_attention_matches_composed(void) {
    const struct {
        nb_dtype dt;
        int64_t B, T, Din, D, H;
        bool causal;
        double tol, w_scale;
    } cases[] = {{NB_F64, 2, 5, 6, 8, 2, true, 1e-12, 0.4},
                 {NB_F32, 3, 16, 12, 16, 4, true, 2e-5, 0.4}, /* the small-head kernels */
                 {NB_F32, 1, 40, 8, 8, 1, false, 2e-5, 0.4},  /* the rows kernel */
                 {NB_F64, 1, 7, 4, 6, 3, false, 1e-12, 0.4},
                 /* the three weight gradients as one product (the GEMM packs for each);
                  * dx sums 768 products where the composed ops add three sums of 256. Weights
                  * of scale 1 / sqrt(D_in) keep the scores near 1: at 0.4 they were near 100,
                  * and the saturated softmax turned a BLAS's other summation order into
                  * gradients 1% apart. */
                 {NB_F32, 2, 16, 640, 256, 4, true, 1e-4, 0.0395},
                 {NB_F64, 1, 8, 640, 256, 4, false, 1e-12, 0.0395}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nb_rng rng;
        nb_rng_seed(&rng, 40 + c);
        const nb_dtype dt = cases[c].dt;
        nb_tensor *x = nb_randn(&rng, dt, NB_SHAPE(cases[c].B, cases[c].T, cases[c].Din));
        nb_tensor *w0[3];
        for (int i = 0; i < 3; i++)
            w0[i] = nb_mul_scalar(nb_randn(&rng, dt, NB_SHAPE(cases[c].D, cases[c].Din)),
                                  cases[c].w_scale);
        nb_tensor *w = nb_randn(&rng, dt, NB_SHAPE(cases[c].B, cases[c].T, cases[c].D));
        const double tol = cases[c].tol;
        if (cases[c].Din == 640) /* the case is there for that path: make sure it takes it */
            CU_ASSERT_TRUE(
                nbt_gemm_weight_grad_packs(dt, cases[c].D, cases[c].Din, cases[c].B * cases[c].T));
        for (int variant = 0; variant < 4; variant++) { /* once; twice; Wk = Wq; stacked */
            bool twice = variant == 1, shared = variant == 2, stacked = variant == 3;
            qkv_result a =
                run_qkv(true, twice, shared, stacked, x, w0, w, cases[c].H, cases[c].causal);
            qkv_result b =
                run_qkv(false, twice, shared, stacked, x, w0, w, cases[c].H, cases[c].causal);
            NBT_ASSERT_CLOSE(a.out, b.out, tol, tol);
            NBT_ASSERT_CLOSE(a.dx, b.dx, tol, tol);
            for (int i = 0; i < 3; i++) NBT_ASSERT_CLOSE(a.dw[i], b.dw[i], tol, tol);
        }
    }
}

static void test_qkv_attention_bad_input(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3, 4)), *w = nb_zeros(NB_F32, NB_SHAPE(6, 4));
    CU_ASSERT_PTR_NULL(nb_f_qkv_attention(x, w, nb_zeros(NB_F32, NB_SHAPE(6, 5)), w, 2, true, 1));
    NBT_ASSERT_ERROR("qkv_attention: expected x [B, T, D_in] and Wq, Wk, Wv [D, D_in], got x "
                     "[2, 3, 4], Wq [6, 4], Wk [6, 5], Wv [6, 4]");
    CU_ASSERT_PTR_NULL(nb_f_qkv_attention(nb_zeros(NB_F32, NB_SHAPE(3, 4)), w, w, w, 2, true, 1));
    NBT_ASSERT_ERROR("qkv_attention: expected x [B, T, D_in]");
    CU_ASSERT_PTR_NULL(nb_f_qkv_attention(x, w, w, w, 4, false, 1));
    NBT_ASSERT_ERROR("qkv_attention: num_heads 4 must be positive and divide D = 6 (Wq [6, 4])");
    CU_ASSERT_PTR_NULL(nb_f_qkv_attention(x, w, nb_zeros(NB_F64, NB_SHAPE(6, 4)), w, 2, true, 1));
    NBT_ASSERT_ERROR("qkv_attention");
    NBT_ASSERT_ERROR("float64");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_f_qkv_attention(x, w, NULL, w, 2, true, 1));
    NBT_ASSERT_ERROR("qkv_attention: input 2 is NULL");
}

int main(void) {
    const nbtest_case cases[] = {
        {"one and two heads by hand", test_by_hand},
        {"matches the composed ops: causal + key padding, f32 and f64",
         test_matches_composed_masked},
        {"matches the composed ops: long rows, cross attention, attention mask",
         test_matches_composed_long_rows},
        {"small float32 heads (vector kernels), every instruction set", test_small_heads_every_isa},
        {"large heads (tiled products), every instruction set", test_tiled_heads_every_isa},
        {"a 16-wide head by hand", test_small_head_by_hand},
        {"bad input is an error naming op and shapes", test_bad_input},
        {"qkv_attention matches the composed ops, adds into gradients, a shared weight",
         test_qkv_attention_matches_composed},
        {"qkv_attention bad input names the op and the shapes", test_qkv_attention_bad_input},
    };
    return nbtest_run("attention", cases, sizeof cases / sizeof cases[0]);
}
