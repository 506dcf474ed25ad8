/* nb_linears_forward: several Linear layers of one input. A single row with no gradient to
 * record runs as one job split across threads by all the layers' outputs (tensor/
 * row_products.c); it must give the bits of one nb_linear_forward per layer, on 1 and 2
 * threads, for float32 and float64, a bias or none, and a strided input. */
#include "harness.h"

#include <math.h>
#include <string.h>

static bool same_bits(const nb_tensor *a, const nb_tensor *b) {
    return a && b && nb_same_shape(a, b) && a->dtype == b->dtype &&
           memcmp(nb_data(nb_contiguous(a)), nb_data(nb_contiguous(b)),
                  (size_t)nb_numel(a) * nb_dtype_size(a->dtype)) == 0;
}

/* Three layers (with and without bias, output widths that are not multiples of the 64-output
 * split unit) of a 128-wide row, grouped and one by one. */
static void check_group(nb_dtype dt, bool strided, int threads) {
    nb_module *model = nb_model_new(dt, 7);
    nb_linear *layers[3] = {nb_linear_new(model, "q", 128, 128, true),
                            nb_linear_new(model, "k", 128, 72, false),
                            nb_linear_new(model, "v", 128, 200, true)};
    nb_rng rng;
    nb_rng_seed(&rng, 3);
    nb_scope_begin();
    nb_tensor *x = nb_randn(&rng, dt, NB_SHAPE(1, 1, 128));
    if (strided) /* every other element of a [1, 1, 256] row */
        x = nb_view(nb_select(nb_view(nb_randn(&rng, dt, NB_SHAPE(256)), NB_SHAPE(128, 2)), 1, 0),
                    NB_SHAPE(1, 1, 128));
    nb_set_num_threads(threads);
    const bool grad = nb_set_grad_enabled(false);
    nb_tensor *out[3];
    CU_ASSERT_TRUE_FATAL(nb_linears_forward(3, layers, x, out));
    for (int i = 0; i < 3; i++) {
        NBT_ASSERT_SHAPE(out[i], 1, 1, layers[i]->out_features);
        CU_ASSERT_TRUE(same_bits(out[i], nb_linear_forward(layers[i], x)));
        CU_ASSERT_FALSE(out[i]->requires_grad);
    }
    nb_set_grad_enabled(grad);
    nb_set_num_threads(0);
    nb_scope_end();
    nb_module_free(model);
}

static void test_group_equals_one_by_one(void) {
    for (int threads = 1; threads <= 2; threads++)
        for (int strided = 0; strided < 2; strided++) {
            check_group(NB_F32, strided, threads);
            check_group(NB_F64, strided, threads);
        }
}

/* Worked by hand: x = [1, 2], A = [[1, 0], [0, 1], [1, 1]] + [0.5, -1, 0], B = [[2, 3]]. */
static void test_values_by_hand(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_linear *a = nb_linear_new(model, "a", 2, 3, true),
              *b = nb_linear_new(model, "b", 2, 1, false);
    const float wa[] = {1, 0, 0, 1, 1, 1}, ba[] = {0.5f, -1, 0}, wb[] = {2, 3};
    memcpy(nb_data(a->weight), wa, sizeof wa);
    memcpy(nb_data(a->bias), ba, sizeof ba);
    memcpy(nb_data(b->weight), wb, sizeof wb);
    nb_scope_begin();
    const bool grad = nb_set_grad_enabled(false);
    nb_tensor *out[2];
    CU_ASSERT_TRUE_FATAL(
        nb_linears_forward(2, (nb_linear *[]){a, b},
                           nb_from_array(NB_F32, NB_SHAPE(1, 2), (const float[]){1, 2}), out));
    NBT_ASSERT_VALUES(out[0], 0, 1.5, 1, 3);
    NBT_ASSERT_VALUES(out[1], 0, 8);
    nb_set_grad_enabled(grad);
    nb_scope_end();
    nb_module_free(model);
}

/* With gradients recorded (training), or several rows, each layer is its own op: the outputs
 * carry their graph, and backward reaches every weight. */
