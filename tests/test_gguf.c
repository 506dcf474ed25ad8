/* The GGUF writer (nabla/gguf.h) against the format's specification (ggml's docs/gguf.md):
 * a small file's bytes written out by hand, float16 rounding at hand-picked values, GPT-2's
 * byte-to-unicode map in a vocabulary, and errors naming the key, tensor or file. That
 * llama.cpp itself runs an exported model is tests/llama_cpp_check.sh's part. */
#define _GNU_SOURCE
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The whole file at path, its length in *len; the caller frees it. */
static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

#define U64(x) (x), 0, 0, 0, 0, 0, 0, 0
#define U32(x) (x), 0, 0, 0

static void test_file_bytes(void) {
    nb_gguf *g = nb_gguf_new();
    CU_ASSERT_TRUE(nb_gguf_set_u32(g, "a.b", 7));
    nb_tensor *w = nb_view(nb_arange(NB_F32, 0, 6, 1), NB_SHAPE(2, 3));
    CU_ASSERT_TRUE(nb_gguf_add_tensor(g, "w", w, NB_GGUF_F32));
    char path[] = "/tmp/nabla_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_TRUE_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_TRUE(nb_gguf_save(g, path));
    nb_gguf_free(g);
    size_t len = 0;
    unsigned char *got = read_file(path, &len);
    /* header 24 bytes, one key/value 19, one tensor info 41: 84, padded to 96; the data 24
     * bytes, padded to 128 */
    const unsigned char head[] = {
        'G',    'G', 'U',    'F',    U32(3), U64(1), U64(1), /* magic, version, counts */
        U64(3), 'a', '.',    'b',    U32(4), U32(7),         /* "a.b": uint32 7 */
        U64(1), 'w', U32(2), U64(3), U64(2), U32(0), U64(0), /* w: ne {3, 2}, F32, at 0 */
        0,      0,   0,      0,      0,      0,      0,      0,    0, 0, 0, 0, /* to 96 */
        0,      0,   0,      0,      0,      0,      0x80,   0x3f, 0, 0, 0, 0x40,
        0,      0,   0x40,   0x40,                                  /* 0, 1, 2, 3 */
        0,      0,   0x80,   0x40,   0,      0,      0xa0,   0x40}; /* 4, 5 */
    CU_ASSERT_EQUAL(sizeof head, 120);
    CU_ASSERT_EQUAL(len, 128);
    CU_ASSERT_TRUE(got && len >= sizeof head && memcmp(got, head, sizeof head) == 0);
    for (size_t i = sizeof head; got && i < len; i++) CU_ASSERT_EQUAL(got[i], 0);
    free(got);
    unlink(path);
}

static void test_f16(void) {
    const struct {
        float x;
        uint16_t bits;
    } cases[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},
        {65520.0f, 0x7c00},
        {65519.99f, 0x7bff},
        {1.0f / 16777216, 0x0001},
        {1.0f / 33554432, 0x0000},
        {1.5f / 16777216, 0x0002},
        {1.0f / 16384, 0x0400},
        {1.0f / 3, 0x3555},
        {0.1f, 0x2e66},
        {1.0f + 1.0f / 2048, 0x3c00},
        {1.0f + 3.0f / 2048, 0x3c02},
        {-0.0f, 0x8000},
        {1e30f, 0x7c00},
        {2.5f / 16777216, 0x0002},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t b = nb_gguf_f16_bits(cases[i].x);
        if (b != cases[i].bits)
            fprintf(stderr, "f16(%.9g) = 0x%04x, not 0x%04x\n", cases[i].x, b, cases[i].bits);
        CU_ASSERT_EQUAL(b, cases[i].bits);
    }
    uint16_t nan = nb_gguf_f16_bits(nanf(""));
    CU_ASSERT_TRUE((nan & 0x7c00) == 0x7c00 && (nan & 0x03ff) != 0);
}

/* Whether needle occurs in the file at path. */
static bool file_has(const char *path, const void *needle, size_t n) {
    size_t len = 0;
    unsigned char *got = read_file(path, &len);
    bool found = got && memmem(got, len, needle, n) != NULL;
    free(got);
    return found;
}

