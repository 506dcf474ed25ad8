/* The engine: fan-out, accumulation, grad mode, detach, errors, deep graphs. Values by hand. */
#include "harness.h"

static nb_tensor *leaf(const double *v, int64_t n) {
    return nb_requires_grad_(nb_from_array(NB_F64, 1, &n, v), true);
}

static void test_fan_out_sums(void) {
    /* y = sum(x * x + 3x): dy/dx = 2x + 3, x used three times */
    nb_tensor *x = leaf((double[]){1, -2, 0.5}, 3);
    nb_tensor *y = nb_sum(nb_add(nb_mul(x, x), nb_mul_scalar(x, 3)));
    CU_ASSERT_TRUE(nb_backward(y, NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 1e-15, 5, -1, 4);
}

static void test_diamond(void) {
    /* a = 2x; b = a + 1; c = a * b; d/dx (2x (2x + 1)) = 8x + 2 */
    nb_tensor *x = leaf((double[]){3}, 1);
    nb_tensor *a = nb_mul_scalar(x, 2);
    nb_tensor *c = nb_sum(nb_mul(a, nb_add_scalar(a, 1)));
    CU_ASSERT_TRUE(nb_backward(c, NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 1e-15, 26);
}

static void test_accumulates_until_zero_grad(void) {
    nb_tensor *x = leaf((double[]){1, 2}, 2);
    for (int i = 0; i < 3; i++) CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul_scalar(x, 5)), NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 15, 15);
    nb_zero_grad(x);
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 0);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul_scalar(x, 5)), NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 5, 5);
}

static void test_linear_weight_grad_accumulates(void) {
    /* sum(x W^T) over rows: dW = the column sums of x. linear adds dW straight into an
     * existing gradient of W, so a second backward, and a second use of W, must add. */
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(2, 2), (double[]){1, 2, 3, 4});
    nb_tensor *x2 = nb_from_array(NB_F64, NB_SHAPE(2, 2), (double[]){1, 0, 0, 1});
    nb_tensor *w =
        nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(1, 2), (double[]){0.5, -1}), true);
    for (int i = 0; i < 2; i++) CU_ASSERT_TRUE(nb_backward(nb_sum(nb_f_linear(x, w, NULL)), NULL));
    NBT_ASSERT_VALUES(nb_grad(w), 0, 8, 12);
    nb_zero_grad(w);
    nb_tensor *two_uses = nb_add(nb_sum(nb_f_linear(x, w, NULL)), nb_sum(nb_f_linear(x2, w, NULL)));
    CU_ASSERT_TRUE(nb_backward(two_uses, NULL));
    NBT_ASSERT_VALUES(nb_grad(w), 0, 5, 7);
}

/* The bias's gradient is added straight into an existing one (nbt_add_row_sums): for
 * sum(out * r), db[j] = sum over rows of r[., j]. Gradients laid out [rows, out] contiguous,
 * transposed (the out dim strided: the usual sum then an add), and of a 3-D input. */
static void test_linear_bias_grad_accumulates(void) {
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6});
    nb_tensor *w = nb_from_array(NB_F64, NB_SHAPE(2, 2), (double[]){1, 0, 0, 1});
    nb_tensor *b = nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(2), (double[]){0, 0}), true);
    nb_tensor *r = nb_from_array(NB_F64, NB_SHAPE(3, 2), (double[]){0.5, 1, 0.25, -2, 4, 8});
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(nb_f_linear(x, w, b), r)), NULL));
    NBT_ASSERT_VALUES(nb_grad(b), 0, 4.75, 7);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(nb_f_linear(x, w, b), r)), NULL));
    NBT_ASSERT_VALUES(nb_grad(b), 0, 9.5, 14);
    nb_tensor *rt =
        nb_transpose(nb_from_array(NB_F64, NB_SHAPE(2, 3), (double[]){1, 1, 1, 2, 2, 2}), 0,
                     1); /* [3, 2]: columns 1 and 2 */
    nb_tensor *out_t = nb_transpose(nb_f_linear(x, w, b), 0, 1);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(out_t, nb_transpose(rt, 0, 1))), NULL));
    NBT_ASSERT_VALUES(nb_grad(b), 0, 12.5, 20);
    nb_tensor *x3 = nb_view(x, NB_SHAPE(3, 1, 2)), *r3 = nb_view(r, NB_SHAPE(3, 1, 2));
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(nb_f_linear(x3, w, b), r3)), NULL));
    NBT_ASSERT_VALUES(nb_grad(b), 0, 17.25, 27);
}

