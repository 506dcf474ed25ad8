/* layer_norm, embedding and dropout: values and gradients by hand and from PyTorch, the
 * dropout generator contract, and bad input. */
#include "harness.h"
#include "tensor/isa.h"

static const nb_dtype dtypes[] = {NB_F32, NB_F64};
static double tol(nb_dtype dt) {
    return dt == NB_F32 ? 2e-6 : 1e-12;
}

static nb_tensor *values(nb_dtype dt, int ndim, const int64_t *shape, const double *v) {
    return nb_to_dtype(nb_from_array(NB_F64, ndim, shape, v), dt);
}
static nb_tensor *leaf(nb_dtype dt, int ndim, const int64_t *shape, const double *v) {
    return nb_requires_grad_(values(dt, ndim, shape, v), true);
}
/* A 0-d tensor, as a view of a one-element tensor. */
static nb_tensor *zero_d(nb_dtype dt, double v) {
    return nb_select(nb_full(dt, NB_SHAPE(1), v), 0, 0);
}
#define D(...) ((const double[]){__VA_ARGS__})
#define IDX64(...) ((const int64_t[]){__VA_ARGS__})

/* ---- layer_norm ---- */

/* By hand, eps = 0. Row [1, 2, 3, 4]: mean 2.5, biased variance 1.25, so the normalised row
 * is [-1.5, -0.5, 0.5, 1.5] / sqrt(1.25) = [-3, -1, 1, 3] * XH. Row [40, 30, 20, 10] has
 * variance 125 and normalises to the same values reversed. */
#define XH 0.4472135954999579    /* 0.5 / sqrt(1.25) */
#define RSTD0 0.8944271909999159 /* 1 / sqrt(1.25) */
#define RSTD1 0.0894427190999916 /* 1 / sqrt(125) */

static void test_layer_norm_by_hand(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = leaf(dt, NB_SHAPE(2, 4), D(1, 2, 3, 4, 40, 30, 20, 10));
        nb_tensor *w = leaf(dt, NB_SHAPE(4), D(1, 2, 1, 2));
        nb_tensor *b = leaf(dt, NB_SHAPE(4), D(0, 0, 1, 1));
        NBT_ASSERT_VALUES(nb_f_layer_norm(x, NULL, NULL, 0.0), tol(dt), -3 * XH, -XH, XH, 3 * XH,
                          3 * XH, XH, -XH, -3 * XH);
        nb_tensor *y = nb_f_layer_norm(x, w, b, 0.0);
        NBT_ASSERT_VALUES(y, tol(dt), -3 * XH, -2 * XH, XH + 1, 6 * XH + 1, 3 * XH, 2 * XH, 1 - XH,
                          1 - 6 * XH);
        /* g picks one element per row. With gh = g * w and xh the normalised row,
         * dx = rstd (gh - mean(gh) - xh mean(gh xh)):
         *   row 0, g = e_0, w_0 = 1: [0.75, -0.25, -0.25, -0.25] - xh * xh_0 / 4
         *        = [0.75 - 0.45, -0.25 - 0.15, -0.25 + 0.15, -0.25 + 0.45] = [0.3, -0.4, -0.1, 0.2]
         *   row 1, g = e_3, w_3 = 2: [-0.5, -0.5, -0.5, 1.5] - xh * 2 xh_3 / 4
         *        = [-0.5 + 0.9, -0.5 + 0.3, -0.5 - 0.3, 1.5 - 0.9] = [0.4, -0.2, -0.8, 0.6]
         * dw = sum over rows of g * xh, db = sum over rows of g. */
        CU_ASSERT_TRUE(nb_backward(y, values(dt, NB_SHAPE(2, 4), D(1, 0, 0, 0, 0, 0, 0, 1))));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt), 0.3 * RSTD0, -0.4 * RSTD0, -0.1 * RSTD0, 0.2 * RSTD0,
                          0.4 * RSTD1, -0.2 * RSTD1, -0.8 * RSTD1, 0.6 * RSTD1);
        NBT_ASSERT_VALUES(nb_grad(w), tol(dt), -3 * XH, 0, 0, -3 * XH);
        NBT_ASSERT_VALUES(nb_grad(b), tol(dt), 1, 0, 0, 1);
    }
}

