/* Calls a careless or hostile user makes (issue 12, items 6-10): size arithmetic at the edge of
 * int64 (the sanitizer pass makes any signed overflow fatal), bool bytes other than 0/1,
 * ranges nb_uniform cannot sample, NULL arguments to helpers, and scope misuse. Each must be an
 * error or a documented harmless result, never a crash or corruption. */
#include "harness.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define EXPECT_ERROR(call, ...)                                                                    \
    do {                                                                                           \
        nb_clear_error();                                                                          \
        CU_ASSERT_PTR_NULL(call);                                                                  \
        const char *want_[] = {__VA_ARGS__};                                                       \
        for (size_t k_ = 0; k_ < sizeof want_ / sizeof want_[0]; k_++) {                           \
            bool found_ = strstr(nb_last_error(), want_[k_]) != NULL;                              \
            CU_ASSERT_TRUE(found_);                                                                \
            if (!found_)                                                                           \
                fprintf(stderr, "\n  expected \"%s\" in \"%s\"\n", want_[k_], nb_last_error());    \
        }                                                                                          \
    } while (0)

/* ---- item 6: sizes ---- */
static void test_zero_size_beside_huge_dims(void) {
    const int64_t big = 1LL << 62;
    /* No elements, but the strides of such a tensor overflow int64 (as in PyTorch: an error). */
    EXPECT_ERROR(nb_zeros(NB_F32, NB_SHAPE(0, big, big)), "zeros: ", "overflows");
    EXPECT_ERROR(nb_empty(NB_F64, NB_SHAPE(big, 0, 4, big)), "empty: ", "overflows");
    EXPECT_ERROR(nb_from_array(NB_F32, NB_SHAPE(0, big, big), NULL), "from_array: ", "overflows");
    /* Zero-size tensors with representable strides still work. */
    nb_tensor *ok = nb_zeros(NB_F32, NB_SHAPE(0, 1LL << 20, 1LL << 20));
    CU_ASSERT_PTR_NOT_NULL(ok);
    CU_ASSERT_EQUAL(nb_numel(ok), 0);
    /* Views: an expand of an empty tensor to huge dims, then ops on it. */
    nb_tensor *e = nb_expand(nb_zeros(NB_F32, NB_SHAPE(0, 1, 1)), NB_SHAPE(0, big, big));
    if (e) {
        EXPECT_ERROR(nb_contiguous(e), "overflows");
        EXPECT_ERROR(nb_add(e, e), "overflows");
    }
    nb_tensor *row = nb_expand(nb_zeros(NB_F32, NB_SHAPE(1)), NB_SHAPE(big));
    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
    EXPECT_ERROR(nb_concat(2, (nb_tensor *[]){row, row}, 0), "concat: ");
    EXPECT_ERROR(nb_concat(3, (nb_tensor *[]){row, row, row}, 0), "concat: ");
    EXPECT_ERROR(nb_stack(2, (nb_tensor *[]){row, row}, 0), "stack: ");
    /* Saving an expanded view whose bytes cannot be counted (2^61 doubles): an error, not a
     * wrapped size and a heap overflow. */
    nb_tensor *wide = nb_expand(nb_zeros(NB_F64, NB_SHAPE(1)), NB_SHAPE(1LL << 61));
    CU_ASSERT_PTR_NOT_NULL_FATAL(wide);
    nb_clear_error();
    const char *path = nbtest_tmp_path("never_written.safetensors");
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"wide", wide}}));
    NBT_ASSERT_ERROR("holds more than 2^63 bytes");
    CU_ASSERT_EQUAL(nbtest_tmp_files(""), 0);
}

