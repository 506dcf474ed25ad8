/* Backward releases each non-leaf gradient once its node's backward has run (autograd/
 * engine.c, "releasing gradients"): the memory a backward holds does not grow with the
 * graph's depth, gradients shared by several slots (add's backward, views, a user function
 * handing its gradient on) still arrive whole, and what the caller owns stays. The tensors
 * are [64, 64] float64 (32 KB), above the size the engine leaves to the scope. Expected
 * gradients are hand derivatives evaluated in the test. */
#include "harness.h"
#include "tensor/nbt.h" /* nbt_is_released */

#include <math.h>

#define N 64

static nb_tensor *random_leaf(uint64_t seed) {
    nb_rng rng;
    nb_rng_seed(&rng, seed);
    return nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(N, N)), true);
}

/* x scaled 48 times by 1.01: dL/dx = 1.01^48 everywhere. Before this change each of the 48
 * gradients stayed in the scope until it ended (49 more tensors after backward); now the
 * scope gains the leaf's gradient and the seed at most. */
static void test_depth_does_not_grow_memory(void) {
    nb_scope_begin();
    nb_tensor *x = random_leaf(1);
    nb_tensor *y = x;
    for (int i = 0; i < 48; i++) y = nb_mul_scalar(y, 1.01);
    nb_tensor *loss = nb_sum(y);
    CU_ASSERT_FATAL(loss != NULL);
    int64_t before = nb_scope_tensor_count();
    CU_ASSERT_TRUE_FATAL(nb_backward(loss, NULL));
    int64_t gained = nb_scope_tensor_count() - before;
    CU_ASSERT(gained <= 3);
    if (gained > 3) printf("\n  backward left %lld tensors in the scope\n", (long long)gained);
    const double expect = pow(1.01, 48);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(x->grad, NB_IDX(0, 0)), expect, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(x->grad, NB_IDX(N - 1, 5)), expect, 1e-12);
    nb_scope_end();
}

/* y = x * w * w ... (32 times, w a [1, N] row broadcast over x's rows), L = sum(y). Each
 * mul's backward makes w's [N, N] contribution gout * y before summing it to w's shape; that
 * product is spent once the backward returns. Before this was released, each of the 32 stayed
 * in the scope until it ended. dL/dx[i][j] = w[j]^32, dL/dw[j] = 32 w[j]^31 sum_i x[i][j]. */
static void test_backward_temporaries_do_not_stay(void) {
    nb_scope_begin();
    nb_tensor *x = random_leaf(5);
    nb_tensor *w = nb_empty(NB_F64, NB_SHAPE(1, N));
    for (int64_t j = 0; j < N; j++) nb_set(w, NB_IDX(0, j), 1.0 + 0.01 * (double)j / N);
    nb_requires_grad_(w, true);
    nb_tensor *y = x;
    for (int i = 0; i < 32; i++) y = nb_mul(y, w);
    nb_tensor *loss = nb_sum(y);
    CU_ASSERT_FATAL(loss != NULL);
    int64_t before = nb_scope_tensor_count();
    CU_ASSERT_TRUE_FATAL(nb_backward(loss, NULL));
    int64_t gained = nb_scope_tensor_count() - before;
    /* the seed, x's and w's gradients, w's small contributions: not one per mul of [N, N] */
    CU_ASSERT(gained <= 3 + 32);
    if (gained > 3 + 32) printf("\n  backward left %lld tensors in the scope\n", (long long)gained);
    double worst = 0;
    for (int64_t j = 0; j < N; j++) {
        double wj = nb_get(w, NB_IDX(0, j)), colsum = 0;
        for (int64_t i = 0; i < N; i++) {
            colsum += nb_get(x, NB_IDX(i, j));
            double err = fabs(nb_get(x->grad, NB_IDX(i, j)) - pow(wj, 32));
            worst = err > worst ? err : worst;
        }
        double err = fabs(nb_get(w->grad, NB_IDX(0, j)) - 32 * pow(wj, 31) * colsum);
        worst = err > worst ? err : worst;
    }
    CU_ASSERT(worst < 1e-9);
    nb_scope_end();
}

/* The largest |dL/dx - c tanh(x) (1 - tanh(x)^2)| over x's elements: the hand derivative of
 * the two tests below, which differ in c. */
static double tanh_gradient_error(const nb_tensor *x, double c) {
    double worst = 0;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++) {
            double t = tanh(nb_get(x, NB_IDX(i, j)));
            double err = fabs(nb_get(x->grad, NB_IDX(i, j)) - c * t * (1 - t * t));
            worst = err > worst ? err : worst;
        }
    return worst;
}