/* PyTorch 1.13, float64: F.layer_norm(x, (2, 3), w, b, 1e-5) on x [2, 2, 3], then
 * .backward(g). Here x is stored transposed to exercise a strided input. */
static void test_layer_norm_against_torch(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x =
            leaf(dt, NB_SHAPE(2, 2, 3),
                 D(3.07, 1.45, 0.49, -2.17, -2.08, -1.2, -1.39, 1.16, 1.86, -1.15, -1.49, 2.55));
        nb_tensor *w = leaf(dt, NB_SHAPE(2, 3), D(0.17, -1.38, 1.54, -1.68, 1.1, -0.07));
        nb_tensor *b = leaf(dt, NB_SHAPE(2, 3), D(1.75, 0.23, 1.06, 0.61, -2.91, -1.92));
        nb_tensor *g =
            values(dt, NB_SHAPE(2, 2, 3),
                   D(-2.02, 0.09, -0.45, 2.32, -0.65, -0.79, -0.72, 2.54, 0.52, 0.87, -0.19, 1.51));
        nb_tensor *xs = nb_transpose(nb_contiguous(nb_transpose(x, 1, 2)), 1, 2);
        nb_tensor *y = nb_f_layer_norm(xs, w, b, 1e-5);
        NBT_ASSERT_VALUES(y, tol(dt) * 4, 2.0277377445517804, -0.8626210840186251,
                          1.5109015370035954, 2.44077181350357, -4.057264265748793,
                          -1.8790089511814914, 1.580613828532295, -0.5243110312633039,
                          2.5540594504999725, 2.0399597537954755, -4.072588583400632,
                          -2.0171378663715727);
        CU_ASSERT_TRUE(nb_backward(y, g));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt) * 4, -0.2631986586976693, 0.14966480848763924,
                          0.03117636543991009, -1.1435762652152368, 0.4939766284955342,
                          0.7319571214898231, 0.42042079652237047, -1.673362645491738,
                          0.919309016409136, -0.3943332164524286, 0.36985760289196334,
                          0.35810844612069725);
        NBT_ASSERT_VALUES(nb_grad(w), tol(dt) * 4, -2.5827776502226403, 1.4596274760655568,
                          0.3727306640314077, -3.2687235673394914, 0.8787396396207594,
                          2.5580158112528064);
        NBT_ASSERT_VALUES(nb_grad(b), tol(dt) * 4, -2.74, 2.63, 0.07, 3.19, -0.84, 0.72);
    }
}

/* y and the gradients of sum(y * r) for x, w, b; out[0..3]. */
static void layer_norm_and_grads(nb_tensor *x, nb_tensor *w, nb_tensor *b, nb_tensor *r,
                                 nb_tensor **out) {
    nb_zero_grad(x), nb_zero_grad(w), nb_zero_grad(b);
    out[0] = nb_f_layer_norm(x, w, b, 1e-5);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(out[0], r)), NULL));
    out[1] = nb_clone(nb_grad(x)), out[2] = nb_clone(nb_grad(w)), out[3] = nb_clone(nb_grad(b));
}

