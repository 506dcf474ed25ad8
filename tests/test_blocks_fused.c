/* The blocks' fused nodes against the ops they replace: the attention's one q/k/v product and
 * RoPE node (nn/blocks/qkv_rope.c) against three linears and blk_rope_apply, SwiGLU's gate
 * node (silu(a) * b) and grouped products against two linears, nb_silu and nb_mul, and
 * blk_rms_norm_forward_add against nb_add and the norm. Values by hand, float64 gradchecks,
 * values and every gradient against the op-by-op form, float32 against float64, errors. */
#include <nabla/blocks.h>
#include "harness.h"

#include <math.h>
#include <stdio.h>

static nb_tensor *randn(nb_rng *rng, nb_dtype dt, int ndim, const int64_t *shape) {
    return nb_randn(rng, dt, ndim, shape);
}

/* ---- the residual add and RMSNorm as one node -------------------------------------------- */
static void test_add_norm_values(void) {
    nb_module *model = nb_model_new(NB_F64, 1);
    blk_rms_norm *norm = blk_rms_norm_new(model, "norm", 2, 0);
    nb_copy_(norm->weight, nb_from_array(NB_F64, NB_SHAPE(2), (double[]){1, 2}));
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(1, 2), (double[]){1, 2});
    nb_tensor *res = nb_from_array(NB_F64, NB_SHAPE(1, 2), (double[]){2, 2});
    nb_tensor *sum;
    /* sum (3, 4); rms = sqrt((9 + 16) / 2) = 3.5355339...; (3, 4 * 2) / rms */
    NBT_ASSERT_VALUES(blk_rms_norm_forward_add(norm, x, res, &sum), 1e-7, 0.8485281, 2.2627417);
    NBT_ASSERT_VALUES(sum, 0, 3, 4);
    nb_module_free(model);
}

static blk_rms_norm *gradcheck_norm;

/* Both outputs count: the norm, and the sum scaled (the residual stream's own gradient). */
static nb_tensor *f_add_norm(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *sum;
    nb_tensor *y = blk_rms_norm_forward_add(gradcheck_norm, in[0], in[1], &sum);
    return nb_add(y, nb_mul_scalar(sum, 0.3));
}

static void test_add_norm_gradcheck(void) {
    nb_module *model = nb_model_new(NB_F64, 2);
    gradcheck_norm = blk_rms_norm_new(model, "norm", 5, 1e-5);
    nb_rng rng;
    nb_rng_seed(&rng, 3);
    nb_copy_(gradcheck_norm->weight, randn(&rng, NB_F64, NB_SHAPE(5)));
    /* x a transposed view (not contiguous) */
    nb_tensor *in[3] = {nb_transpose(randn(&rng, NB_F64, NB_SHAPE(5, 3)), 0, 1),
                        randn(&rng, NB_F64, NB_SHAPE(3, 5)), gradcheck_norm->weight};
    nb_requires_grad_(in[0], true);
    nb_requires_grad_(in[1], true);
    nb_gradcheck_result res;
    bool ok = nb_gradcheck(f_add_norm, 3, in, NULL, NULL, &res);
    printf("  add_rms_norm: %s\n", res.message);
    CU_ASSERT_TRUE(ok);
    nb_module_free(model);
}

/* Values and the gradients of x, res and the weight, fused and op by op (float64), for a
 * gradient reaching the sum and the norm. */
