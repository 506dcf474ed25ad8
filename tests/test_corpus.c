/* The text corpus (text.h): block split sizes and contents, files joined in order, language-
 * model windows drawn deterministically from an rng with targets shifted by one, evenly spaced
 * validation windows, and errors that name the call. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

/* "0123456789" in blocks of 3, every 2nd held out: blocks 012 | 345 | 678 | 9, so validation
 * is "345" + "9" and training "012" + "678". */
static void test_split(void) {
    nb_corpus c;
    CU_ASSERT_TRUE_FATAL(nb_corpus_split(&c, "0123456789", 10, 3, 2));
    CU_ASSERT_EQUAL(c.train_bytes, 6);
    CU_ASSERT_EQUAL(c.val_bytes, 4);
    CU_ASSERT_EQUAL(memcmp(c.train_text, "012678", 6), 0);
    CU_ASSERT_EQUAL(memcmp(c.val_text, "3459", 4), 0);
    CU_ASSERT_PTR_NULL(c.train); /* not encoded yet */
    nb_corpus_free(&c);
    /* every 0: no validation text. 100 bytes in blocks of 7, every 5th held out: blocks 4, 9
     * and 14, the last and short one (bytes 28..34, 63..69, 98..99): 16 validation bytes. */
    char text[100];
    for (int i = 0; i < 100; i++) text[i] = (char)i;
    CU_ASSERT_TRUE(nb_corpus_split(&c, text, 100, 7, 0));
    CU_ASSERT(c.train_bytes == 100 && c.val_bytes == 0);
    nb_corpus_free(&c);
    CU_ASSERT_TRUE(nb_corpus_split(&c, text, 100, 7, 5));
    CU_ASSERT(c.train_bytes == 84 && c.val_bytes == 16);
    CU_ASSERT(c.val_text[0] == 28 && c.val_text[6] == 34 && c.val_text[7] == 63);
    CU_ASSERT(c.val_text[14] == 98 && c.val_text[15] == 99);
    nb_corpus_free(&c);
}

static void test_read_files(void) {
    const char *paths[2] = {nbtest_tmp_path("a.txt"), nbtest_tmp_path("b.txt")};
    FILE *f = fopen(paths[0], "wb");
    fputs("abc", f);
    fclose(f);
    f = fopen(paths[1], "wb");
    fputs("defg", f);
    fclose(f);
    nb_corpus c;
    CU_ASSERT_TRUE_FATAL(nb_corpus_read(&c, 2, paths, 2, 2)); /* ab | cd | ef | g */
    CU_ASSERT(c.train_bytes == 4 && memcmp(c.train_text, "abef", 4) == 0);
    CU_ASSERT(c.val_bytes == 3 && memcmp(c.val_text, "cdg", 3) == 0);
    nb_corpus_free(&c);
    const char *missing[2] = {paths[0], nbtest_tmp_path("none.txt")};
    nb_clear_error();
    CU_ASSERT_FALSE(nb_corpus_read(&c, 2, missing, 2, 2));
    NBT_ASSERT_ERROR("nb_corpus_read: cannot read");
    NBT_ASSERT_ERROR("none.txt");
    nb_corpus_free(&c);
}

/* The bytes tokenizer on bytes 0..199: token = byte, so a window's values are its positions. */
static void corpus_of_positions(nb_corpus *c) {
    char text[200];
    for (int i = 0; i < 200; i++) text[i] = (char)i;
    CU_ASSERT_TRUE_FATAL(nb_corpus_split(c, text, 200, 50, 4)); /* 150 train, 50 validation */
    nb_tokenizer *t = nb_tokenizer_bytes();
    CU_ASSERT_TRUE_FATAL(nb_corpus_encode(c, t));
    nb_tokenizer_free(t);
}

