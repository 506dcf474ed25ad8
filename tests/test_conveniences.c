/* Comparisons, counting, argmax, accuracy, printing values alone and a module's parameter
 * array, with hand-computed expectations. */
#include "harness.h"

#include <stdlib.h>

static void test_comparisons_broadcast(void) {
    /* a [2, 3] against b [3] (broadcast over rows) */
    nb_tensor *a = nb_from_array(NB_F32, NB_SHAPE(2, 3), (float[]){1, 2, 3, 4, 2, 0});
    nb_tensor *b = nb_from_array(NB_F32, NB_SHAPE(3), (float[]){1, 3, 0});
    nb_tensor *eq = nb_eq(a, b);
    CU_ASSERT_EQUAL(eq->dtype, NB_BOOL);
    NBT_ASSERT_SHAPE(eq, 2, 3);
    NBT_ASSERT_VALUES(eq, 0, 1, 0, 0, 0, 0, 1);
    NBT_ASSERT_VALUES(nb_ne(a, b), 0, 0, 1, 1, 1, 1, 0);
    NBT_ASSERT_VALUES(nb_lt(a, b), 0, 0, 1, 0, 0, 1, 0);
    NBT_ASSERT_VALUES(nb_le(a, b), 0, 1, 1, 0, 0, 1, 1);
    NBT_ASSERT_VALUES(nb_gt(a, b), 0, 0, 0, 1, 1, 0, 0);
    NBT_ASSERT_VALUES(nb_ge(a, b), 0, 1, 0, 1, 1, 0, 1);
    /* a column [2, 1] against a row [1, 3]: outer comparison [2, 3] */
    nb_tensor *col = nb_from_array(NB_I64, NB_SHAPE(2, 1), (int64_t[]){1, 5});
    nb_tensor *row = nb_from_array(NB_I64, NB_SHAPE(1, 3), (int64_t[]){0, 1, 5});
    NBT_ASSERT_VALUES(nb_ge(col, row), 0, 1, 1, 0, 1, 1, 1);
    /* non-contiguous input: the transpose of a */
    NBT_ASSERT_VALUES(nb_gt(nb_transpose(a, 0, 1), nb_scalar(NB_F32, 1.5)), 0, 0, 1, 1, 1, 1, 0);
    /* mixed dtypes compare as values; NaN equals nothing, not even itself */
    nb_tensor *ints = nb_from_array(NB_I64, NB_SHAPE(3), (int64_t[]){1, 3, 0});
    NBT_ASSERT_VALUES(nb_eq(b, ints), 0, 1, 1, 1);
    nb_tensor *nan = nb_from_array(NB_F64, NB_SHAPE(2), (double[]){NAN, 1});
    NBT_ASSERT_VALUES(nb_eq(nan, nan), 0, 0, 1);
    NBT_ASSERT_VALUES(nb_ne(nan, nan), 0, 1, 0);
    /* bool masks */
    nb_tensor *m = nb_from_array(NB_BOOL, NB_SHAPE(3), (uint8_t[]){1, 0, 1});
    NBT_ASSERT_VALUES(nb_eq(m, nb_scalar(NB_BOOL, 1)), 0, 1, 0, 1);
    /* errors name the op and the shapes; results have no autograd history */
    CU_ASSERT_PTR_NULL(nb_lt(a, nb_zeros(NB_F32, NB_SHAPE(4))));
    NBT_ASSERT_ERROR("lt");
    NBT_ASSERT_ERROR("[2, 3]");
    CU_ASSERT_PTR_NULL(nb_eq(a, NULL));
    nb_tensor *w = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2)), true);
    nb_tensor *c = nb_lt(w, nb_scalar(NB_F64, 2));
    CU_ASSERT_FALSE(c->requires_grad);
    CU_ASSERT_PTR_NULL(c->node);
}

static void test_count_and_argmax(void) {
    nb_tensor *a = nb_from_array(NB_F64, NB_SHAPE(2, 4), (double[]){0, -1, 0, 2.5, 3, 3, NAN, 0});
    CU_ASSERT_EQUAL(nb_count_nonzero(a), 5); /* NaN is nonzero, as in PyTorch */
    CU_ASSERT_EQUAL(nb_count_nonzero(nb_narrow(a, 1, 0, 2)), 3);
    CU_ASSERT_EQUAL(nb_count_nonzero(nb_zeros(NB_BOOL, NB_SHAPE(0))), 0);
    CU_ASSERT_EQUAL(nb_count_nonzero(NULL), -1);
    nb_tensor *b = nb_from_array(NB_F32, NB_SHAPE(2, 3), (float[]){1, 7, 7, 9, 2, 9});
    nb_tensor *i1 = nb_argmax(b, -1, false);
    CU_ASSERT_EQUAL(i1->dtype, NB_I64);
    NBT_ASSERT_VALUES(i1, 0, 1, 0); /* first of equal maxima */
    NBT_ASSERT_VALUES(nb_argmax(b, 0, false), 0, 1, 0, 1);
    NBT_ASSERT_SHAPE(nb_argmax(b, 0, true), 1, 3);
    NBT_ASSERT_VALUES(
        nb_argmax(nb_from_array(NB_I64, NB_SHAPE(4), (int64_t[]){-5, 4, -2, 4}), 0, false), 0, 1);
    CU_ASSERT_PTR_NULL(nb_argmax(b, 2, false));
    NBT_ASSERT_ERROR("argmax");
    CU_ASSERT_PTR_NULL(nb_argmax(nb_zeros(NB_F32, NB_SHAPE(2, 0)), 1, false));
    NBT_ASSERT_ERROR("size 0");
}

