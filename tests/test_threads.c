/* Results do not depend on the thread count: a few AdamW steps of a small transformer LM,
 * large enough that GEMM, GELU, softmax and layer_norm split their work, give bitwise
 * identical losses and parameters with 1 and 2 threads. So does the Llama-style LM of
 * nn/blocks, whose user functions (RMSNorm, the SwiGLU gate, RoPE) loop through
 * nb_parallel_for: at its sizes every one of those loops splits, RMSNorm's weight gradient by
 * columns. */
#include <nabla/blocks.h>
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define STEPS 3
/* Steps compared: 2 under valgrind (nbtest_under_valgrind), where the AVX2 kernels' FMAs run
 * in software: the same ops, one step fewer. */
static int steps_run(void) {
    return nbtest_under_valgrind() ? 2 : STEPS;
}

/* A language model to train: built under model, run on tokens [B, T] into logits [B, T, V]. */
typedef struct {
    void *(*build)(nb_module *model);
    nb_tensor *(*forward)(void *lm, const nb_tensor *tokens);
    int64_t B, T, V;
} lm_kind;

static void *gpt_build(nb_module *model) {
    return nb_transformer_lm_new(model, "", 32, 32, 64, 4, 2, 0.0);
}
static nb_tensor *gpt_forward(void *lm, const nb_tensor *tokens) {
    return nb_transformer_lm_forward(lm, tokens, true, NULL, NULL);
}
static const lm_kind gpt = {gpt_build, gpt_forward, 16, 32, 32};

/* 512 rows of dim 64: RMSNorm splits above 256 rows and its dw above 2 x 16 columns; the gate
 * has 512 x 96 elements (splits above 2 x 16384); RoPE 2048 rows of 16 (above 1024). */
static void *llama_build(nb_module *model) {
    blk_llama_config cfg = {.dim = 64,
                            .n_heads = 4,
                            .n_kv_heads = 2,
                            .hidden = 96,
                            .norm_eps = 1e-5,
                            .rope_base = 10000};
    return blk_llama_lm_new(model, "", 24, 2, &cfg);
}
static nb_tensor *llama_forward(void *lm, const nb_tensor *tokens) {
    return blk_llama_lm_forward(lm, tokens, &(blk_attn_opts){.causal = true});
}
static const lm_kind llama = {llama_build, llama_forward, 8, 64, 24};

/* Trains kind from scratch with `threads` threads; fills losses[STEPS] and returns the
 * flattened parameters (caller frees). */
static double *train(const lm_kind *kind, int threads, double *losses, int64_t *count) {
    nb_set_num_threads(threads);
    nb_module *model = nb_model_new(NB_F32, 5);
    void *lm = kind->build(model);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    nb_param params[64];
    int np = nb_module_named_params(model, params, 64);
    nb_tensor *pt[64];
    for (int i = 0; i < np; i++) pt[i] = params[i].tensor;
    nb_optimizer *opt = nb_adamw_new(np, pt, nb_adamw_defaults(1e-2));
    for (int s = 0; s < steps_run(); s++) {
        nb_rng rng; /* the same batch every step, so the loss must fall */
        nb_rng_seed(&rng, 9);
        nb_scope_begin();
        nb_tensor *x = nb_randint(&rng, 0, kind->V, NB_SHAPE(kind->B, kind->T));
        nb_tensor *y = nb_randint(&rng, 0, kind->V, NB_SHAPE(kind->B * kind->T));
        nb_tensor *logits = kind->forward(lm, x);
        nb_tensor *loss =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, kind->V)), y, -100, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        CU_ASSERT_TRUE(loss && nb_backward(loss, NULL));
        nb_optimizer_step(opt);
        losses[s] = loss ? nb_item(loss) : NAN;
        nb_scope_end();
    }
    *count = nb_module_param_numel(model);
    double *flat = malloc(sizeof(double) * (size_t)*count);
    int64_t k = 0;
    for (int i = 0; i < np && flat; i++) {
        nb_to_doubles(pt[i], flat + k);
        k += nb_numel(pt[i]);
    }
    nb_optimizer_free(opt);
    nb_module_free(model);
    return flat;
}

static void one_and_two_threads_agree_bitwise(const lm_kind *kind) {
    double l1[STEPS], l2[STEPS];
    int64_t n1, n2;
    double *p1 = train(kind, 1, l1, &n1), *p2 = train(kind, 2, l2, &n2);
    nb_set_num_threads(0);
    CU_ASSERT_TRUE_FATAL(p1 && p2 && n1 == n2);
    const int steps = steps_run();
    for (int s = 0; s < steps; s++) {
        printf("  step %d loss: 1 thread %.9g, 2 threads %.9g\n", s, l1[s], l2[s]);
        CU_ASSERT_EQUAL(memcmp(&l1[s], &l2[s], sizeof(double)), 0);
    }
    CU_ASSERT_TRUE(l1[steps - 1] < l1[0]); /* it trained */
    int64_t differ = 0;
    for (int64_t i = 0; i < n1; i++) differ += memcmp(&p1[i], &p2[i], sizeof(double)) != 0;
    printf("  %lld of %lld parameters differ\n", (long long)differ, (long long)n1);
    CU_ASSERT_EQUAL(differ, 0);
    free(p1);
    free(p2);
}

static void test_one_and_two_threads_agree_bitwise(void) {
    one_and_two_threads_agree_bitwise(&gpt);
}

static void test_llama_one_and_two_threads_agree_bitwise(void) {
    one_and_two_threads_agree_bitwise(&llama);
}

/* AdamW on a parameter big enough (40000 elements) that its update is split across threads;
 * returns the parameter after 3 steps with a fixed gradient (caller frees). */
static double *adamw_steps(int threads) {
    nb_set_num_threads(threads);
    nb_rng rng;
    nb_rng_seed(&rng, 4);
    nb_tensor *p = nb_randn(&rng, NB_F32, NB_SHAPE(200, 200));
    nb_requires_grad_(p, true);
    nb_optimizer *opt = nb_adamw_new(1, &p, nb_adamw_defaults(1e-2));
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
        {"llama (nn/blocks): 1 and 2 threads train bitwise the same",
         test_llama_one_and_two_threads_agree_bitwise},
        {"an AdamW update split across threads is bitwise identical",
         test_adamw_split_across_threads_agrees_bitwise},
    };
    return nbtest_run("threads", cases, sizeof cases / sizeof cases[0]);
}
