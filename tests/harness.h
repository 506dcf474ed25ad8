/* Shared CUnit scaffolding: each test program registers its suites and calls nbtest_run. */
#ifndef NABLA_TEST_HARNESS_H
#define NABLA_TEST_HARNESS_H

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <math.h>
#include <nabla/nabla.h>
#include <string.h>

#include "tensor/isa.h"

typedef struct {
    const char *name;
    void (*fn)(void);
} nbtest_case;

/* Runs every case as one suite; each case gets a fresh scope that is ended afterwards.
 * Returns the process exit status (0 when everything passed). */
int nbtest_run(const char *suite, const nbtest_case *cases, int ncases);

/* A directory of this test program's own under /tmp (made on first use; nbtest_run removes it
 * and the files in it at the end), and a path in it (rotating buffers: a few can be live at
 * once). Both abort the program if the directory cannot be made. */
const char *nbtest_tmp_dir(void);
const char *nbtest_tmp_path(const char *name);
/* How many names in nbtest_tmp_dir() start with prefix ("" counts every file). */
int nbtest_tmp_files(const char *prefix);

/* True when the program runs under valgrind (RUNNING_ON_VALGRIND; false in a build without
 * valgrind's header). There the tests that run a model for many forward passes check fewer
 * elements or steps (scripts/test's valgrind pass): the same code runs, fewer times, since
 * valgrind runs the FMA instructions of the AVX2 kernels one lane at a time in software (the
 * 2-thread tests took 70-280x their native time). The native passes run them in full. */
bool nbtest_under_valgrind(void);

/* A loop forcing each instruction set this CPU runs, widest first, one a turn, then restoring
 * the set in use before it (so do not break out early: the last set forced would stay):
 *   for (nbtest_isa_loop s = nbtest_isa_begin(); nbtest_isa_next(&s);) { ... s.isa ... } */
typedef struct {
    nbt_isa isa;    /* the set forced for this turn */
    int ran;        /* sets forced before this turn (0 on the first); after the loop, all of them */
    nbt_isa in_use; /* the set in use before the loop, restored after its last turn */
    int cursor;     /* the turn's set: NBT_ISA_COUNT before the first turn, -1 after the last */
} nbtest_isa_loop;
/* The loop before its first turn (it remembers the set in use now). */
nbtest_isa_loop nbtest_isa_begin(void);
/* Forces the next narrower set this CPU runs (true), or after the last restores in_use (false). */
bool nbtest_isa_next(nbtest_isa_loop *loop);

/* Asserts |a - b| <= atol + rtol * |b| for every element of two same-shape tensors. NaN
 * equals nothing, not even NaN: a kernel that returns NaN where the reference does fails. An
 * infinity equals the same infinity. */
#define NBT_ASSERT_CLOSE(a, b, atol, rtol) CU_ASSERT(nbtest_close((a), (b), (atol), (rtol)))
bool nbtest_close(const nb_tensor *a, const nb_tensor *b, double atol, double rtol);
/* Asserts t equals the given doubles elementwise in row-major order. NaN equals nothing,
 * except that t may (and must) hold NaN where the expected value is NBT_NAN: the one way a
 * test says it expects NaN at a position. */
bool nbtest_values(const nb_tensor *t, const double *expected, int64_t n, double tol);
#define NBT_ASSERT_VALUES(t, tol, ...)                                                             \
    CU_ASSERT(nbtest_values((t), (const double[]){__VA_ARGS__},                                    \
                            (int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)),     \
                            (tol)))
/* The expected value that asks for NaN at its position (nbtest_values, NBT_ASSERT_VALUES). */
#define NBT_NAN (nbtest_expected_nan())
double nbtest_expected_nan(void);
/* True if x is NBT_NAN (not any other NaN). */
bool nbtest_is_expected_nan(double x);
/* True if t is non-NULL with exactly this shape. */
bool nbtest_has_shape(const nb_tensor *t, int ndim, const int64_t *shape);
#define NBT_ASSERT_SHAPE(t, ...) CU_ASSERT_TRUE(nbtest_has_shape((t), NB_SHAPE(__VA_ARGS__)))
/* Asserts the last error contains the substring. */
#define NBT_ASSERT_ERROR(substr) CU_ASSERT_PTR_NOT_NULL(strstr(nb_last_error(), (substr)))

/* Runs expr after clearing the last error, and asserts it failed with every substring. */
#define EXPECT_NULL(expr, ...)                                                                     \
    do {                                                                                           \
        nb_clear_error();                                                                          \
        CU_ASSERT_PTR_NULL(expr);                                                                  \
        const char *subs_[] = {__VA_ARGS__};                                                       \
        for (size_t k_ = 0; k_ < sizeof subs_ / sizeof subs_[0]; k_++) {                           \
            bool found_ = strstr(nb_last_error(), subs_[k_]) != NULL;                              \
            if (!found_)                                                                           \
                fprintf(stderr, "line %d: error \"%s\" lacks \"%s\"\n", __LINE__, nb_last_error(), \
                        subs_[k_]);                                                                \
            CU_ASSERT(found_);                                                                     \
        }                                                                                          \
    } while (0)

/* Feeds tokens [B, T] to cache c through lm's forward in the chunks listed (summing to T,
 * from c's current length), and checks each chunk: logits [B, chunk, vocab] equal to full's
 * (the full forward's) at the same positions within tol, no autograd history, grad mode as it
 * was, and c's length moved only by the commit that follows. */
void nbtest_check_cached_chunks(const nb_causal_lm *lm, nb_kv_cache *c, const nb_tensor *tokens,
                                const nb_tensor *full, const int64_t *chunks, int nchunks,
                                double tol);

/* nbtest_check_cached_chunks over every chunking of tokens [B, T] (T <= 64) from an empty
 * cache (reset first): chunks of each size 1..T (the last one shorter), then mixed chunks
 * 5, 1, 3, 1, 2, ... (repeating until T). */
void nbtest_check_every_chunking(const nb_causal_lm *lm, nb_kv_cache *c, const nb_tensor *tokens,
                                 const nb_tensor *full, double tol);

/* nb_generate greedy through lm (with a cache of its own, of max_len) continues prompt by n
 * (<= 64) tokens exactly as nbtest_greedy_reference does, with the prompt fed whole and in
 * chunks of 1, 2 and 3 tokens. */
void nbtest_check_greedy_generation(const nb_causal_lm *lm, int64_t max_len, const int64_t *prompt,
                                    int64_t plen, int64_t n);

/* Decodes greedily through lm and its cache c (batch 1) from token first: `warm` one-token
 * forwards, then `count` more, each with its commit in a scope of its own, checking each
 * forward's result. Returns the mallocs the last `count` made (0 for a cache and scope
 * buffers that are warm), reporting them on stderr. */
uint64_t nbtest_decode_mallocs(const nb_causal_lm *lm, nb_kv_cache *c, int64_t first, int warm,
                               int count);

/* Greedy continuation of prompt by n tokens through lm's full forward (no cache) over the
 * window nb_generate reads: the sequence so far, restarted from its last max_len / 2 tokens
 * whenever it would not fit max_len (the smaller of lm's and the cache's). The reference the
 * cached generation is checked against. */
void nbtest_greedy_reference(const nb_causal_lm *lm, int64_t max_len, const int64_t *prompt,
                             int64_t plen, int64_t n, int64_t *out);

#endif
