/* User-defined differentiable functions (nabla/function.h), backward failures, and the
 * one-pass rule of nb_backward (retain_graph). */
#include "harness.h"
#include "tensor/nbt.h" /* nbt_fail_storage_after */

#include <stdio.h>

/* ---- gather_scale(x [N, D], idx int64 [M], w [D]) = x[idx] * w, shape [M, D] ----
 * Three inputs, one of them (idx) not differentiable; w is broadcast over the rows. */
typedef struct {
    int backward_calls, dx_computed;
    bool grad_mode_in_backward;
} counters;

static bool gather_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                           nb_tensor **out) {
    (void)nin, (void)nout;
    nb_tensor *rows = nb_f_embedding(in[0], in[1]); /* x[idx]; records nothing: grad mode off */
    out[0] = nb_mul(rows, in[2]);
    /* Save only what the needed gradients use: dx needs idx and w, dw needs x[idx]. */
    bool ok = nb_ctx_save(ctx, in[1]) && nb_ctx_save(ctx, in[2]) && nb_ctx_save(ctx, rows);
    return ok && nb_ctx_save_scalar(ctx, (double)in[0]->shape[0]) && out[0];
}

static bool gather_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                            nb_tensor **gin) {
    (void)nout, (void)nin;
    counters *c = nb_ctx_user(ctx);
    c->backward_calls++;
    c->grad_mode_in_backward = nb_is_grad_enabled();
    const nb_tensor *idx = nb_ctx_saved(ctx, 0), *w = nb_ctx_saved(ctx, 1);
    const nb_tensor *rows = nb_ctx_saved(ctx, 2);
    if (nb_ctx_needs_input_grad(ctx, 0)) { /* scatter-add gout * w into the gathered rows */
        c->dx_computed++;
        int64_t N = (int64_t)nb_ctx_scalar(ctx, 0), M = idx->shape[0], D = w->shape[0];
        nb_tensor *dx = nb_zeros(NB_F64, NB_SHAPE(N, D));
        nb_tensor *g = nb_contiguous(nb_mul(gout[0], w));
        if (!dx || !g) return false;
        const double *gp = nb_data(g);
        double *dp = nb_data(dx);
        for (int64_t m = 0; m < M; m++) {
            int64_t r = (int64_t)nb_get(idx, NB_IDX(m));
            for (int64_t d = 0; d < D; d++) dp[r * D + d] += gp[m * D + d];
        }
        gin[0] = dx;
    }
    /* dw: the [M, D] product summed down to w's [D] with the public helper. */
    if (nb_ctx_needs_input_grad(ctx, 2))
        gin[2] = nb_sum_to_shape(nb_mul(gout[0], rows), w->ndim, w->shape);
    return true;
}

static const nb_function gather_scale = {"gather_scale", gather_forward, gather_backward};

typedef struct {
    const nb_tensor *idx;
    counters c;
} gather_case;

static nb_tensor *run_gather(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    gather_case *gc = vctx;
    return nb_function_apply1(&gather_scale, 3, (const nb_tensor *[]){in[0], gc->idx, in[1]},
                              &gc->c);
}

