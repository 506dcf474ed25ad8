/* Safetensors checkpoints: bitwise round trips, the byte layout of the format, every kind of
 * corrupt file rejected with the destinations untouched, failed saves that keep the previous
 * file, and a checkpoint written from PyTorch tensors (tests/gen_safetensors_golden.py). */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <zlib.h>

#define tmp_path nbtest_tmp_path
#define files_named nbtest_tmp_files

static bool write_bytes(const char *path, const void *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(bytes, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* Reads a whole file into a malloc'd buffer (caller frees). */
static unsigned char *read_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

/* A file with the given length field, header text and data section. */
static bool write_raw(const char *path, uint64_t length_field, const char *header, const void *data,
                      size_t data_len) {
    size_t hl = strlen(header);
    unsigned char *buf = malloc(8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(length_field >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (data_len) memcpy(buf + 8 + hl, data, data_len);
    bool ok = write_bytes(path, buf, 8 + hl + data_len);
    free(buf);
    return ok;
}

static bool write_st(const char *path, const char *header, const void *data, size_t data_len) {
    return write_raw(path, strlen(header), header, data, data_len);
}

/* Same dtype, shape and bytes (row-major), whatever the layouts. */
static bool bitwise_equal(const nb_tensor *a, const nb_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || !nb_same_shape(a, b)) return false;
    const nb_tensor *ca = nb_contiguous(a), *cb = nb_contiguous(b);
    return memcmp(nb_data(ca), nb_data(cb), (size_t)nb_numel(a) * nb_dtype_size(a->dtype)) == 0;
}

/* ---- round trips ---- */
static void test_round_trip_bitwise(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 11);
    nb_tensor *f32 = nb_randn(&rng, NB_F32, NB_SHAPE(3, 4));
    float *fd = nb_data(f32);
    fd[0] = -0.0f, fd[1] = INFINITY, fd[2] = 1e-42f /* subnormal */;
    uint32_t nan_bits = 0x7fc12345u; /* a quiet NaN with a payload */
    memcpy(&fd[3], &nan_bits, 4);
    nb_tensor *f64 = nb_randn(&rng, NB_F64, NB_SHAPE(2, 3));
    ((double *)nb_data(f64))[0] = -INFINITY;
    nb_tensor *i64 =
        nb_from_array(NB_I64, NB_SHAPE(4), (int64_t[]){INT64_MIN, -1, INT64_MAX, (int64_t)1 << 53});
    nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(2, 3), (uint8_t[]){1, 0, 0, 1, 1, 0});
    /* 0-d tensors (nb_scalar passes a NULL shape to memcpy, which UBSan rejects; see report) */
    static const int64_t no_dims[1] = {0};
    nb_tensor *scalar = nb_full(NB_F64, 0, no_dims, 0.1);
    nb_tensor *scalar_i = nb_full(NB_I64, 0, no_dims, -42);
    nb_tensor *empty = nb_zeros(NB_F32, NB_SHAPE(0, 4));
    nb_tensor *transposed = nb_transpose(nb_randn(&rng, NB_F64, NB_SHAPE(3, 5)), 0, 1);
    nb_tensor *sliced = nb_narrow(nb_randn(&rng, NB_F32, NB_SHAPE(4, 6)), 1, 1, 3);
    nb_tensor *mask_t = nb_transpose(mask, 0, 1);
    CU_ASSERT_FALSE(nb_is_contiguous(transposed));
    CU_ASSERT_FALSE(nb_is_contiguous(sliced));
    nb_named_tensor saved[] = {
        {"f32", f32},       {"f64", f64},           {"i64", i64},     {"mask", mask},
        {"scalar", scalar}, {"scalar_i", scalar_i}, {"empty", empty}, {"transposed", transposed},
        {"sliced", sliced}, {"mask_t", mask_t},
    };
    int n = (int)(sizeof saved / sizeof saved[0]);
    const char *path = tmp_path("round_trip.safetensors");
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, n, saved));
    CU_ASSERT_EQUAL(files_named("round_trip.safetensors"), 1); /* no temporary left */

    /* load into fresh tensors, some of them non-contiguous destinations */
    nb_named_tensor into[sizeof saved / sizeof saved[0]];
    for (int i = 0; i < n; i++) {
        const nb_tensor *s = saved[i].tensor;
        nb_tensor *d = nb_zeros(s->dtype, s->ndim, s->shape);
        if (strcmp(saved[i].name, "transposed") == 0) /* a [5, 3] stored transposed */
            d = nb_transpose(nb_zeros(NB_F64, NB_SHAPE(3, 5)), 0, 1);
        into[n - 1 - i] = (nb_named_tensor){saved[i].name, d}; /* order does not matter */
    }
    CU_ASSERT_TRUE_FATAL(nb_safetensors_load(path, n, into));
    for (int i = 0; i < n; i++)
        CU_ASSERT_TRUE(bitwise_equal(into[n - 1 - i].tensor, saved[i].tensor));

    /* read: same names in save order, contiguous tensors, same bits */
    int count = -1;
    nb_named_tensor *got = nb_safetensors_read(path, &count);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_EQUAL_FATAL(count, n);
    for (int i = 0; i < n; i++) {
        CU_ASSERT_STRING_EQUAL(got[i].name, saved[i].name);
        CU_ASSERT_TRUE(nb_is_contiguous(got[i].tensor));
        CU_ASSERT_TRUE(bitwise_equal(got[i].tensor, saved[i].tensor));
    }
    unlink(path);
}