static void test_vocab_bytes(void) {
    const char *tokens[] = {"a", " ", "\0", "\xff", "a "};
    const int64_t lens[] = {1, 1, 1, 1, 2};
    const int64_t merges[][2] = {{0, 1}};
    const nb_gguf_vocab v = {.n_tokens = 5,
                             .tokens = tokens,
                             .lens = lens,
                             .n_merges = 1,
                             .merges = merges,
                             .bos = -1,
                             .eos = 4};
    nb_gguf *g = nb_gguf_new();
    CU_ASSERT_TRUE(nb_gguf_set_vocab(g, &v));
    char path[] = "/tmp/nabla_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CU_ASSERT_TRUE(nb_gguf_save(g, path));
    nb_gguf_free(g);
    /* GPT-2's map: 'a' is itself; space (32) is U+0120 (C4 A0), NUL U+0100 (C4 80), 0xff
     * U+00FF (C3 BF). */
    const unsigned char tokens_kv[] = {'e',    'n',    's',  U32(9), U32(8), U64(5), U64(1),
                                       'a',    U64(2), 0xc4, 0xa0,   U64(2), 0xc4,   0x80,
                                       U64(2), 0xc3,   0xbf, U64(3), 'a',    0xc4,   0xa0};
    CU_ASSERT_TRUE(file_has(path, tokens_kv, sizeof tokens_kv));
    const unsigned char merges_kv[] = {'g',    'e', 's', U32(9), U32(8), U64(1),
                                       U64(4), 'a', ' ', 0xc4,   0xa0};
    CU_ASSERT_TRUE(file_has(path, merges_kv, sizeof merges_kv));
    const unsigned char eos_kv[] = {'e', 'o', 's', '_', 't', 'o',    'k',
                                    'e', 'n', '_', 'i', 'd', U32(4), U32(4)};
    CU_ASSERT_TRUE(file_has(path, eos_kv, sizeof eos_kv));
    CU_ASSERT_FALSE(file_has(path, "bos_token_id", 12));
    unlink(path);
}

#define EXPECT_FAILS(call, ...)                                                                    \
    do {                                                                                           \
        nb_clear_error();                                                                          \
        EXPECT_NULL((call) ? (void *)1 : NULL, __VA_ARGS__);                                       \
    } while (0)

/* Whether the file at path has a tensor info for name with dims ne (innermost first, as the
 * file counts them) and ggml type: GGUF's u64 length, name, u32 n_dims, u64 dims, u32 type. */
static bool has_tensor(const char *path, const char *name, int ndim, const uint64_t *ne,
                       uint32_t type) {
    unsigned char info[128];
    size_t n = 0, len = strlen(name);
    for (int b = 0; b < 8; b++) info[n++] = (unsigned char)((uint64_t)len >> (8 * b));
    memcpy(info + n, name, len);
    n += len;
    for (int b = 0; b < 4; b++) info[n++] = (unsigned char)((uint32_t)ndim >> (8 * b));
    for (int d = 0; d < ndim; d++)
        for (int b = 0; b < 8; b++) info[n++] = (unsigned char)(ne[d] >> (8 * b));
    for (int b = 0; b < 4; b++) info[n++] = (unsigned char)(type >> (8 * b));
    return file_has(path, info, n);
}

/* A model exporter's frame: general and context keys, the vocabulary, the exporter's own
 * tensors, a 1-D weight kept float32 in a float16 file. */
static bool fill_two(nb_gguf *g, const void *model, nb_gguf_type type) {
    (void)model;
    return nb_gguf_set_u32(g, "toy.block_count", 1) &&
           nb_gguf_add_weight(g, "n", nb_ones(NB_F32, NB_SHAPE(2)), type) &&
           nb_gguf_add_weight(g, "w", nb_ones(NB_F32, NB_SHAPE(3, 2)), type);
}

static bool fill_fails(nb_gguf *g, const void *model, nb_gguf_type type) {
    (void)model;
    return nb_gguf_add_weight(g, "", nb_ones(NB_F32, NB_SHAPE(2)), type);
}

