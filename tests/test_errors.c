/* Every error path of the tensor core and the views: size overflow, ndim > 8, bad dims,
 * negative sizes, incompatible layouts and NULL inputs. Each call must return NULL (or -1,
 * or false) without aborting, with a message that names the op and the shapes involved. */
#include "harness.h"

#include <stdio.h>

static void test_size_overflow(void) {
    const int64_t huge = 1LL << 40;
    EXPECT_NULL(nb_empty(NB_F32, NB_SHAPE(huge, huge)), "empty: ", "overflows",
                "[1099511627776, 1099511627776]");
    EXPECT_NULL(nb_zeros(NB_F64, NB_SHAPE(4, INT64_MAX)), "zeros: ", "overflows");
    EXPECT_NULL(nb_ones(NB_I64, NB_SHAPE(1LL << 20, 1LL << 20, 1LL << 20)), "ones: ", "overflows");
    /* The byte count matters, not just the element count: 2^55 doubles are 2^58 bytes. */
    EXPECT_NULL(nb_full(NB_F64, NB_SHAPE(1LL << 55), 0), "full: ", "overflows", "float64");
    EXPECT_NULL(nb_from_array(NB_F32, NB_SHAPE(huge, huge), (float[]){0}),
                "from_array: ", "overflows");
    nb_rng r;
    nb_rng_seed(&r, 0);
    EXPECT_NULL(nb_randn(&r, NB_F32, NB_SHAPE(huge, huge)), "randn: ", "overflows");
    EXPECT_NULL(nb_eye(NB_F64, 1LL << 40), "eye: ");
    /* A view whose requested sizes multiply past int64 */
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(6));
    EXPECT_NULL(nb_view(x, NB_SHAPE(1LL << 62, 1LL << 62, -1)), "view: ", "[6]");
    EXPECT_NULL(nb_reshape(x, NB_SHAPE(1LL << 62, 8)), "reshape: ", "[6]");
    /* An expand to more elements than int64 can count */
    EXPECT_NULL(nb_expand(nb_zeros(NB_F32, NB_SHAPE(1, 1)), NB_SHAPE(1LL << 62, 1LL << 62)),
                "expand: ", "[1, 1]");
}

static void test_too_many_dims(void) {
    const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_NULL(nb_zeros(NB_F32, 9, nine), "zeros: ", "ndim 9");
    EXPECT_NULL(nb_empty(NB_F32, -1, nine), "empty: ", "ndim -1");
    nb_tensor *eight = nb_zeros(NB_F32, 8, nine);
    CU_ASSERT_PTR_NOT_NULL_FATAL(eight);
    EXPECT_NULL(nb_unsqueeze(eight, 0), "unsqueeze: ", "[1, 1, 1, 1, 1, 1, 1, 1]", "8");
    EXPECT_NULL(nb_view(eight, 9, nine), "view: ", "ndim 9");
    EXPECT_NULL(nb_reshape(eight, 9, nine), "reshape: ", "ndim 9");
    EXPECT_NULL(nb_expand(eight, 9, nine), "expand: ", "[1, 1, 1, 1, 1, 1, 1, 1]");
    EXPECT_NULL(nb_stack(2, (nb_tensor *[]){eight, eight}, 0), "stack: ", "8");
}

static void test_negative_sizes(void) {
    EXPECT_NULL(nb_ones(NB_F32, NB_SHAPE(2, -3)), "ones: ", "negative size -3", "[2, -3]");
    EXPECT_NULL(nb_full(NB_BOOL, NB_SHAPE(-1), 1), "full: ", "negative size -1");
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    EXPECT_NULL(nb_view(x, NB_SHAPE(-2, 3)), "view: ", "-2", "[-2, 3]");
    EXPECT_NULL(nb_view(x, NB_SHAPE(-1, -1)), "view: ", "only one", "[-1, -1]");
    EXPECT_NULL(nb_view(x, NB_SHAPE(4, 2)), "view: ", "[4, 2]", "size 6", "[2, 3]");
    EXPECT_NULL(nb_view(x, NB_SHAPE(4, -1)), "view: ", "[4, -1]", "size 6");
    EXPECT_NULL(nb_view(nb_zeros(NB_F32, NB_SHAPE(0, 3)), NB_SHAPE(-1, 0)), "view: ", "[-1, 0]");
    EXPECT_NULL(nb_expand(x, NB_SHAPE(-1, 2, 3)), "expand: ", "[2, 3]", "[-1, 2, 3]");
    EXPECT_NULL(nb_expand(x, NB_SHAPE(2, -2)), "expand: ", "[2, 3]", "[2, -2]");
    EXPECT_NULL(nb_narrow(x, 1, 0, -1), "narrow: ", "[2, 3]");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_split(x, 0, 1, (nb_tensor *[4]){0}, 4), -1);
    NBT_ASSERT_ERROR("split: ");
    NBT_ASSERT_ERROR("split_size");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_split(x, -2, 1, (nb_tensor *[4]){0}, 4), -1);
    NBT_ASSERT_ERROR("split: ");
}