static void test_empty_checkpoint(void) {
    const char *path = tmp_path("nothing.safetensors");
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 0, NULL));
    CU_ASSERT_TRUE(nb_safetensors_load(path, 0, NULL));
    int count = -1;
    CU_ASSERT_PTR_NOT_NULL(nb_safetensors_read(path, &count));
    CU_ASSERT_EQUAL(count, 0);
    unlink(path);
}

/* The bytes on disk, checked against the format by hand: length, padded JSON, row-major data. */
static void test_file_layout(void) {
    nb_tensor *m = nb_transpose(nb_view(nb_arange(NB_F64, 0, 6, 1), NB_SHAPE(2, 3)), 0, 1);
    nb_tensor *flags = nb_from_array(NB_BOOL, NB_SHAPE(3), (uint8_t[]){0, 1, 1});
    const char *path = tmp_path("layout.safetensors");
    CU_ASSERT_TRUE_FATAL(
        nb_safetensors_save(path, 2, (nb_named_tensor[]){{"flags", flags}, {"m", m}}));
    size_t len = 0;
    unsigned char *b = read_bytes(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
    CU_ASSERT_EQUAL(hl % 8, 0); /* data starts 8-byte aligned */
    CU_ASSERT_EQUAL(len, 8 + hl + 6 * 8 + 3);
    double rows[6];
    memcpy(rows, b + 8 + hl, sizeof rows);
    const double expected[6] = {0, 3, 1, 4, 2, 5}; /* [[0,3],[1,4],[2,5]] row-major */
    CU_ASSERT_EQUAL(memcmp(rows, expected, sizeof rows), 0);
    CU_ASSERT_EQUAL(memcmp(b + 8 + hl + 48, "\0\1\1", 3), 0);
    /* Metadata first, with zlib's CRC-32 of exactly those 51 data bytes; then the header in
     * the caller's order; data by decreasing element size, so m is 8-aligned. */
    unsigned char data[51];
    memcpy(data, expected, 48);
    memcpy(data + 48, "\0\1\1", 3);
    /* Beside it, what it covers: the CRC-32 of the tensor index (checkpoint.h: in offset order,
     * name, dtype, dims, begin and end, each ended by a NUL, the last by a newline) and the
     * data length. */
    static const char index[] = "m\0F64\0003,2\0000\00048\n"
                                "flags\0BOOL\0003\00048\00051\n";
    char want[400];
    snprintf(want, sizeof want,
             "{\"__metadata__\":{\"nabla.data_crc32\":\"%08lx\","
             "\"nabla.data_crc32_covers\":\"%08lx 51\"},"
             "\"flags\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[48,51]},"
             "\"m\":{\"dtype\":\"F64\",\"shape\":[3,2],\"data_offsets\":[0,48]}}",
             crc32(crc32(0, Z_NULL, 0), data, sizeof data),
             crc32(crc32(0, Z_NULL, 0), (const unsigned char *)index, sizeof index - 1));
    CU_ASSERT_TRUE(hl >= strlen(want) && memcmp(b + 8, want, strlen(want)) == 0);
    for (size_t k = strlen(want); k < hl; k++) CU_ASSERT_EQUAL(b[8 + k], ' ');
    free(b);
    unlink(path);
}

/* ---- the PyTorch golden ---- */
static void test_torch_checkpoint(void) {
    const char *path = NBTEST_GOLDEN_DIR "/torch_checkpoint.safetensors";
    int count = 0;
    nb_named_tensor *got = nb_safetensors_read(path, &count);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_EQUAL(count, 7);
    /* Values as tests/gen_safetensors_golden.py states them. */
    nb_tensor *weight = nb_zeros(NB_F32, NB_SHAPE(2, 3));
    nb_tensor *bias = nb_zeros(NB_F64, NB_SHAPE(3));
    nb_tensor *ids = nb_zeros(NB_I64, NB_SHAPE(4));
    nb_tensor *mask = nb_zeros(NB_BOOL, NB_SHAPE(2, 2));
    static const int64_t no_dims[1] = {0};
    nb_tensor *scale = nb_zeros(NB_F32, 0, no_dims); /* 0-d */
    nb_tensor *empty = nb_zeros(NB_F32, NB_SHAPE(0, 3));
    nb_tensor *tr = nb_transpose(nb_zeros(NB_F64, NB_SHAPE(2, 3)), 0, 1); /* strided destination */
    nb_named_tensor into[] = {{"layer.weight", weight}, {"layer.bias", bias}, {"token_ids", ids},
                              {"mask", mask},           {"scale", scale},     {"empty", empty},
                              {"transposed", tr}};
    CU_ASSERT_TRUE_FATAL(nb_safetensors_load(path, 7, into));
    NBT_ASSERT_VALUES(weight, 0, -1, -0.5, 0, 0.5, 1, 1.5);
    NBT_ASSERT_VALUES(bias, 0, 0.1, -2.5, 1e300);
    const int64_t *id = nb_data(ids);
    CU_ASSERT_TRUE(id[0] == 0 && id[1] == -1 && id[2] == (int64_t)1 << 40 && id[3] == 7);
    NBT_ASSERT_VALUES(mask, 0, 1, 0, 0, 1);
    CU_ASSERT_EQUAL(nb_item(scale), 3.25);
    NBT_ASSERT_VALUES(tr, 0, 0, 3, 1, 4, 2, 5);
    for (int i = 0; i < count; i++) {
        if (strcmp(got[i].name, "transposed") == 0)
            NBT_ASSERT_VALUES(got[i].tensor, 0, 0, 3, 1, 4, 2, 5);
        if (strcmp(got[i].name, "scale") == 0) CU_ASSERT_EQUAL(got[i].tensor->ndim, 0);
        if (strcmp(got[i].name, "empty") == 0) CU_ASSERT_EQUAL(nb_size(got[i].tensor, 0), 0);
    }
}

/* ---- corrupt files: rejected, destinations untouched ---- */
static nb_tensor *dst_a, *dst_b; /* a: F32 [2] = {7, 7}, b: I64 [1] = {9} */

static void reset_destinations(void) {
    dst_a = nb_full(NB_F32, NB_SHAPE(2), 7);
    dst_b = nb_full(NB_I64, NB_SHAPE(1), 9);
}

/* Loads path into a and b, expecting failure with an error naming the file and `why`. A file
 * that is valid but does not match a and b still reads; any other must fail to read too. */
static void expect_mismatch_or_rejected(const char *path, const char *why, bool valid_file) {
    nb_clear_error();
    nb_named_tensor into[2] = {{"a", dst_a}, {"b", dst_b}};
    bool loaded = nb_safetensors_load(path, 2, into);
    CU_ASSERT_FALSE(loaded);
    const char *err = nb_last_error();
    bool names_file = strstr(err, path) != NULL, says_why = !why || strstr(err, why) != NULL;
    CU_ASSERT_TRUE(names_file);
    CU_ASSERT_TRUE(says_why);
    if (loaded || !names_file || !says_why)
        fprintf(stderr, "\n  expected \"%s\", got \"%s\"\n", why ? why : "(any)", err);
    NBT_ASSERT_VALUES(dst_a, 0, 7, 7);
    NBT_ASSERT_VALUES(dst_b, 0, 9);
    int count = -1;
    int64_t before = nb_scope_tensor_count();
    nb_named_tensor *got = nb_safetensors_read(path, &count);
    if (valid_file) {
        CU_ASSERT_PTR_NOT_NULL(got);
        CU_ASSERT_TRUE(count > 0);
    } else {
        CU_ASSERT_PTR_NULL(got);
        CU_ASSERT_EQUAL(count, 0);
        CU_ASSERT_EQUAL(nb_scope_tensor_count(), before);
    }
}

static void expect_rejected(const char *path, const char *why) {
    expect_mismatch_or_rejected(path, why, false);
}

/* a = {1.5, -2}, b = {123}: 16 bytes of data. */
static const unsigned char good_data[16] = {0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0, 123};
#define GOOD_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define GOOD_B "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}"

static void test_good_hand_written_file(void) {
    reset_destinations();
    const char *path = tmp_path("good.safetensors");
    CU_ASSERT_TRUE_FATAL(write_st(
        path, "{\"__metadata__\":{\"format\":\"pt\"}," GOOD_B "," GOOD_A "}  ", good_data, 16));
    nb_named_tensor into[2] = {{"a", dst_a}, {"b", dst_b}};
    CU_ASSERT_TRUE_FATAL(nb_safetensors_load(path, 2, into));
    NBT_ASSERT_VALUES(dst_a, 0, 1.5, -2);
    NBT_ASSERT_VALUES(dst_b, 0, 123);
    unlink(path);
}

static void test_truncated(void) {
    reset_destinations();
    const char *path = tmp_path("full.safetensors"), *cut = tmp_path("cut.safetensors");
    nb_tensor *a = nb_full(NB_F32, NB_SHAPE(2), 1), *b = nb_full(NB_I64, NB_SHAPE(1), 2);
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 2, (nb_named_tensor[]){{"a", a}, {"b", b}}));
    size_t len = 0;
    unsigned char *bytes = read_bytes(path, &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | bytes[i];
    size_t lengths[] = {0, 1, 7, 8, 9, 8 + hl / 2, 8 + hl - 1, 8 + hl, 8 + hl + 5, len - 1};
    const char *why[] = {"too few",       "too few",       "too few",       "header length",
                         "header length", "header length", "header length", "reach past",
                         "reach past",    "reach past"};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        CU_ASSERT_TRUE_FATAL(write_bytes(cut, bytes, lengths[i]));
        expect_rejected(cut, why[i]);
    }
    free(bytes);
    unlink(path);
    unlink(cut);
}