static void test_add_norm_matches_ops(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    blk_rms_norm *norm = blk_rms_norm_new(model, "norm", 6, 1e-5);
    nb_rng rng;
    nb_rng_seed(&rng, 4);
    nb_copy_(norm->weight, randn(&rng, NB_F64, NB_SHAPE(6)));
    nb_tensor *x = nb_requires_grad_(randn(&rng, NB_F64, NB_SHAPE(2, 4, 6)), true);
    nb_tensor *res = nb_requires_grad_(randn(&rng, NB_F64, NB_SHAPE(2, 4, 6)), true);
    nb_tensor *gy = randn(&rng, NB_F64, NB_SHAPE(2, 4, 6)),
              *gs = randn(&rng, NB_F64, NB_SHAPE(2, 4, 6));
    nb_tensor *grads[2][3];
    for (int fused = 0; fused < 2; fused++) {
        nb_zero_grad(x), nb_zero_grad(res), nb_zero_grad(norm->weight);
        nb_tensor *sum = NULL, *y;
        if (fused)
            y = blk_rms_norm_forward_add(norm, x, res, &sum);
        else
            y = blk_rms_norm_forward(norm, sum = nb_add(x, res));
        CU_ASSERT_TRUE_FATAL(
            nb_backward(nb_add(nb_sum(nb_mul(y, gy)), nb_sum(nb_mul(sum, gs))), NULL));
        grads[fused][0] = nb_clone(x->grad);
        grads[fused][1] = nb_clone(res->grad);
        grads[fused][2] = nb_clone(norm->weight->grad);
    }
    for (int i = 0; i < 3; i++) NBT_ASSERT_CLOSE(grads[1][i], grads[0][i], 1e-12, 1e-12);
    nb_tensor *sum;
    NBT_ASSERT_CLOSE(blk_rms_norm_forward_add(norm, x, res, &sum),
                     blk_rms_norm_forward(norm, nb_add(x, res)), 0, 0);
    nb_module_free(model);
}

/* ---- the attention's q, k and v -------------------------------------------------------- */
/* The attention module written with three linears and blk_rope_apply, as before the fused
 * node. */
static nb_tensor *attention_by_ops(blk_attention *m, const nb_tensor *x, int64_t offset) {
    int64_t B = x->shape[0], T = x->shape[1], hd = m->head_dim;
    blk_rope_tables rope;
    CU_ASSERT_TRUE_FATAL(blk_rope_tables_make(x->dtype, T, hd, offset, m->rope_base, &rope));
    nb_tensor *w[3] = {m->wq->weight, m->wk->weight, m->wv->weight}, *h[3];
    for (int i = 0; i < 3; i++) {
        nb_tensor *p = nb_f_linear(x, w[i], NULL);
        h[i] = nb_view(p, NB_SHAPE(B, T, p->shape[2] / hd, hd));
        if (i < 2) h[i] = blk_rope_apply(h[i], 1, &rope);
        h[i] = nb_transpose(h[i], 1, 2);
    }
    nb_tensor *ctx = nb_sdpa(h[0], h[1], h[2], NULL, true, 1 / sqrt((double)hd));
    return nb_f_linear(nb_reshape(nb_transpose(ctx, 1, 2), NB_SHAPE(B, T, m->dim)), m->wo->weight,
                       NULL);
}

/* Output and the gradients of x and the four weights: the module (fused) and by ops. */
static void attention_grads(blk_attention *m, nb_tensor *x, const nb_tensor *gy, bool fused,
                            int64_t offset, nb_tensor **out) {
    nb_tensor *p[4] = {m->wq->weight, m->wk->weight, m->wv->weight, m->wo->weight};
    nb_zero_grad(x);
    for (int i = 0; i < 4; i++) nb_zero_grad(p[i]);
    nb_tensor *y =
        fused ? blk_attention_forward(m, x, &(blk_attn_opts){.causal = true, .offset = offset})
              : attention_by_ops(m, x, offset);
    CU_ASSERT_TRUE_FATAL(y && nb_backward(y, gy));
    out[0] = y, out[1] = nb_clone(x->grad);
    for (int i = 0; i < 4; i++) out[i + 2] = nb_clone(p[i]->grad);
}

static void test_attention_matches_ops(void) {
    for (int64_t kv = 1; kv <= 4; kv *= 2) { /* MQA, GQA 2 of 4, MHA */
        nb_module *model = nb_model_new(NB_F64, 5);
        blk_attention *m = blk_attention_new(model, "attn", 16, 4, kv, 100);
        nb_rng rng;
        nb_rng_seed(&rng, 5 + (uint64_t)kv);
        /* x a transposed view (not contiguous) */
        nb_tensor *x =
            nb_requires_grad_(nb_transpose(randn(&rng, NB_F64, NB_SHAPE(3, 5, 16)), 0, 1), true);
        nb_tensor *gy = randn(&rng, NB_F64, NB_SHAPE(5, 3, 16));
        nb_tensor *fused[6], *ops[6];
        attention_grads(m, x, gy, true, 2, fused);
        attention_grads(m, x, gy, false, 2, ops);
        for (int i = 0; i < 6; i++) NBT_ASSERT_CLOSE(fused[i], ops[i], 1e-12, 1e-12);
        nb_module_free(model);
    }
}