static void test_layer_norm_vector_builds(void) {
    /* Rows of 37 (four vectors and a tail of 5): the AVX-512, AVX2 and generic builds of the
     * float32 rows give the same bits (each set this CPU runs is checked), and agree with the
     * float64 rows. */
    nb_rng rng;
    nb_rng_seed(&rng, 7);
    nb_tensor *x64 = nb_randn(&rng, NB_F64, NB_SHAPE(6, 37)),
              *r64 = nb_randn(&rng, NB_F64, NB_SHAPE(6, 37));
    nb_tensor *w64 = nb_randn(&rng, NB_F64, NB_SHAPE(37)),
              *b64 = nb_randn(&rng, NB_F64, NB_SHAPE(37));
    nb_tensor *args[2][4];
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = k ? NB_F32 : NB_F64;
        args[k][0] = nb_requires_grad_(nb_to_dtype(x64, dt), true);
        args[k][1] = nb_requires_grad_(nb_to_dtype(w64, dt), true);
        args[k][2] = nb_requires_grad_(nb_to_dtype(b64, dt), true);
        args[k][3] = nb_to_dtype(r64, dt);
    }
    nb_tensor *ref[4], *got[NBT_ISA_COUNT][4];
    layer_norm_and_grads(args[0][0], args[0][1], args[0][2], args[0][3], ref);
    /* got[k]: the k-th set run; every later set must give the first one's bits */
    for (nbtest_isa_loop s = nbtest_isa_begin(); nbtest_isa_next(&s);) {
        layer_norm_and_grads(args[1][0], args[1][1], args[1][2], args[1][3], got[s.ran]);
        for (int i = 0; i < 4; i++) {
            if (s.ran > 0) CU_ASSERT_TRUE(nbtest_close(got[s.ran][i], got[0][i], 0, 0));
            CU_ASSERT_TRUE(nbtest_close(got[s.ran][i], ref[i], 1e-5, 1e-5));
        }
    }
}

static void test_layer_norm_errors(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 4));
    CU_ASSERT_PTR_NULL(nb_f_layer_norm(x, nb_ones(NB_F32, NB_SHAPE(3)), NULL, 1e-5));
    NBT_ASSERT_ERROR("layer_norm: weight of shape [3] does not match the normalised shape [4] of "
                     "input [2, 4]");
    CU_ASSERT_PTR_NULL(nb_f_layer_norm(x, NULL, nb_ones(NB_F32, NB_SHAPE(2, 4)), 1e-5));
    NBT_ASSERT_ERROR("layer_norm: bias of shape [2, 4] does not match the normalised shape [4]");
    CU_ASSERT_PTR_NULL(nb_f_layer_norm(x, nb_ones(NB_F32, NB_SHAPE(3, 2, 4)), NULL, 1e-5));
    NBT_ASSERT_ERROR("layer_norm: cannot normalise the last 3 dims of input [2, 4] (weight [3, 2, "
                     "4])");
    CU_ASSERT_PTR_NULL(nb_f_layer_norm(x, nb_ones(NB_F64, NB_SHAPE(4)), NULL, 1e-5));
    NBT_ASSERT_ERROR("layer_norm: dtype mismatch: [2, 4] float32 and [4] float64");
    CU_ASSERT_PTR_NULL(nb_f_layer_norm(x, NULL, NULL, -1.0));
    NBT_ASSERT_ERROR("layer_norm: eps must be >= 0, got -1");
    CU_ASSERT_PTR_NULL(nb_f_layer_norm(nb_zeros(NB_I64, NB_SHAPE(4)), NULL, NULL, 1e-5));
    NBT_ASSERT_ERROR("layer_norm: expected a float32 or float64 tensor, got int64");
    CU_ASSERT_PTR_NULL(nb_f_layer_norm(zero_d(NB_F32, 1), NULL, NULL, 1e-5));
    NBT_ASSERT_ERROR("layer_norm: cannot normalise the last 1 dims of input []");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_f_layer_norm(NULL, NULL, NULL, 1e-5));
    NBT_ASSERT_ERROR("layer_norm: input 0 is NULL");
}

/* ---- add_layer_norm: the residual add and the norm as one node ---- */

/* By hand: x + res is test_layer_norm_by_hand's rows, so the norm is its values; the sum's
 * gradient adds to the norm's for both inputs. With y's gradient all ones and no weight, the
 * norm's input gradient is rstd * (1 - 1 - xh * mean(xh)) = 0 (xh sums to 0), so each input's
 * gradient is exactly the sum's gradient. */