static void test_bad_header_length(void) {
    reset_destinations();
    const char *path = tmp_path("bad_len.safetensors");
    const char *h = "{" GOOD_A "," GOOD_B "}";
    CU_ASSERT_TRUE(write_raw(path, (uint64_t)1 << 40, h, good_data, 16));
    expect_rejected(path, "header length 1099511627776 is larger than");
    CU_ASSERT_TRUE(write_raw(path, UINT64_MAX, h, good_data, 16));
    expect_rejected(path, "is larger than");
    CU_ASSERT_TRUE(write_raw(path, strlen(h) + 17, h, good_data, 16)); /* one byte too many */
    expect_rejected(path, "is larger than");
    CU_ASSERT_TRUE(write_raw(path, strlen(h) + 2, h, good_data, 16)); /* eats data as JSON */
    expect_rejected(path, "not valid JSON");
    unlink(path);
}

static void test_garbage(void) {
    reset_destinations();
    const char *path = tmp_path("garbage.safetensors");
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    unsigned char junk[4096];
    for (int trial = 0; trial < 20; trial++) {
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)nb_rng_next(&rng);
        size_t len = 1 + nb_rng_next(&rng) % sizeof junk;
        if (trial % 2) { /* a plausible header length, then garbage */
            uint64_t hl = nb_rng_next(&rng) % (len > 8 ? len - 8 : 1);
            for (int i = 0; i < 8; i++) junk[i] = (unsigned char)(hl >> (8 * i));
        }
        CU_ASSERT_TRUE_FATAL(write_bytes(path, junk, len));
        expect_rejected(path, NULL);
    }
    /* not a safetensors file at all */
    CU_ASSERT_TRUE(write_bytes(path, "hello, world: this is text", 26));
    expect_rejected(path, NULL);
    unlink(path);
}

