/* nb_parallel_for (nabla/parallel.h): every index handled by exactly one call, inline when
 * small or nested, bitwise the same user function results on 1 and 2 threads, safe from two
 * user threads at once, and clear errors. Run under ThreadSanitizer by scripts/test. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* ---- coverage ---- */
typedef struct {
    int *visits;      /* per index: how many calls handled it */
    int64_t n;        /* the loop's size: every range must lie inside [0, n) */
    atomic_int calls; /* calls made */
    atomic_int bad;   /* empty or out-of-range calls */
} coverage;

static void visit(void *ctx, int64_t begin, int64_t end) {
    coverage *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    if (begin < 0 || end > c->n || begin >= end) {
        atomic_fetch_add(&c->bad, 1);
        return;
    }
    for (int64_t i = begin; i < end; i++) c->visits[i]++; /* two calls on one index: a race */
}

/* Runs a loop of n over grain; true if every index was visited once by sane calls. Returns
 * the number of calls in *calls. */
static bool covers_once(int64_t n, int64_t grain, int *calls) {
    coverage c = {calloc((size_t)n + 1, sizeof(int)), n, 0, 0};
    bool ok = c.visits && nb_parallel_for(n, grain, visit, &c) && atomic_load(&c.bad) == 0;
    for (int64_t i = 0; ok && i < n; i++) ok = c.visits[i] == 1;
    *calls = atomic_load(&c.calls);
    free(c.visits);
    return ok;
}

static void test_each_index_once(void) {
    const int64_t sizes[] = {1, 2, 15, 16, 17, 31, 33, 1000, 4099, 100003};
    const int64_t grains[] = {1, 3, 16, 17, 1000, 1 << 20};
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (size_t g = 0; g < sizeof grains / sizeof *grains; g++) {
                int calls;
                CU_ASSERT_TRUE(covers_once(sizes[s], grains[g], &calls));
                /* under two grains (or on one thread) the loop is one call */
                if (threads == 1 || sizes[s] < 2 * grains[g]) CU_ASSERT_EQUAL(calls, 1);
            }
    }
    /* At 2 threads a loop of many grains is split (into at most 4 pieces a thread). */
    nb_set_num_threads(2);
    int calls;
    CU_ASSERT_TRUE(covers_once(100000, 1000, &calls));
    CU_ASSERT_TRUE(calls > 1 && calls <= 8);
    nb_set_num_threads(0);
}

static void never(void *ctx, int64_t begin, int64_t end) {
    (void)begin, (void)end;
    ++*(int *)ctx;
}

static void test_empty_loop(void) {
    int called = 0;
    CU_ASSERT_TRUE(nb_parallel_for(0, 1, never, &called));
    CU_ASSERT_EQUAL(called, 0);
}

/* ---- inline when nested or small ---- */
typedef struct {
    pthread_t caller;
    atomic_int inner_calls, inner_off_thread, outer_calls;
} nesting;

static void inner(void *ctx, int64_t begin, int64_t end) {
    nesting *n = ((void **)ctx)[0];
    pthread_t *outer_thread = ((void **)ctx)[1];
    atomic_fetch_add(&n->inner_calls, 1);
    if (begin != 0 || end != 100000 || !pthread_equal(pthread_self(), *outer_thread))
        atomic_fetch_add(&n->inner_off_thread, 1);
}

static void outer(void *ctx, int64_t begin, int64_t end) {
    nesting *n = ctx;
    atomic_fetch_add(&n->outer_calls, 1);
    pthread_t self = pthread_self();
    for (int64_t i = begin; i < end; i++) /* a big inner loop: still one call, here */
        nb_parallel_for(100000, 10, inner, (void *[]){n, &self});
}

