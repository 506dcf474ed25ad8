/* The installed blocks (<nabla/blocks.h>) from a user's program: a Llama-style LM and a
 * DeepSeek-style LM (multi-head latent attention, mixture of experts) each learn to continue
 * 0 1 2 ... 7 0 1 ... (next = token + 1 mod 8) and then generate it greedily through
 * nb_generate with their caches (the DeepSeek one keeps latents). Build: cc blocks_lm.c
 * $(pkg-config --cflags --libs nabla) */
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>

/* The model's logits [1, 16, 8] for in; *aux receives a loss to add (or stays NULL). */
typedef nb_tensor *(*forward_fn)(void *lm, const nb_tensor *in, nb_tensor **aux);

static nb_tensor *llama_forward(void *lm, const nb_tensor *in, nb_tensor **aux) {
    (void)aux;
    return blk_llama_lm_forward(lm, in, &(blk_attn_opts){.causal = true});
}

static nb_tensor *deepseek_forward(void *lm, const nb_tensor *in, nb_tensor **aux) {
    return blk_deepseek_lm_forward(lm, in, &(blk_attn_opts){.causal = true}, aux);
}

/* Trains root's model for 150 steps and checks what it generates; false with a message. */
static bool train_and_generate(const char *what, nb_module *root, void *lm, forward_fn forward,
                               nb_causal_lm causal) {
    int n_params = 0;
    nb_tensor **params = nb_module_param_tensors(root, &n_params);
    nb_optimizer *opt = lm ? nb_adamw_new(n_params, params, nb_adamw_defaults(1e-2)) : NULL;
    free(params);
    if (!opt) return fprintf(stderr, "blocks_lm: %s: %s\n", what, nb_last_error()), false;
    int64_t seq[17];
    for (int i = 0; i < 17; i++) seq[i] = i % 8;
    double loss = 0;
    for (int step = 0; step < 150; step++) {
        nb_scope_begin();
        nb_tensor *in = nb_from_array(NB_I64, NB_SHAPE(1, 16), seq), *aux = NULL;
        nb_tensor *target = nb_from_array(NB_I64, NB_SHAPE(16), seq + 1);
        nb_tensor *logits = forward(lm, in, &aux);
        nb_tensor *l =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(16, 8)), target, -1, NB_REDUCE_MEAN);
        if (l && aux) l = nb_add(l, aux); /* the mixture of experts' load-balancing loss */
        nb_optimizer_zero_grad(opt);
        if (!l || !nb_backward(l, NULL) || !nb_optimizer_step(opt))
            return fprintf(stderr, "blocks_lm: %s: %s\n", what, nb_last_error()), false;
        loss = nb_item(l);
        nb_scope_end();
    }
    nb_optimizer_free(opt);
    int64_t out[12];
    const nb_generate_opts opts = nb_generate_defaults(12);
    if (nb_generate(&causal, (const int64_t[]){3, 4}, 2, &opts, out, NULL) != 12)
        return fprintf(stderr, "blocks_lm: %s: %s\n", what, nb_last_error()), false;
    for (int i = 0; i < 12; i++)
        if (out[i] != (5 + i) % 8)
            return fprintf(stderr, "blocks_lm: %s: token %d is %lld (loss %.3g)\n", what, i,
                           (long long)out[i], loss),
                   false;
    printf("%s: loss %.4f, generated 5 6 7 0 ... as trained\n", what, loss);
    return true;
}

int main(void) {
    nb_module *llama_root = nb_model_new(NB_F32, 7), *deepseek_root = nb_model_new(NB_F32, 7);
    const blk_llama_config cfg = {
        .dim = 16, .n_heads = 2, .n_kv_heads = 1, .hidden = 32, .norm_eps = 1e-5, .rope_base = 1e4};
    blk_llama_lm *llama = blk_llama_lm_new(llama_root, "lm", 8, 1, &cfg);
    const blk_deepseek_config ds_cfg = {
        .attn = {.dim = 16,
                 .n_heads = 2,
                 .kv_rank = 8,
                 .nope_dim = 4,
                 .rope_dim = 4,
                 .v_dim = 8,
                 .norm_eps = 1e-5,
                 .rope_base = 1e4},
        .moe =
            {.dim = 16, .hidden = 16, .n_experts = 4, .top_k = 2, .n_shared = 1, .aux_alpha = 0.01},
        .norm_eps = 1e-5};
    blk_deepseek_lm *deepseek = blk_deepseek_lm_new(deepseek_root, "lm", 8, 1, &ds_cfg);
    bool ok = train_and_generate("llama", llama_root, llama, llama_forward,
                                 blk_llama_lm_causal(llama, 32)) &&
              train_and_generate("deepseek", deepseek_root, deepseek, deepseek_forward,
                                 blk_deepseek_lm_causal(deepseek, 32));
    nb_module_free(llama_root);
    nb_module_free(deepseek_root);
    nb_shutdown();
    if (ok) printf("blocks_lm: both models train and generate: ok\n");
    return ok ? 0 : 1;
}