static void test_non_scalar_needs_grad_output(void) {
    nb_tensor *x = leaf((double[]){1, 2}, 2);
    nb_tensor *y = nb_mul_scalar(x, 2);
    CU_ASSERT_FALSE(nb_backward(y, NULL));
    NBT_ASSERT_ERROR("pass grad_output");
    NBT_ASSERT_ERROR("[2]");
    CU_ASSERT_FALSE(nb_backward(y, nb_ones(NB_F64, NB_SHAPE(3))));
    NBT_ASSERT_ERROR("grad_output has shape [3]");
    CU_ASSERT_FALSE(nb_backward(y, nb_ones(NB_F32, NB_SHAPE(2))));
    NBT_ASSERT_ERROR("float32");
    CU_ASSERT_TRUE(nb_backward(y, nb_from_array(NB_F64, NB_SHAPE(2), (double[]){1, 10})));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 2, 20);
}

static void test_errors(void) {
    nb_tensor *c = nb_ones(NB_F64, NB_SHAPE(2));
    CU_ASSERT_FALSE(nb_backward(nb_sum(c), NULL));
    NBT_ASSERT_ERROR("does not require grad");
    CU_ASSERT_FALSE(nb_backward(NULL, NULL));
    CU_ASSERT_PTR_NULL(nb_requires_grad_(nb_zeros(NB_I64, NB_SHAPE(2)), true));
    NBT_ASSERT_ERROR("only float tensors");
    nb_tensor *x = leaf((double[]){1}, 1);
    CU_ASSERT_PTR_NULL(nb_requires_grad_(nb_mul_scalar(x, 2), true));
    NBT_ASSERT_ERROR("not a leaf");
}

static void test_no_grad_and_detach(void) {
    nb_tensor *x = leaf((double[]){1, 2}, 2);
    bool prev = nb_set_grad_enabled(false);
    CU_ASSERT_FALSE(nb_is_grad_enabled());
    nb_tensor *y = nb_mul(x, x);
    nb_set_grad_enabled(prev);
    CU_ASSERT_FALSE(y->requires_grad);
    CU_ASSERT_PTR_NULL(y->node);
    NBT_ASSERT_VALUES(y, 0, 1, 4);
    /* detach: same storage, no history; the gradient flows only through the other path */
    nb_tensor *d = nb_detach(x);
    CU_ASSERT_FALSE(d->requires_grad);
    CU_ASSERT_PTR_EQUAL(d->storage, x->storage);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(x, d)), NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 1, 2);
    /* requires_grad propagates through ops; constants do not */
    CU_ASSERT_TRUE(nb_add(x, nb_ones(NB_F64, NB_SHAPE(2)))->requires_grad);
    CU_ASSERT_FALSE(nb_add(d, nb_ones(NB_F64, NB_SHAPE(2)))->requires_grad);
}

static void test_leaf_backward_and_deep_chain(void) {
    nb_tensor *x = leaf((double[]){4}, 1);
    CU_ASSERT_TRUE(nb_backward(x, NULL)); /* a leaf's own gradient is 1 */
    NBT_ASSERT_VALUES(nb_grad(x), 0, 1);
    /* 20000 chained ops: the traversal is iterative, so no stack overflow */
    nb_tensor *y = leaf((double[]){1}, 1);
    nb_tensor *h = y;
    for (int i = 0; i < 20000; i++) h = nb_add_scalar(h, 1e-3);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul_scalar(h, 2)), NULL));
    NBT_ASSERT_VALUES(nb_grad(y), 0, 2);
}

/* log(x) at x = 1e-7 with eps 1e-6: the numeric side evaluates log of a negative number,
 * a NaN value, not a failure. */