static void test_gradcheck_with_index_input(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 3);
    gather_case gc = {.idx = nb_from_array(NB_I64, NB_SHAPE(5), (int64_t[]){2, 0, 2, 3, 1})};
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(4, 3)), true);
    nb_tensor *w = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(3)), true);
    nb_gradcheck_result res;
    CU_ASSERT_TRUE(nb_gradcheck(run_gather, 2, (nb_tensor *[]){x, w}, &gc, NULL, &res));
    printf("  %s\n", res.message);
    CU_ASSERT_TRUE(gc.c.backward_calls >= 1);
    CU_ASSERT_FALSE(gc.c.grad_mode_in_backward);
    /* A non-contiguous x (a transposed leaf) and a strided w (every other element). */
    nb_tensor *xt = nb_requires_grad_(
        nb_detach(nb_transpose(nb_randn(&rng, NB_F64, NB_SHAPE(3, 4)), 0, 1)), true);
    nb_tensor *ws = nb_requires_grad_(
        nb_detach(nb_select(nb_view(nb_randn(&rng, NB_F64, NB_SHAPE(6)), NB_SHAPE(3, 2)), 1, 0)),
        true);
    CU_ASSERT_FALSE(nb_is_contiguous(xt) || nb_is_contiguous(ws));
    CU_ASSERT_TRUE(nb_gradcheck(run_gather, 2, (nb_tensor *[]){xt, ws}, &gc, NULL, &res));
    printf("  non-contiguous: %s\n", res.message);
    /* Values by hand: x = 0..11 as [4, 3], w = (1, 2, 3), idx = (3, 0): out = x[idx] * w. */
    nb_tensor *xv = nb_requires_grad_(nb_view(nb_arange(NB_F64, 0, 12, 1), NB_SHAPE(4, 3)), true);
    nb_tensor *wv = nb_from_array(NB_F64, NB_SHAPE(3), (double[]){1, 2, 3});
    gather_case hand = {.idx = nb_from_array(NB_I64, NB_SHAPE(2), (int64_t[]){3, 0})};
    nb_tensor *y = run_gather((nb_tensor *[]){xv, wv}, 2, &hand);
    NBT_ASSERT_VALUES(y, 0, 9, 20, 33, 0, 2, 6);
    CU_ASSERT_TRUE(y->requires_grad);
    CU_ASSERT_TRUE(nb_backward(nb_sum(y), NULL));
    NBT_ASSERT_VALUES(nb_grad(xv), 0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 1, 2, 3);
    CU_ASSERT_PTR_NULL(nb_grad(wv));
    CU_ASSERT_EQUAL(hand.c.backward_calls, 1);
}

/* Only w requires grad: backward is asked for dw alone and skips the scatter. */
static void test_needs_input_grad(void) {
    nb_tensor *x = nb_ones(NB_F64, NB_SHAPE(2, 2));
    nb_tensor *w = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2)), true);
    gather_case gc = {.idx = nb_from_array(NB_I64, NB_SHAPE(3), (int64_t[]){1, 1, 0})};
    CU_ASSERT_TRUE(nb_backward(nb_sum(run_gather((nb_tensor *[]){x, w}, 2, &gc)), NULL));
    CU_ASSERT_EQUAL(gc.c.backward_calls, 1);
    CU_ASSERT_EQUAL(gc.c.dx_computed, 0);
    NBT_ASSERT_VALUES(nb_grad(w), 0, 3, 3);
    /* Nothing requires grad: no node, the output is a plain tensor. */
    nb_tensor *plain = run_gather((nb_tensor *[]){x, nb_ones(NB_F64, NB_SHAPE(2))}, 2, &gc);
    CU_ASSERT_TRUE(plain && !plain->requires_grad && !plain->node);
}

/* ---- prod_and_sum(x, y) = (x * y, sum(x), argmax-like int64 [1]): three outputs ---- */
typedef struct {
    int calls;
    bool second_got_zeros, third_null;
} multi_log;

static bool multi_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                          nb_tensor **out) {
    (void)nin, (void)nout;
    out[0] = nb_mul(in[0], in[1]);
    out[1] = nb_sum(in[0]);
    out[2] = nb_zeros(NB_I64, NB_SHAPE(1));
    return nb_ctx_save(ctx, in[0]) && nb_ctx_save(ctx, in[1]);
}

static bool multi_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                           nb_tensor **gin) {
    (void)nout, (void)nin;
    multi_log *log = nb_ctx_user(ctx);
    log->calls++;
    log->second_got_zeros = gout[1] && nb_item(gout[1]) == 0;
    log->third_null = gout[2] == NULL;
    const nb_tensor *x = nb_ctx_saved(ctx, 0), *y = nb_ctx_saved(ctx, 1);
    /* d/dx: ga * y + gb (gb a scalar, broadcast: the engine sums it down if needed) */
    gin[0] = nb_add(nb_mul(gout[0], y), gout[1]);
    gin[1] = nb_mul(gout[0], x);
    return gin[0] && gin[1];
}

static const nb_function prod_and_sum = {"prod_and_sum", multi_forward, multi_backward};

static nb_tensor *run_multi(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    nb_tensor *out[3];
    if (!nb_function_apply(&prod_and_sum, 2, (const nb_tensor *const *)in, 3, out, ctx))
        return NULL;
    return nb_add(out[0], nb_mul_scalar(out[1], 3)); /* both float outputs reach the loss */
}