/* a = tanh(x), b = a + a (one gradient in both of add's slots), c = b^T * b^T through a
 * transpose (a view of the gradient): L = sum(c) = sum(4 tanh(x)^2), so
 * dL/dx = 8 tanh(x) (1 - tanh(x)^2). */
static void test_shared_gradients_arrive_whole(void) {
    nb_scope_begin();
    nb_tensor *x = random_leaf(2);
    nb_tensor *a = nb_tanh(x);
    nb_tensor *b = nb_add(a, a);
    nb_tensor *bt = nb_transpose(b, 0, 1);
    CU_ASSERT_TRUE_FATAL(nb_backward(nb_sum(nb_mul(bt, bt)), NULL));
    CU_ASSERT(tanh_gradient_error(x, 8) < 1e-12);
    /* The forward's results are the caller's: still there after backward. */
    CU_ASSERT_FALSE(nbt_is_released(b) || nbt_is_released(bt));
    CU_ASSERT_DOUBLE_EQUAL(nb_get(b, NB_IDX(3, 4)), 2 * tanh(nb_get(x, NB_IDX(3, 4))), 1e-15);
    nb_scope_end();
}

/* A user function whose backward hands on a view of the gradient it got. */
static bool pass_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                         nb_tensor **out) {
    (void)ctx, (void)nin, (void)nout;
    out[0] = nb_clone(in[0]);
    return out[0] != NULL;
}

static bool pass_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                          nb_tensor **gin) {
    (void)ctx, (void)nout, (void)nin;
    gin[0] = nb_reshape(gout[0], gout[0]->ndim, gout[0]->shape);
    return gin[0] != NULL;
}

static const nb_function pass = {"pass", pass_forward, pass_backward};

/* L = sum(p(p(tanh x))^2) with p the identity: dL/dx = 2 tanh(x) (1 - tanh(x)^2). */
static void test_user_function_hands_gradient_on(void) {
    nb_scope_begin();
    nb_tensor *x = random_leaf(3);
    nb_tensor *p = nb_function_apply1(&pass, 1, (const nb_tensor *[]){nb_tanh(x)}, NULL);
    p = nb_function_apply1(&pass, 1, (const nb_tensor *[]){p}, NULL);
    CU_ASSERT_TRUE_FATAL(nb_backward(nb_sum(nb_mul(p, p)), NULL));
    CU_ASSERT(tanh_gradient_error(x, 2) < 1e-12);
    nb_scope_end();
}

/* The caller's grad_output is never released, and a second backward through a retained
 * graph gives the same gradient again (added to the first). */
static void test_caller_tensors_stay(void) {
    nb_scope_begin();
    nb_tensor *x = random_leaf(4);
    nb_tensor *y = nb_mul_scalar(nb_mul_scalar(x, 3.0), 0.5);
    nb_tensor *go = nb_full(NB_F64, NB_SHAPE(N, N), 2.0);
    nb_backward_opts keep = {.retain_graph = true};
    CU_ASSERT_TRUE_FATAL(nb_backward_with(y, go, &keep));
    CU_ASSERT_FALSE(nbt_is_released(go));
    CU_ASSERT_DOUBLE_EQUAL(nb_get(go, NB_IDX(7, 9)), 2.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(x->grad, NB_IDX(7, 9)), 3.0, 1e-15);
    CU_ASSERT_TRUE_FATAL(nb_backward(y, go));
    CU_ASSERT_DOUBLE_EQUAL(nb_get(x->grad, NB_IDX(7, 9)), 6.0, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(y, NB_IDX(7, 9)), 1.5 * nb_get(x, NB_IDX(7, 9)), 1e-15);
    nb_scope_end();
}

int main(void) {
    const nbtest_case cases[] = {
        {"a deep chain's backward holds a bounded number of gradients",
         test_depth_does_not_grow_memory},
        {"what a backward made and dropped does not stay", test_backward_temporaries_do_not_stay},
        {"gradients shared by add's slots and a view arrive whole",
         test_shared_gradients_arrive_whole},
        {"a user function handing on a view of its gradient", test_user_function_hands_gradient_on},
        {"grad_output and retained graphs stay the caller's", test_caller_tensors_stay},
    };
    return nbtest_run("backward_release", cases, sizeof cases / sizeof cases[0]);
}