/* Random byte changes to a valid file: each load either succeeds (a change in the data, or in
 * the header that keeps it valid) or fails leaving the destinations untouched; never a crash
 * (the valgrind and sanitizer passes watch the reads). */
static void test_random_corruption(void) {
    const char *path = tmp_path("fuzz.safetensors");
    nb_tensor *a = nb_full(NB_F32, NB_SHAPE(2), 1.5), *b = nb_full(NB_I64, NB_SHAPE(1), 3);
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 2, (nb_named_tensor[]){{"a", a}, {"b", b}}));
    size_t len = 0;
    unsigned char *good = read_bytes(path, &len), *bad = malloc(len);
    nb_rng rng;
    nb_rng_seed(&rng, 99);
    int failures = 0;
    for (int trial = 0; trial < 300; trial++) {
        memcpy(bad, good, len);
        int changes = 1 + (int)(nb_rng_next(&rng) % 3);
        for (int k = 0; k < changes; k++) {
            size_t at = nb_rng_next(&rng) % len;
            bad[at] = trial % 2 ? (unsigned char)nb_rng_next(&rng) : bad[at] ^ 0x01;
        }
        CU_ASSERT_TRUE_FATAL(write_bytes(path, bad, len));
        nb_tensor *da = nb_full(NB_F32, NB_SHAPE(2), 7), *db = nb_full(NB_I64, NB_SHAPE(1), 9);
        if (!nb_safetensors_load(path, 2, (nb_named_tensor[]){{"a", da}, {"b", db}})) {
            failures++;
            CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), path));
            NBT_ASSERT_VALUES(da, 0, 7, 7);
            NBT_ASSERT_VALUES(db, 0, 9);
        }
        int count;
        nb_safetensors_read(path, &count);
    }
    CU_ASSERT_TRUE(failures > 100); /* most header changes break it */
    free(good);
    free(bad);
    unlink(path);
}

/* One header per case with the message it must produce. */
static void test_bad_headers(void) {
    reset_destinations();
    static const struct {
        const char *header;
        size_t data_len;
        const char *why;
        bool valid_file; /* only the names, dtypes or shapes differ from a and b */
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",", 16, "not valid JSON", false},
        {"{" GOOD_A "," GOOD_B "} x", 16, "not valid JSON", false},
        {"[1, 2]", 16, "not a JSON object", false},
        {"{" GOOD_A "," GOOD_A "," GOOD_B "}", 16, "duplicate", false},
        {"{" GOOD_A "}", 8, "tensor 'b' is missing", true},
        {"{" GOOD_A "," GOOD_B ",\"c\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[16,17]}}",
         17, "tensor 'c' is in the file but not expected", true},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}," GOOD_B "}", 16,
         "tensor 'a': dtype F64 in the file, expected F32", true},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}," GOOD_B "}", 16,
         "tensor 'a': shape [1, 2] in the file, expected [2]", true},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[4,12]}}",
         12, "tensor 'a': shape [] in the file, expected [2]", true},
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}," GOOD_B "}", 16,
         "tensor 'a': dtype F16 is not supported", false},
        {"{" GOOD_A ",\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,24]}}", 16,
         "tensor 'b': data_offsets [8, 24] reach past the data section of 16 bytes", false},
        {"{" GOOD_A ",\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,8]}}", 16,
         "tensor 'b': data_offsets [16, 8] end before they begin", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}," GOOD_B "}", 16,
         "tensor 'a': data_offsets [0, 4] hold 4 bytes, but F32 [2] needs 8", false},
        {"{" GOOD_A ",\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[4,12]}}", 16,
         "tensor 'b': data_offsets [4, 12] overlap those of tensor 'a'", false},
        {"{" GOOD_A ",\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,24]}}", 24,
         "gap: bytes [8, 16) belong to no tensor", false},
        {"{" GOOD_A ",\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 16,
         "tensor 'b': data_offsets [0, 8] overlap those of tensor 'a'", false},
        {"{" GOOD_A "," GOOD_B "}", 20,
         "the data section has 20 bytes but the tensors cover only 16", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}," GOOD_B "}", 16,
         "tensor 'a': data_offsets is not a pair of non-negative integers", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.0,8]}," GOOD_B "}", 16,
         "data_offsets is not a pair", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}," GOOD_B "}", 16,
         "data_offsets is not a pair", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}," GOOD_B "}", 16, "data_offsets is not a pair",
         false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}," GOOD_B "}", 16,
         "tensor 'a': shape entry 0 is not a non-negative integer", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}," GOOD_B "}", 16,
         "tensor 'a': shape is missing or not an array", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}," GOOD_B
         "}",
         16, "shape has 9 dims", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}"
         "," GOOD_B "}",
         16, "tensor 'a': shape is too large", false},
        {"{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}," GOOD_B "}", 16,
         "dtype is missing or not a string", false},
        {"{\"a\":[0,8]," GOOD_B "}", 16, "tensor 'a': its description is not a JSON object", false},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}," GOOD_B "}", 16,
         "tensor 'a': unknown field 'x'", false},
        {"{\"__metadata__\":{\"step\":5}," GOOD_A "," GOOD_B "}", 16,
         "__metadata__ entry 'step' is not a string", false},
        {"{\"__metadata__\":[]," GOOD_A "," GOOD_B "}", 16, "__metadata__ is not a JSON object",
         false},
        {"", 16, "not valid JSON", false},
    };
    const char *path = tmp_path("bad_header.safetensors");
    unsigned char data[32] = {0};
    memcpy(data, good_data, 16);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT_TRUE_FATAL(write_st(path, cases[i].header, data, cases[i].data_len));
        expect_mismatch_or_rejected(path, cases[i].why, cases[i].valid_file);
    }
    unlink(path);
}

