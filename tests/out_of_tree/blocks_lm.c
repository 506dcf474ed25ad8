/* The installed blocks (<nabla/blocks.h>) from a user's program: a Llama-style LM learns to
 * continue 0 1 2 ... 7 0 1 ... (next = token + 1 mod 8) and then generates it greedily through
 * nb_generate with its KV cache. Build: cc blocks_lm.c $(pkg-config --cflags --libs nabla) */
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    nb_module *root = nb_model_new(NB_F32, 7);
    const blk_llama_config cfg = {
        .dim = 16, .n_heads = 2, .n_kv_heads = 1, .hidden = 32, .norm_eps = 1e-5, .rope_base = 1e4};
    blk_llama_lm *lm = blk_llama_lm_new(root, "lm", 8, 1, &cfg);
    int n_params = 0;
    nb_tensor **params = nb_module_parameters(root, &n_params);
    nb_optimizer *opt = nb_adamw_new(params, n_params, nb_adamw_defaults(1e-2));
    free(params);
    if (!lm || !opt) return fprintf(stderr, "blocks_lm: %s\n", nb_last_error()), 1;
    int64_t seq[17];
    for (int i = 0; i < 17; i++) seq[i] = i % 8;
    double loss = 0;
    for (int step = 0; step < 150; step++) {
        nb_scope_begin();
        nb_tensor *in = nb_from_array(NB_I64, NB_SHAPE(1, 16), seq);
        nb_tensor *target = nb_from_array(NB_I64, NB_SHAPE(16), seq + 1);
        const blk_attn_opts causal = {.causal = true};
        nb_tensor *logits = blk_llama_lm_forward(lm, in, &causal);
        nb_tensor *l =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(16, 8)), target, -1, NB_REDUCE_MEAN);
        nb_optimizer_zero_grad(opt);
        if (!l || !nb_backward(l, NULL))
            return fprintf(stderr, "blocks_lm: %s\n", nb_last_error()), 1;
        if (!nb_optimizer_step(opt)) return fprintf(stderr, "blocks_lm: %s\n", nb_last_error()), 1;
        loss = nb_item(l);
        nb_scope_end();
    }
    const nb_causal_lm causal = blk_llama_lm_causal(lm, 32);
    int64_t out[12];
    const nb_generate_opts opts = nb_generate_defaults(12);
    if (nb_generate(&causal, (const int64_t[]){3, 4}, 2, &opts, out, NULL) != 12)
        return fprintf(stderr, "blocks_lm: %s\n", nb_last_error()), 1;
    for (int i = 0; i < 12; i++)
        if (out[i] != (5 + i) % 8)
            return fprintf(stderr, "blocks_lm: token %d is %lld (loss %.3g)\n", i,
                           (long long)out[i], loss),
                   1;
    nb_optimizer_free(opt);
    nb_module_free(root);
    nb_shutdown();
    printf("blocks_lm: loss %.4f, generated 5 6 7 0 ... as trained: ok\n", loss);
    return 0;
}