static void test_nested_runs_inline(void) {
    nb_set_num_threads(2);
    nesting n = {pthread_self(), 0, 0, 0};
    CU_ASSERT_TRUE(nb_parallel_for(64, 4, outer, &n));
    CU_ASSERT_EQUAL(atomic_load(&n.inner_calls), 64); /* one per outer index */
    CU_ASSERT_EQUAL(atomic_load(&n.inner_off_thread), 0);
    CU_ASSERT_TRUE(atomic_load(&n.outer_calls) > 1);
    nb_set_num_threads(0);
}

static void on_caller(void *ctx, int64_t begin, int64_t end) {
    nesting *n = ctx;
    atomic_fetch_add(&n->outer_calls, 1);
    if (begin != 0 || end != 31 || !pthread_equal(pthread_self(), n->caller))
        atomic_fetch_add(&n->inner_off_thread, 1);
}

static void test_small_runs_inline(void) {
    nb_set_num_threads(2);
    nesting n = {pthread_self(), 0, 0, 0};
    CU_ASSERT_TRUE(nb_parallel_for(31, 16, on_caller, &n)); /* under two grains */
    CU_ASSERT_EQUAL(atomic_load(&n.outer_calls), 1);
    CU_ASSERT_EQUAL(atomic_load(&n.inner_off_thread), 0);
    nb_set_num_threads(0);
}

/* ---- sizes near INT64_MAX ----
 * The loop's size need not be backed by memory (a user may loop over a counter), so the
 * split must not overflow: every call is recorded (no index is touched) and the calls,
 * sorted, must tile [0, n) exactly. */
#define MAX_SPANS 64
typedef struct {
    int64_t begin[MAX_SPANS], end[MAX_SPANS];
    atomic_int count;
} spans;

static void record_span(void *ctx, int64_t begin, int64_t end) {
    spans *s = ctx;
    int i = atomic_fetch_add(&s->count, 1);
    if (i < MAX_SPANS) s->begin[i] = begin, s->end[i] = end;
}

/* True if nb_parallel_for(n, grain) made calls that tile [0, n); their number in *calls. */
static bool tiles_exactly(int64_t n, int64_t grain, int *calls) {
    spans s = {.count = 0};
    if (!nb_parallel_for(n, grain, record_span, &s)) return false;
    int k = *calls = atomic_load(&s.count);
    if (k < 1 || k > MAX_SPANS) return false;
    for (int i = 1; i < k; i++) /* insertion sort by begin: a handful of calls */
        for (int j = i; j > 0 && s.begin[j] < s.begin[j - 1]; j--) {
            int64_t b = s.begin[j], e = s.end[j];
            s.begin[j] = s.begin[j - 1], s.end[j] = s.end[j - 1];
            s.begin[j - 1] = b, s.end[j - 1] = e;
        }
    bool ok = s.begin[0] == 0 && s.end[k - 1] == n;
    for (int i = 0; i < k; i++) ok = ok && s.begin[i] < s.end[i];
    for (int i = 1; i < k; i++) ok = ok && s.begin[i] == s.end[i - 1];
    return ok;
}

static void test_sizes_near_int64_max(void) {
    const int64_t sizes[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX - 15, INT64_MAX - 300,
                             INT64_MAX / 2 + 1};
    const int64_t grains[] = {1, 15, 16, 17, 1000, INT64_MAX / 4, INT64_MAX / 2, INT64_MAX};
    for (int threads = 1; threads <= 2; threads++) {
        nb_set_num_threads(threads);
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            for (size_t g = 0; g < sizeof grains / sizeof *grains; g++) {
                int calls = 0;
                CU_ASSERT_TRUE(tiles_exactly(sizes[i], grains[g], &calls));
                /* one thread, or under two grains: one call; two threads and a grain of 1:
                 * at most 4 pieces a thread, so 2 to 8 calls */
                if (threads == 1 || sizes[i] / 2 < grains[g]) CU_ASSERT_EQUAL(calls, 1);
                if (threads == 2 && grains[g] == 1) CU_ASSERT_TRUE(calls >= 2 && calls <= 8);
            }
    }
    nb_set_num_threads(0);
}