static void test_bad_bool_bytes(void) {
    const char *path = tmp_path("bool.safetensors");
    CU_ASSERT_TRUE_FATAL(write_st(
        path, "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", "\1\0\2", 3));
    nb_tensor *m = nb_zeros(NB_BOOL, NB_SHAPE(3));
    CU_ASSERT_FALSE(nb_safetensors_load(path, 1, (nb_named_tensor[]){{"m", m}}));
    NBT_ASSERT_ERROR("tensor 'm': BOOL element 2 is 2, not 0 or 1");
    NBT_ASSERT_VALUES(m, 0, 0, 0, 0);
    unlink(path);
}

static void test_bad_load_arguments(void) {
    reset_destinations();
    const char *path = tmp_path("args.safetensors");
    CU_ASSERT_TRUE_FATAL(write_st(path, "{" GOOD_A "," GOOD_B "}", good_data, 16));
    CU_ASSERT_FALSE(nb_safetensors_load(NULL, 2, (nb_named_tensor[]){{"a", dst_a}, {"b", dst_b}}));
    NBT_ASSERT_ERROR("nb_safetensors_load: path is NULL");
    CU_ASSERT_FALSE(nb_safetensors_load(path, 2, NULL));
    NBT_ASSERT_ERROR("into is NULL");
    CU_ASSERT_FALSE(nb_safetensors_load(path, 2, (nb_named_tensor[]){{"a", dst_a}, {"a", dst_b}}));
    NBT_ASSERT_ERROR("the name 'a' is listed twice");
    CU_ASSERT_FALSE(nb_safetensors_load(path, 2, (nb_named_tensor[]){{"a", dst_a}, {"b", NULL}}));
    NBT_ASSERT_ERROR("tensor 'b': the destination is NULL");
    CU_ASSERT_FALSE(nb_safetensors_load(path, 2, (nb_named_tensor[]){{"a", dst_a}, {NULL, dst_b}}));
    NBT_ASSERT_ERROR("entry 1 has a NULL name");
    nb_tensor *expanded = nb_expand(nb_zeros(NB_F32, NB_SHAPE(1)), NB_SHAPE(2));
    CU_ASSERT_FALSE(
        nb_safetensors_load(path, 2, (nb_named_tensor[]){{"a", expanded}, {"b", dst_b}}));
    NBT_ASSERT_ERROR("tensor 'a': the destination (shape [2]) is an expanded view");
    CU_ASSERT_FALSE(nb_safetensors_load(path, -1, NULL));
    NBT_ASSERT_ERROR("n is -1");
    NBT_ASSERT_VALUES(dst_a, 0, 7, 7);
    NBT_ASSERT_VALUES(dst_b, 0, 9);
    expect_rejected(tmp_path("does_not_exist.safetensors"), "cannot open: No such file");
    expect_rejected(nbtest_tmp_dir(), "not a regular file");
    CU_ASSERT_PTR_NULL(nb_safetensors_read(path, NULL));
    NBT_ASSERT_ERROR("count is NULL");
    unlink(path);
}

/* A watchdog, not a timing check: if a call blocks, SIGALRM interrupts it (no SA_RESTART; the
 * timer repeats, for each call that blocks), so the call fails with EINTR and the test fails
 * on its message instead of hanging. */
static void on_alarm(int sig) {
    (void)sig;
}

/* A FIFO (with no writer) is refused at once by every reader, naming the path and what it is;
 * opening it for reading used to block forever (issue 29, item 11). */
static void test_fifo_refused_without_blocking(void) {
    reset_destinations();
    const char *path = tmp_path("fifo.safetensors");
    unlink(path);
    CU_ASSERT_EQUAL_FATAL(mkfifo(path, 0600), 0);
    struct sigaction alarm_action = {.sa_handler = on_alarm}, old_action;
    sigemptyset(&alarm_action.sa_mask);
    sigaction(SIGALRM, &alarm_action, &old_action);
    struct itimerval watchdog = {.it_value = {10, 0}, .it_interval = {1, 0}},
                     off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &watchdog, NULL);
    expect_rejected(path, "not a regular file (a FIFO)");
    int count = -1;
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_safetensors_read_metadata(path, &count));
    NBT_ASSERT_ERROR("not a regular file (a FIFO)");
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old_action, NULL);
    unlink(path);
}