static void test_training_goes_one_by_one(void) {
    nb_module *model = nb_model_new(NB_F64, 2);
    nb_linear *layers[2] = {nb_linear_new(model, "a", 4, 3, true),
                            nb_linear_new(model, "b", 4, 5, false)};
    nb_rng rng;
    nb_rng_seed(&rng, 4);
    nb_scope_begin();
    nb_tensor *x = nb_randn(&rng, NB_F64, NB_SHAPE(1, 4)), *out[2];
    CU_ASSERT_TRUE_FATAL(nb_linears_forward(2, layers, x, out));
    CU_ASSERT_TRUE(out[0]->requires_grad && out[1]->requires_grad);
    nb_backward(nb_add(nb_sum(out[0]), nb_sum(out[1])), NULL);
    /* d sum(x W^T) / dW[j, k] = x[k] for every output j */
    for (int i = 0; i < 2; i++) {
        nb_tensor *g = nb_grad(layers[i]->weight);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        for (int64_t j = 0; j < layers[i]->out_features; j++)
            for (int64_t k = 0; k < 4; k++)
                CU_ASSERT_EQUAL(nb_get(g, (int64_t[]){j, k}), nb_get(x, (int64_t[]){0, k}));
    }
    nb_scope_end();
    nb_module_free(model);
}

/* nb_linear_forward_act: one row without gradients (the activation inside the product's
 * tasks) gives the bits of the activation op applied to nb_linear_forward, for every
 * activation, float32 and float64, 1 and 2 threads; 520 outputs make several parts with a
 * short last vector. */
static nb_tensor *act_op(nb_activation act, nb_tensor *y) {
    return act == NB_ACT_GELU        ? nb_gelu(y)
           : act == NB_ACT_GELU_TANH ? nb_gelu_tanh(y)
           : act == NB_ACT_SILU      ? nb_silu(y)
                                     : y;
}

static void test_activation_equals_op(void) {
    for (int dti = 0; dti < 2; dti++) {
        const nb_dtype dt = dti ? NB_F64 : NB_F32;
        nb_module *model = nb_model_new(dt, 5);
        nb_linear *fc = nb_linear_new(model, "fc", 128, 520, true);
        nb_rng rng;
        nb_rng_seed(&rng, 9);
        nb_scope_begin();
        nb_tensor *x = nb_randn(&rng, dt, NB_SHAPE(1, 128));
        const bool grad = nb_set_grad_enabled(false);
        for (int threads = 1; threads <= 2; threads++) {
            nb_set_num_threads(threads);
            for (int a = NB_ACT_NONE; a <= NB_ACT_SILU; a++) {
                nb_tensor *y = nb_linear_forward_act(fc, x, (nb_activation)a);
                NBT_ASSERT_SHAPE(y, 1, 520);
                CU_ASSERT_TRUE(same_bits(y, act_op((nb_activation)a, nb_linear_forward(fc, x))));
            }
        }
        nb_set_num_threads(0);
        nb_set_grad_enabled(grad);
        nb_scope_end();
        nb_module_free(model);
    }
}

/* By hand: W = [[1, 0], [0, -1]], b = [0, 0], x = [1, 2]: x W^T = [1, -2]; silu(1) =
 * 1 / (1 + e^-1), silu(-2) = -2 / (1 + e^2); gelu(1) = Phi(1), gelu(-2) = -2 Phi(-2). */
static void test_activation_by_hand(void) {
    nb_module *model = nb_model_new(NB_F64, 1);
    nb_linear *fc = nb_linear_new(model, "fc", 2, 2, true);
    const double w[] = {1, 0, 0, -1}, b[] = {0, 0};
    memcpy(nb_data(fc->weight), w, sizeof w);
    memcpy(nb_data(fc->bias), b, sizeof b);
    nb_scope_begin();
    const bool grad = nb_set_grad_enabled(false);
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(1, 2), (const double[]){1, 2});
    nb_tensor *s = nb_linear_forward_act(fc, x, NB_ACT_SILU);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(s, NB_IDX(0, 0)), 1 / (1 + exp(-1.0)), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(s, NB_IDX(0, 1)), -2 / (1 + exp(2.0)), 1e-15);
    nb_tensor *g = nb_linear_forward_act(fc, x, NB_ACT_GELU);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(g, NB_IDX(0, 0)), 0.5 * (1 + erf(1 / sqrt(2.0))), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(nb_get(g, NB_IDX(0, 1)), -2 * 0.5 * (1 + erf(-2 / sqrt(2.0))), 1e-15);
    nb_set_grad_enabled(grad);
    nb_scope_end();
    nb_module_free(model);
}

/* With gradients recorded the activation is its own op: backward reaches the weight, and
 * d sum(silu(x W^T + b)) / db = silu'(x W^T + b). */