static void test_add_layer_norm_by_hand(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = leaf(dt, NB_SHAPE(2, 4), D(0.5, 1, 1.5, 2, 20, 15, 10, 5));
        nb_tensor *res = leaf(dt, NB_SHAPE(2, 4), D(0.5, 1, 1.5, 2, 20, 15, 10, 5));
        nb_tensor *sum;
        nb_tensor *y = nb_f_add_layer_norm(x, res, NULL, NULL, 0.0, &sum);
        NBT_ASSERT_VALUES(sum, 0, 1, 2, 3, 4, 40, 30, 20, 10);
        NBT_ASSERT_VALUES(y, tol(dt), -3 * XH, -XH, XH, 3 * XH, 3 * XH, XH, -XH, -3 * XH);
        nb_tensor *g_sum = values(dt, NB_SHAPE(2, 4), D(1, 2, 3, 4, 5, 6, 7, 8));
        nb_tensor *loss = nb_add(nb_sum(y), nb_sum(nb_mul(sum, g_sum)));
        CU_ASSERT_TRUE(nb_backward(loss, NULL));
        NBT_ASSERT_VALUES(nb_grad(x), tol(dt), 1, 2, 3, 4, 5, 6, 7, 8);
        NBT_ASSERT_VALUES(nb_grad(res), tol(dt), 1, 2, 3, 4, 5, 6, 7, 8);
    }
}

/* Outputs and every gradient: the fused node against nb_add then nb_f_layer_norm, which must
 * give the same bits (the fused forward adds the same way; its backward adds the same two
 * terms, and a + b == b + a). out: sum, y, dx, dres, dw, db. */
static void add_norm_results(bool fused, nb_tensor *const *in, nb_tensor **out) {
    nb_tensor *x = in[0], *res = in[1], *w = in[2], *b = in[3];
    for (int i = 0; i < 4; i++) nb_zero_grad(in[i]);
    nb_tensor *sum, *y;
    if (fused) {
        y = nb_f_add_layer_norm(x, res, w, b, 1e-5, &sum);
    } else {
        sum = nb_add(x, res);
        y = nb_f_layer_norm(sum, w, b, 1e-5);
    }
    /* the sum's gradient from a second use, as the next residual add gives it */
    nb_tensor *loss = nb_add(nb_sum(nb_mul(y, y)), nb_sum(nb_mul(sum, nb_tanh(sum))));
    CU_ASSERT_TRUE(nb_backward(loss, NULL));
    out[0] = sum, out[1] = y;
    for (int i = 0; i < 4; i++) out[2 + i] = nb_grad(in[i]);
}

static void test_add_layer_norm_same_bits(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 11);
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        /* res transposed, so that a strided input is copied first */
        nb_tensor *in[4] = {nb_randn(&rng, dt, NB_SHAPE(3, 5, 40)),
                            nb_transpose(nb_randn(&rng, dt, NB_SHAPE(3, 40, 5)), 1, 2),
                            nb_randn(&rng, dt, NB_SHAPE(40)), nb_randn(&rng, dt, NB_SHAPE(40))};
        for (int i = 0; i < 4; i++) nb_requires_grad_(in[i], true);
        nb_tensor *want[6], *got[6];
        add_norm_results(false, in, want);
        add_norm_results(true, in, got);
        for (int i = 0; i < 6; i++) CU_ASSERT_TRUE(nbtest_close(got[i], want[i], 0, 0));
    }
}

/* TransformerLM runs each block's last residual add and the norm after it as one node, across
 * blocks: logits and every parameter's gradient are the bits of the blocks' ops one by one. */