/* ---- SwiGLU's gate --------------------------------------------------------------------------- */
/* The module's output and the gradients of x, w1, w2 and w3, fused and op by op. */
static void swiglu_grads(blk_swiglu *m, nb_tensor *x, const nb_tensor *gy, bool fused,
                         nb_tensor **out) {
    nb_tensor *p[3] = {m->w1->weight, m->w2->weight, m->w3->weight};
    nb_zero_grad(x);
    for (int i = 0; i < 3; i++) nb_zero_grad(p[i]);
    nb_tensor *y =
        fused ? blk_swiglu_forward(m, x)
              : nb_f_linear(nb_mul(nb_silu(nb_f_linear(x, p[0], NULL)), nb_f_linear(x, p[2], NULL)),
                            p[1], NULL);
    CU_ASSERT_TRUE_FATAL(y && nb_backward(y, gy));
    out[0] = y, out[1] = nb_clone(x->grad);
    for (int i = 0; i < 3; i++) out[i + 2] = nb_clone(p[i]->grad);
}

static void test_swiglu_matches_ops(void) {
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        nb_module *model = nb_model_new(dt, 9);
        blk_swiglu *m = blk_swiglu_new(model, "ff", 8, 21);
        nb_rng rng;
        nb_rng_seed(&rng, 10);
        /* x a transposed view (not contiguous) */
        nb_tensor *x =
            nb_requires_grad_(nb_transpose(randn(&rng, dt, NB_SHAPE(4, 3, 8)), 0, 1), true);
        nb_tensor *gy = randn(&rng, dt, NB_SHAPE(3, 4, 8));
        nb_tensor *fused[5], *ops[5];
        swiglu_grads(m, x, gy, true, fused);
        swiglu_grads(m, x, gy, false, ops);
        double tol = d ? 1e-5 : 1e-12;
        for (int i = 0; i < 5; i++) NBT_ASSERT_CLOSE(fused[i], ops[i], tol, tol);
        nb_module_free(model);
    }
}

/* With grad the module is two products and the gate node; without, one gated job
 * (nb_linear_gated_forward): the same values, and the same as op by op, on 1 and 5 rows. */
static void test_swiglu_forms_agree(void) {
    nb_module *model = nb_model_new(NB_F64, 11);
    blk_swiglu *m = blk_swiglu_new(model, "ff", 8, 21);
    nb_rng rng;
    nb_rng_seed(&rng, 12);
    for (int rows = 1; rows <= 5; rows += 4) {
        nb_tensor *x = randn(&rng, NB_F64, NB_SHAPE(rows, 8));
        nb_tensor *packed = blk_swiglu_forward(m, x);
        bool was = nb_set_grad_enabled(false);
        nb_tensor *grouped = blk_swiglu_forward(m, x);
        nb_set_grad_enabled(was);
        nb_tensor *ops = nb_f_linear(nb_mul(nb_silu(nb_f_linear(x, m->w1->weight, NULL)),
                                            nb_f_linear(x, m->w3->weight, NULL)),
                                     m->w2->weight, NULL);
        NBT_ASSERT_CLOSE(packed, ops, 1e-12, 1e-12);
        NBT_ASSERT_CLOSE(grouped, ops, 1e-12, 1e-12);
    }
    nb_module_free(model);
}