static void test_save_model(void) {
    const char *tokens[] = {"a", "b"};
    const nb_gguf_vocab v = {.n_tokens = 2, .tokens = tokens, .bos = -1, .eos = -1};
    nb_gguf_model_info info = {
        .arch = "toy", .name = "m", .max_len = 9, .n_vocab = 2, .vocab = &v, .type = NB_GGUF_F16};
    char path[] = "/tmp/nabla_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    int dummy = 0;
    CU_ASSERT_TRUE(nb_gguf_save_model("toy_save", path, &info, fill_two, &dummy));
    const unsigned char arch[] = {U64(20), 'g', 'e', 'n',    'e',    'r', 'a', 'l', '.',
                                  'a',     'r', 'c', 'h',    'i',    't', 'e', 'c', 't',
                                  'u',     'r', 'e', U32(8), U64(3), 't', 'o', 'y'};
    CU_ASSERT_TRUE(file_has(path, arch, sizeof arch));
    const unsigned char file_type[] = {'f', 'i', 'l', 'e', '_', 't', 'y', 'p', 'e', U32(4), U32(1)};
    CU_ASSERT_TRUE(file_has(path, file_type, sizeof file_type));
    const unsigned char ctx[] = {'t', 'o', 'y', '.', 'c', 'o', 'n', 't', 'e',    'x',
                                 't', '_', 'l', 'e', 'n', 'g', 't', 'h', U32(4), U32(9)};
    CU_ASSERT_TRUE(file_has(path, ctx, sizeof ctx));
    const unsigned char vocab_size[] = {'t', 'o', 'y', '.', 'v', 'o', 'c',    'a',
                                        'b', '_', 's', 'i', 'z', 'e', U32(4), U32(2)};
    CU_ASSERT_TRUE(file_has(path, vocab_size, sizeof vocab_size));
    CU_ASSERT_TRUE(file_has(path, "tokenizer.ggml.tokens", 21));
    CU_ASSERT_TRUE(has_tensor(path, "n", 1, (uint64_t[]){2}, 0)); /* 1-D: float32 */
    CU_ASSERT_TRUE(has_tensor(path, "w", 2, (uint64_t[]){2, 3}, 1));
    unlink(path);
    EXPECT_FAILS(nb_gguf_save_model("toy_save", path, &info, fill_fails, &dummy), "toy_save", path,
                 "nb_gguf_add_tensor", "1 to 63 bytes");
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    info.max_len = (int64_t)UINT32_MAX + 1;
    EXPECT_FAILS(nb_gguf_save_model("toy_save", path, &info, fill_two, &dummy), "toy_save",
                 "max_len 4294967296");
    info.max_len = 9;
    info.arch = NULL;
    EXPECT_FAILS(nb_gguf_save_model("toy_save", path, &info, fill_two, &dummy), "toy_save",
                 "NULL architecture");
    EXPECT_FAILS(nb_gguf_save_model("toy_save", path, &info, NULL, &dummy), "toy_save",
                 "NULL fill");
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
}

static void test_errors(void) {
    nb_gguf *g = nb_gguf_new();
    EXPECT_FAILS(nb_gguf_set_u32(g, "Bad.Key", 1), "nb_gguf_set_u32", "'Bad.Key'");
    EXPECT_FAILS(nb_gguf_set_u32(g, "a..b", 1), "nb_gguf_set_u32", "'a..b'");
    EXPECT_FAILS(nb_gguf_set_string(g, "a.b", NULL), "nb_gguf_set_string", "'a.b'", "NULL");
    CU_ASSERT_TRUE(nb_gguf_set_string(g, "a.b", "x"));
    EXPECT_FAILS(nb_gguf_set_f32(g, "a.b", 1), "nb_gguf_set_f32", "'a.b' is already set");
    nb_tensor *w = nb_zeros(NB_F32, NB_SHAPE(2, 2));
    EXPECT_FAILS(
        nb_gguf_add_tensor(g, "0123456789012345678901234567890123456789012345678901234567890123", w,
                           NB_GGUF_F32),
        "nb_gguf_add_tensor", "1 to 63 bytes");
    EXPECT_FAILS(nb_gguf_add_tensor(g, "i", nb_zeros(NB_I64, NB_SHAPE(2)), NB_GGUF_F32),
                 "nb_gguf_add_tensor", "'i'", "int64 [2]", "float32 or float64");
    EXPECT_FAILS(
        nb_gguf_add_tensor(g, "big", nb_zeros(NB_F32, NB_SHAPE(1, 1, 1, 1, 1)), NB_GGUF_F16),
        "nb_gguf_add_tensor", "'big'", "1 to 4 dims");
    CU_ASSERT_TRUE(nb_gguf_add_tensor(g, "w", w, NB_GGUF_F16));
    EXPECT_FAILS(nb_gguf_add_tensor(g, "w", w, NB_GGUF_F32), "nb_gguf_add_tensor",
                 "'w' is already added");
    EXPECT_FAILS(nb_gguf_save(g, "/nonexistent-dir/x.gguf"), "nb_gguf_save",
                 "/nonexistent-dir/x.gguf");
    const char *tokens[] = {"a", "b"};
    const nb_gguf_vocab bad = {.n_tokens = 2, .tokens = tokens, .bos = 2, .eos = -1};
    EXPECT_FAILS(nb_gguf_set_vocab(g, &bad), "nb_gguf_set_vocab", "bos 2");
    nb_gguf_free(g);
}