static void test_transformer_lm_fused_norms(void) {
    nb_module *model = nb_model_new(NB_F32, 3);
    nb_transformer_lm *lm = nb_transformer_lm_new(model, "", 11, 8, 16, 2, 3, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_tensor *tokens = nb_randint(&rng, 0, 11, NB_SHAPE(2, 8));
    nb_tensor *targets = nb_randint(&rng, 0, 11, NB_SHAPE(16));
    nb_param p[64];
    int np = nb_module_named_params(model, p, 64);
    nb_tensor *want[65], *got[65];
    for (int pass = 0; pass < 2; pass++) {
        nb_module_zero_grad(model);
        nb_tensor *logits;
        if (pass == 0) { /* op by op */
            nb_tensor *x = nb_add(nb_embedding_forward(lm->tok_emb, tokens),
                                  nb_embedding_forward(lm->pos_emb, nb_arange(NB_I64, 0, 8, 1)));
            const nb_mha_opts causal = {.causal = true};
            for (int i = 0; i < lm->num_layers; i++) {
                nb_transformer_block *b = lm->blocks[i];
                nb_tensor *h =
                    nb_add(x, nb_mha_forward(b->attn, nb_layer_norm_forward(b->norm1, x), &causal));
                x = nb_add(h, nb_feedforward_forward(b->ff, nb_layer_norm_forward(b->norm2, h)));
            }
            logits =
                nb_f_linear(nb_layer_norm_forward(lm->norm_f, x), lm->head_weight, lm->head_bias);
        } else {
            logits = nb_transformer_lm_forward(lm, tokens, true, NULL, NULL);
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(logits);
        nb_tensor *loss =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(16, 11)), targets, -100, NB_REDUCE_MEAN);
        CU_ASSERT_TRUE(nb_backward(loss, NULL));
        nb_tensor **out = pass ? got : want;
        out[0] = logits;
        for (int i = 0; i < np; i++) out[1 + i] = nb_contiguous(nb_grad(p[i].tensor));
    }
    for (int i = 0; i <= np; i++) CU_ASSERT_TRUE(nbtest_close(got[i], want[i], 0, 0));
    nb_module_free(model);
}

static void test_add_layer_norm_errors(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 4)), *sum = x;
    CU_ASSERT_PTR_NULL(
        nb_f_add_layer_norm(x, nb_zeros(NB_F32, NB_SHAPE(4)), NULL, NULL, 1e-5, &sum));
    NBT_ASSERT_ERROR("add_layer_norm: x [2, 4] and res [4] must have the same shape");
    CU_ASSERT_PTR_NULL(sum);
    CU_ASSERT_PTR_NULL(
        nb_f_add_layer_norm(x, nb_zeros(NB_F64, NB_SHAPE(2, 4)), NULL, NULL, 1e-5, &sum));
    NBT_ASSERT_ERROR("add_layer_norm: dtype mismatch: [2, 4] float32 and [2, 4] float64");
    CU_ASSERT_PTR_NULL(nb_f_add_layer_norm(x, x, nb_ones(NB_F32, NB_SHAPE(3)), NULL, 1e-5, &sum));
    NBT_ASSERT_ERROR("add_layer_norm: weight of shape [3] does not match the normalised shape [4] "
                     "of input [2, 4]");
    nb_clear_error(); /* a NULL input keeps the error before it (the chain's first) */
    CU_ASSERT_PTR_NULL(nb_f_add_layer_norm(x, NULL, NULL, NULL, 1e-5, &sum));
    NBT_ASSERT_ERROR("add_layer_norm: input 1 is NULL");
    CU_ASSERT_PTR_NULL(nb_f_add_layer_norm(x, x, NULL, NULL, 1e-5, NULL));
    NBT_ASSERT_ERROR("add_layer_norm: NULL sum");
    nb_module *model = nb_model_new(NB_F32, 0);
    nb_layer_norm *ln = nb_layer_norm_new(model, "ln", 4);
    CU_ASSERT_PTR_NULL(nb_layer_norm_forward_add(ln, x, nb_zeros(NB_F32, NB_SHAPE(3, 4)), &sum));
    NBT_ASSERT_ERROR("add_layer_norm: x [2, 4] and res [3, 4] must have the same shape");
    NBT_ASSERT_ERROR("ln");
    nb_module_free(model);
}

/* ---- embedding ---- */

