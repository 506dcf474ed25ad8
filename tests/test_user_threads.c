/* Two user threads, each training its own model at the same time, get exactly what each gets
 * alone: scopes, free lists, the tape and grad mode are per thread, the root scope is locked.
 * Run under ThreadSanitizer by scripts/test; valgrind and LeakSanitizer check that a thread's
 * pools are freed when it exits. */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define STEPS 8
#define B 4
#define T 12
#define V 16

typedef struct {
    uint64_t seed;
    bool no_grad_probe; /* also evaluate under no_grad between steps */
    double losses[STEPS];
    double *params; /* flattened, malloc'd */
    int64_t count;
    int root_tensors;         /* made outside any scope, in the shared root scope */
    pthread_barrier_t *start; /* both threads begin together (NULL when run alone) */
    bool ok;
} run;

/* A small transformer LM trained with AdamW from seed r->seed. */
static void *train(void *arg) {
    run *r = arg;
    r->ok = true;
    if (r->start) pthread_barrier_wait(r->start);
    nb_module *model = nb_model_new(NB_F32, r->seed);
    nb_transformer_lm *lm = nb_transformer_lm_new(model, "", V, T, 32, 4, 2, 0.0);
    nb_param params[64];
    int np = nb_module_named_params(model, params, 64);
    nb_tensor *pt[64];
    for (int i = 0; i < np; i++) pt[i] = params[i].tensor;
    nb_optimizer *opt = nb_adamw_new(np, pt, nb_adamw_defaults(1e-2));
    for (int s = 0; s < STEPS && r->ok; s++) {
        nb_rng rng; /* the same batch every step, so the loss must fall */
        nb_rng_seed(&rng, r->seed * 7 + 1);
        /* Tensors outside any scope go to the root scope, shared by all threads. */
        for (int k = 0; k < 8; k++) r->root_tensors += nb_zeros(NB_F32, NB_SHAPE(3)) != NULL;
        nb_scope_begin();
        nb_tensor *x = nb_randint(&rng, 0, V, NB_SHAPE(B, T));
        nb_tensor *y = nb_randint(&rng, 0, V, NB_SHAPE(B * T));
        nb_tensor *logits = nb_transformer_lm_forward(lm, x, true, NULL, NULL);
        nb_tensor *loss =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, V)), y, -100, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        r->ok = loss && nb_backward(loss, NULL);
        nb_optimizer_step(opt);
        r->losses[s] = loss ? nb_item(loss) : NAN;
        if (r->no_grad_probe) { /* grad mode is per thread: the other thread keeps recording */
            bool prev = nb_set_grad_enabled(false);
            nb_tensor *probe = nb_transformer_lm_forward(lm, x, false, NULL, NULL);
            r->ok = r->ok && probe && !probe->requires_grad;
            nb_set_grad_enabled(prev);
        }
        nb_scope_end();
    }
    r->count = nb_module_param_numel(model);
    r->params = malloc(sizeof(double) * (size_t)r->count);
    int64_t k = 0;
    for (int i = 0; i < np; i++) {
        nb_to_doubles(pt[i], r->params + k);
        k += nb_numel(pt[i]);
    }
    nb_optimizer_free(opt);
    nb_module_free(model);
    return NULL;
}

static bool same_run(const run *a, const run *b) {
    return a->count == b->count && memcmp(a->losses, b->losses, sizeof a->losses) == 0 &&
           memcmp(a->params, b->params, sizeof(double) * (size_t)a->count) == 0;
}

static void test_two_threads_train_as_one(void) {
    run alone[2] = {{.seed = 5}, {.seed = 6, .no_grad_probe = true}};
    for (int k = 0; k < 2; k++) train(&alone[k]);
    CU_ASSERT_TRUE(alone[0].ok && alone[1].ok);
    CU_ASSERT_TRUE(alone[0].losses[STEPS - 1] < alone[0].losses[0]); /* it trained */
    CU_ASSERT_FALSE(same_run(&alone[0], &alone[1]));                 /* different seeds */
    for (int round = 0; round < 2; round++) {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, 2);
        run together[2] = {{.seed = 5, .start = &start},
                           {.seed = 6, .no_grad_probe = true, .start = &start}};
        pthread_t threads[2];
        for (int k = 0; k < 2; k++)
            CU_ASSERT_EQUAL_FATAL(pthread_create(&threads[k], NULL, train, &together[k]), 0);
        for (int k = 0; k < 2; k++) pthread_join(threads[k], NULL);
        for (int k = 0; k < 2; k++) {
            CU_ASSERT_TRUE(together[k].ok);
            CU_ASSERT_TRUE(same_run(&together[k], &alone[k]));
            CU_ASSERT_EQUAL(together[k].root_tensors, 8 * STEPS);
            free(together[k].params);
        }
        pthread_barrier_destroy(&start);
    }
    for (int k = 0; k < 2; k++) free(alone[k].params);
}

/* Scope misuse in one thread does not disturb another thread's scopes. */
static void *misuse_scopes(void *arg) {
    (void)arg;
    nb_scope_end(); /* nothing begun in this thread: an error */
    nb_scope_pop(); /* nothing pushed: an error */
    bool *errored = malloc(sizeof *errored);
    *errored = strstr(nb_last_error(), "nb_scope_pop") != NULL;
    return errored;
}

static void test_scope_stacks_are_per_thread(void) {
    nb_scope_begin();
    nb_tensor *t = nb_ones(NB_F32, NB_SHAPE(2));
    int64_t count = nb_scope_tensor_count();
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, misuse_scopes, NULL), 0);
    void *res;
    pthread_join(th, &res);
    CU_ASSERT_TRUE(*(bool *)res);
    free(res);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), count); /* still this thread's begun scope */
    NBT_ASSERT_VALUES(t, 0, 1, 1);
    nb_scope_end();
}

int main(void) {
    const nbtest_case cases[] = {
        {"two threads train as each does alone", test_two_threads_train_as_one},
        {"scope stacks are per thread", test_scope_stacks_are_per_thread},
    };
    return nbtest_run("user threads", cases, sizeof cases / sizeof cases[0]);
}