static void test_bad_dims(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    EXPECT_NULL(nb_transpose(x, 2, 0), "transpose: ", "dim 2", "[2, 3]");
    EXPECT_NULL(nb_transpose(x, 0, -3), "transpose: ", "dim -3", "[2, 3]");
    EXPECT_NULL(nb_permute(x, (int[]){0, 0}), "permute: ", "twice", "[2, 3]");
    EXPECT_NULL(nb_permute(x, (int[]){0, 2}), "permute: ", "dim 2", "[2, 3]");
    EXPECT_NULL(nb_unsqueeze(x, 3), "unsqueeze: ", "dim 3", "[2, 3]");
    EXPECT_NULL(nb_unsqueeze(x, -4), "unsqueeze: ", "dim -4", "[2, 3]");
    EXPECT_NULL(nb_squeeze(x, 2), "squeeze: ", "dim 2", "[2, 3]");
    EXPECT_NULL(nb_narrow(x, 2, 0, 1), "narrow: ", "dim 2", "[2, 3]");
    EXPECT_NULL(nb_narrow(x, 1, 2, 2), "narrow: ", "start 2 and length 2", "[2, 3]");
    EXPECT_NULL(nb_narrow(x, 1, -4, 1), "narrow: ", "start -4", "[2, 3]");
    EXPECT_NULL(nb_narrow(x, 1, 1, INT64_MAX), "narrow: ", "[2, 3]"); /* no overflow */
    EXPECT_NULL(nb_select(x, -3, 0), "select: ", "dim -3", "[2, 3]");
    EXPECT_NULL(nb_select(x, 0, 2), "select: ", "index 2", "[2, 3]");
    EXPECT_NULL(nb_select(x, 1, -4), "select: ", "index -4", "[2, 3]");
    EXPECT_NULL(nb_select(nb_scalar(NB_F32, 1), 0, 0), "select: ", "[]");
    EXPECT_NULL(nb_expand(x, NB_SHAPE(3)), "expand: ", "[2, 3]", "[3]");
    EXPECT_NULL(nb_expand(x, NB_SHAPE(4, 3)), "expand: ", "[2, 3]", "[4, 3]");
    EXPECT_NULL(nb_concat(2, (nb_tensor *[]){x, x}, 2), "concat: ", "dim 2", "[2, 3]");
    EXPECT_NULL(nb_stack(2, (nb_tensor *[]){x, x}, 3), "stack: ", "dim 3", "[2, 3]");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_split(x, 1, 2, (nb_tensor *[4]){0}, 4), -1);
    NBT_ASSERT_ERROR("split: ");
    NBT_ASSERT_ERROR("[2, 3]");
    /* Mismatched joins name both shapes or dtypes. */
    nb_tensor *y = nb_zeros(NB_F32, NB_SHAPE(3, 3));
    EXPECT_NULL(nb_concat(2, (nb_tensor *[]){x, y}, 1), "concat: ", "[3, 3]", "[2, 3]");
    EXPECT_NULL(nb_concat(2, (nb_tensor *[]){x, nb_zeros(NB_F32, NB_SHAPE(6))}, 0),
                "concat: ", "[6]", "[2, 3]");
    EXPECT_NULL(nb_concat(2, (nb_tensor *[]){x, nb_zeros(NB_F64, NB_SHAPE(2, 3))}, 0),
                "concat: ", "float32", "float64");
    EXPECT_NULL(nb_stack(2, (nb_tensor *[]){x, y}, 0), "stack: ", "[3, 3]", "[2, 3]");
    EXPECT_NULL(nb_concat(0, (nb_tensor *[]){x}, 0), "concat: ");
    EXPECT_NULL(nb_stack(0, NULL, 0), "stack: ");
    /* nb_size of a bad dim is -1, not an error */
    CU_ASSERT_EQUAL(nb_size(x, 2), -1);
}