static void test_embedding(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *w = leaf(dt, NB_SHAPE(4, 2), D(0, 1, 10, 11, 20, 21, 30, 31));
        nb_tensor *idx = nb_from_array(NB_I64, NB_SHAPE(2, 2), IDX64(3, 1, 1, 1));
        nb_tensor *y = nb_f_embedding(w, idx);
        CU_ASSERT_PTR_NOT_NULL_FATAL(y);
        CU_ASSERT_EQUAL(y->ndim, 3);
        CU_ASSERT_EQUAL(y->shape[2], 2);
        NBT_ASSERT_VALUES(y, 0, 30, 31, 10, 11, 10, 11, 10, 11);
        /* Row 1 is used three times: its gradient is the sum [3 + 5 + 7, 4 + 6 + 8]. */
        CU_ASSERT_TRUE(nb_backward(y, values(dt, NB_SHAPE(2, 2, 2), D(1, 2, 3, 4, 5, 6, 7, 8))));
        NBT_ASSERT_VALUES(nb_grad(w), 0, 0, 0, 15, 18, 0, 0, 1, 2);

        /* A transposed weight and strided indices read the same rows. */
        nb_tensor *wt =
            nb_transpose(values(dt, NB_SHAPE(2, 4), D(0, 10, 20, 30, 1, 11, 21, 31)), 0, 1);
        nb_tensor *it = nb_transpose(nb_from_array(NB_I64, NB_SHAPE(2, 2), IDX64(3, 0, 2, 1)), 0,
                                     1); /* [[3, 2], [0, 1]] */
        NBT_ASSERT_VALUES(nb_f_embedding(wt, it), 0, 30, 31, 20, 21, 0, 1, 10, 11);
        /* A 0-d index gives one row. */
        NBT_ASSERT_VALUES(nb_f_embedding(wt, zero_d(NB_I64, 2)), 0, 20, 21);
    }
}

static void test_embedding_errors(void) {
    nb_tensor *w = nb_zeros(NB_F32, NB_SHAPE(4, 2));
    CU_ASSERT_PTR_NULL(nb_f_embedding(w, nb_from_array(NB_I64, NB_SHAPE(2, 2), IDX64(0, 1, 4, 2))));
    NBT_ASSERT_ERROR("embedding: index 4 at position [1, 0] is out of range for V = 4 "
                     "(weight [4, 2])");
    CU_ASSERT_PTR_NULL(nb_f_embedding(w, nb_from_array(NB_I64, NB_SHAPE(1), IDX64(-1))));
    NBT_ASSERT_ERROR("embedding: index -1 at position [0] is out of range for V = 4");
    CU_ASSERT_PTR_NULL(nb_f_embedding(w, nb_zeros(NB_F32, NB_SHAPE(3))));
    NBT_ASSERT_ERROR("embedding: indices must be int64, got float32 of shape [3]");
    CU_ASSERT_PTR_NULL(nb_f_embedding(w, nb_zeros(NB_BOOL, NB_SHAPE(3))));
    NBT_ASSERT_ERROR("embedding: indices must be int64, got bool");
    CU_ASSERT_PTR_NULL(
        nb_f_embedding(nb_zeros(NB_F32, NB_SHAPE(4)), nb_zeros(NB_I64, NB_SHAPE(1))));
    NBT_ASSERT_ERROR("embedding: weight must be [V, D], got shape [4]");
    CU_ASSERT_PTR_NULL(
        nb_f_embedding(nb_zeros(NB_I64, NB_SHAPE(4, 2)), nb_zeros(NB_I64, NB_SHAPE(1))));
    NBT_ASSERT_ERROR("embedding: expected a float32 or float64 tensor, got int64");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_f_embedding(w, NULL));
    NBT_ASSERT_ERROR("embedding: input 1 is NULL");
}

/* ---- dropout ---- */

static nb_tensor *dropout_seeded(const nb_tensor *x, double p, uint64_t seed) {
    nb_rng rng;
    nb_rng_seed(&rng, seed);
    return nb_f_dropout(&rng, x, p, true);
}