static void test_accuracy(void) {
    /* rows' argmax: 2, 0, 1, 1 */
    nb_tensor *logits =
        nb_from_array(NB_F32, NB_SHAPE(2, 2, 3), (float[]){0, 1, 5, 9, 1, 2, 0, 3, 1, 4, 8, 2});
    nb_tensor *target = nb_from_array(NB_I64, NB_SHAPE(2, 2), (int64_t[]){2, 1, 1, -100});
    CU_ASSERT_DOUBLE_EQUAL(nb_accuracy(logits, target, -100), 2.0 / 3.0, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(nb_accuracy(logits, target, 7), 2.0 / 4.0, 1e-15);
    nb_tensor *all_ignored = nb_full(NB_I64, NB_SHAPE(2, 2), -100);
    CU_ASSERT_TRUE(isnan(nb_accuracy(logits, all_ignored, -100)));
    CU_ASSERT_EQUAL(nb_accuracy(logits, nb_zeros(NB_I64, NB_SHAPE(2, 3)), -100), -1);
    NBT_ASSERT_ERROR("accuracy");
    CU_ASSERT_EQUAL(nb_accuracy(logits, nb_zeros(NB_F32, NB_SHAPE(2, 2)), -100), -1);
    NBT_ASSERT_ERROR("int64 targets");
}

static char *printed(const nb_tensor *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    nb_fprint_values(f, t);
    fclose(f);
    return buf;
}

static void test_print_values(void) {
    /* PyTorch 1.13: print(torch.tensor([[1., 2.5], [3., 4.]])) */
    char *s = printed(nb_from_array(NB_F32, NB_SHAPE(2, 2), (float[]){1, 2.5f, 3, 4}));
    CU_ASSERT_STRING_EQUAL(s, "tensor([[1.0000, 2.5000],\n        [3.0000, 4.0000]])\n");
    free(s);
    s = printed(nb_from_array(NB_I64, NB_SHAPE(3), (int64_t[]){1, 0, 2}));
    CU_ASSERT_STRING_EQUAL(s, "tensor([1, 0, 2])\n");
    free(s);
    char *full = nb_to_string(nb_ones(NB_F32, NB_SHAPE(2)));
    CU_ASSERT_PTR_NOT_NULL(strstr(full, "shape=[2], dtype=float32"));
    free(full);
}

static void test_module_parameters(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_transformer_lm *lm = nb_transformer_lm_new(model, "", 5, 4, 8, 2, 1, 0.0);
    int n = -1;
    nb_tensor **params = nb_module_param_tensors(model, &n);
    nb_param named[64];
    CU_ASSERT_EQUAL(n, nb_module_named_params(model, named, 64));
    for (int i = 0; i < n; i++) CU_ASSERT_PTR_EQUAL(params[i], named[i].tensor);
    CU_ASSERT_PTR_EQUAL(params[0], lm->tok_emb->weight);
    /* ready for an optimizer and clipping */
    nb_optimizer *opt = nb_adamw_new(n, params, nb_adamw_defaults(1e-3));
    CU_ASSERT_PTR_NOT_NULL(opt);
    CU_ASSERT_TRUE(nb_clip_grad_norm(n, params, 1.0) >= 0);
    nb_optimizer_free(opt);
    free(params);
    int m = -1;
    nb_tensor **sub = nb_module_param_tensors(&lm->norm_f->base, &m);
    CU_ASSERT_EQUAL(m, 2);
    CU_ASSERT_PTR_EQUAL(sub[0], lm->norm_f->weight);
    free(sub);
    CU_ASSERT_PTR_NULL(nb_module_param_tensors(NULL, &m));
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"comparisons broadcast", test_comparisons_broadcast},
        {"count_nonzero and argmax", test_count_and_argmax},
        {"accuracy", test_accuracy},
        {"printing values alone", test_print_values},
        {"module parameter array", test_module_parameters},
    };
    return nbtest_run("conveniences", cases, (int)(sizeof cases / sizeof cases[0]));
}