static void test_multi_output(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(2, 3)), true);
    nb_tensor *y = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(2, 3)), true);
    multi_log log = {0};
    nb_gradcheck_result res;
    CU_ASSERT_TRUE(nb_gradcheck(run_multi, 2, (nb_tensor *[]){x, y}, &log, NULL, &res));
    printf("  %s\n", res.message);
    /* One backward per nb_backward, after both outputs' gradients are in. */
    log = (multi_log){0};
    nb_zero_grad(x), nb_zero_grad(y);
    CU_ASSERT_TRUE(nb_backward(nb_sum(run_multi((nb_tensor *[]){x, y}, 2, &log)), NULL));
    CU_ASSERT_EQUAL(log.calls, 1);
    CU_ASSERT_TRUE(log.third_null);
    /* d/dx sum(x*y + 3 sum(x)) = y + 3*6 */
    NBT_ASSERT_CLOSE(nb_grad(x), nb_add_scalar(y, 18), 1e-12, 0);
    /* Only the first output used: the second's gradient arrives as zeros. */
    nb_tensor *out[3];
    CU_ASSERT_TRUE(nb_function_apply(&prod_and_sum, 2, (const nb_tensor *[]){x, y}, 3, out, &log));
    CU_ASSERT_FALSE(out[2]->requires_grad); /* int64: not differentiable */
    CU_ASSERT_TRUE(out[1]->requires_grad);
    CU_ASSERT_TRUE(nb_backward(nb_sum(out[0]), NULL));
    CU_ASSERT_EQUAL(log.calls, 2);
    CU_ASSERT_TRUE(log.second_got_zeros);
}

/* ---- failures ---- */
static bool fail_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                         nb_tensor **out) {
    (void)ctx, (void)nin, (void)nout;
    int mode = *(int *)nb_ctx_user(ctx);
    if (mode == 0) return false; /* no message */
    if (mode == 1) return nb_error("failing", "forward could not: %d", 42), false;
    out[0] = mode == 2 ? (nb_tensor *)in[0] : nb_mul_scalar(in[0], 2); /* 2: returns its input */
    return true;
}

static bool fail_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                          nb_tensor **gin) {
    (void)nout, (void)nin;
    int mode = *(int *)nb_ctx_user(ctx);
    if (mode == 3)
        return nb_error("failing", "backward exploded at %s", nb_shape_text(gout[0])), false;
    if (mode == 4) return false;
    if (mode == 5) return (gin[0] = nb_ones(NB_F64, NB_SHAPE(7))), true; /* wrong shape */
    if (mode == 6) return (gin[0] = nb_matmul(gout[0], gout[0])), true;  /* an op fails */
    gin[0] = nb_mul_scalar((nb_tensor *)gout[0], 2);
    return true;
}

static const nb_function failing = {"failing", fail_forward, fail_backward};

static void test_forward_failures(void) {
    nb_tensor *x = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2, 3)), true);
    int mode = 0;
    CU_ASSERT_PTR_NULL(nb_function_apply1(&failing, 1, (const nb_tensor *[]){x}, &mode));
    NBT_ASSERT_ERROR("failing: forward returned false");
    mode = 1;
    CU_ASSERT_PTR_NULL(nb_function_apply1(&failing, 1, (const nb_tensor *[]){x}, &mode));
    NBT_ASSERT_ERROR("forward could not: 42");
    mode = 2;
    CU_ASSERT_PTR_NULL(nb_function_apply1(&failing, 1, (const nb_tensor *[]){x}, &mode));
    NBT_ASSERT_ERROR("output 0 (shape [2, 3]) requires grad already");
    nb_tensor *out[2];
    CU_ASSERT_FALSE(nb_function_apply(&failing, 1, (const nb_tensor *[]){x}, 0, out, &mode));
    NBT_ASSERT_ERROR("1 to 16 outputs");
    CU_ASSERT_FALSE(nb_function_apply(NULL, 1, (const nb_tensor *[]){x}, 1, out, &mode));
    NBT_ASSERT_ERROR("needs a name");
}

/* ---- forwards and backwards that recover from an error by themselves ---- */
/* mode 0: try nb_matmul(x, x) (fails on [2, 3]), clear the error, fall back to 2x.
 * mode 1: the same without clearing: the error stands, and fails the call.
 * mode 2: 2 * nb_reshape(x^T, [6]), which copies where no view exists.
 * mode 3: clear the error, then return false. */