/* The Llama LM's export refuses a vocabulary of the wrong size and a bad path, naming them,
 * and leaves no file behind. */
static void test_llama_export_errors(void) {
    nb_module *root = nb_model_new(NB_F32, 1);
    const blk_llama_config cfg = {
        .dim = 8, .n_heads = 2, .n_kv_heads = 1, .hidden = 16, .norm_eps = 1e-5, .rope_base = 1e4};
    blk_llama_lm *lm = blk_llama_lm_new(root, "lm", 3, 1, &cfg);
    const char *tokens[] = {"a", "b"};
    const nb_gguf_vocab two = {.n_tokens = 2, .tokens = tokens, .bos = -1, .eos = -1};
    EXPECT_FAILS(blk_llama_lm_save_gguf(lm, "/tmp/nabla_never.gguf", 16, &two, NB_GGUF_F32),
                 "blk_llama_lm_save_gguf", "2 tokens, the model 3");
    CU_ASSERT_EQUAL(access("/tmp/nabla_never.gguf", F_OK), -1);
    const char *three[] = {"a", "b", "c"};
    const nb_gguf_vocab ok = {.n_tokens = 3, .tokens = three, .bos = -1, .eos = -1};
    EXPECT_FAILS(blk_llama_lm_save_gguf(lm, "/nonexistent-dir/m.gguf", 16, &ok, NB_GGUF_F32),
                 "blk_llama_lm_save_gguf", "/nonexistent-dir/m.gguf");
    EXPECT_FAILS(blk_llama_lm_save_gguf(lm, "/tmp/nabla_never.gguf", 0, &ok, NB_GGUF_F32),
                 "blk_llama_lm_save_gguf", "max_len 0");
    nb_module_free(root);
}

/* A small DeepSeek-style LM (2 layers, vocab 3) with the given epsilons and experts. */
static blk_deepseek_lm *tiny_deepseek(nb_module *root, double attn_eps, double eps,
                                      int64_t n_experts) {
    const blk_deepseek_config cfg = {
        .attn = {.dim = 4,
                 .n_heads = 1,
                 .kv_rank = 2,
                 .nope_dim = 2,
                 .rope_dim = 2,
                 .v_dim = 2,
                 .norm_eps = attn_eps,
                 .rope_base = 1e4},
        .moe = {.dim = 4, .hidden = 1, .n_experts = n_experts, .top_k = 1},
        .norm_eps = eps};
    return blk_deepseek_lm_new(root, "ds", 3, 1, &cfg);
}

/* The DeepSeek LM's export refuses what llama.cpp's deepseek2 cannot compute, naming the
 * part, and a vocabulary of the wrong size; no file is left behind. */