/* ---- errors ---- */
static void test_errors(void) {
    int called = 0;
    nb_clear_error();
    CU_ASSERT_FALSE(nb_parallel_for(-1, 1, never, &called));
    NBT_ASSERT_ERROR("nb_parallel_for: needs n >= 0, grain >= 1 and a function, got n -1, grain 1");
    CU_ASSERT_FALSE(nb_parallel_for(10, 0, never, &called));
    NBT_ASSERT_ERROR("got n 10, grain 0");
    CU_ASSERT_FALSE(nb_parallel_for(10, -4, never, &called));
    NBT_ASSERT_ERROR("grain -4");
    CU_ASSERT_FALSE(nb_parallel_for(10, 1, NULL, &called));
    NBT_ASSERT_ERROR("got n 10, grain 1 and a NULL function");
    CU_ASSERT_EQUAL(called, 0);
}

/* ---- a user function: y = x * w (w [D] over rows of x [N, D]), loops on nabla's threads ----
 * Forward and dx split by rows; dw, a sum over rows, splits by columns, each column summed
 * over the rows in order (the whole-output rule), so any split gives the same bits. */
typedef struct {
    const double *x, *w, *g;
    double *y, *dx, *dw;
    int64_t rows, cols;
} scale_job;

static void scale_rows(void *ctx, int64_t begin, int64_t end) {
    const scale_job *j = ctx;
    for (int64_t i = begin; i < end; i++)
        for (int64_t c = 0; c < j->cols; c++)
            j->y[i * j->cols + c] = j->x[i * j->cols + c] * j->w[c];
}

static void scale_weight_grad(void *ctx, int64_t begin, int64_t end) {
    const scale_job *j = ctx;
    for (int64_t c = begin; c < end; c++) j->dw[c] = 0;
    for (int64_t i = 0; i < j->rows; i++)
        for (int64_t c = begin; c < end; c++)
            j->dw[c] += j->g[i * j->cols + c] * j->x[i * j->cols + c];
}

static bool scale_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
                          nb_tensor **out) {
    (void)nin, (void)nout;
    const nb_tensor *x = nb_contiguous(in[0]), *w = nb_contiguous(in[1]);
    if (!x || !w || !(out[0] = nb_empty(NB_F64, x->ndim, x->shape))) return false;
    scale_job j = {.x = nb_data(x), .w = nb_data(w), .y = nb_data(out[0]), .cols = x->shape[1]};
    return nb_parallel_for(x->shape[0], 8, scale_rows, &j) && nb_ctx_save(ctx, x) &&
           nb_ctx_save(ctx, w);
}

static bool scale_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
                           nb_tensor **gin) {
    (void)nout, (void)nin;
    const nb_tensor *x = nb_ctx_saved(ctx, 0), *w = nb_ctx_saved(ctx, 1);
    const nb_tensor *g = nb_contiguous(gout[0]);
    if (!x || !w || !g || !(gin[0] = nb_empty(NB_F64, x->ndim, x->shape)) ||
        !(gin[1] = nb_empty(NB_F64, w->ndim, w->shape)))
        return false;
    int64_t rows = x->shape[0], cols = x->shape[1];
    /* dx = g * w has the forward's shape: the forward's row loop with g in place of x */
    scale_job dx = {.x = nb_data(g), .w = nb_data(w), .y = nb_data(gin[0]), .cols = cols};
    scale_job dw = {
        .x = nb_data(x), .g = nb_data(g), .dw = nb_data(gin[1]), .rows = rows, .cols = cols};
    return nb_parallel_for(rows, 8, scale_rows, &dx) &&
           nb_parallel_for(cols, 16, scale_weight_grad, &dw);
}

static const nb_function scale_fn = {"row_scale", scale_forward, scale_backward};

static nb_tensor *run_scale(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    if (in[0]->dtype != NB_F64 || in[0]->ndim != 2)
        return nb_error("row_scale", "expects f64 [N, D], got %s", nb_shape_text(in[0]));
    return nb_function_apply1(&scale_fn, 2, (const nb_tensor *const *)in, NULL);
}