static void test_activation_training(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    nb_linear *fc = nb_linear_new(model, "fc", 3, 2, true);
    nb_rng rng;
    nb_rng_seed(&rng, 6);
    nb_scope_begin();
    nb_tensor *x = nb_randn(&rng, NB_F64, NB_SHAPE(1, 3));
    nb_tensor *y = nb_linear_forward_act(fc, x, NB_ACT_SILU);
    CU_ASSERT_TRUE_FATAL(y && y->requires_grad);
    CU_ASSERT_TRUE_FATAL(nb_backward(nb_sum(y), NULL));
    nb_tensor *h = nb_linear_forward(fc, x);
    for (int64_t j = 0; j < 2; j++) {
        double z = nb_get(h, NB_IDX(0, j)), sg = 1 / (1 + exp(-z));
        CU_ASSERT_DOUBLE_EQUAL(nb_get(nb_grad(fc->bias), NB_IDX(j)), sg * (1 + z * (1 - sg)),
                               1e-12);
    }
    nb_scope_end();
    nb_module_free(model);
}

/* nb_linear_gated_forward: one row without gradients (both products and the gate in one job)
 * gives the bits of the ops, act(gate(x)) * up(x), for every activation, float32 and float64,
 * 1 and 2 threads, a strided row; 520 outputs make several parts with a short last vector. */
static void test_gated_equals_ops(void) {
    for (int dti = 0; dti < 2; dti++) {
        const nb_dtype dt = dti ? NB_F64 : NB_F32;
        nb_module *model = nb_model_new(dt, 4);
        nb_linear *gate = nb_linear_new(model, "gate", 128, 520, true),
                  *up = nb_linear_new(model, "up", 128, 520, false);
        nb_rng rng;
        nb_rng_seed(&rng, 12);
        nb_scope_begin();
        nb_tensor *rows[2] = {
            nb_randn(&rng, dt, NB_SHAPE(1, 1, 128)),
            nb_view(nb_select(nb_view(nb_randn(&rng, dt, NB_SHAPE(256)), NB_SHAPE(128, 2)), 1, 1),
                    NB_SHAPE(1, 1, 128))};
        const bool grad = nb_set_grad_enabled(false);
        for (int threads = 1; threads <= 2; threads++) {
            nb_set_num_threads(threads);
            for (int r = 0; r < 2; r++)
                for (int a = NB_ACT_NONE; a <= NB_ACT_SILU; a++) {
                    nb_tensor *y = nb_linear_gated_forward(gate, up, rows[r], (nb_activation)a);
                    NBT_ASSERT_SHAPE(y, 1, 1, 520);
                    nb_tensor *want =
                        nb_mul(act_op((nb_activation)a, nb_linear_forward(gate, rows[r])),
                               nb_linear_forward(up, rows[r]));
                    CU_ASSERT_TRUE(same_bits(y, want));
                }
        }
        nb_set_num_threads(0);
        nb_set_grad_enabled(grad);
        nb_scope_end();
        nb_module_free(model);
    }
}

/* By hand: gate W = [[1, 0], [0, -1]], b = [0, 1]; up W = [[2, 0], [1, 1]], no bias; x = [1, 2]:
 * gate(x) = [1, -1], up(x) = [2, 3]; silu: [2 silu(1), 3 silu(-1)] with silu(z) = z / (1 + e^-z).
 * Several rows go op by op: the same values. */
static void test_gated_by_hand(void) {
    nb_module *model = nb_model_new(NB_F64, 1);
    nb_linear *gate = nb_linear_new(model, "gate", 2, 2, true),
              *up = nb_linear_new(model, "up", 2, 2, false);
    memcpy(nb_data(gate->weight), (const double[]){1, 0, 0, -1}, 4 * sizeof(double));
    memcpy(nb_data(gate->bias), (const double[]){0, 1}, 2 * sizeof(double));
    memcpy(nb_data(up->weight), (const double[]){2, 0, 1, 1}, 4 * sizeof(double));
    nb_scope_begin();
    const bool grad = nb_set_grad_enabled(false);
    const double s1 = 2 / (1 + exp(-1.0)), s2 = 3 * -1 / (1 + exp(1.0));
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(1, 2), (const double[]){1, 2});
    NBT_ASSERT_VALUES(nb_linear_gated_forward(gate, up, x, NB_ACT_SILU), 1e-15, s1, s2);
    NBT_ASSERT_VALUES(nb_linear_gated_forward(gate, up, x, NB_ACT_NONE), 1e-15, 2.0, -3.0);
    nb_tensor *x2 = nb_from_array(NB_F64, NB_SHAPE(2, 2), (const double[]){1, 2, 1, 2});
    NBT_ASSERT_VALUES(nb_linear_gated_forward(gate, up, x2, NB_ACT_SILU), 1e-15, s1, s2, s1, s2);
    nb_set_grad_enabled(grad);
    nb_scope_end();
    nb_module_free(model);
}