/* A crafted checkpoint: a tensor with no bytes whose shape has huge dims beside a zero. */
static void test_checkpoint_with_overflowing_shape(void) {
    char path[] = "/tmp/nabla_hostile_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    const char header[] = "{\"x\":{\"dtype\":\"F32\",\"shape\":[0,4611686018427387904,"
                          "4611686018427387904],\"data_offsets\":[0,0]}}";
    unsigned char len[8] = {(unsigned char)(sizeof header - 1)};
    CU_ASSERT_FATAL(write(fd, len, 8) == 8);
    CU_ASSERT_FATAL(write(fd, header, sizeof header - 1) == (ssize_t)(sizeof header - 1));
    close(fd);
    int count = -1;
    EXPECT_ERROR(nb_safetensors_read(path, &count), "nb_safetensors_read: ", path, "'x'");
    CU_ASSERT_EQUAL(count, 0);
    unlink(path);
}

/* ---- item 7: bool bytes ---- */
static void test_bool_bytes_normalised(void) {
    nb_tensor *m = nb_from_array(NB_BOOL, NB_SHAPE(4), (uint8_t[]){0, 2, 255, 1});
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const uint8_t *b = nb_data(m);
    CU_ASSERT_TRUE(b[0] == 0 && b[1] == 1 && b[2] == 1 && b[3] == 1);
    /* Bytes written through nb_data are saved as 0/1, so the file loads again. */
    ((uint8_t *)nb_data(m))[0] = 7;
    char path[] = "/tmp/nabla_hostile_XXXXXX";
    close(mkstemp(path));
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"m", m}}));
    nb_tensor *back = nb_zeros(NB_BOOL, NB_SHAPE(4));
    CU_ASSERT_TRUE(nb_safetensors_load(path, 1, (nb_named_tensor[]){{"m", back}}));
    NBT_ASSERT_VALUES(back, 0, 1, 1, 1, 1);
    unlink(path);
    /* Converting to bool gives 0/1 too. */
    nb_tensor *f = nb_to_dtype(nb_from_array(NB_F32, NB_SHAPE(3), (float[]){0, -3, 0.5f}), NB_BOOL);
    b = nb_data(f);
    CU_ASSERT_TRUE(b[0] == 0 && b[1] == 1 && b[2] == 1);
}

/* ---- item 8: nb_uniform ---- */
static void test_uniform_rejects_unsampleable_ranges(void) {
    nb_rng r;
    nb_rng_seed(&r, 1);
    EXPECT_ERROR(nb_uniform(&r, NB_F64, NB_SHAPE(3), -DBL_MAX, DBL_MAX), "uniform: ");
    EXPECT_ERROR(nb_uniform(&r, NB_F64, NB_SHAPE(3), 0, INFINITY), "uniform: ");
    EXPECT_ERROR(nb_uniform(&r, NB_F64, NB_SHAPE(3), -INFINITY, 0), "uniform: ");
    EXPECT_ERROR(nb_uniform(&r, NB_F64, NB_SHAPE(3), NAN, 1), "uniform: ");
    EXPECT_ERROR(nb_uniform(&r, NB_F64, NB_SHAPE(3), 0, NAN), "uniform: ");
    /* float32 cannot hold the bounds */
    EXPECT_ERROR(nb_uniform(&r, NB_F32, NB_SHAPE(3), 0, 1e39), "uniform: ", "float32");
    /* A failed call does not advance the generator. */
    nb_rng fresh;
    nb_rng_seed(&fresh, 1);
    CU_ASSERT_EQUAL(nb_rng_next(&r), nb_rng_next(&fresh));
    /* Wide but finite ranges sample inside [low, high). */
    nb_tensor *w = nb_uniform(&r, NB_F64, NB_SHAPE(64), -DBL_MAX / 2, DBL_MAX / 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    for (int i = 0; i < 64; i++) {
        double v = nb_get(w, NB_IDX(i));
        CU_ASSERT_TRUE(isfinite(v) && v >= -DBL_MAX / 2 && v < DBL_MAX / 2);
    }
    nb_tensor *c = nb_uniform(&r, NB_F32, NB_SHAPE(2), 2.5, 2.5); /* empty width: low itself */
    NBT_ASSERT_VALUES(c, 0, 2.5, 2.5);
}

/* ---- item 9: NULL arguments ---- */
static void test_null_arguments_to_helpers(void) {
    nb_clear_error();
    nb_rng_seed(NULL, 3);
    NBT_ASSERT_ERROR("nb_rng_seed: ");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_rng_next(NULL), 0);
    NBT_ASSERT_ERROR("nb_rng_next: ");
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_rng_uniform(NULL)));
    NBT_ASSERT_ERROR("nb_rng_uniform: ");
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_rng_normal(NULL)));
    NBT_ASSERT_ERROR("nb_rng_normal: ");
    nb_tensor *t = nb_zeros(NB_F32, NB_SHAPE(2));
    nb_clear_error();
    nb_fprint(NULL, t);
    NBT_ASSERT_ERROR("nb_fprint: ");
    nb_clear_error();
    nb_module_fprint(NULL, NULL);
    NBT_ASSERT_ERROR("nb_module_fprint: ");
    char buf[16] = "untouched";
    CU_ASSERT_PTR_NULL(nb_shape_str(t, NULL, 16));
    CU_ASSERT_STRING_EQUAL(nb_shape_str(NULL, buf, sizeof buf), "(null)");
    CU_ASSERT_STRING_EQUAL(nb_shape_str(t, buf, sizeof buf), "[2]");
    char *text = nb_to_string(NULL);
    CU_ASSERT_STRING_EQUAL(text, "tensor(NULL)\n");
    free(text);
    /* Other helpers taking pointers. */
    nb_clear_error();
    CU_ASSERT_FALSE(nb_to_doubles(t, NULL));
    NBT_ASSERT_ERROR("to_doubles: ");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_to_doubles(NULL, (double[2]){0}));
    CU_ASSERT_FALSE(nb_copy_(NULL, t));
    CU_ASSERT_FALSE(nb_copy_(t, NULL));
    CU_ASSERT_EQUAL(nb_numel(NULL), 0);
    CU_ASSERT_EQUAL(nb_size(NULL, 0), -1);
    CU_ASSERT_FALSE(nb_is_contiguous(NULL));
    CU_ASSERT_FALSE(nb_same_shape(NULL, t));
    CU_ASSERT_PTR_NULL(nb_data(NULL));
    CU_ASSERT_PTR_NULL(nb_keep(NULL));
}