static bool recover_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                            nb_tensor **out) {
    (void)nin, (void)nout;
    int mode = *(int *)nb_ctx_user(ctx);
    if (mode == 2) {
        out[0] = nb_mul_scalar(nb_reshape(nb_transpose(in[0], 0, 1), NB_SHAPE(6)), 2);
        return out[0] != NULL;
    }
    out[0] = nb_matmul(in[0], in[0]);
    if (out[0]) return true;
    if (mode != 1) nb_clear_error();
    if (mode == 3) return false;
    out[0] = nb_mul_scalar(in[0], 2);
    return out[0] != NULL;
}

/* The same in backward: 2 * gout after a failed matmul; mode 2 undoes the forward's reshape
 * and transpose. */
static bool recover_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                             nb_tensor **gin) {
    (void)nout, (void)nin;
    int mode = *(int *)nb_ctx_user(ctx);
    if (mode == 2) {
        gin[0] = nb_mul_scalar(nb_transpose(nb_reshape(gout[0], NB_SHAPE(2, 3)), 0, 1), 2);
        return gin[0] != NULL;
    }
    if (nb_matmul(gout[0], gout[0])) return false; /* [2, 3] @ [2, 3] must fail */
    if (mode != 1) nb_clear_error();
    if (mode == 3) return false;
    gin[0] = nb_mul_scalar(gout[0], 2);
    return gin[0] != NULL;
}

static const nb_function recovering = {"recovering", recover_forward, recover_backward};

static void test_recovered_errors(void) {
    for (int mode = 0; mode <= 2; mode += 2) {
        nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
        /* mode 2 takes x^T [3, 2], which its forward transposes back */
        nb_tensor *in =
            nb_requires_grad_(mode == 2 ? nb_contiguous(nb_transpose(x, 0, 1)) : x, true);
        nb_tensor *y = nb_function_apply1(&recovering, 1, (const nb_tensor *[]){in}, &mode);
        CU_ASSERT_PTR_NOT_NULL(y);
        if (!y) {
            printf("  mode %d: '%s'\n", mode, nb_last_error());
            continue;
        }
        NBT_ASSERT_VALUES(y, 0, 2, 4, 6, 8, 10, 12);
        /* d sum(2 x)/dx = 2, and the same through the transpose and reshape */
        CU_ASSERT_TRUE(nb_backward(nb_sum(y), NULL));
        NBT_ASSERT_VALUES(nb_grad(in), 0, 2, 2, 2, 2, 2, 2);
    }
    /* An error left standing fails the call with its own message, in forward and backward. */
    nb_tensor *x = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2, 3)), true);
    int mode = 1;
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_function_apply1(&recovering, 1, (const nb_tensor *[]){x}, &mode));
    NBT_ASSERT_ERROR("matmul");
    int later = 0;
    nb_tensor *y = nb_function_apply1(&recovering, 1, (const nb_tensor *[]){x}, &later);
    later = 1;
    CU_ASSERT_FALSE(nb_backward(nb_sum(y), NULL));
    NBT_ASSERT_ERROR("in the backward of recovering: matmul");
    /* Returning false after clearing the message still reports something, never "". */
    mode = 3;
    CU_ASSERT_PTR_NULL(nb_function_apply1(&recovering, 1, (const nb_tensor *[]){x}, &mode));
    NBT_ASSERT_ERROR("recovering: forward returned false");
    later = 0;
    y = nb_function_apply1(&recovering, 1, (const nb_tensor *[]){x}, &later);
    later = 3;
    CU_ASSERT_FALSE(nb_backward(nb_sum(y), NULL));
    NBT_ASSERT_ERROR("recovering: backward returned false");
}

/* function.h forbids outputs that are views of inputs: they would share the input's memory,
 * so writing the input would change the output. */
static bool view_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                         nb_tensor **out) {
    (void)nin;
    int mode = *(int *)nb_ctx_user(ctx);
    out[0] = nb_mul_scalar(in[0], 2);
    if (nout > 1)
        out[1] = mode == 0   ? nb_view(in[1], NB_SHAPE(6))
                 : mode == 1 ? nb_transpose(in[1], 0, 1)
                 : mode == 2 ? (nb_tensor *)in[1]
                             : nb_clone(in[1]);
    return true;
}

static const nb_function viewing = {"viewing", view_forward, recover_backward};