/* With gradients recorded it is the ops: backward reaches both layers, and
 * d sum(silu(g) * u) / d(up's bias) = silu(g). */
static void test_gated_training(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    nb_linear *gate = nb_linear_new(model, "gate", 3, 2, false),
              *up = nb_linear_new(model, "up", 3, 2, true);
    nb_rng rng;
    nb_rng_seed(&rng, 6);
    nb_scope_begin();
    nb_tensor *x = nb_randn(&rng, NB_F64, NB_SHAPE(1, 3));
    nb_tensor *y = nb_linear_gated_forward(gate, up, x, NB_ACT_SILU);
    CU_ASSERT_TRUE_FATAL(y && y->requires_grad);
    CU_ASSERT_TRUE_FATAL(nb_backward(nb_sum(y), NULL));
    CU_ASSERT_PTR_NOT_NULL(nb_grad(gate->weight));
    nb_tensor *g = nb_linear_forward(gate, x);
    for (int64_t j = 0; j < 2; j++) {
        double z = nb_get(g, NB_IDX(0, j));
        CU_ASSERT_DOUBLE_EQUAL(nb_get(nb_grad(up->bias), NB_IDX(j)), z / (1 + exp(-z)), 1e-12);
    }
    nb_scope_end();
    nb_module_free(model);
}

static void test_errors(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_linear *a = nb_linear_new(model, "a", 4, 3, true),
              *b = nb_linear_new(model, "b", 5, 2, true);
    nb_scope_begin();
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(1, 4)), *out[2];
    CU_ASSERT_FALSE(nb_linears_forward(0, (nb_linear *[]){a}, x, out));
    NBT_ASSERT_ERROR("1 to 8 layers");
    CU_ASSERT_FALSE(nb_linears_forward(2, (nb_linear *[]){a, b}, x, out));
    NBT_ASSERT_ERROR("'b'");
    NBT_ASSERT_ERROR("[..., 5], got [1, 4]");
    CU_ASSERT_FALSE(
        nb_linears_forward(1, (nb_linear *[]){a}, nb_zeros(NB_F64, NB_SHAPE(1, 4)), out));
    NBT_ASSERT_ERROR("linear");
    CU_ASSERT_FALSE(nb_linears_forward(1, (nb_linear *[]){a}, NULL, out));
    NBT_ASSERT_ERROR("NULL input");
    CU_ASSERT_PTR_NULL(nb_linear_forward_act(a, x, (nb_activation)7));
    NBT_ASSERT_ERROR("'a'");
    NBT_ASSERT_ERROR("unknown activation 7");
    CU_ASSERT_PTR_NULL(nb_linear_forward_act(b, x, NB_ACT_GELU));
    NBT_ASSERT_ERROR("[..., 5], got [1, 4]");
    nb_linear *c = nb_linear_new(model, "c", 4, 2, false);
    CU_ASSERT_PTR_NULL(nb_linear_gated_forward(a, c, x, NB_ACT_SILU));
    NBT_ASSERT_ERROR("Linear 'c': cannot gate 'a' (4 -> 3 features): it maps 4 -> 2");
    CU_ASSERT_PTR_NULL(nb_linear_gated_forward(a, a, x, (nb_activation)9));
    NBT_ASSERT_ERROR("unknown activation 9");
    CU_ASSERT_PTR_NULL(nb_linear_gated_forward(b, b, x, NB_ACT_SILU));
    NBT_ASSERT_ERROR("[..., 5], got [1, 4]");
    nb_clear_error(); /* a NULL argument keeps an earlier error (an op's failure) */
    CU_ASSERT_PTR_NULL(nb_linear_gated_forward(a, NULL, x, NB_ACT_SILU));
    NBT_ASSERT_ERROR("NULL layer");
    nb_scope_end();
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"grouped equals one by one, 1 and 2 threads", test_group_equals_one_by_one},
        {"values by hand", test_values_by_hand},
        {"training goes one by one", test_training_goes_one_by_one},
        {"linear + activation equals the ops, 1 and 2 threads", test_activation_equals_op},
        {"linear + activation by hand", test_activation_by_hand},
        {"linear + activation in training", test_activation_training},
        {"gated pair equals the ops, 1 and 2 threads", test_gated_equals_ops},
        {"gated pair by hand", test_gated_by_hand},
        {"gated pair in training", test_gated_training},
        {"errors", test_errors},
    };
    return nbtest_run("linears", cases, sizeof cases / sizeof cases[0]);
}
