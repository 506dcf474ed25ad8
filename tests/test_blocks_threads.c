/* The Llama-style LM of examples/blocks trains to bitwise the same losses and parameters on 1
 * and 2 threads. Its user functions (RMSNorm, the SwiGLU gate, RoPE) run their loops through
 * nb_parallel_for; the sizes here are large enough that every one of those loops splits (and
 * RMSNorm's weight gradient splits by columns), as do GEMM and the fused attention. */
#include "blocks.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

#define STEPS 3
#define B 8
#define T 64 /* 512 rows of dim 64: RMSNorm splits above 256 rows, its dw above 2 x 16 columns */
#define V 24
#define DIM 64
#define HIDDEN 96 /* 512 x 96 gate elements: the gate splits above 2 x 16384 */

/* Trains from scratch on `threads` threads; fills losses and returns the flattened parameters
 * (caller frees), their number in *count. */
static double *train_llama(int threads, double losses[STEPS], int64_t *count) {
    nb_set_num_threads(threads);
    nb_module *model = nb_model_new(NB_F32, 21);
    blk_llama_config cfg = {.dim = DIM,
                            .n_heads = 4,
                            .n_kv_heads = 2,
                            .hidden = HIDDEN,
                            .norm_eps = 1e-5,
                            .rope_base = 10000}; /* rope: 2048 rows of 16 */
    blk_llama_lm *lm = blk_llama_lm_new(model, "", V, 2, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    nb_param params[64];
    int np = nb_module_params(model, params, 64);
    nb_tensor *pt[64];
    for (int i = 0; i < np; i++) pt[i] = params[i].tensor;
    nb_optimizer *opt = nb_adamw_new(pt, np, nb_adamw_defaults(1e-2));
    nb_rng rng;
    nb_rng_seed(&rng, 8);
    for (int s = 0; s < STEPS; s++) {
        nb_scope_begin();
        nb_tensor *x = nb_randint(&rng, 0, V, NB_SHAPE(B, T));
        nb_tensor *y = nb_randint(&rng, 0, V, NB_SHAPE(B * T));
        nb_tensor *logits = blk_llama_lm_forward(lm, x, &(blk_attn_opts){.causal = true});
        nb_tensor *loss =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, V)), y, -100, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        CU_ASSERT_TRUE(loss && nb_backward(loss, NULL));
        nb_optimizer_step(opt);
        losses[s] = loss ? nb_item(loss) : NAN;
        nb_scope_end();
    }
    *count = nb_module_numel(model);
    double *flat = malloc(sizeof(double) * (size_t)*count);
    for (int i = 0, k = 0; i < np && flat; k += (int)nb_numel(pt[i]), i++)
        nb_to_doubles(pt[i], flat + k);
    nb_optimizer_free(opt);
    nb_module_free(model);
    return flat;
}

static void test_llama_one_and_two_threads_agree_bitwise(void) {
    double l1[STEPS], l2[STEPS];
    int64_t n1, n2;
    double *p1 = train_llama(1, l1, &n1), *p2 = train_llama(2, l2, &n2);
    nb_set_num_threads(0);
    CU_ASSERT_TRUE_FATAL(p1 && p2 && n1 == n2);
    for (int s = 0; s < STEPS; s++) {
        printf("  step %d loss: 1 thread %.9g, 2 threads %.9g\n", s, l1[s], l2[s]);
        CU_ASSERT_EQUAL(memcmp(&l1[s], &l2[s], sizeof(double)), 0);
    }
    CU_ASSERT_TRUE(l1[STEPS - 1] < l1[0]); /* it trained */
    int64_t differ = 0;
    for (int64_t i = 0; i < n1; i++) differ += memcmp(&p1[i], &p2[i], sizeof(double)) != 0;
    printf("  %lld of %lld parameters differ\n", (long long)differ, (long long)n1);
    CU_ASSERT_EQUAL(differ, 0);
    free(p1);
    free(p2);
}

int main(void) {
    const nbtest_case cases[] = {
        {"llama: 1 and 2 threads train bitwise the same",
         test_llama_one_and_two_threads_agree_bitwise},
    };
    return nbtest_run("blocks_threads", cases, sizeof cases / sizeof cases[0]);
}
