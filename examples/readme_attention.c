/* The README's multi-head attention excerpts (the tutorials' layer, and PyTorch's bias=False),
 * compiled and run by the test suite: the causal weights it returns must be zero above the
 * diagonal and sum to one along each row. */
#include <nabla/nabla.h>
#include <math.h>
#include <stdio.h>

int main(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(1, 3, 6)); /* [B, T, d_in] */
    nb_module *model = nb_model_new(NB_F32, /*seed*/ 42);
    nb_mha *mha = nb_mha_new(model, "attn", /*d_in*/ 6, /*d_out*/ 6, /*heads*/ 2,
                             /*qkv_bias*/ false, /*dropout*/ 0.0);
    nb_tensor *weights; /* [B, H, T, T], for plotting */
    nb_tensor *y = nb_mha_forward(mha, x, &(nb_mha_opts){.causal = true, .attn_weights = &weights});

    nb_mha_config cfg = nb_mha_defaults(/*d_in*/ 6, /*d_out*/ 6, /*heads*/ 2);
    cfg.qkv_bias = cfg.out_bias = false; /* nn.MultiheadAttention(6, 2, bias=False) */
    nb_mha *bare = nb_mha_new_config(model, "bare", &cfg);

    if (!y || !bare || nb_module_param_count(&bare->base) != 4) {
        fprintf(stderr, "readme_attention: %s\n", nb_last_error());
        return 1;
    }
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 3; i++) {
            double row = 0;
            for (int64_t j = 0; j < 3; j++) {
                const double w = nb_get(weights, NB_IDX(0, h, i, j));
                if (j > i && w != 0) return fprintf(stderr, "weight above the diagonal\n"), 1;
                row += w;
            }
            if (fabs(row - 1) > 1e-6) return fprintf(stderr, "a row sums to %g\n", row), 1;
        }
    nb_print(weights);
    printf("readme_attention: ok\n");
    nb_module_free(model);
    nb_shutdown();
    return 0;
}
