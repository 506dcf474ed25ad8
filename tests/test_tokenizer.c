/* Tokenizers (text.h): BPE merges worked out by hand on tiny texts, the piece rule, round trips
 * of random bytes (invalid UTF-8 and NUL included), characters tokenizers, the checkpoint
 * metadata written and read back from the file alone, and errors that name the call. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

/* Asserts t's merges are exactly the n pairs given (flattened). */
static void expect_merges(const nb_tokenizer *t, const int64_t *pairs, int64_t n) {
    CU_ASSERT_EQUAL_FATAL(nb_tokenizer_merge_count(t), n);
    CU_ASSERT_EQUAL(nb_tokenizer_vocab_size(t), 256 + n);
    for (int64_t i = 0; i < n; i++) {
        int64_t l = -1, r = -1;
        CU_ASSERT_TRUE(nb_tokenizer_merge(t, i, &l, &r));
        CU_ASSERT_EQUAL(l, pairs[2 * i]);
        CU_ASSERT_EQUAL(r, pairs[2 * i + 1]);
    }
}

/* Encodes s with t and asserts the ids (and that they decode back to s). */
static void expect_encoding(const nb_tokenizer *t, const char *s, const int64_t *want, int64_t n) {
    size_t len = strlen(s), skipped = 99;
    int64_t ids[64];
    int64_t got = nb_tokenizer_encode(t, s, len, ids, &skipped);
    CU_ASSERT_EQUAL_FATAL(got, n);
    CU_ASSERT_EQUAL(skipped, 0);
    for (int64_t i = 0; i < n; i++) CU_ASSERT_EQUAL(ids[i], want[i]);
    char back[64];
    CU_ASSERT_EQUAL(nb_tokenizer_decode(t, ids, got, back, sizeof back), (int64_t)len);
    CU_ASSERT_EQUAL(memcmp(back, s, len), 0);
}

/* "abab abc ab" is cut into the pieces "abab", " abc", " ab". Pairs: (a,b) 2+1+1 = 4, (' ',a)
 * 2, (b,a) 1, (b,c) 1 -> merge 0 = a+b (256). Then (' ',256) 2 -> merge 1 (257). Left: (256,256)
 * 1 in "abab" and (257,c) 1 in " abc": a tie, the smaller left id wins -> merge 2 = 256+256
 * (258), then merge 3 = 257+c (259). No pair is left: training stops at 260 of the 300 asked. */
static void test_bpe_merges_by_hand(void) {
    const char *text = "abab abc ab";
    nb_tokenizer *t = nb_tokenizer_bpe_train(text, strlen(text), 300);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(nb_tokenizer_kind_of(t), NB_TOKENIZER_BPE);
    CU_ASSERT_STRING_EQUAL(nb_tokenizer_kind_name(t), "bpe");
    expect_merges(t, (const int64_t[]){'a', 'b', ' ', 256, 256, 256, 257, 'c'}, 4);
    size_t len;
    const char *tok = nb_tokenizer_token(t, 258, &len);
    CU_ASSERT(len == 4 && memcmp(tok, "abab", 4) == 0);
    tok = nb_tokenizer_token(t, 259, &len);
    CU_ASSERT(len == 4 && memcmp(tok, " abc", 4) == 0);
    expect_encoding(t, text, (const int64_t[]){258, 259, 257}, 3);
    /* (b,a) was never merged; "cab" is one piece: c, then a+b. */
    expect_encoding(t, "ba cab", (const int64_t[]){'b', 'a', ' ', 'c', 256}, 5);
    nb_tokenizer_free(t);
    /* Asking for fewer tokens stops after the first merges. */
    t = nb_tokenizer_bpe_train(text, strlen(text), 258);
    expect_merges(t, (const int64_t[]){'a', 'b', ' ', 256}, 2);
    nb_tokenizer_free(t);
}

/* "aaa": pairs (a,a) at 0 and 1, count 2 -> a+a (256), replaced left to right: [256, a]; then
 * (256,a) -> 257. "aaaa" encodes by merge 0 left to right, [256, 256], which no merge joins. */