static void test_dropout_same_seed_same_mask(void) {
    nb_tensor *x32 = nb_ones(NB_F32, NB_SHAPE(40, 25));
    nb_tensor *x64 = nb_ones(NB_F64, NB_SHAPE(40, 25));
    nb_tensor *a = dropout_seeded(x32, 0.5, 42), *b = dropout_seeded(x32, 0.5, 42);
    nb_tensor *c = dropout_seeded(x64, 0.5, 42), *other = dropout_seeded(x32, 0.5, 43);
    NBT_ASSERT_CLOSE(a, b, 0, 0);
    NBT_ASSERT_CLOSE(a, c, 0, 0); /* the mask does not depend on the dtype */
    int differ = 0;
    for (int64_t i = 0; i < 40; i++)
        for (int64_t j = 0; j < 25; j++)
            differ += nb_get(a, NB_IDX(i, j)) != nb_get(other, NB_IDX(i, j));
    CU_ASSERT(differ > 100); /* about half of 1000 for an independent seed */

    /* A strided input draws in its own row-major order: the same mask as a contiguous copy. */
    nb_tensor *base = nb_arange(NB_F64, 1, 13, 1);
    nb_tensor *xt = nb_transpose(nb_view(base, NB_SHAPE(3, 4)), 0, 1);
    NBT_ASSERT_CLOSE(dropout_seeded(xt, 0.5, 7), dropout_seeded(nb_clone(xt), 0.5, 7), 0, 0);
}

/* The documented stream: element k is kept when the k-th uniform draw is >= p. */
static void test_dropout_mask_follows_the_generator(void) {
    nb_tensor *x = nb_arange(NB_F64, 1, 9, 1);
    nb_tensor *y = dropout_seeded(x, 0.3, 11);
    nb_rng rng;
    nb_rng_seed(&rng, 11);
    for (int64_t k = 0; k < 8; k++) {
        double want = nb_rng_uniform(&rng) >= 0.3 ? (double)(k + 1) / 0.7 : 0.0;
        CU_ASSERT_DOUBLE_EQUAL(nb_get(y, &k), want, 1e-12);
    }
}

static void test_dropout_scaling_and_gradient(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        int64_t n = 4000;
        nb_tensor *x = nb_requires_grad_(nb_arange(dt, 1, (double)n + 1, 1), true);
        nb_tensor *y = dropout_seeded(x, 0.25, 3);
        CU_ASSERT_TRUE_FATAL(nb_backward(y, nb_ones(dt, 1, &n)));
        nb_tensor *g = nb_grad(x);
        int64_t dropped = 0;
        for (int64_t i = 0; i < n; i++) {
            double xv = (double)(i + 1), yv = nb_get(y, &i), gv = nb_get(g, &i);
            bool kept = yv != 0;
            dropped += !kept;
            /* kept: x / (1 - p) = x * 4/3; the gradient carries the same mask and scale. */
            CU_ASSERT_DOUBLE_EQUAL(yv, kept ? xv * (4.0 / 3.0) : 0.0, xv * tol(dt));
            CU_ASSERT_DOUBLE_EQUAL(gv, kept ? 4.0 / 3.0 : 0.0, tol(dt));
        }
        /* 1000 expected; the binomial standard deviation is about 27. */
        CU_ASSERT(dropped > 850 && dropped < 1150);
    }
}

