#include "harness.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef NBTEST_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#endif

static char tmp_dir[64];

const char *nbtest_tmp_dir(void) {
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/nabla_test_XXXXXX");
        if (!mkdtemp(tmp_dir)) {
            perror("mkdtemp");
            abort();
        }
    }
    return tmp_dir;
}

const char *nbtest_tmp_path(const char *name) {
    static char bufs[4][sizeof tmp_dir + 1 + 256];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", nbtest_tmp_dir(), name);
    return b;
}

int nbtest_tmp_files(const char *prefix) {
    DIR *d = opendir(nbtest_tmp_dir());
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
             strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d) closedir(d);
    return n;
}

static void remove_tmp_dir(void) {
    if (!tmp_dir[0]) return;
    DIR *d = opendir(tmp_dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(nbtest_tmp_path(e->d_name));
    if (d) closedir(d);
    rmdir(tmp_dir);
    tmp_dir[0] = '\0';
}

static int suite_init(void) {
    return 0;
}
static int suite_clean(void) {
    return 0;
}
/* Every test runs in its own scope, so whatever it creates is released after it. */
static void test_setup(void) {
    nb_clear_error();
    nb_scope_begin();
}
static void test_teardown(void) {
    nb_scope_end();
}

int nbtest_run(const char *suite_name, const nbtest_case *cases, int ncases) {
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite suite = CU_add_suite_with_setup_and_teardown(suite_name, suite_init, suite_clean,
                                                           test_setup, test_teardown);
    for (int i = 0; suite && i < ncases; i++) CU_add_test(suite, cases[i].name, cases[i].fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    unsigned ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    nb_shutdown();
    remove_tmp_dir();
    if (ran != (unsigned)ncases) {
        fprintf(stderr, "%s: only %u of %d tests ran\n", suite_name, ran, ncases);
        return 1;
    }
    return failed ? 1 : 0;
}

bool nbtest_close(const nb_tensor *a, const nb_tensor *b, double atol, double rtol) {
    if (!a || !b || !nb_same_shape(a, b)) {
        fprintf(stderr, "nbtest_close: shapes differ or NULL (%s)\n", nb_last_error());
        return false;
    }
    int64_t n = nb_numel(a);
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *y = malloc(sizeof(double) * (size_t)(n ? n : 1));
    bool ok = x && y && nb_to_doubles(a, x) && nb_to_doubles(b, y);
    for (int64_t k = 0; ok && k < n; k++) {
        /* NaN equals nothing, NaN included; an infinity only the same infinity (the
         * tolerance would let any value pass next to one). */
        bool ok_k = isfinite(x[k]) && isfinite(y[k]) ? fabs(x[k] - y[k]) <= atol + rtol * fabs(y[k])
                                                     : isinf(x[k]) && x[k] == y[k];
        if (!ok_k) {
            fprintf(stderr, "nbtest_close: element %lld: %.17g vs %.17g\n", (long long)k, x[k],
                    y[k]);
            ok = false;
        }
    }
    free(x);
    free(y);
    return ok;
}

/* NBT_NAN: a quiet NaN with a payload that arithmetic never creates (an invalid operation
 * gives the default NaN, other NaNs keep their own payload), so an expected value that came
 * out NaN by accident does not count as expecting NaN. */
#define EXPECTED_NAN_BITS 0x7ff80000000ba5edULL

double nbtest_expected_nan(void) {
    uint64_t bits = EXPECTED_NAN_BITS;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

bool nbtest_is_expected_nan(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits == EXPECTED_NAN_BITS;
}

bool nbtest_values(const nb_tensor *t, const double *expected, int64_t n, double tol) {
    if (!t) {
        fprintf(stderr, "nbtest_values: NULL tensor (%s)\n", nb_last_error());
        return false;
    }
    if (nb_numel(t) != n) {
        fprintf(stderr, "nbtest_values: %lld elements, expected %lld\n", (long long)nb_numel(t),
                (long long)n);
        return false;
    }
    double buf[4096];
    if (n > 4096) {
        fprintf(stderr, "nbtest_values: at most 4096 values\n");
        return false;
    }
    nb_to_doubles(t, buf);
    for (int64_t k = 0; k < n; k++) {
        /* NaN equals nothing, except where the expected value is NBT_NAN itself. */
        bool ok_k = isfinite(buf[k]) && isfinite(expected[k])
                        ? fabs(buf[k] - expected[k]) <= tol
                        : (isnan(buf[k]) && nbtest_is_expected_nan(expected[k])) ||
                              (isinf(buf[k]) && buf[k] == expected[k]);
        if (!ok_k) {
            fprintf(stderr, "nbtest_values: element %lld is %.17g, expected %.17g\n", (long long)k,
                    buf[k], expected[k]);
            return false;
        }
    }
    return true;
}

bool nbtest_has_shape(const nb_tensor *t, int ndim, const int64_t *shape) {
    if (!t || t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return false;
    return true;
}

void nbtest_greedy_reference(const nb_causal_lm *lm, int64_t max_len, const int64_t *prompt,
                             int64_t plen, int64_t n, int64_t *out) {
    int64_t *seq = malloc(sizeof *seq * (size_t)(plen + n));
    CU_ASSERT_PTR_NOT_NULL_FATAL(seq);
    memcpy(seq, prompt, sizeof *seq * (size_t)plen);
    int64_t total = plen, start = 0;
    for (int64_t i = 0; i < n; i++) {
        if (total - start > max_len) start = total - max_len / 2;
        nb_scope_begin();
        nb_tensor *logits = lm->forward(
            lm->model, nb_from_array(NB_I64, NB_SHAPE(1, total - start), seq + start), NULL);
        nb_tensor *last = logits ? nb_select(nb_select(logits, 0, 0), 0, total - start - 1) : NULL;
        out[i] = seq[total++] = last ? (int64_t)nb_item(nb_argmax(last, 0, false)) : -1;
        nb_scope_end();
    }
    free(seq);
}

void nbtest_check_cached_chunks(const nb_causal_lm *lm, nb_kv_cache *c, const nb_tensor *tokens,
                                const nb_tensor *full, const int64_t *chunks, int nchunks,
                                double tol) {
    const int64_t B = tokens->shape[0], start = nb_kv_cache_len(c);
    const bool grad = nb_is_grad_enabled();
    int64_t at = 0;
    for (int i = 0; i < nchunks; i++) {
        nb_scope_begin();
        nb_tensor *logits = lm->forward(lm->model, nb_narrow(tokens, 1, at, chunks[i]), c);
        CU_ASSERT_FALSE(logits && logits->requires_grad);
        CU_ASSERT_EQUAL(nb_is_grad_enabled(), grad);
        NBT_ASSERT_SHAPE(logits, B, chunks[i], lm->vocab);
        NBT_ASSERT_CLOSE(logits, nb_narrow(full, 1, at, chunks[i]), tol, tol);
        CU_ASSERT_EQUAL(nb_kv_cache_len(c), start + at); /* only a commit advances it */
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, chunks[i]));
        nb_scope_end();
        at += chunks[i];
    }
    CU_ASSERT_EQUAL(nb_kv_cache_len(c), start + at);
}

uint64_t nbtest_decode_mallocs(const nb_causal_lm *lm, nb_kv_cache *c, int64_t first, int warm,
                               int count) {
    int64_t tok = first;
    uint64_t before = 0;
    for (int t = 0; t < warm + count; t++) {
        if (t == warm) before = nb_alloc_count();
        nb_scope_begin();
        nb_tensor *logits = lm->forward(lm->model, nb_from_array(NB_I64, NB_SHAPE(1, 1), &tok), c);
        CU_ASSERT_PTR_NOT_NULL(logits);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
        if (logits)
            tok = (int64_t)nb_item(nb_argmax(nb_select(nb_select(logits, 0, 0), 0, 0), 0, false));
        nb_scope_end();
    }
    const uint64_t mallocs = nb_alloc_count() - before;
    if (mallocs) fprintf(stderr, "%llu mallocs in %d tokens\n", (unsigned long long)mallocs, count);
    return mallocs;
}

void nbtest_check_every_chunking(const nb_causal_lm *lm, nb_kv_cache *c, const nb_tensor *tokens,
                                 const nb_tensor *full, double tol) {
    const int64_t T = tokens->shape[1], mixed[] = {5, 1, 3, 1, 2};
    CU_ASSERT_TRUE_FATAL(T <= 64);
    int64_t chunks[64];
    for (int64_t size = 1; size <= T + 1; size++) { /* T + 1: the mixed chunks */
        int nchunks = 0;
        for (int64_t at = 0; at < T; at += chunks[nchunks++]) {
            const int64_t want = size <= T ? size : mixed[nchunks % 5];
            chunks[nchunks] = at + want <= T ? want : T - at;
        }
        nb_kv_cache_reset(c);
        nbtest_check_cached_chunks(lm, c, tokens, full, chunks, nchunks, tol);
    }
}

void nbtest_check_greedy_generation(const nb_causal_lm *lm, int64_t max_len, const int64_t *prompt,
                                    int64_t plen, int64_t n) {
    CU_ASSERT_TRUE_FATAL(n <= 64);
    int64_t want[64], got[64];
    nbtest_greedy_reference(lm, max_len, prompt, plen, n, want);
    for (int64_t chunk = 0; chunk <= 3; chunk++) {
        nb_generate_opts o = nb_generate_defaults(n);
        o.prompt_chunk = chunk;
        memset(got, 0xff, sizeof got);
        CU_ASSERT_EQUAL(nb_generate(lm, prompt, plen, &o, got, NULL), n);
        CU_ASSERT_EQUAL(memcmp(got, want, sizeof *got * (size_t)n), 0);
    }
}

bool nbtest_under_valgrind(void) {
#ifdef NBTEST_HAVE_VALGRIND_H
    return RUNNING_ON_VALGRIND != 0;
#else
    return false;
#endif
}

nbtest_isa_loop nbtest_isa_begin(void) {
    return (nbtest_isa_loop){.in_use = nbt_isa_current(), .cursor = NBT_ISA_COUNT};
}

bool nbtest_isa_next(nbtest_isa_loop *loop) {
    if (loop->cursor < 0) return false;
    if (loop->cursor < NBT_ISA_COUNT) loop->ran++; /* the turn of loop->isa is over */
    while (--loop->cursor >= 0)
        if (nbt_isa_force(loop->isa = (nbt_isa)loop->cursor)) return true;
    nbt_isa_force(loop->in_use);
    return false;
}