static void test_bpe_overlapping_pairs(void) {
    nb_tokenizer *t = nb_tokenizer_bpe_train("aaa", 3, 1000);
    expect_merges(t, (const int64_t[]){'a', 'a', 256, 'a'}, 2);
    expect_encoding(t, "aaa", (const int64_t[]){257}, 1);
    expect_encoding(t, "aaaa", (const int64_t[]){256, 256}, 2);
    expect_encoding(t, "aaaaa", (const int64_t[]){256, 257}, 2);
    nb_tokenizer_free(t);
}

/* Merges stay within pieces: "a.a.a.a." is eight one-byte pieces (letter, other, ...), so no
 * pair exists although (a,.) occurs four times across them. "  x  x": the two-space runs give
 * " " and leave their last space to " x": pieces " ", " x", " ", " x" -> one merge, ' '+x. */
static void test_bpe_pieces(void) {
    nb_tokenizer *t = nb_tokenizer_bpe_train("a.a.a.a.", 8, 300);
    expect_merges(t, NULL, 0);
    nb_tokenizer_free(t);
    t = nb_tokenizer_bpe_train("  x  x", 6, 300);
    expect_merges(t, (const int64_t[]){' ', 'x'}, 1);
    expect_encoding(t, "  x  x", (const int64_t[]){' ', 256, ' ', 256}, 4);
    /* Digits, letters and others are separate runs; "\n\n" keeps both newlines. */
    nb_tokenizer_free(t);
    t = nb_tokenizer_bpe_train("x42\n\nx42\n\n", 10, 300);
    /* pieces "x", "42", "\n\n" twice each: pairs (4,2) 2, (\n,\n) 2 -> \n+\n first (10 < 52). */
    expect_merges(t, (const int64_t[]){'\n', '\n', '4', '2'}, 2);
    nb_tokenizer_free(t);
}

/* A text of English-like words and random bytes, for round trips. */
static char *random_bytes(nb_rng *rng, size_t n, bool words) {
    char *s = malloc(n + 1);
    static const char *const w[] = {"the ", "cat ", "sat ", "on ", "mat.\n", "\xc3\xa9t\xc3\xa9 "};
    for (size_t i = 0; i < n;) {
        if (words && nb_rng_next(rng) % 3) {
            const char *x = w[nb_rng_next(rng) % 6];
            for (; *x && i < n; x++) s[i++] = *x;
        } else {
            s[i++] = (char)(nb_rng_next(rng) % 256);
        }
    }
    return s;
}

static void test_round_trips(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 7);
    char *train = random_bytes(&rng, 20000, true);
    nb_tokenizer *toks[2] = {nb_tokenizer_bpe_train(train, 20000, 400), nb_tokenizer_bytes()};
    CU_ASSERT_EQUAL(nb_tokenizer_vocab_size(toks[0]), 400);
    CU_ASSERT_EQUAL(nb_tokenizer_vocab_size(toks[1]), 256);
    for (int k = 0; k < 2; k++)
        for (int trial = 0; trial < 200; trial++) {
            size_t n = (size_t)(nb_rng_next(&rng) % 300);
            char *s = random_bytes(&rng, n, trial % 2);
            if (trial == 0) memset(s, 0, n); /* all NUL */
            if (trial == 1 && n > 2) s[0] = (char)0xc3, s[1] = '(', s[n - 1] = (char)0xff;
            int64_t *ids = malloc(sizeof *ids * (n + 1));
            char *back = malloc(n + 1);
            int64_t got = nb_tokenizer_encode(toks[k], s, n, ids, NULL);
            CU_ASSERT(got >= 0 && got <= (int64_t)n);
            for (int64_t i = 0; i < got; i++)
                CU_ASSERT(ids[i] >= 0 && ids[i] < nb_tokenizer_vocab_size(toks[k]));
            CU_ASSERT_EQUAL(nb_tokenizer_decode(toks[k], ids, got, back, n), (int64_t)n);
            CU_ASSERT_EQUAL(memcmp(back, s, n), 0);
            free(ids);
            free(back);
            free(s);
        }
    /* The BPE shortens the text it learned from. */
    int64_t *ids = malloc(sizeof *ids * 20000);
    CU_ASSERT(nb_tokenizer_encode(toks[0], train, 20000, ids, NULL) < 20000 / 2);
    /* A decode with too little room writes what fits and says how much there is. */
    char small[3] = {0};
    int64_t n = nb_tokenizer_encode(toks[0], "the cat", 7, ids, NULL);
    CU_ASSERT_EQUAL(nb_tokenizer_decode(toks[0], ids, n, small, 3), 7);
    CU_ASSERT_EQUAL(memcmp(small, "the", 3), 0);
    CU_ASSERT_EQUAL(nb_tokenizer_decode(toks[0], ids, n, NULL, 0), 7);
    free(ids);
    free(train);
    nb_tokenizer_free(toks[0]);
    nb_tokenizer_free(toks[1]);
}