static void test_dropout_identities(void) {
    for (int k = 0; k < 2; k++) {
        nb_dtype dt = dtypes[k];
        nb_tensor *x = leaf(dt, NB_SHAPE(2, 2), D(1, -2, 3, -4));
        /* p = 0 in training: unchanged, and no numbers drawn. */
        nb_rng rng, fresh;
        nb_rng_seed(&rng, 5), nb_rng_seed(&fresh, 5);
        nb_tensor *y0 = nb_f_dropout(&rng, x, 0.0, true);
        NBT_ASSERT_VALUES(y0, 0, 1, -2, 3, -4);
        CU_ASSERT_EQUAL(nb_rng_next(&rng), nb_rng_next(&fresh));
        /* Eval: unchanged, a view of x, gradient passed through; no generator needed. */
        nb_tensor *ye = nb_f_dropout(NULL, x, 0.9, false);
        NBT_ASSERT_VALUES(ye, 0, 1, -2, 3, -4);
        CU_ASSERT_PTR_EQUAL(ye->storage, x->storage);
        CU_ASSERT_TRUE(nb_backward(ye, values(dt, NB_SHAPE(2, 2), D(5, 6, 7, 8))));
        NBT_ASSERT_VALUES(nb_grad(x), 0, 5, 6, 7, 8);
        /* p = 1 in training: zeros and a zero gradient. */
        nb_tensor *x1 = leaf(dt, NB_SHAPE(3), D(1, INFINITY, 3));
        nb_tensor *y1 = nb_f_dropout(NULL, x1, 1.0, true);
        NBT_ASSERT_VALUES(y1, 0, 0, 0, 0);
        CU_ASSERT_TRUE(nb_backward(y1, values(dt, NB_SHAPE(3), D(1, 1, 1))));
        NBT_ASSERT_VALUES(nb_grad(x1), 0, 0, 0, 0);
    }
}

static void test_dropout_errors(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    nb_tensor *x = nb_ones(NB_F32, NB_SHAPE(2, 3));
    CU_ASSERT_PTR_NULL(nb_f_dropout(&rng, x, -0.1, true));
    NBT_ASSERT_ERROR("dropout: probability p must be in [0, 1], got -0.1 (input [2, 3])");
    CU_ASSERT_PTR_NULL(nb_f_dropout(&rng, x, 1.5, false));
    NBT_ASSERT_ERROR("dropout: probability p must be in [0, 1], got 1.5");
    CU_ASSERT_PTR_NULL(nb_f_dropout(&rng, x, NAN, true));
    NBT_ASSERT_ERROR("dropout: probability p must be in [0, 1], got nan");
    CU_ASSERT_PTR_NULL(nb_f_dropout(NULL, x, 0.5, true));
    NBT_ASSERT_ERROR("dropout: training with p = 0.5 needs a generator, got NULL rng");
    CU_ASSERT_PTR_NULL(nb_f_dropout(&rng, nb_ones(NB_I64, NB_SHAPE(2)), 0.5, true));
    NBT_ASSERT_ERROR("dropout: expected a float32 or float64 tensor, got int64");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_f_dropout(&rng, NULL, 0.5, true));
    NBT_ASSERT_ERROR("dropout: input 0 is NULL");
}

int main(void) {
    const nbtest_case cases[] = {
        {"layer_norm by hand, with weight and bias gradients", test_layer_norm_by_hand},
        {"layer_norm over 2 dims against PyTorch", test_layer_norm_against_torch},
        {"layer_norm float32 rows: AVX2 and baseline builds agree", test_layer_norm_vector_builds},
        {"layer_norm bad input", test_layer_norm_errors},
        {"add_layer_norm by hand: the sum's gradient reaches both inputs",
         test_add_layer_norm_by_hand},
        {"add_layer_norm: the bits of nb_add then layer_norm", test_add_layer_norm_same_bits},
        {"TransformerLM's fused residual norms: the bits of its ops one by one",
         test_transformer_lm_fused_norms},
        {"add_layer_norm bad input", test_add_layer_norm_errors},
        {"embedding values and repeated-index gradient", test_embedding},
        {"embedding bad input", test_embedding_errors},
        {"dropout: same seed, same mask", test_dropout_same_seed_same_mask},
        {"dropout: element k kept when draw k >= p", test_dropout_mask_follows_the_generator},
        {"dropout: scaling by 1/(1-p) and the gradient mask", test_dropout_scaling_and_gradient},
        {"dropout: p = 0, eval and p = 1", test_dropout_identities},
        {"dropout bad input", test_dropout_errors},
    };
    return nbtest_run("layers", cases, sizeof cases / sizeof cases[0]);
}