static void test_batches(void) {
    nb_corpus c;
    corpus_of_positions(&c);
    CU_ASSERT(c.train_tokens == 150 && c.val_tokens == 50 && c.skipped == 0);
    nb_rng a, b;
    nb_rng_seed(&a, 5);
    nb_rng_seed(&b, 5);
    nb_tensor *x, *y, *x2, *y2;
    CU_ASSERT_TRUE_FATAL(nb_corpus_batch(&c, &a, 4, 10, &x, &y));
    CU_ASSERT_TRUE_FATAL(nb_corpus_batch(&c, &b, 4, 10, &x2, &y2));
    NBT_ASSERT_SHAPE(x, 4, 10);
    NBT_ASSERT_SHAPE(y, 4, 10);
    CU_ASSERT_EQUAL(x->dtype, NB_I64);
    NBT_ASSERT_CLOSE(x, x2, 0, 0); /* the same rng state, the same batch */
    NBT_ASSERT_CLOSE(y, y2, 0, 0);
    /* Each row: start (next() mod the 150 - 10 starts), consecutive, targets one further. The
     * training text is bytes 0..149 (block 3, bytes 150..199, is held out). */
    nb_rng r;
    nb_rng_seed(&r, 5);
    const int64_t *xd = nb_data(x), *yd = nb_data(y);
    for (int row = 0; row < 4; row++) {
        int64_t s = (int64_t)(nb_rng_next(&r) % 140);
        for (int t = 0; t < 10; t++) {
            CU_ASSERT_EQUAL(xd[row * 10 + t], s + t);
            CU_ASSERT_EQUAL(yd[row * 10 + t], s + t + 1);
        }
    }
    /* The next draw differs (a fresh rng state). */
    CU_ASSERT_TRUE(nb_corpus_batch(&c, &a, 4, 10, &x2, &y2));
    CU_ASSERT_FALSE(nbtest_close(x, x2, 0, 0));
    /* T = 149: one start only, 0. */
    CU_ASSERT_TRUE(nb_corpus_batch(&c, &a, 1, 149, &x2, &y2));
    CU_ASSERT(((int64_t *)nb_data(x2))[0] == 0 && ((int64_t *)nb_data(y2))[148] == 149);
    nb_corpus_free(&c);
}

/* Validation bytes are text bytes 150..199; 50 tokens, T 8: stride (50 - 9) / 4 = 10, so
 * windows start at 0, 10, 20, 30. */
static void test_val_batches(void) {
    nb_corpus c;
    corpus_of_positions(&c);
    nb_tensor *x, *y;
    CU_ASSERT_TRUE_FATAL(nb_corpus_val_batch(&c, 1, 2, 4, 8, &x, &y));
    NBT_ASSERT_SHAPE(x, 2, 8);
    const int64_t *xd = nb_data(x), *yd = nb_data(y);
    CU_ASSERT(xd[0] == 160 && xd[7] == 167 && yd[7] == 168);
    CU_ASSERT(xd[8] == 170 && yd[15] == 178);
    nb_clear_error();
    CU_ASSERT_FALSE(nb_corpus_val_batch(&c, 3, 2, 4, 8, &x, &y));
    NBT_ASSERT_ERROR("nb_corpus_val_batch: windows 3..4 of 4");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_corpus_val_batch(&c, 0, 1, 4, 49, &x, &y));
    NBT_ASSERT_ERROR("50 validation tokens, fewer than 51");
    nb_corpus_free(&c);
}

static void test_errors(void) {
    nb_corpus c;
    nb_clear_error();
    CU_ASSERT_FALSE(nb_corpus_split(&c, "abc", 3, 0, 2));
    NBT_ASSERT_ERROR("nb_corpus_split: block 0 and every 2");
    nb_corpus_free(&c);
    CU_ASSERT_FALSE(nb_corpus_split(&c, "abc", 3, 2, 1));
    NBT_ASSERT_ERROR("every 1");
    nb_corpus_free(&c);
    CU_ASSERT_TRUE(nb_corpus_split(&c, "abcdef", 6, 2, 0));
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    nb_tensor *x, *y;
    nb_clear_error();
    CU_ASSERT_FALSE(nb_corpus_batch(&c, &rng, 1, 2, &x, &y));
    NBT_ASSERT_ERROR("nb_corpus_batch: the corpus is not encoded");
    /* A characters tokenizer without 'f': five tokens, one byte left out and counted. */
    nb_tokenizer *t = nb_tokenizer_chars("abcde", 5);
    CU_ASSERT_TRUE(nb_corpus_encode(&c, t));
    CU_ASSERT(c.train_tokens == 5 && c.skipped == 1);
    nb_clear_error();
    CU_ASSERT_FALSE(nb_corpus_batch(&c, &rng, 1, 5, &x, &y));
    NBT_ASSERT_ERROR("nb_corpus_batch: 5 training tokens, fewer than a window's 6");
    CU_ASSERT_TRUE(nb_corpus_batch(&c, &rng, 1, 4, &x, &y));
    nb_tokenizer_free(t);
    nb_corpus_free(&c);
}

int main(void) {
    const nbtest_case cases[] = {
        {"split sizes", test_split},
        {"files read in order", test_read_files},
        {"training batches", test_batches},
        {"validation batches", test_val_batches},
        {"errors", test_errors},
    };
    return nbtest_run("corpus", cases, sizeof cases / sizeof cases[0]);
}