static void test_outputs_viewing_inputs(void) {
    nb_tensor *a = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2, 3)), true);
    nb_tensor *b = nb_ones(NB_F64, NB_SHAPE(2, 3)); /* needs no grad */
    nb_tensor *out[2];
    const char *expected[] = {"output 1 (shape [6]) shares memory with input 1",
                              "output 1 (shape [3, 2]) shares memory with input 1",
                              "output 1 (shape [2, 3]) is input 1"};
    for (int mode = 0; mode < 3; mode++) {
        nb_clear_error();
        CU_ASSERT_FALSE(nb_function_apply(&viewing, 2, (const nb_tensor *[]){a, b}, 2, out, &mode));
        NBT_ASSERT_ERROR(expected[mode]);
        CU_ASSERT_PTR_NULL(out[1]);
    }
    /* A view of a grad-requiring input too (grad mode is off in forward, so no history). */
    int mode = 0;
    CU_ASSERT_FALSE(nb_function_apply(&viewing, 2, (const nb_tensor *[]){a, a}, 2, out, &mode));
    NBT_ASSERT_ERROR("output 1 (shape [6]) shares memory with input 0");
    mode = 3; /* a copy is fine, and stays apart from the input */
    CU_ASSERT_TRUE(nb_function_apply(&viewing, 2, (const nb_tensor *[]){a, b}, 2, out, &mode));
    nb_fill_(b, 7);
    NBT_ASSERT_VALUES(out[1], 0, 1, 1, 1, 1, 1, 1);
}

static void test_backward_failures_return_false(void) {
    nb_tensor *x = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2, 3)), true);
    struct {
        int mode;
        const char *message;
    } cases[] = {
        {3, "backward exploded at [2, 3]"},
        {4, "failing: backward returned false"},
        {5, "gradient for input 0 of float64 [7]"},
        {6, "matmul"},
    };
    for (int i = 0; i < 4; i++) {
        nb_clear_error();
        /* A built-in op after the function: the failure happens mid-graph. */
        nb_tensor *y = nb_function_apply1(&failing, 1, (const nb_tensor *[]){x}, &cases[i].mode);
        CU_ASSERT_FALSE(nb_backward(nb_sum(nb_tanh(y)), NULL));
        NBT_ASSERT_ERROR(cases[i].message);
        NBT_ASSERT_ERROR("in the backward of failing");
    }
    int ok_mode = 7;
    CU_ASSERT_TRUE(nb_backward(
        nb_sum(nb_function_apply1(&failing, 1, (const nb_tensor *[]){x}, &ok_mode)), NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 2, 2, 2, 2, 2, 2);
}

/* A built-in backward that runs out of memory: nb_backward reports it. Every allocation of
 * the backward pass is made to fail in turn; each must give false with the message, and
 * once no allocation fails the pass succeeds. */
static void test_builtin_backward_out_of_memory(void) {
    int failures = 0;
    bool succeeded = false;
    for (int k = 0; k < 64 && !succeeded; k++) {
        nb_scope_begin();
        nb_tensor *x = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(3, 4)), true);
        nb_tensor *w = nb_requires_grad_(nb_full(NB_F64, NB_SHAPE(4, 2), 0.5), true);
        nb_tensor *loss = nb_sum(nb_softmax(nb_matmul(nb_tanh(x), w), -1));
        nb_clear_error();
        nbt_fail_storage_after(k);
        bool ok = nb_backward(loss, NULL);
        nbt_fail_storage_after(-1);
        if (ok)
            succeeded = true;
        else {
            failures++;
            CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), "out of memory"));
        }
        nb_scope_end();
    }
    CU_ASSERT_TRUE(succeeded);
    CU_ASSERT_TRUE(failures >= 3); /* the seed, then several backward functions */
    printf("  %d allocations in backward, each failure reported\n", failures);
}