static void test_deepseek_export_errors(void) {
    nb_module *root = nb_model_new(NB_F32, 1);
    const char *three[] = {"a", "b", "c"};
    const nb_gguf_vocab ok = {.n_tokens = 3, .tokens = three, .bos = -1, .eos = -1};
    const char *path = "/tmp/nabla_never.gguf";
    blk_deepseek_lm *two_eps = tiny_deepseek(root, 1e-6, 1e-5, 2);
    EXPECT_FAILS(blk_deepseek_lm_save_gguf(two_eps, path, 16, &ok, NB_GGUF_F32),
                 "blk_deepseek_lm_save_gguf", path, "one RMSNorm epsilon",
                 "attn.norm_eps 1e-06 of q_norm and kv_norm, norm_eps 1e-05");
    nb_module *root2 = nb_model_new(NB_F32, 1);
    blk_deepseek_lm *many = tiny_deepseek(root2, 1e-5, 1e-5, 1025);
    EXPECT_FAILS(blk_deepseek_lm_save_gguf(many, path, 16, &ok, NB_GGUF_F32),
                 "blk_deepseek_lm_save_gguf", "at most 1024 experts, this model has 1025");
    nb_module_free(root2);
    nb_module *root3 = nb_model_new(NB_F32, 1);
    blk_deepseek_lm *fits = tiny_deepseek(root3, 1e-5, 1e-5, 2);
    const nb_gguf_vocab two = {.n_tokens = 2, .tokens = three, .bos = -1, .eos = -1};
    EXPECT_FAILS(blk_deepseek_lm_save_gguf(fits, path, 16, &two, NB_GGUF_F32),
                 "blk_deepseek_lm_save_gguf", "2 tokens, the model 3");
    EXPECT_FAILS(blk_deepseek_lm_save_gguf(fits, path, 0, &ok, NB_GGUF_F32),
                 "blk_deepseek_lm_save_gguf", "max_len 0");
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    /* the same model fits: it is written */
    char ok_path[] = "/tmp/nabla_test_gguf_XXXXXX";
    int fd = mkstemp(ok_path);
    CU_ASSERT_TRUE_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_TRUE(blk_deepseek_lm_save_gguf(fits, ok_path, 16, &ok, NB_GGUF_F16));
    /* llama.cpp's shapes (dims innermost first; 1 head, nope 2, rope 2, v 2, kv_rank 2, 2
     * experts of hidden 1, D 4): wkv_b split, experts stacked, a zero shared expert, the
     * router float32 */
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.attn_q.weight", 2, (uint64_t[]){4, 4}, 1));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.attn_kv_a_mqa.weight", 2, (uint64_t[]){4, 4}, 1));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.attn_k_b.weight", 3, (uint64_t[]){2, 2, 1}, 1));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.attn_v_b.weight", 3, (uint64_t[]){2, 2, 1}, 1));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.ffn_gate_inp.weight", 2, (uint64_t[]){4, 2}, 0));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.ffn_gate_exps.weight", 3, (uint64_t[]){4, 1, 2}, 1));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.ffn_down_exps.weight", 3, (uint64_t[]){1, 4, 2}, 1));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.ffn_up_shexp.weight", 2, (uint64_t[]){4, 1}, 1));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.0.attn_kv_a_norm.weight", 1, (uint64_t[]){2}, 0));
    unlink(ok_path);
    nb_module_free(root3);
    nb_module_free(root);
}

/* The TransformerLM's export refuses what llama.cpp's gpt2 cannot compute, naming the part;
 * GPT-2's form (tanh GELU, head without bias) is written, with or without q/k/v biases. */