/* ---- item 10: scopes ---- */
static void test_scope_destroyed_twice(void) {
    nb_scope *s = nb_scope_new();
    nb_scope_push(s);
    nb_zeros(NB_F32, NB_SHAPE(3));
    nb_scope_pop();
    nb_scope_free(s);
    nb_clear_error();
    nb_scope_free(s); /* again: an error, and the free list is not corrupted */
    NBT_ASSERT_ERROR("nb_scope_free: ");
    nb_scope *a = nb_scope_new(), *b = nb_scope_new();
    CU_ASSERT_PTR_NOT_NULL(a);
    CU_ASSERT_PTR_NOT_NULL(b);
    CU_ASSERT_PTR_NOT_EQUAL(a, b);
    /* Pushing a destroyed scope is an error too. */
    nb_scope_free(a);
    nb_clear_error();
    nb_scope_push(a);
    NBT_ASSERT_ERROR("nb_scope_push: ");
    /* the current scope is unchanged */
    int64_t count = nb_scope_tensor_count();
    nb_zeros(NB_F32, NB_SHAPE(1));
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), count + 1);
    nb_scope_free(b);
}

static void test_scope_end_and_pop_without_begin(void) {
    /* The harness's own scope is current: end it once too often from a pushed scope. */
    nb_scope *s = nb_scope_new();
    nb_scope_push(s);
    nb_clear_error();
    nb_scope_end();
    NBT_ASSERT_ERROR("nb_scope_end: ");
    nb_scope_pop();
    nb_clear_error();
    nb_scope_pop(); /* the harness's begun scope is current: not poppable */
    NBT_ASSERT_ERROR("nb_scope_pop: ");
    nb_scope_free(s);
    nb_scope_free(NULL); /* harmless, like free(NULL) */
}

int main(void) {
    const nbtest_case cases[] = {
        {"zero size beside huge dims", test_zero_size_beside_huge_dims},
        {"checkpoint with an overflowing shape", test_checkpoint_with_overflowing_shape},
        {"bool bytes normalised", test_bool_bytes_normalised},
        {"uniform rejects ranges it cannot sample", test_uniform_rejects_unsampleable_ranges},
        {"NULL arguments to helpers", test_null_arguments_to_helpers},
        {"scope destroyed twice", test_scope_destroyed_twice},
        {"scope end and pop without begin", test_scope_end_and_pop_without_begin},
    };
    return nbtest_run("hostile inputs", cases, sizeof cases / sizeof cases[0]);
}