/* y, dx and dw of sum(y * r) for a fixed random r, at the current thread count. */
static void scale_step(nb_tensor *const *in, const nb_tensor *r, nb_tensor **y, nb_tensor **dx,
                       nb_tensor **dw) {
    for (int i = 0; i < 2; i++) nb_zero_grad(in[i]);
    *y = run_scale(in, 2, NULL);
    CU_ASSERT_TRUE_FATAL(*y && nb_backward(nb_sum(nb_mul(*y, r)), NULL));
    *dx = nb_clone(nb_grad(in[0]));
    *dw = nb_clone(nb_grad(in[1]));
}

static bool bitwise_equal(const nb_tensor *a, const nb_tensor *b) {
    return a && b && nb_numel(a) == nb_numel(b) &&
           memcmp(nb_data(a), nb_data(b), (size_t)nb_numel(a) * sizeof(double)) == 0;
}

static void test_user_function_bitwise_any_threads(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 11);
    nb_tensor *in[2] = {nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(512, 96)), true),
                        nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(96)), true)};
    nb_tensor *r = nb_randn(&rng, NB_F64, NB_SHAPE(512, 96));
    nb_tensor *y1, *dx1, *dw1, *y2, *dx2, *dw2;
    nb_set_num_threads(1);
    scale_step(in, r, &y1, &dx1, &dw1);
    nb_set_num_threads(2);
    scale_step(in, r, &y2, &dx2, &dw2);
    nb_set_num_threads(0);
    CU_ASSERT_TRUE(bitwise_equal(y1, y2));
    CU_ASSERT_TRUE(bitwise_equal(dx1, dx2));
    CU_ASSERT_TRUE(bitwise_equal(dw1, dw2));
    /* and the values are right: nabla's own broadcast product and its gradients */
    bool prev = nb_set_grad_enabled(false);
    NBT_ASSERT_CLOSE(y2, nb_mul(in[0], in[1]), 0, 0);
    NBT_ASSERT_CLOSE(dx2, nb_mul(r, in[1]), 0, 0);
    NBT_ASSERT_CLOSE(dw2, nb_sum_dims(nb_mul(r, in[0]), 1, (int[]){0}, false), 1e-12, 1e-12);
    nb_set_grad_enabled(prev);
}

static void test_user_function_gradcheck(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 12);
    nb_set_num_threads(2); /* big enough that both loops split */
    nb_tensor *in[2] = {nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(40, 48)), true),
                        nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(48)), true)};
    nb_gradcheck_result res;
    CU_ASSERT_TRUE(nb_gradcheck(run_scale, 2, in, NULL, NULL, &res));
    nb_set_num_threads(0);
}

/* ---- two user threads loop at the same time ---- */
static void *loop_repeatedly(void *arg) {
    bool *ok = arg;
    *ok = true;
    for (int k = 0; k < 20 && *ok; k++) {
        int calls;
        *ok = covers_once(50000, 500, &calls);
    }
    return NULL;
}

static void test_two_user_threads(void) {
    nb_set_num_threads(2);
    pthread_t t[2];
    bool ok[2] = {false, false};
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, loop_repeatedly, &ok[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CU_ASSERT_TRUE(ok[0] && ok[1]);
    nb_set_num_threads(0);
}

int main(void) {
    const nbtest_case cases[] = {
        {"each index once", test_each_index_once},
        {"empty loop", test_empty_loop},
        {"nested runs inline", test_nested_runs_inline},
        {"small runs inline", test_small_runs_inline},
        {"sizes near INT64_MAX", test_sizes_near_int64_max},
        {"errors", test_errors},
        {"user function bitwise on 1 and 2 threads", test_user_function_bitwise_any_threads},
        {"user function gradcheck", test_user_function_gradcheck},
        {"two user threads", test_two_user_threads},
    };
    return nbtest_run("parallel", cases, (int)(sizeof cases / sizeof *cases));
}