/* ---- checksum and metadata ---- */
/* One data byte changed (in a way the header cannot see): the CRC-32 catches it. */
static void test_checksum_catches_changed_data(void) {
    reset_destinations();
    const char *path = tmp_path("crc.safetensors");
    nb_tensor *a = nb_full(NB_F32, NB_SHAPE(2), 1.5), *b = nb_full(NB_I64, NB_SHAPE(1), 3);
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 2, (nb_named_tensor[]){{"a", a}, {"b", b}}));
    size_t len = 0;
    unsigned char *bytes = read_bytes(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
    bytes[len - 1] ^= 0x40; /* the last byte of a's 1.5f: still a valid float */
    CU_ASSERT_TRUE_FATAL(write_bytes(path, bytes, len));
    expect_rejected(path, "the data does not match its checksum");
    /* A checksum that is not 8 lowercase hex digits is refused before the data is read. */
    static const char *bad[] = {"1234567", "123456789", "ABCDEF01", "1234567g", ""};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char header[300];
        snprintf(header, sizeof header,
                 "{\"__metadata__\":{\"nabla.data_crc32\":\"%s\"}," GOOD_A "," GOOD_B "}", bad[k]);
        CU_ASSERT_TRUE_FATAL(write_st(path, header, good_data, 16));
        expect_rejected(path, "not 8 lowercase hex digits");
    }
    /* The right checksum (zlib's CRC-32 of the 16 data bytes) loads. */
    char header[300];
    snprintf(header, sizeof header,
             "{\"__metadata__\":{\"nabla.data_crc32\":\"%08lx\"}," GOOD_A "," GOOD_B "}",
             crc32(crc32(0, Z_NULL, 0), good_data, 16));
    CU_ASSERT_TRUE_FATAL(write_st(path, header, good_data, 16));
    CU_ASSERT_TRUE(nb_safetensors_load(path, 2, (nb_named_tensor[]){{"a", dst_a}, {"b", dst_b}}));
    NBT_ASSERT_VALUES(dst_a, 0, 1.5, -2);
    free(bytes);
    unlink(path);
}

/* A tool that copies nabla's __metadata__ into a file it writes copies the checksum too: the
 * covers entry says it was made for other tensors, so the new file is not called corrupt. A
 * checksum copied without a covers entry (from older nabla) cannot be told from corruption:
 * the message says either may be the cause. */
static void test_copied_checksum_is_not_corruption(void) {
    reset_destinations();
    const char *nabla_file = tmp_path("original.safetensors"), *copy = tmp_path("copy.safetensors");
    nb_tensor *w = nb_full(NB_F64, NB_SHAPE(3), 0.5);
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(nabla_file, 1, (nb_named_tensor[]){{"w", w}}));
    size_t len = 0;
    unsigned char *bytes = read_bytes(nabla_file, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
    /* Its metadata object (first, flat): from {"__metadata__": to the first '}'. */
    const char *meta = strstr((const char *)bytes + 8, "\"__metadata__\"");
    const char *end = meta ? strchr(meta, '}') : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(end);
    CU_ASSERT_PTR_NOT_NULL(strstr(meta, NB_SAFETENSORS_CRC_COVERS_KEY));
    char header[400];
    snprintf(header, sizeof header, "{%.*s," GOOD_A "," GOOD_B "}", (int)(end - meta + 1), meta);
    CU_ASSERT_TRUE_FATAL(write_st(copy, header, good_data, 16));
    bool loaded = nb_safetensors_load(copy, 2, (nb_named_tensor[]){{"a", dst_a}, {"b", dst_b}});
    if (!loaded) printf("\n    %s\n", nb_last_error());
    CU_ASSERT_TRUE(loaded);
    NBT_ASSERT_VALUES(dst_a, 0, 1.5, -2);
    /* The original still checks out, and one changed data byte in it is still caught. */
    nb_tensor *into = nb_zeros(NB_F64, NB_SHAPE(3));
    CU_ASSERT_TRUE(nb_safetensors_load(nabla_file, 1, (nb_named_tensor[]){{"w", into}}));
    bytes[len - 1] ^= 0x01;
    CU_ASSERT_TRUE_FATAL(write_bytes(nabla_file, bytes, len));
    CU_ASSERT_FALSE(nb_safetensors_load(nabla_file, 1, (nb_named_tensor[]){{"w", into}}));
    NBT_ASSERT_ERROR("the file is corrupt");
    CU_ASSERT_PTR_NULL(strstr(nb_last_error(), "copied"));
    /* Without a covers entry: verified, and the message names both causes. */
    reset_destinations();
    CU_ASSERT_TRUE_FATAL(write_st(
        copy, "{\"__metadata__\":{\"nabla.data_crc32\":\"00000000\"}," GOOD_A "," GOOD_B "}",
        good_data, 16));
    expect_rejected(copy, "or its metadata was copied from another file");
    /* A malformed covers entry is refused like a malformed checksum. */
    static const char *bad[] = {"",           "0000000 16",   "00000000",    "00000000 ",
                                "00000000 x", "00000000 016", "0000000g 16", "00000000 16 "};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(header, sizeof header,
                 "{\"__metadata__\":{\"nabla.data_crc32\":\"00000000\","
                 "\"nabla.data_crc32_covers\":\"%s\"}," GOOD_A "," GOOD_B "}",
                 bad[k]);
        CU_ASSERT_TRUE_FATAL(write_st(copy, header, good_data, 16));
        expect_rejected(copy, "not \"<8 hex digits> <length>\"");
    }
    free(bytes);
    unlink(nabla_file);
    unlink(copy);
}