/* ---- one pass per graph unless retained ---- */
static void test_second_backward(void) {
    /* max_dim saves its indices, which the first pass releases. x = [1, 2]: max(x * x) = 4,
     * whose gradient is [0, 2 * 2]. */
    nb_tensor *x = nb_requires_grad_(nb_from_array(NB_F64, NB_SHAPE(2), (double[]){1, 2}), true);
    nb_tensor *loss = nb_max_dim(nb_mul(x, x), 0, false, NULL);
    CU_ASSERT_TRUE(nb_backward(loss, NULL));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 4);
    CU_ASSERT_FALSE(nb_backward(loss, NULL));
    NBT_ASSERT_ERROR("second time");
    NBT_ASSERT_ERROR("max_dim's backward already ran");
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 4); /* unchanged */
    /* A new loss over the consumed max is refused too, naming the op that was consumed. */
    nb_tensor *top = nb_max_dim(nb_mul(x, x), 0, false, NULL);
    CU_ASSERT_TRUE(nb_backward(top, NULL));
    CU_ASSERT_FALSE(nb_backward(nb_mul_scalar(top, 2), NULL));
    NBT_ASSERT_ERROR("max_dim's backward already ran");
    /* retain_graph: the second pass works and accumulates. */
    nb_zero_grad(x);
    nb_tensor *kept = nb_max_dim(nb_mul(x, x), 0, false, NULL);
    nb_backward_opts retain = {.retain_graph = true};
    CU_ASSERT_TRUE(nb_backward_with(kept, NULL, &retain));
    CU_ASSERT_TRUE(nb_backward_with(kept, NULL, &retain));
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 8);
    CU_ASSERT_TRUE(nb_backward(kept, NULL)); /* the last pass may release */
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 12);
    CU_ASSERT_FALSE(nb_backward(kept, NULL));
    /* The same for a user function: its saved tensors are dropped after one pass. */
    gather_case gc = {.idx = nb_from_array(NB_I64, NB_SHAPE(1), (int64_t[]){0})};
    nb_tensor *w = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2)), true);
    nb_tensor *g = run_gather((nb_tensor *[]){nb_ones(NB_F64, NB_SHAPE(1, 2)), w}, 2, &gc);
    nb_tensor *seed = nb_ones(NB_F64, NB_SHAPE(1, 2));
    CU_ASSERT_TRUE(nb_backward_with(g, seed, &retain));
    CU_ASSERT_PTR_NOT_NULL(nb_ctx_saved(g->node, 0)); /* retained */
    CU_ASSERT_TRUE(nb_backward(g, seed));
    CU_ASSERT_EQUAL(gc.c.backward_calls, 2);
    CU_ASSERT_PTR_NULL(nb_ctx_saved(g->node, 0)); /* released by the last pass */
    NBT_ASSERT_ERROR("released after backward ran");
    NBT_ASSERT_VALUES(nb_grad(w), 0, 2, 2);
    CU_ASSERT_FALSE(nb_backward(g, seed));
    NBT_ASSERT_ERROR("gather_scale");
    CU_ASSERT_EQUAL(gc.c.backward_calls, 2);
}

/* Nodes that saved no tensors lose nothing in a pass, so a second backward through them
 * works. PyTorch: x = leaf.t(); (2 * x).sum().backward(); (3 * x).sum().backward() leaves
 * leaf.grad = 5 everywhere. */
static bool scale_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                          nb_tensor **out) {
    (void)ctx, (void)nin, (void)nout;
    out[0] = nb_mul_scalar(in[0], 4); /* saves nothing */
    return out[0] != NULL;
}

static bool scale_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                           nb_tensor **gin) {
    (void)ctx, (void)nout, (void)nin;
    gin[0] = nb_mul_scalar(gout[0], 4);
    return gin[0] != NULL;
}

static const nb_function scale4 = {"scale4", scale_forward, scale_backward};

static void test_second_backward_without_saved_tensors(void) {
    nb_tensor *leaf = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2, 3)), true);
    nb_tensor *x = nb_transpose(leaf, 0, 1);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul_scalar(x, 2)), NULL));
    NBT_ASSERT_VALUES(nb_grad(leaf), 0, 2, 2, 2, 2, 2, 2);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul_scalar(x, 3)), NULL));
    NBT_ASSERT_VALUES(nb_grad(leaf), 0, 5, 5, 5, 5, 5, 5);
    /* The same loss twice: sum, scaling and transpose keep what they need. */
    nb_tensor *loss = nb_sum(nb_mul_scalar(x, 2));
    CU_ASSERT_TRUE(nb_backward(loss, NULL));
    CU_ASSERT_TRUE(nb_backward(loss, NULL));
    NBT_ASSERT_VALUES(nb_grad(leaf), 0, 9, 9, 9, 9, 9, 9);
    /* A user function that saved no tensors (only, here, nothing at all) runs again too. */
    nb_zero_grad(leaf);
    nb_tensor *y = nb_function_apply1(&scale4, 1, (const nb_tensor *[]){x}, NULL);
    CU_ASSERT_TRUE(nb_backward(nb_sum(y), NULL));
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul_scalar(y, 2)), NULL));
    NBT_ASSERT_VALUES(nb_grad(leaf), 0, 12, 12, 12, 12, 12, 12); /* 4 + 2 * 4 */
    /* Past a node that saved something, the refusal still names that node. */
    nb_tensor *g = nb_gelu(x);
    CU_ASSERT_TRUE(nb_backward(nb_sum(g), NULL));
    CU_ASSERT_FALSE(nb_backward(nb_sum(nb_mul_scalar(g, 2)), NULL));
    NBT_ASSERT_ERROR("gelu's backward already ran and released what it saved");
}

