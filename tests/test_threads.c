/* Results do not depend on the thread count: a few AdamW steps of a small transformer LM,
 * large enough that GEMM, GELU, softmax and layer_norm split their work, give bitwise
 * identical losses and parameters with 1 and 2 threads. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define STEPS 3
#define B 16
#define T 32
#define V 32

/* Trains from scratch with `threads` threads; fills losses[STEPS] and returns the flattened
 * parameters (caller frees). */
static double *train(int threads, double *losses, int64_t *count) {
    nb_set_num_threads(threads);
    nb_module *model = nb_model_new(NB_F32, 5);
    nb_transformer_lm *lm = nb_transformer_lm_new(model, "", V, T, 64, 4, 2, 0.0);
    nb_param params[64];
    int np = nb_module_params(model, params, 64);
    nb_tensor *pt[64];
    for (int i = 0; i < np; i++) pt[i] = params[i].tensor;
    nb_optimizer *opt = nb_adamw_new(pt, np, nb_adamw_defaults(1e-2));
    nb_rng rng;
    nb_rng_seed(&rng, 9);
    for (int s = 0; s < STEPS; s++) {
        nb_scope_begin();
        nb_tensor *x = nb_randint(&rng, 0, V, NB_SHAPE(B, T));
        nb_tensor *y = nb_randint(&rng, 0, V, NB_SHAPE(B * T));
        nb_tensor *logits = nb_transformer_lm_forward(lm, x, true, NULL, NULL);
        nb_tensor *loss =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, V)), y, -100, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        CU_ASSERT_TRUE(nb_backward(loss, NULL));
        nb_optimizer_step(opt);
        losses[s] = nb_item(loss);
        nb_scope_end();
    }
    *count = nb_module_numel(model);
    double *flat = malloc(sizeof(double) * (size_t)*count);
    int64_t k = 0;
    for (int i = 0; i < np; i++) {
        nb_to_doubles(pt[i], flat + k);
        k += nb_numel(pt[i]);
    }
    nb_optimizer_free(opt);
    nb_module_free(model);
    return flat;
}

static void test_one_and_two_threads_agree_bitwise(void) {
    double l1[STEPS], l2[STEPS];
    int64_t n1, n2;
    double *p1 = train(1, l1, &n1), *p2 = train(2, l2, &n2);
    nb_set_num_threads(0);
    for (int s = 0; s < STEPS; s++) {
        printf("  step %d loss: 1 thread %.9g, 2 threads %.9g\n", s, l1[s], l2[s]);
        CU_ASSERT_EQUAL(memcmp(&l1[s], &l2[s], sizeof(double)), 0);
    }
    CU_ASSERT_TRUE(l1[STEPS - 1] < l1[0]); /* it trained */
    CU_ASSERT_EQUAL_FATAL(n1, n2);
    int64_t differ = 0;
    for (int64_t i = 0; i < n1; i++) differ += memcmp(&p1[i], &p2[i], sizeof(double)) != 0;
    printf("  %lld of %lld parameters differ\n", (long long)differ, (long long)n1);
    CU_ASSERT_EQUAL(differ, 0);
    free(p1);
    free(p2);
}

/* AdamW on a parameter big enough (40000 elements) that its update is split across threads;
 * returns the parameter after 3 steps with a fixed gradient (caller frees). */
static double *adamw_steps(int threads) {
    nb_set_num_threads(threads);
    nb_rng rng;
    nb_rng_seed(&rng, 4);
    nb_tensor *p = nb_randn(&rng, NB_F32, NB_SHAPE(200, 200));
    nb_requires_grad_(p, true);
    nb_optimizer *opt = nb_adamw_new(&p, 1, nb_adamw_defaults(1e-2));
    for (int s = 0; s < 3; s++) {
        nb_scope_begin();
        nb_optimizer_zero_grad(opt);
        CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(p, p)), NULL));
        nb_optimizer_step(opt);
        nb_scope_end();
    }
    double *flat = malloc(sizeof(double) * 40000);
    nb_to_doubles(p, flat);
    nb_optimizer_free(opt);
    return flat;
}

static void test_adamw_split_across_threads_agrees_bitwise(void) {
    nb_scope_begin();
    double *p1 = adamw_steps(1), *p2 = adamw_steps(2);
    nb_set_num_threads(0);
    int64_t differ = 0, moved = 0;
    for (int64_t i = 0; i < 40000; i++) differ += memcmp(&p1[i], &p2[i], sizeof(double)) != 0;
    CU_ASSERT_EQUAL(differ, 0);
    /* the update ran on every element: with grad 2p of fixed sign Adam's steps are lr each,
     * so every element not near 0 shrank by 3 lr (plus the small decoupled decay) */
    double *start = NULL;
    {
        nb_rng rng;
        nb_rng_seed(&rng, 4);
        nb_tensor *p0 = nb_randn(&rng, NB_F32, NB_SHAPE(200, 200));
        start = malloc(sizeof(double) * 40000);
        nb_to_doubles(p0, start);
    }
    int64_t away_from_zero = 0;
    for (int64_t i = 0; i < 40000; i++) {
        if (fabs(start[i]) < 0.1) continue;
        away_from_zero++;
        double shrink = fabs(start[i]) - fabs(p1[i]); /* about 3 lr: the gradient shrinks too */
        moved += shrink > 0.0285 && shrink < 0.0315;
    }
    CU_ASSERT_TRUE(away_from_zero > 30000);
    CU_ASSERT_EQUAL(moved, away_from_zero);
    free(start);
    free(p1);
    free(p2);
    nb_scope_end();
}

int main(void) {
    const nbtest_case cases[] = {
        {"1 and 2 threads give bitwise identical training", test_one_and_two_threads_agree_bitwise},
        {"an AdamW update split across threads is bitwise identical",
         test_adamw_split_across_threads_agrees_bitwise},
    };
    return nbtest_run("threads", cases, sizeof cases / sizeof cases[0]);
}