static void test_metadata_round_trip(void) {
    const char *path = tmp_path("meta.safetensors");
    nb_tensor *w = nb_full(NB_F32, NB_SHAPE(2), 0.25);
    const nb_metadata_entry meta[] = {{"d_model", "128"}, {"name", "caf\xc3\xa9"}, {"empty", ""}};
    CU_ASSERT_TRUE_FATAL(
        nb_safetensors_save_with_metadata(path, 1, (nb_named_tensor[]){{"w", w}}, 3, meta));
    int count = -1;
    int64_t tensors_before = nb_scope_tensor_count();
    nb_metadata_entry *got = nb_safetensors_read_metadata(path, &count);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_EQUAL_FATAL(count, 3); /* the checksum entry is not listed */
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_STRING_EQUAL(got[i].key, meta[i].key);
        CU_ASSERT_STRING_EQUAL(got[i].value, meta[i].value);
    }
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), tensors_before);
    /* The tensors load as from any file. */
    nb_tensor *into = nb_zeros(NB_F32, NB_SHAPE(2));
    CU_ASSERT_TRUE(nb_safetensors_load(path, 1, (nb_named_tensor[]){{"w", into}}));
    NBT_ASSERT_VALUES(into, 0, 0.25, 0.25);
    /* A PyTorch-written file: its own metadata, no checksum. */
    got = nb_safetensors_read_metadata(NBTEST_GOLDEN_DIR "/torch_checkpoint.safetensors", &count);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_EQUAL_FATAL(count, 2); /* as tests/gen_safetensors_golden.py writes them */
    CU_ASSERT_TRUE(!strcmp(got[0].key, "format") && !strcmp(got[0].value, "pt"));
    CU_ASSERT_TRUE(!strcmp(got[1].key, "generator") &&
                   !strcmp(got[1].value, "tests/gen_safetensors_golden.py"));
    /* No __metadata__ at all: none, and a non-NULL array. */
    const char *plain = tmp_path("plain.safetensors");
    CU_ASSERT_TRUE_FATAL(write_st(plain, "{" GOOD_A "," GOOD_B "}", good_data, 16));
    count = -1;
    CU_ASSERT_PTR_NOT_NULL(nb_safetensors_read_metadata(plain, &count));
    CU_ASSERT_EQUAL(count, 0);
    /* Errors: the file's and the arguments'. */
    CU_ASSERT_PTR_NULL(nb_safetensors_read_metadata(tmp_path("absent.safetensors"), &count));
    NBT_ASSERT_ERROR("nb_safetensors_read_metadata");
    CU_ASSERT_EQUAL(count, 0);
    CU_ASSERT_PTR_NULL(nb_safetensors_read_metadata(path, NULL));
    NBT_ASSERT_ERROR("count is NULL");
    CU_ASSERT_PTR_NULL(nb_safetensors_read_metadata(NULL, &count));
    NBT_ASSERT_ERROR("path is NULL");
    unlink(path);
    unlink(plain);
}

static void test_bad_metadata_arguments(void) {
    const char *path = tmp_path("meta_args.safetensors");
    nb_named_tensor t[] = {{"t", nb_zeros(NB_F32, NB_SHAPE(2))}};
    static const struct {
        nb_metadata_entry entries[2];
        int n;
        const char *why;
    } cases[] = {
        {{{NULL, "v"}}, 1, "metadata entry 0 has a NULL key"},
        {{{"k", NULL}}, 1, "metadata entry 0 has a NULL value"},
        {{{NB_SAFETENSORS_CRC_KEY, "00000000"}}, 1, "the key nabla.data_crc32 is reserved"},
        {{{NB_SAFETENSORS_CRC_COVERS_KEY, "00000000 0"}},
         1,
         "the key nabla.data_crc32_covers is reserved"},
        {{{"k", "1"}, {"k", "2"}}, 2, "the metadata key 'k' appears twice"},
        {{{"k\xff", "1"}}, 1, "valid UTF-8"},
        {{{"k", "\xc3"}}, 1, "valid UTF-8"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nb_clear_error();
        CU_ASSERT_FALSE(
            nb_safetensors_save_with_metadata(path, 1, t, cases[c].n, cases[c].entries));
        NBT_ASSERT_ERROR(cases[c].why);
    }
    CU_ASSERT_FALSE(nb_safetensors_save_with_metadata(path, 1, t, 1, NULL));
    NBT_ASSERT_ERROR("meta is NULL for n_meta = 1");
    CU_ASSERT_FALSE(nb_safetensors_save_with_metadata(path, 1, t, -1, NULL));
    NBT_ASSERT_ERROR("n_meta is -1");
    CU_ASSERT_EQUAL(files_named("meta_args.safetensors"), 0);
}

/* ---- saving ---- */
static void test_bad_save_arguments(void) {
    const char *path = tmp_path("save_args.safetensors");
    nb_tensor *t = nb_zeros(NB_F32, NB_SHAPE(2));
    CU_ASSERT_FALSE(nb_safetensors_save(NULL, 1, (nb_named_tensor[]){{"t", t}}));
    NBT_ASSERT_ERROR("nb_safetensors_save: path is NULL");
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, NULL));
    NBT_ASSERT_ERROR("tensors is NULL");
    CU_ASSERT_FALSE(nb_safetensors_save(path, -2, NULL));
    NBT_ASSERT_ERROR("n is -2");
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"t", NULL}}));
    NBT_ASSERT_ERROR("tensor 't' (entry 0) is NULL");
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"", t}}));
    NBT_ASSERT_ERROR("entry 0 has an empty name");
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, (nb_named_tensor[]){{NULL, t}}));
    NBT_ASSERT_ERROR("entry 0 has a NULL name");
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"__metadata__", t}}));
    NBT_ASSERT_ERROR("the name __metadata__ is reserved");
    CU_ASSERT_FALSE(nb_safetensors_save(path, 2, (nb_named_tensor[]){{"t", t}, {"t", t}}));
    NBT_ASSERT_ERROR("the name 't' appears twice");
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"bad\xff", t}}));
    NBT_ASSERT_ERROR("valid UTF-8");
    CU_ASSERT_EQUAL(files_named("save_args.safetensors"), 0);
}

