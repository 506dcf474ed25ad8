/* nb_linears_forward: several Linear layers of one input. A single row with no gradient to
 * record runs as one job split across threads by all the layers' outputs (tensor/
 * row_products.c); it must give the bits of one nb_linear_forward per layer, on 1 and 2
 * threads, for float32 and float64, a bias or none, and a strided input. */
#include "harness.h"

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
    nb_scope_end();
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"grouped equals one by one, 1 and 2 threads", test_group_equals_one_by_one},
        {"values by hand", test_values_by_hand},
        {"training goes one by one", test_training_goes_one_by_one},
        {"errors", test_errors},
    };
    return nbtest_run("linears", cases, sizeof cases / sizeof cases[0]);
}
