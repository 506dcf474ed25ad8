/* Printing: the body follows PyTorch's formatting rules (torch/_tensor_str.py), followed by
 * nabla's ", shape=[...], dtype=...)" suffix. Each expected body was derived by hand from
 * those rules and agrees with repr() of the same tensor in PyTorch 1.13:
 *  - floats: one format for the whole tensor, chosen from the nonzero finite values: all
 *    integers -> "3." unless max/min > 1000 or max > 1e8; otherwise "%.4f" unless
 *    max/min > 1000, max > 1e8 or min < 1e-4; otherwise "%.4e".
 *  - every element is right-aligned to the widest formatted nonzero finite value (others,
 *    such as 0., nan and -inf, are padded to that width but never widen it).
 *  - a row holds floor((80 - indent) / (width + 2)) elements, continuation lines are
 *    indented one past the opening bracket.
 *  - more than 1000 elements: every dim longer than 6 shows 3 items at each end around
 *    " ..." (in a row) or "..." (between sub-tensors); the format is chosen from the
 *    shown items only. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

static bool prints_as(const nb_tensor *t, const char *expected) {
    char *s = nb_to_string(t);
    bool ok = s && strcmp(s, expected) == 0;
    if (!ok) fprintf(stderr, "\nexpected:\n%s\ngot:\n%s\n", expected, s ? s : "(NULL)");
    free(s);
    return ok;
}
#define ASSERT_PRINTS(t, expected) CU_ASSERT(prints_as((t), (expected)))

static nb_tensor *f32(int n, const float *v) {
    return nb_from_array(NB_F32, 1, (int64_t[]){n}, v);
}
static nb_tensor *f64(int n, const double *v) {
    return nb_from_array(NB_F64, 1, (int64_t[]){n}, v);
}

static void test_integer_valued_floats(void) {
    nb_tensor *m = nb_from_array(NB_F32, NB_SHAPE(2, 2), (float[]){1, 2, 3, 4});
    ASSERT_PRINTS(m, "tensor([[1., 2.],\n"
                     "        [3., 4.]], shape=[2, 2], dtype=float32)\n");
    /* max/min > 1000 switches integers to scientific */
    ASSERT_PRINTS(f32(2, (float[]){1, 10000}),
                  "tensor([1.0000e+00, 1.0000e+04], shape=[2], dtype=float32)\n");
    ASSERT_PRINTS(f64(2, (double[]){-3, 1e9}),
                  "tensor([-3.0000e+00,  1.0000e+09], shape=[2], dtype=float64)\n");
    /* 1000 exactly is not above the ratio */
    ASSERT_PRINTS(f32(2, (float[]){-1, 1000}),
                  "tensor([  -1., 1000.], shape=[2], dtype=float32)\n");
}

static void test_fractional_floats(void) {
    ASSERT_PRINTS(f64(3, (double[]){0.5, -1.25, 3}),
                  "tensor([ 0.5000, -1.2500,  3.0000], shape=[3], dtype=float64)\n");
    ASSERT_PRINTS(f32(1, (float[]){0.1f}), "tensor([0.1000], shape=[1], dtype=float32)\n");
    /* min < 1e-4 and max/min > 1000 both switch to scientific */
    ASSERT_PRINTS(f64(2, (double[]){1e-5, 1}),
                  "tensor([1.0000e-05, 1.0000e+00], shape=[2], dtype=float64)\n");
    ASSERT_PRINTS(f32(2, (float[]){0.001f, 2}),
                  "tensor([1.0000e-03, 2.0000e+00], shape=[2], dtype=float32)\n");
    /* -0.0 keeps its sign and is not counted for the width */
    ASSERT_PRINTS(f32(2, (float[]){-0.0f, 0.5f}),
                  "tensor([-0.0000, 0.5000], shape=[2], dtype=float32)\n");
}

static void test_non_finite(void) {
    ASSERT_PRINTS(f64(3, (double[]){NAN, 1.5, -INFINITY}),
                  "tensor([   nan, 1.5000,   -inf], shape=[3], dtype=float64)\n");
    /* a negative NaN prints as nan, as in Python */
    ASSERT_PRINTS(f64(2, (double[]){-NAN, 1.5}),
                  "tensor([   nan, 1.5000], shape=[2], dtype=float64)\n");
    ASSERT_PRINTS(f32(2, (float[]){0, NAN}), "tensor([0., nan], shape=[2], dtype=float32)\n");
    ASSERT_PRINTS(f32(2, (float[]){1, -INFINITY}),
                  "tensor([1., -inf], shape=[2], dtype=float32)\n");
}

static void test_int64_and_bool(void) {
    nb_tensor *i = nb_from_array(NB_I64, NB_SHAPE(2, 2), (int64_t[]){1, -20, 300, 4});
    ASSERT_PRINTS(i, "tensor([[  1, -20],\n"
                     "        [300,   4]], shape=[2, 2], dtype=int64)\n");
    nb_tensor *b = nb_from_array(NB_BOOL, NB_SHAPE(2), (uint8_t[]){1, 0});
    ASSERT_PRINTS(b, "tensor([ True, False], shape=[2], dtype=bool)\n");
}

static void test_zero_dim_and_empty(void) {
    ASSERT_PRINTS(nb_scalar(NB_F32, 3.5), "tensor(3.5000, shape=[], dtype=float32)\n");
    ASSERT_PRINTS(nb_scalar(NB_F64, 2), "tensor(2., shape=[], dtype=float64)\n");
    ASSERT_PRINTS(nb_scalar(NB_I64, -7), "tensor(-7, shape=[], dtype=int64)\n");
    ASSERT_PRINTS(nb_scalar(NB_BOOL, 1), "tensor(True, shape=[], dtype=bool)\n");
    ASSERT_PRINTS(nb_zeros(NB_F32, NB_SHAPE(0)), "tensor([], shape=[0], dtype=float32)\n");
    ASSERT_PRINTS(nb_zeros(NB_F64, NB_SHAPE(2, 0)), "tensor([], shape=[2, 0], dtype=float64)\n");
    ASSERT_PRINTS(NULL, "tensor(NULL)\n");
}