static void test_view_on_incompatible_layout(void) {
    nb_tensor *x = nb_zeros(NB_F64, NB_SHAPE(4, 6));
    EXPECT_NULL(nb_view(nb_transpose(x, 0, 1), NB_SHAPE(24)), "view: ", "[24]", "[6, 4]",
                "contiguous()", "reshape()");
    EXPECT_NULL(nb_view(nb_narrow(x, 1, 0, 3), NB_SHAPE(12)), "view: ", "[12]", "[4, 3]",
                "contiguous()");
    EXPECT_NULL(nb_view(nb_expand(nb_zeros(NB_F64, NB_SHAPE(1, 3)), NB_SHAPE(2, 3)), NB_SHAPE(6)),
                "view: ", "[6]", "[2, 3]", "reshape()");
    /* A permuted [2, 3, 4] as [4, 2, 3] (strides [1, 12, 4]) can merge its last two dims,
     * which stayed adjacent in memory, but not its first two. */
    nb_tensor *p = nb_permute(nb_zeros(NB_F32, NB_SHAPE(2, 3, 4)), (int[]){2, 0, 1});
    EXPECT_NULL(nb_view(p, NB_SHAPE(8, 3)), "view: ", "[8, 3]", "[4, 2, 3]");
    CU_ASSERT_PTR_NOT_NULL(nb_view(p, NB_SHAPE(4, 6)));
}

/* NULL tensors in, NULL out, with a message naming the op (when nothing failed before). */
static void test_null_inputs(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    EXPECT_NULL(nb_view(NULL, NB_SHAPE(6)), "view: ");
    EXPECT_NULL(nb_reshape(NULL, NB_SHAPE(6)), "reshape: ");
    EXPECT_NULL(nb_transpose(NULL, 0, 1), "transpose: ");
    EXPECT_NULL(nb_permute(NULL, (int[]){1, 0}), "permute: ");
    EXPECT_NULL(nb_unsqueeze(NULL, 0), "unsqueeze: ");
    EXPECT_NULL(nb_squeeze(NULL, 0), "squeeze: ");
    EXPECT_NULL(nb_squeeze_all(NULL), "squeeze");
    EXPECT_NULL(nb_expand(NULL, NB_SHAPE(2, 3)), "expand: ");
    EXPECT_NULL(nb_narrow(NULL, 0, 0, 1), "narrow: ");
    EXPECT_NULL(nb_select(NULL, 0, 0), "select: ");
    EXPECT_NULL(nb_contiguous(NULL), "contiguous: ");
    EXPECT_NULL(nb_concat(2, (nb_tensor *[]){x, NULL}, 0), "concat: ", "input 1");
    EXPECT_NULL(nb_concat(2, NULL, 0), "concat: ");
    EXPECT_NULL(nb_stack(2, (nb_tensor *[]){NULL, x}, 0), "stack: ", "input 0");
    nb_tensor *parts[2];
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_split(NULL, 1, 0, parts, 2), -1);
    NBT_ASSERT_ERROR("split: ");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_split(x, 1, 0, NULL, 2), -1);
    NBT_ASSERT_ERROR("split: ");
    /* NULL shape, dims or index arrays with a tensor that needs them */
    EXPECT_NULL(nb_view(x, 2, NULL), "view: ", "NULL", "[2, 3]");
    EXPECT_NULL(nb_reshape(x, 2, NULL), "reshape: ", "NULL", "[2, 3]");
    EXPECT_NULL(nb_expand(x, 2, NULL), "expand: ", "NULL");
    EXPECT_NULL(nb_permute(x, NULL), "permute: ", "NULL", "[2, 3]");
    EXPECT_NULL(nb_zeros(NB_F32, 2, NULL), "zeros: ", "NULL");
    /* Creation and conversion functions handed NULL */
    EXPECT_NULL(nb_clone(NULL), "clone");
    EXPECT_NULL(nb_detach(NULL), "detach");
    EXPECT_NULL(nb_to_dtype(NULL, NB_F64), "to_dtype");
    EXPECT_NULL(nb_tril(NULL, 0), "tril");
    /* Misc queries on NULL are safe */
    CU_ASSERT_EQUAL(nb_numel(NULL), 0);
    CU_ASSERT_EQUAL(nb_size(NULL, 0), -1);
    CU_ASSERT_FALSE(nb_is_float(NULL));
    CU_ASSERT_FALSE(nb_same_shape(NULL, x));
    CU_ASSERT_PTR_NULL(nb_data(NULL));
    char buf[16];
    CU_ASSERT_STRING_EQUAL(nb_shape_str(NULL, buf, sizeof buf), "(null)");
}

/* In a chain, the first failure's message survives the NULLs that follow it. */
static void test_chain_keeps_first_error(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    nb_clear_error();
    nb_tensor *r = nb_contiguous(nb_select(nb_transpose(nb_view(x, NB_SHAPE(5)), 0, 1), 0, 0));
    CU_ASSERT_PTR_NULL(r);
    NBT_ASSERT_ERROR("view: ");
    NBT_ASSERT_ERROR("[5]");
    /* A later success does not clear it (callers check pointers, not the message)... */
    CU_ASSERT_PTR_NOT_NULL(nb_view(x, NB_SHAPE(6)));
    NBT_ASSERT_ERROR("view: ");
    /* ...and a new failure replaces it. */
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_transpose(x, 0, 5));
    NBT_ASSERT_ERROR("transpose: ");
    CU_ASSERT_PTR_NULL(strstr(nb_last_error(), "view"));
}