static void test_gpt2_export_errors(void) {
    const char *three[] = {"a", "b", "c"};
    const nb_gguf_vocab ok = {.n_tokens = 3, .tokens = three, .bos = -1, .eos = -1};
    const char *path = "/tmp/nabla_never.gguf";
    const char *op = "nb_transformer_lm_save_gguf";
    const nb_lm_config gpt2 = {.vocab = 3,
                               .max_len = 8,
                               .dim = 4,
                               .num_heads = 2,
                               .layers = 2,
                               .gelu_tanh = true,
                               .no_head_bias = true};
    nb_module *root = nb_model_new(NB_F32, 1);
    nb_lm_config c = gpt2;
    c.gelu_tanh = false;
    nb_transformer_lm *erf = nb_transformer_lm_new_config(root, "erf", &c, 0);
    EXPECT_FAILS(nb_transformer_lm_save_gguf(erf, path, &ok, NB_GGUF_F32), op, path,
                 "TransformerLM 'erf' does not fit llama.cpp's gpt2",
                 "GELU is the exact (erf) form");
    c = gpt2;
    c.no_head_bias = false;
    nb_transformer_lm *biased = nb_transformer_lm_new_config(root, "biased", &c, 0);
    EXPECT_FAILS(nb_transformer_lm_save_gguf(biased, path, &ok, NB_GGUF_F32), op,
                 "its head has a bias");
    c = gpt2;
    c.out_features = 5;
    nb_transformer_lm *wide = nb_transformer_lm_new_config(root, "wide", &c, 0);
    EXPECT_FAILS(nb_transformer_lm_save_gguf(wide, path, &ok, NB_GGUF_F32), op,
                 "out_features other than the vocabulary");
    nb_transformer_lm *fits = nb_transformer_lm_new_config(root, "fits", &gpt2, 0);
    fits->blocks[1]->norm2->eps = 1e-6;
    EXPECT_FAILS(nb_transformer_lm_save_gguf(fits, path, &ok, NB_GGUF_F32), op,
                 "one LayerNorm eps, block 1's differs from norm_f's 1e-05");
    fits->blocks[1]->norm2->eps = 1e-5;
    const nb_gguf_vocab two = {.n_tokens = 2, .tokens = three, .bos = -1, .eos = -1};
    EXPECT_FAILS(nb_transformer_lm_save_gguf(fits, path, &two, NB_GGUF_F32), op,
                 "2 tokens, the model 3");
    EXPECT_FAILS(nb_transformer_lm_save_gguf(NULL, path, &ok, NB_GGUF_F32), op, "NULL model");
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    char ok_path[] = "/tmp/nabla_test_gguf_XXXXXX";
    int fd = mkstemp(ok_path);
    CU_ASSERT_TRUE_FATAL(fd >= 0);
    close(fd);
    CU_ASSERT_TRUE(nb_transformer_lm_save_gguf(fits, ok_path, &ok, NB_GGUF_F16));
    /* q/k/v stacked, their biases (zeros here) beside; positions float32 */
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.1.attn_qkv.weight", 2, (uint64_t[]){4, 12}, 1));
    CU_ASSERT_TRUE(has_tensor(ok_path, "blk.1.attn_qkv.bias", 1, (uint64_t[]){12}, 0));
    CU_ASSERT_TRUE(has_tensor(ok_path, "position_embd.weight", 2, (uint64_t[]){4, 8}, 0));
    CU_ASSERT_TRUE(has_tensor(ok_path, "output.weight", 2, (uint64_t[]){4, 3}, 1));
    c = gpt2;
    c.qkv_bias = true;
    c.tie_weights = true;
    nb_transformer_lm *tied = nb_transformer_lm_new_config(root, "tied", &c, 0);
    CU_ASSERT_TRUE(nb_transformer_lm_save_gguf(tied, ok_path, &ok, NB_GGUF_F32));
    const unsigned char output[] = {U64(13), 'o', 'u', 't', 'p', 'u', 't',
                                    '.',     'w', 'e', 'i', 'g', 'h', 't'};
    CU_ASSERT_FALSE(file_has(ok_path, output, sizeof output)); /* read from token_embd */
    CU_ASSERT_TRUE(file_has(ok_path, "output_norm.bias", 16));
    unlink(ok_path);
    nb_module_free(root);
}

int main(void) {
    const nbtest_case cases[] = {
        {"a small file, byte for byte as the specification lays it out", test_file_bytes},
        {"float16 rounds to nearest even, overflows to infinity, keeps NaN", test_f16},
        {"a vocabulary goes through GPT-2's byte-to-unicode map", test_vocab_bytes},
        {"bad keys, tensors, vocabularies and paths name what is wrong", test_errors},
        {"a model exporter's frame: keys, vocabulary, tensors, errors", test_save_model},
        {"the Llama LM's export refuses what does not fit", test_llama_export_errors},
        {"the DeepSeek LM's export refuses what deepseek2 cannot compute",
         test_deepseek_export_errors},
        {"the TransformerLM's export refuses what gpt2 cannot compute", test_gpt2_export_errors},
    };
    return nbtest_run("gguf", cases, sizeof cases / sizeof cases[0]);
}