/* Training twice on the same text learns the same merges. */
static void test_bpe_deterministic(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 3);
    char *text = random_bytes(&rng, 5000, true);
    nb_tokenizer *a = nb_tokenizer_bpe_train(text, 5000, 300),
                 *b = nb_tokenizer_bpe_train(text, 5000, 300);
    CU_ASSERT_EQUAL_FATAL(nb_tokenizer_merge_count(a), nb_tokenizer_merge_count(b));
    for (int64_t i = 0; i < nb_tokenizer_merge_count(a); i++) {
        int64_t l1, r1, l2, r2;
        nb_tokenizer_merge(a, i, &l1, &r1);
        nb_tokenizer_merge(b, i, &l2, &r2);
        CU_ASSERT(l1 == l2 && r1 == r2);
    }
    nb_tokenizer_free(a);
    nb_tokenizer_free(b);
    free(text);
}

/* The distinct bytes in byte order; other bytes are left out and counted. */
static void test_chars(void) {
    nb_tokenizer *t = nb_tokenizer_chars("hello\0", 6);
    CU_ASSERT_EQUAL(nb_tokenizer_kind_of(t), NB_TOKENIZER_CHARS);
    CU_ASSERT_EQUAL(nb_tokenizer_vocab_size(t), 5); /* \0 e h l o */
    CU_ASSERT_TRUE(nb_tokenizer_has_byte(t, 0));
    CU_ASSERT_FALSE(nb_tokenizer_has_byte(t, 'x'));
    int64_t ids[8];
    size_t skipped = 0;
    CU_ASSERT_EQUAL(nb_tokenizer_encode(t, "hex\0lo", 6, ids, &skipped), 5);
    CU_ASSERT_EQUAL(skipped, 1);
    const int64_t want[] = {2, 1, 0, 3, 4};
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(ids[i], want[i]);
    char back[8];
    CU_ASSERT_EQUAL(nb_tokenizer_decode(t, ids, 5, back, sizeof back), 5);
    CU_ASSERT_EQUAL(memcmp(back, "he\0lo", 5), 0);
    CU_ASSERT_EQUAL(nb_tokenizer_merge_count(t), 0);
    nb_tokenizer_free(t);
    EXPECT_NULL(nb_tokenizer_chars("", 0), "nb_tokenizer_chars", "no bytes");
}

/* Asserts a and b have the same kind, vocabulary and tokens. */
static void expect_same(const nb_tokenizer *a, const nb_tokenizer *b) {
    CU_ASSERT_EQUAL_FATAL(nb_tokenizer_vocab_size(a), nb_tokenizer_vocab_size(b));
    CU_ASSERT_EQUAL(nb_tokenizer_kind_of(a), nb_tokenizer_kind_of(b));
    for (int64_t id = 0; id < nb_tokenizer_vocab_size(a); id++) {
        size_t la, lb;
        const char *x = nb_tokenizer_token(a, id, &la), *y = nb_tokenizer_token(b, id, &lb);
        CU_ASSERT(la == lb && memcmp(x, y, la) == 0);
    }
}