/* The rule nabla/tensor.h documents for nb_last_error: the message is the most recent
 * failure's; successful calls leave it as it was (neither clear nor set it), so it means
 * something only right after a call reports failure; nb_clear_error empties it. */
static void test_last_error_rule(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    nb_clear_error();
    CU_ASSERT_STRING_EQUAL(nb_last_error(), "");
    CU_ASSERT_PTR_NULL(nb_matmul(x, x));
    char failure[1024];
    snprintf(failure, sizeof failure, "%s", nb_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(failure, "matmul: "));
    /* Successes of every kind after it, including a reshape that must copy (no view of a
     * transposed [3, 2] as [6] exists) and a backward, leave the message as it was. */
    CU_ASSERT_PTR_NOT_NULL(nb_reshape(nb_transpose(x, 0, 1), NB_SHAPE(6)));
    CU_ASSERT_STRING_EQUAL(nb_last_error(), failure);
    nb_tensor *w = nb_requires_grad_(nb_ones(NB_F64, NB_SHAPE(2, 3)), true);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_reshape(nb_transpose(w, 0, 1), NB_SHAPE(6))), NULL));
    CU_ASSERT_PTR_NOT_NULL(nb_add(x, x));
    CU_ASSERT_STRING_EQUAL(nb_last_error(), failure);
    /* Cleared, it stays empty through successes. */
    nb_clear_error();
    CU_ASSERT_PTR_NOT_NULL(nb_reshape(nb_transpose(x, 0, 1), NB_SHAPE(6)));
    CU_ASSERT_PTR_NOT_NULL(nb_matmul(x, nb_transpose(x, 0, 1)));
    CU_ASSERT_STRING_EQUAL(nb_last_error(), "");
    /* A NULL input keeps a message that is there (the NULL most likely came from that
     * failure), and names itself once the message was cleared. */
    CU_ASSERT_PTR_NULL(nb_matmul(x, x));
    CU_ASSERT_PTR_NULL(nb_relu(NULL));
    NBT_ASSERT_ERROR("matmul: ");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_relu(NULL));
    NBT_ASSERT_ERROR("relu: ");
}

static void test_shape_str(void) {
    char buf[64];
    CU_ASSERT_STRING_EQUAL(nb_shape_str(nb_zeros(NB_F32, NB_SHAPE(2, 0, 3)), buf, sizeof buf),
                           "[2, 0, 3]");
    CU_ASSERT_STRING_EQUAL(nb_shape_str(nb_scalar(NB_F32, 0), buf, sizeof buf), "[]");
    char tiny[5];
    nb_shape_str(nb_zeros(NB_F32, NB_SHAPE(123, 456)), tiny, sizeof tiny);
    CU_ASSERT_STRING_EQUAL(tiny, "[123"); /* truncated, still terminated */
    CU_ASSERT_STRING_EQUAL(nb_dtype_name(NB_F32), "float32");
    CU_ASSERT_STRING_EQUAL(nb_dtype_name(NB_F64), "float64");
    CU_ASSERT_STRING_EQUAL(nb_dtype_name(NB_I64), "int64");
    CU_ASSERT_STRING_EQUAL(nb_dtype_name(NB_BOOL), "bool");
    CU_ASSERT_EQUAL(nb_dtype_size(NB_F32), 4);
    CU_ASSERT_EQUAL(nb_dtype_size(NB_F64), 8);
    CU_ASSERT_EQUAL(nb_dtype_size(NB_I64), 8);
    CU_ASSERT_EQUAL(nb_dtype_size(NB_BOOL), 1);
    EXPECT_NULL(nb_zeros((nb_dtype)9, NB_SHAPE(2)), "zeros: ", "dtype");
}

int main(void) {
    const nbtest_case cases[] = {
        {"size overflow", test_size_overflow},
        {"more than 8 dims", test_too_many_dims},
        {"negative sizes", test_negative_sizes},
        {"bad dims", test_bad_dims},
        {"view on an incompatible layout", test_view_on_incompatible_layout},
        {"NULL inputs", test_null_inputs},
        {"a chain keeps its first error", test_chain_keeps_first_error},
        {"nb_last_error: successes leave it, nb_clear_error empties it", test_last_error_rule},
        {"shape strings and dtype names", test_shape_str},
    };
    return nbtest_run("errors", cases, sizeof cases / sizeof cases[0]);
}