static void test_sum_to_shape(void) {
    nb_tensor *g = nb_view(nb_arange(NB_F64, 0, 6, 1), NB_SHAPE(2, 3));
    NBT_ASSERT_VALUES(nb_sum_to_shape(g, NB_SHAPE(3)), 0, 3, 5, 7);
    NBT_ASSERT_VALUES(nb_sum_to_shape(g, NB_SHAPE(2, 1)), 0, 3, 12);
    NBT_ASSERT_VALUES(nb_sum_to_shape(g, NB_SHAPE(1, 1)), 0, 15);
    NBT_ASSERT_VALUES(nb_sum_to_shape(g, NB_SHAPE(2, 3)), 0, 0, 1, 2, 3, 4, 5);
    CU_ASSERT_PTR_NULL(nb_sum_to_shape(g, NB_SHAPE(4)));
    NBT_ASSERT_ERROR("does not broadcast from [4]");
    CU_ASSERT_PTR_NULL(nb_sum_to_shape(g, NB_SHAPE(3, 2, 3)));
    NBT_ASSERT_ERROR("[2, 3] does not broadcast");
    CU_ASSERT_PTR_NULL(nb_sum_to_shape(nb_zeros(NB_I64, NB_SHAPE(2)), NB_SHAPE(1)));
    NBT_ASSERT_ERROR("sum_to_shape");
}

/* A loop of identical steps through a user function stops calling malloc after its first
 * step, as the built-in ops do (the function's recorded state is recycled). */
static void test_steps_do_not_allocate(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 8);
    nb_tensor *x = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(4, 3)), true);
    nb_tensor *w = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(3)), true);
    gather_case gc = {.idx = nb_from_array(NB_I64, NB_SHAPE(5), (int64_t[]){2, 0, 2, 3, 1})};
    uint64_t allocs[3];
    for (int step = 0; step < 3; step++) {
        uint64_t before = nb_alloc_count();
        nb_scope_begin();
        nb_tensor *y = run_gather((nb_tensor *[]){x, w}, 2, &gc);
        CU_ASSERT_TRUE(nb_backward(nb_sum(y), NULL));
        nb_scope_end();
        allocs[step] = nb_alloc_count() - before;
    }
    CU_ASSERT_EQUAL(allocs[1], 0); /* (the first step may find the pools warm already) */
    CU_ASSERT_EQUAL(allocs[2], 0);
}

static void test_context_misuse(void) {
    CU_ASSERT_FALSE(nb_ctx_save(NULL, nb_ones(NB_F64, NB_SHAPE(1))));
    NBT_ASSERT_ERROR("not a user function's context");
    CU_ASSERT_PTR_NULL(nb_ctx_saved(NULL, 0));
    CU_ASSERT_TRUE(isnan(nb_ctx_scalar(NULL, 0)));
    CU_ASSERT_FALSE(nb_ctx_needs_input_grad(NULL, 0));
}

int main(void) {
    const nbtest_case cases[] = {
        {"gradcheck: index input, broadcast weight", test_gradcheck_with_index_input},
        {"needs_input_grad and no-grad calls", test_needs_input_grad},
        {"several outputs: one backward, zeros, int outputs", test_multi_output},
        {"forward failures", test_forward_failures},
        {"forwards and backwards that recover from errors", test_recovered_errors},
        {"outputs that are views of inputs are refused", test_outputs_viewing_inputs},
        {"failing user backward: nb_backward false", test_backward_failures_return_false},
        {"built-in backward out of memory: false", test_builtin_backward_out_of_memory},
        {"second backward is an error unless retained", test_second_backward},
        {"second backward through nodes that saved nothing",
         test_second_backward_without_saved_tensors},
        {"nb_sum_to_shape", test_sum_to_shape},
        {"context misuse", test_context_misuse},
        {"steps through a function do not allocate", test_steps_do_not_allocate},
    };
    return nbtest_run("function", cases, (int)(sizeof cases / sizeof cases[0]));
}