/* A model checkpoint carries the tokenizer; nb_tokenizer_read rebuilds it from the file. */
static void test_checkpoint_round_trip(void) {
    const char *text = "the cat sat on the mat; the cat sat.\n\x00\xff";
    size_t len = 39;
    nb_tokenizer *toks[2] = {nb_tokenizer_bpe_train(text, len, 280), nb_tokenizer_chars(text, len)};
    for (int k = 0; k < 2; k++) {
        nb_module *root = nb_model_new(NB_F32, 1);
        nb_transformer_lm *lm =
            nb_transformer_lm_new(root, "", nb_tokenizer_vocab_size(toks[k]), 8, 8, 2, 1, 0.0);
        nb_metadata_entry meta[NB_TOKENIZER_METADATA_MAX];
        int n = nb_tokenizer_metadata(toks[k], meta);
        CU_ASSERT_EQUAL(n, 2);
        const char *path = nbtest_tmp_path(k ? "chars.safetensors" : "bpe.safetensors");
        CU_ASSERT_TRUE_FATAL(nb_transformer_lm_save(lm, NULL, path, n, meta));
        nb_module_free(root);
        nb_tokenizer *back = nb_tokenizer_read(path);
        CU_ASSERT_PTR_NOT_NULL_FATAL(back);
        expect_same(toks[k], back);
        int64_t a[64], b[64];
        int64_t na = nb_tokenizer_encode(toks[k], text, len, a, NULL),
                nb = nb_tokenizer_encode(back, text, len, b, NULL);
        CU_ASSERT(na == nb && memcmp(a, b, sizeof *a * (size_t)na) == 0);
        nb_tokenizer_free(back);
    }
    /* The metadata as written: the header's format. */
    nb_metadata_entry meta[NB_TOKENIZER_METADATA_MAX];
    nb_tokenizer *t = nb_tokenizer_bpe_train("abab abc ab", 11, 300);
    nb_tokenizer_metadata(t, meta);
    CU_ASSERT_STRING_EQUAL(meta[0].key, "nabla.tokenizer");
    CU_ASSERT_STRING_EQUAL(meta[0].value, "bpe");
    CU_ASSERT_STRING_EQUAL(meta[1].key, "nabla.tokenizer.merges");
    CU_ASSERT_STRING_EQUAL(meta[1].value, "[[97,98],[32,256],[256,256],[257,99]]");
    nb_tokenizer_free(t);
    t = nb_tokenizer_chars("ba\n", 3);
    nb_tokenizer_metadata(t, meta);
    CU_ASSERT_STRING_EQUAL(meta[0].value, "chars");
    CU_ASSERT_STRING_EQUAL(meta[1].key, "nabla.tokenizer.chars");
    CU_ASSERT_STRING_EQUAL(meta[1].value, "0a6162");
    nb_tokenizer_free(t);
    for (int k = 0; k < 2; k++) nb_tokenizer_free(toks[k]);
}

/* A GGUF export takes the tokenizer's tokens and merges as they are. */
static void test_gguf_vocab(void) {
    nb_tokenizer *toks[2] = {nb_tokenizer_bpe_train("abab abc ab", 11, 300),
                             nb_tokenizer_chars("ba\n", 3)};
    for (int k = 0; k < 2; k++) {
        const nb_gguf_vocab v = nb_tokenizer_gguf_vocab(toks[k]);
        CU_ASSERT_EQUAL(v.n_tokens, k ? 3 : 260);
        CU_ASSERT_EQUAL(v.n_merges, k ? 0 : 4);
        CU_ASSERT(v.bos == -1 && v.eos == -1);
        for (int64_t id = 0; id < v.n_tokens; id++) {
            size_t len;
            const char *bytes = nb_tokenizer_token(toks[k], id, &len);
            CU_ASSERT(v.lens[id] == (int64_t)len && memcmp(v.tokens[id], bytes, len) == 0);
        }
        nb_gguf *g = nb_gguf_new();
        CU_ASSERT_TRUE(nb_gguf_set_vocab(g, &v));
        nb_gguf_free(g);
    }
    const nb_gguf_vocab v = nb_tokenizer_gguf_vocab(toks[0]);
    CU_ASSERT(v.merges[1][0] == ' ' && v.merges[1][1] == 256);
    CU_ASSERT(v.merges[3][0] == 257 && v.merges[3][1] == 'c');
    CU_ASSERT(v.lens[258] == 4 && memcmp(v.tokens[258], "abab", 4) == 0);
    for (int k = 0; k < 2; k++) nb_tokenizer_free(toks[k]);
}

/* A file with the given metadata (and one small tensor). */
static const char *file_with(const char *name, int n, const nb_metadata_entry *meta) {
    const char *path = nbtest_tmp_path(name);
    nb_named_tensor x = {"x", nb_zeros(NB_F32, NB_SHAPE(2))};
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save_with_metadata(path, 1, &x, n, meta));
    return path;
}