static void test_nested_and_strided(void) {
    nb_tensor *c = nb_view(nb_arange(NB_F32, 0, 8, 1), NB_SHAPE(2, 2, 2));
    ASSERT_PRINTS(c, "tensor([[[0., 1.],\n"
                     "         [2., 3.]],\n"
                     "\n"
                     "        [[4., 5.],\n"
                     "         [6., 7.]]], shape=[2, 2, 2], dtype=float32)\n");
    nb_tensor *m = nb_from_array(NB_F64, NB_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    ASSERT_PRINTS(nb_transpose(m, 0, 1), "tensor([[1., 4.],\n"
                                         "        [2., 5.],\n"
                                         "        [3., 6.]], shape=[3, 2], dtype=float64)\n");
    /* a view with an offset prints only its own elements */
    ASSERT_PRINTS(nb_narrow(nb_select(m, 0, 1), 0, 1, 2),
                  "tensor([5., 6.], shape=[2], dtype=float64)\n");
    nb_tensor *p = nb_requires_grad_(f64(2, (double[]){1, 2}), true);
    ASSERT_PRINTS(p, "tensor([1., 2.], shape=[2], dtype=float64, requires_grad=True)\n");
}

static void test_line_wrapping(void) {
    /* width 3, so floor((80 - 7) / 5) = 14 per line */
    ASSERT_PRINTS(nb_arange(NB_F32, 0, 20, 1),
                  "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
                  "        14., 15., 16., 17., 18., 19.], shape=[20], dtype=float32)\n");
}

static void test_summarised(void) {
    /* shown: 0 1 2 1997 1998 1999 -> ratio > 1000 -> scientific, width 10, 6 per line */
    ASSERT_PRINTS(nb_arange(NB_F32, 0, 2000, 1),
                  "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
                  "        1.9990e+03], shape=[2000], dtype=float32)\n");
    nb_tensor *m = nb_view(nb_arange(NB_I64, 0, 1100, 1), NB_SHAPE(100, 11));
    ASSERT_PRINTS(m, "tensor([[   0,    1,    2,  ...,    8,    9,   10],\n"
                     "        [  11,   12,   13,  ...,   19,   20,   21],\n"
                     "        [  22,   23,   24,  ...,   30,   31,   32],\n"
                     "        ...,\n"
                     "        [1067, 1068, 1069,  ..., 1075, 1076, 1077],\n"
                     "        [1078, 1079, 1080,  ..., 1086, 1087, 1088],\n"
                     "        [1089, 1090, 1091,  ..., 1097, 1098, 1099]], shape=[100, 11], "
                     "dtype=int64)\n");
    nb_tensor *e =
        nb_expand(nb_view(nb_arange(NB_I64, 0, 8, 1), NB_SHAPE(8, 1, 1)), NB_SHAPE(8, 2, 70));
    ASSERT_PRINTS(e, "tensor([[[0, 0, 0,  ..., 0, 0, 0],\n"
                     "         [0, 0, 0,  ..., 0, 0, 0]],\n"
                     "\n"
                     "        [[1, 1, 1,  ..., 1, 1, 1],\n"
                     "         [1, 1, 1,  ..., 1, 1, 1]],\n"
                     "\n"
                     "        [[2, 2, 2,  ..., 2, 2, 2],\n"
                     "         [2, 2, 2,  ..., 2, 2, 2]],\n"
                     "\n"
                     "        ...,\n"
                     "\n"
                     "        [[5, 5, 5,  ..., 5, 5, 5],\n"
                     "         [5, 5, 5,  ..., 5, 5, 5]],\n"
                     "\n"
                     "        [[6, 6, 6,  ..., 6, 6, 6],\n"
                     "         [6, 6, 6,  ..., 6, 6, 6]],\n"
                     "\n"
                     "        [[7, 7, 7,  ..., 7, 7, 7],\n"
                     "         [7, 7, 7,  ..., 7, 7, 7]]], shape=[8, 2, 70], dtype=int64)\n");
}

/* nb_fprint writes the same text as nb_to_string. */
static void test_fprint_matches_to_string(void) {
    nb_tensor *t = nb_from_array(NB_F32, NB_SHAPE(2), (float[]){1.5f, -2});
    char *expected = nb_to_string(t);
    FILE *f = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    nb_fprint(f, t);
    rewind(f);
    char buf[256] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    CU_ASSERT_EQUAL(n, strlen(expected));
    CU_ASSERT_STRING_EQUAL(buf, expected);
    CU_ASSERT_STRING_EQUAL(expected, "tensor([ 1.5000, -2.0000], shape=[2], dtype=float32)\n");
    free(expected);
}

int main(void) {
    const nbtest_case cases[] = {
        {"integer-valued floats", test_integer_valued_floats},
        {"fractional floats", test_fractional_floats},
        {"nan and inf", test_non_finite},
        {"int64 and bool", test_int64_and_bool},
        {"0-d and empty", test_zero_dim_and_empty},
        {"nested and strided", test_nested_and_strided},
        {"line wrapping", test_line_wrapping},
        {"summarised", test_summarised},
        {"fprint matches to_string", test_fprint_matches_to_string},
    };
    return nbtest_run("print", cases, sizeof cases / sizeof cases[0]);
}