/* float32 against float64: the same parameters and inputs, rounded. */
static void test_f32_matches_f64(void) {
    nb_module *m64 = nb_model_new(NB_F64, 6), *m32 = nb_model_new(NB_F32, 6);
    blk_attention *a[2] = {blk_attention_new(m64, "attn", 16, 4, 2, 10000),
                           blk_attention_new(m32, "attn", 16, 4, 2, 10000)};
    blk_rms_norm *n[2] = {blk_rms_norm_new(m64, "norm", 16, 1e-5),
                          blk_rms_norm_new(m32, "norm", 16, 1e-5)};
    nb_rng rng;
    nb_rng_seed(&rng, 8);
    nb_copy_(n[0]->weight, randn(&rng, NB_F64, NB_SHAPE(16)));
    nb_copy_(n[1]->weight, nb_to_dtype(n[0]->weight, NB_F32));
    nb_tensor *w[2][4] = {{a[0]->wq->weight, a[0]->wk->weight, a[0]->wv->weight, a[0]->wo->weight},
                          {a[1]->wq->weight, a[1]->wk->weight, a[1]->wv->weight, a[1]->wo->weight}};
    for (int i = 0; i < 4; i++) nb_copy_(w[1][i], nb_to_dtype(w[0][i], NB_F32));
    nb_tensor *x64 = randn(&rng, NB_F64, NB_SHAPE(2, 6, 16));
    nb_tensor *gy64 = randn(&rng, NB_F64, NB_SHAPE(2, 6, 16));
    nb_tensor *got[2][7];
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        nb_tensor *x = nb_requires_grad_(nb_to_dtype(x64, dt), true);
        nb_tensor *sum;
        /* the block's pattern: the attention of norm(x), added back and normalised again */
        nb_tensor *y = blk_rms_norm_forward_add(
            n[d], x, blk_attention_forward(a[d], x, &(blk_attn_opts){.causal = true}), &sum);
        CU_ASSERT_TRUE_FATAL(y && nb_backward(y, nb_to_dtype(gy64, dt)));
        got[d][0] = y, got[d][1] = x->grad, got[d][2] = n[d]->weight->grad;
        for (int i = 0; i < 4; i++) got[d][i + 3] = w[d][i]->grad;
    }
    for (int i = 0; i < 7; i++)
        NBT_ASSERT_CLOSE(nb_to_dtype(got[1][i], NB_F64), got[0][i], 1e-4, 1e-4);
    nb_module_free(m64);
    nb_module_free(m32);
}

static void test_add_norm_errors(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_module *parent = nb_module_container(model, "layers");
    blk_rms_norm *norm = blk_rms_norm_new(parent, "norm", 4, 1e-5);
    nb_tensor *sum = nb_zeros(NB_F32, NB_SHAPE(1)); /* set to NULL on failure */
    CU_ASSERT_PTR_NULL(blk_rms_norm_forward_add(norm, nb_zeros(NB_F32, NB_SHAPE(2, 4)),
                                                nb_zeros(NB_F32, NB_SHAPE(3, 4)), &sum));
    CU_ASSERT_PTR_NULL(sum);
    NBT_ASSERT_ERROR("RMSNorm: 'layers.norm': x float32 [2, 4] and residual float32 [3, 4]");
    CU_ASSERT_PTR_NULL(blk_rms_norm_forward_add(norm, nb_zeros(NB_F32, NB_SHAPE(2, 5)),
                                                nb_zeros(NB_F32, NB_SHAPE(2, 5)), &sum));
    NBT_ASSERT_ERROR("RMSNorm: 'layers.norm': rms_norm: weight must be float32 [5] for x [2, 5]");
    nb_clear_error(); /* a NULL input keeps an earlier message */
    CU_ASSERT_PTR_NULL(
        blk_rms_norm_forward_add(norm, NULL, nb_zeros(NB_F32, NB_SHAPE(2, 4)), &sum));
    NBT_ASSERT_ERROR("NULL argument");
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"add + rms_norm: values by hand", test_add_norm_values},
        {"add + rms_norm: gradcheck (both outputs, strided x)", test_add_norm_gradcheck},
        {"add + rms_norm = nb_add then the norm, gradients too", test_add_norm_matches_ops},
        {"attention's q/k/v node = three linears and blk_rope (MQA, GQA, MHA)",
         test_attention_matches_ops},
        {"swiglu module = two linears, silu and a product (f64, f32)", test_swiglu_matches_ops},
        {"swiglu: with and without grad (gated job) agree", test_swiglu_forms_agree},
        {"float32 against float64", test_f32_matches_f64},
        {"add + rms_norm errors", test_add_norm_errors},
    };
    return nbtest_run("blocks_fused", cases, sizeof cases / sizeof cases[0]);
}