static void test_errors(void) {
    nb_tokenizer *t = nb_tokenizer_bpe_train("abab", 4, 257);
    int64_t ids[] = {97, 257, 1};
    char out[8];
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_tokenizer_decode(t, ids, 3, out, sizeof out), -1);
    NBT_ASSERT_ERROR("nb_tokenizer_decode: id 257 at position 1 is outside the vocabulary of "
                     "257 tokens");
    size_t len;
    EXPECT_NULL(nb_tokenizer_token(t, -1, &len), "nb_tokenizer_token", "token id -1");
    EXPECT_NULL(nb_tokenizer_bpe_train("ab", 2, 255), "nb_tokenizer_bpe_train",
                "vocabulary size 255");
    EXPECT_NULL(nb_tokenizer_bpe_from_merges(1, (const int64_t[]){97, 256}),
                "nb_tokenizer_bpe_from_merges", "merge 0 joins tokens 97 and 256",
                "only tokens 0..255");
    EXPECT_NULL(nb_tokenizer_bpe_from_merges(1, (const int64_t[]){5000000000, -3}),
                "merge 0 joins tokens 5000000000 and -3");
    EXPECT_NULL(nb_tokenizer_bpe_from_merges(2, (const int64_t[]){97, 98, 97, 98}),
                "merge 1 joins tokens 97 and 98, as merge 0 already does");
    nb_tokenizer_free(t);

    /* Corrupt or missing metadata: nb_tokenizer_read names itself, the file and the key. */
    const struct {
        nb_metadata_entry meta[2];
        int n;
        const char *want;
    } bad[] = {
        {{{"other", "1"}}, 1, "no metadata nabla.tokenizer"},
        {{{"nabla.tokenizer", "wordpiece"}}, 1, "'wordpiece', not 'chars' or 'bpe'"},
        {{{"nabla.tokenizer", "bpe"}}, 1, "without metadata nabla.tokenizer.merges"},
        {{{"nabla.tokenizer", "bpe"}, {"nabla.tokenizer.merges", "[[97,98"}},
         2,
         "nabla.tokenizer.merges is not a JSON array"},
        {{{"nabla.tokenizer", "bpe"}, {"nabla.tokenizer.merges", "[[97,98],[1]]"}},
         2,
         "merge 1 is not a pair of integer ids"},
        {{{"nabla.tokenizer", "bpe"}, {"nabla.tokenizer.merges", "[[97,98],[257,1]]"}},
         2,
         "merge 1 joins tokens 257 and 1"},
        {{{"nabla.tokenizer", "chars"}, {"nabla.tokenizer.chars", "6261"}},
         2,
         "byte 61 at 2 is not above the one before"},
        {{{"nabla.tokenizer", "chars"}, {"nabla.tokenizer.chars", "6G"}},
         2,
         "'6G' at 0 is not two lowercase hex digits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu.safetensors", i);
        const char *path = file_with(name, bad[i].n, bad[i].meta);
        EXPECT_NULL(nb_tokenizer_read(path), "nb_tokenizer_read", path, bad[i].want);
        EXPECT_NULL(nb_tokenizer_from_metadata(bad[i].n, bad[i].meta), "nb_tokenizer_from_metadata",
                    bad[i].want);
    }
    EXPECT_NULL(nb_tokenizer_read(nbtest_tmp_path("missing.safetensors")), "nb_tokenizer_read",
                "missing.safetensors");
    CU_ASSERT_EQUAL(nb_tokenizer_encode(NULL, "a", 1, ids, NULL), -1);
    NBT_ASSERT_ERROR("nb_tokenizer_encode");
}

int main(void) {
    const nbtest_case cases[] = {
        {"BPE merges by hand", test_bpe_merges_by_hand},
        {"BPE overlapping pairs", test_bpe_overlapping_pairs},
        {"BPE merges stay within pieces", test_bpe_pieces},
        {"round trips of random bytes", test_round_trips},
        {"BPE training is deterministic", test_bpe_deterministic},
        {"characters", test_chars},
        {"through a checkpoint and back", test_checkpoint_round_trip},
        {"as a GGUF vocabulary", test_gguf_vocab},
        {"errors", test_errors},
    };
    return nbtest_run("tokenizer", cases, sizeof cases / sizeof cases[0]);
}