/* Saves {"w": value} and checks what the file at path holds. */
static bool save_w(const char *path, double value) {
    nb_tensor *w = nb_full(NB_F32, NB_SHAPE(3), value);
    return nb_safetensors_save(path, 1, (nb_named_tensor[]){{"w", w}});
}

static double load_w(const char *path) {
    nb_tensor *w = nb_zeros(NB_F32, NB_SHAPE(3));
    return nb_safetensors_load(path, 1, (nb_named_tensor[]){{"w", w}}) ? nb_get(w, NB_IDX(2)) : NAN;
}

static void test_failed_save_keeps_previous(void) {
    const char *path = tmp_path("ckpt.safetensors");
    CU_ASSERT_TRUE_FATAL(save_w(path, 1.0));
    CU_ASSERT_EQUAL(load_w(path), 1.0);

    /* The disk fills up mid-write: a file size limit makes write() fail with EFBIG. */
    struct rlimit old;
    CU_ASSERT_EQUAL_FATAL(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {200, old.rlim_max};
    CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_FSIZE, &small), 0);
    nb_tensor *big = nb_full(NB_F32, NB_SHAPE(1000), 3.0);
    bool saved = nb_safetensors_save(path, 1, (nb_named_tensor[]){{"w", big}});
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    CU_ASSERT_FALSE(saved);
    NBT_ASSERT_ERROR("write of the temporary file");
    CU_ASSERT_EQUAL(load_w(path), 1.0);
    CU_ASSERT_EQUAL(files_named("ckpt.safetensors"), 1); /* the partial temporary is removed */

    /* Invalid input fails before anything is written. */
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"w", NULL}}));
    CU_ASSERT_EQUAL(load_w(path), 1.0);
    CU_ASSERT_EQUAL(files_named("ckpt.safetensors"), 1);
    unlink(path);

    /* The longest file name the system allows still saves (its temporary's name is cut). */
    char longest[64 + 1 + 256];
    snprintf(longest, sizeof longest, "%s/%0255d", nbtest_tmp_dir(), 7);
    CU_ASSERT_TRUE(save_w(longest, 5.0));
    CU_ASSERT_EQUAL(load_w(longest), 5.0);
    CU_ASSERT_EQUAL(files_named("0000000"), 1);
    unlink(longest);

    /* A path in a directory that does not exist. */
    const char *missing = tmp_path("no_such_dir/ckpt.safetensors");
    CU_ASSERT_FALSE(save_w(missing, 1.0));
    NBT_ASSERT_ERROR("creation of the temporary file");
    NBT_ASSERT_ERROR("No such file or directory");
    CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), missing));
}

int main(void) {
    const nbtest_case cases[] = {
        {"round trip is bitwise", test_round_trip_bitwise},
        {"empty checkpoint", test_empty_checkpoint},
        {"file layout by hand", test_file_layout},
        {"checkpoint written from PyTorch", test_torch_checkpoint},
        {"hand-written file loads", test_good_hand_written_file},
        {"truncated files", test_truncated},
        {"bad header length", test_bad_header_length},
        {"garbage", test_garbage},
        {"random corruption", test_random_corruption},
        {"bad headers", test_bad_headers},
        {"bool bytes other than 0/1", test_bad_bool_bytes},
        {"checksum catches changed data", test_checksum_catches_changed_data},
        {"a copied checksum is not corruption", test_copied_checksum_is_not_corruption},
        {"metadata round trip", test_metadata_round_trip},
        {"bad metadata arguments", test_bad_metadata_arguments},
        {"bad load arguments", test_bad_load_arguments},
        {"a FIFO is refused without blocking", test_fifo_refused_without_blocking},
        {"bad save arguments", test_bad_save_arguments},
        {"failed save keeps the previous file", test_failed_save_keeps_previous},
    };
    return nbtest_run("safetensors", cases, sizeof cases / sizeof cases[0]);
}