static nb_tensor *log_fn(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_log(in[0]);
}

/* gradcheck tells a NaN value from a failed evaluation by the errors recorded during it, not
 * by whether an older error's message is still there (nb_last_error's rule). */
static void test_gradcheck_ignores_older_errors(void) {
    nb_tensor *x = nb_requires_grad_(nb_full(NB_F64, NB_SHAPE(1), 1e-7), true);
    nb_gradcheck_result clean, stale;
    nb_clear_error();
    CU_ASSERT_FALSE(nb_gradcheck(log_fn, 1, &x, NULL, NULL, &clean));
    nb_error("earlier", "an unrelated failure the caller handled");
    CU_ASSERT_FALSE(nb_gradcheck(log_fn, 1, &x, NULL, NULL, &stale));
    CU_ASSERT_PTR_NOT_NULL(strstr(clean.message, "worst at input 0 element 0"));
    CU_ASSERT_STRING_EQUAL(stale.message, clean.message);
}

/* Nodes with more inputs than fit inline (nb_stack of 6) and with several outputs (a user
 * function's 2) take their pointer arrays from the thread's free arrays: a step that records
 * the same graph again allocates nothing after the first. */
static bool pair_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                         nb_tensor **out) {
    (void)ctx, (void)nin, (void)nout;
    out[0] = nb_clone(in[0]);
    out[1] = nb_mul_scalar(in[0], 2);
    return out[0] && out[1];
}
static bool pair_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                          nb_tensor **gin) {
    (void)ctx, (void)nout, (void)nin;
    gin[0] = nb_add(gout[0], nb_mul_scalar(gout[1], 2));
    return gin[0] != NULL;
}

static void test_many_inputs_allocate_nothing_when_repeated(void) {
    static const nb_function pair = {"pair", pair_forward, pair_backward};
    nb_tensor *x[6];
    for (int k = 0; k < 6; k++) x[k] = nb_requires_grad_(nb_full(NB_F64, NB_SHAPE(3), k), true);
    uint64_t before = 0;
    for (int step = 0; step < 4; step++) {
        if (step == 2) before = nb_alloc_count();
        nb_scope_begin();
        nb_tensor *pair_out[2];
        CU_ASSERT_TRUE(
            nb_function_apply(&pair, 1, (const nb_tensor *const[]){x[0]}, 2, pair_out, NULL));
        nb_tensor *stacked = nb_stack(6, x, 0);
        nb_tensor *loss = nb_add(nb_sum(stacked), nb_add(nb_sum(pair_out[0]), nb_sum(pair_out[1])));
        CU_ASSERT_TRUE(nb_backward(loss, NULL));
        nb_scope_end();
    }
    CU_ASSERT_EQUAL(nb_alloc_count() - before, 0);
    /* Four steps of d/dx0 (1 + 1 + 2) and of d/dxk 1 for the others. */
    NBT_ASSERT_VALUES(nb_grad(x[0]), 0, 16, 16, 16);
    NBT_ASSERT_VALUES(nb_grad(x[5]), 0, 4, 4, 4);
}

int main(void) {
    const nbtest_case cases[] = {
        {"many-input nodes allocate nothing when repeated",
         test_many_inputs_allocate_nothing_when_repeated},
        {"fan-out sums gradients", test_fan_out_sums},
        {"diamond graph", test_diamond},
        {"grads accumulate until zero_grad", test_accumulates_until_zero_grad},
        {"linear adds into an existing weight gradient", test_linear_weight_grad_accumulates},
        {"linear adds into an existing bias gradient", test_linear_bias_grad_accumulates},
        {"non-scalar backward needs grad_output", test_non_scalar_needs_grad_output},
        {"errors", test_errors},
        {"gradcheck ignores an older error's message", test_gradcheck_ignores_older_errors},
        {"no_grad, detach, requires_grad propagation", test_no_grad_and_detach},
        {"leaf backward and a deep chain", test_leaf_backward_and_deep_chain},
    };
    return nbtest_run("autograd", cases, sizeof cases / sizeof cases[0]);
}
