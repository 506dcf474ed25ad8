/* Module tree, initialisation and whole-module gradchecks in float64. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void test_names_order_and_count(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_module *blocks = nb_module_container(model, "blocks");
    CU_ASSERT_PTR_NOT_NULL(nb_transformer_block_new(blocks, "0", 8, 2, 0.0));
    CU_ASSERT_PTR_NOT_NULL(nb_transformer_block_new(blocks, "1", 8, 2, 0.0));
    nb_param params[64];
    int n = nb_module_named_params(model, params, 64);
    /* per block: norm1 (2) + attn (3 weights + out_proj 2) + norm2 (2) + ff (4) = 13 */
    CU_ASSERT_EQUAL(n, 26);
    CU_ASSERT_EQUAL(nb_module_param_count(model), 26);
    CU_ASSERT_STRING_EQUAL(params[0].name, "blocks.0.norm1.weight");
    CU_ASSERT_STRING_EQUAL(params[2].name, "blocks.0.attn.W_query.weight");
    CU_ASSERT_STRING_EQUAL(params[5].name, "blocks.0.attn.out_proj.weight");
    CU_ASSERT_STRING_EQUAL(params[12].name, "blocks.0.ff.fc2.bias");
    CU_ASSERT_STRING_EQUAL(params[13].name, "blocks.1.norm1.weight");
    /* D=8: 2*8 + 3*64 + 64+8 + 2*8 + (8*32+32) + (32*8+8) = 848 per block */
    CU_ASSERT_EQUAL(nb_module_param_numel(model), 2 * 848);
    CU_ASSERT_PTR_EQUAL(nb_module_param(model, "blocks.1.attn.W_key.weight"),
                        ((nb_transformer_block *)blocks->children[1])->attn->W_key->weight);
    CU_ASSERT_PTR_NULL(nb_module_param(model, "blocks.2.attn.W_key.weight"));
    NBT_ASSERT_ERROR("blocks.2.attn.W_key.weight");
    CU_ASSERT_EQUAL(nb_module_named_params(model, params, 10), -1);
    NBT_ASSERT_ERROR("room for only 10");
    nb_module_free(model);
}

static void test_linear_init_bounds(void) {
    nb_module *model = nb_model_new(NB_F64, 7);
    nb_linear *lin = nb_linear_new(model, "lin", 16, 4, true);
    double w[64], b[4];
    nb_to_doubles(lin->weight, w);
    nb_to_doubles(lin->bias, b);
    double lo = 1, hi = -1;
    for (int i = 0; i < 64; i++) lo = fmin(lo, w[i]), hi = fmax(hi, w[i]);
    CU_ASSERT_TRUE(lo >= -0.25 && hi <= 0.25); /* 1/sqrt(16) */
    CU_ASSERT_TRUE(hi - lo > 0.3);             /* spread over the range, not a constant */
    for (int i = 0; i < 4; i++) CU_ASSERT_TRUE(fabs(b[i]) <= 0.25);
    CU_ASSERT_TRUE(nb_linear_forward(lin, nb_zeros(NB_F64, NB_SHAPE(2, 16))) != NULL);
    CU_ASSERT_PTR_NULL(nb_linear_forward(lin, nb_zeros(NB_F64, NB_SHAPE(2, 15))));
    NBT_ASSERT_ERROR("[2, 15]");
    /* Same seed, same weights. */
    nb_module *again = nb_model_new(NB_F64, 7);
    nb_linear *lin2 = nb_linear_new(again, "lin", 16, 4, true);
    NBT_ASSERT_CLOSE(lin->weight, lin2->weight, 0, 0);
    nb_module_free(model);
    nb_module_free(again);
}

static void test_mha_rejects_bad_heads(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    CU_ASSERT_PTR_NULL(nb_mha_new(model, "attn", 6, 6, 4, false, 0.0));
    NBT_ASSERT_ERROR("d_out 6 is not divisible by num_heads 4");
    nb_module_free(model);
}

/* ---- whole-module gradchecks: inputs[0] is x, the rest are the module's parameters ---- */
typedef struct {
    nb_module *module;
    int kind;
    const nb_tensor *mask;
    bool causal;
    const nb_tensor *aux; /* embedding indices */
} module_case;

static nb_tensor *run_module(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    module_case *c = vctx;
    nb_mha_opts opts = {.causal = c->causal, .key_padding_mask = c->mask};
    switch (c->kind) {
    case 0: return nb_linear_forward((nb_linear *)c->module, in[0]);
    case 1:
        return nb_layer_norm_forward((nb_layer_norm *)c->module, in[0]);
    case 2: return nb_mha_forward((nb_mha *)c->module, in[0], &opts);
    case 3: return nb_transformer_block_forward((nb_transformer_block *)c->module, in[0], &opts);
    case 4: return nb_feedforward_forward((nb_feedforward *)c->module, in[0]);
    /* Embedding: the weight is the only differentiable input; in[0] is a dummy that the
     * output adds in so the check also sees a gradient flowing to it. */
    case 5:
        return nb_add(nb_embedding_forward((nb_embedding *)c->module, c->aux), in[0]);
    /* Cross-attention: in[0] holds 3 query rows then 5 key/value rows, so both get checked. */
    case 6:
        return nb_mha_forward_cross((nb_mha *)c->module, nb_narrow(in[0], 1, 0, 3),
                                    nb_narrow(in[0], 1, 3, 5), &opts);
    default: return NULL;
    }
}

static void gradcheck_module_aux(nb_module *m, int kind, nb_tensor *x, const nb_tensor *mask,
                                 bool causal, const nb_tensor *aux) {
    nb_tensor *inputs[32];
    nb_param params[31];
    int np = nb_module_named_params(m, params, 31);
    CU_ASSERT_TRUE_FATAL(np > 0);
    inputs[0] = nb_requires_grad_(x, true);
    for (int i = 0; i < np; i++) inputs[i + 1] = params[i].tensor;
    module_case c = {m, kind, mask, causal, aux};
    nb_gradcheck_result res;
    bool ok = nb_gradcheck(run_module, np + 1, inputs, &c, NULL, &res);
    printf("  %s '%s': %s\n", m->type, m->path, res.message);
    CU_ASSERT_TRUE(ok);
}

static void gradcheck_module(nb_module *m, int kind, nb_tensor *x, const nb_tensor *mask,
                             bool causal) {
    gradcheck_module_aux(m, kind, x, mask, causal, NULL);
}

static nb_tensor *randn64(nb_rng *rng, int ndim, const int64_t *shape) {
    return nb_randn(rng, NB_F64, ndim, shape);
}

static void test_gradcheck_linear_layernorm_ff(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    nb_rng rng;
    nb_rng_seed(&rng, 11);
    gradcheck_module(&nb_linear_new(model, "lin", 5, 3, true)->base, 0,
                     randn64(&rng, NB_SHAPE(2, 4, 5)), NULL, false);
    gradcheck_module(&nb_linear_new(model, "nobias", 5, 3, false)->base, 0,
                     nb_transpose(randn64(&rng, NB_SHAPE(5, 2)), 0, 1), NULL, false);
    nb_layer_norm *ln = nb_layer_norm_new(model, "ln", 6);
    /* Non-trivial affine parameters so their gradients matter. */
    nb_copy_(ln->weight, randn64(&rng, NB_SHAPE(6)));
    nb_copy_(ln->bias, randn64(&rng, NB_SHAPE(6)));
    gradcheck_module(&ln->base, 1, randn64(&rng, NB_SHAPE(3, 6)), NULL, false);
    gradcheck_module(&nb_feedforward_new(model, "ff", 4, 8)->base, 4,
                     randn64(&rng, NB_SHAPE(2, 3, 4)), NULL, false);
    nb_module_free(model);
}

static void test_gradcheck_mha(void) {
    nb_module *model = nb_model_new(NB_F64, 5);
    nb_rng rng;
    nb_rng_seed(&rng, 12);
    nb_mha *causal = nb_mha_new(model, "causal", 6, 6, 2, false, 0.0);
    gradcheck_module(&causal->base, 2, randn64(&rng, NB_SHAPE(2, 4, 6)), NULL, true);
    /* Padding: the second sequence is entirely padding, so its rows are fully blocked. */
    nb_mha *padded = nb_mha_new(model, "padded", 6, 4, 2, true, 0.0);
    const uint8_t pad[] = {0, 0, 1, 1, 1, 1, 1, 1};
    nb_tensor *mask = nb_from_array(NB_BOOL, NB_SHAPE(2, 4), pad);
    nb_tensor *x = randn64(&rng, NB_SHAPE(2, 4, 6));
    gradcheck_module(&padded->base, 2, x, mask, false);
    nb_tensor *y = nb_mha_forward(padded, x, &(nb_mha_opts){.key_padding_mask = mask});
    double vals[32];
    nb_to_doubles(y, vals);
    for (int i = 0; i < 32; i++) CU_ASSERT_FALSE(isnan(vals[i]));
    nb_module_free(model);
}

static void test_gradcheck_embedding_and_cross_attention(void) {
    nb_module *model = nb_model_new(NB_F64, 8);
    nb_rng rng;
    nb_rng_seed(&rng, 14);
    nb_embedding *emb = nb_embedding_new(model, "emb", 5, 3);
    /* index 2 appears twice: its row's gradient must sum both uses */
    nb_tensor *idx = nb_from_array(NB_I64, NB_SHAPE(2, 2), (int64_t[]){2, 0, 4, 2});
    gradcheck_module_aux(&emb->base, 5, randn64(&rng, NB_SHAPE(2, 2, 3)), NULL, false, idx);
    /* cross-attention: 3 queries over 5 keys, with a padding mask over the keys */
    nb_mha *cross = nb_mha_new(model, "cross", 4, 4, 2, true, 0.0);
    const uint8_t pad[] = {0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
    gradcheck_module_aux(&cross->base, 6, randn64(&rng, NB_SHAPE(2, 8, 4)),
                         nb_from_array(NB_BOOL, NB_SHAPE(2, 5), pad), false, NULL);
    nb_module_free(model);
}

static void test_gradcheck_block(void) {
    nb_module *model = nb_model_new(NB_F64, 9);
    nb_rng rng;
    nb_rng_seed(&rng, 13);
    nb_transformer_block *block = nb_transformer_block_new(model, "block", 4, 2, 0.0);
    gradcheck_module(&block->base, 3, randn64(&rng, NB_SHAPE(2, 3, 4)), NULL, true);
    nb_module_free(model);
}

/* ---- resuming from a checkpoint with optimizer state ---- */
typedef struct {
    nb_module *model;
    nb_linear *lin;
    nb_optimizer *opt;
    nb_tensor *params[2];
} tiny_trainer;

static void tiny_new(tiny_trainer *t) {
    t->model = nb_model_new(NB_F32, 21);
    t->lin = nb_linear_new(t->model, "lin", 4, 3, true);
    t->params[0] = t->lin->weight, t->params[1] = t->lin->bias;
    t->opt = nb_adamw_new(2, t->params, nb_adamw_defaults(0.05));
}

static void tiny_steps(tiny_trainer *t, int from, int to) {
    for (int s = from; s < to; s++) {
        nb_scope_begin();
        nb_rng rng; /* the data of step s, whoever runs it */
        nb_rng_seed(&rng, 100 + (uint64_t)s);
        nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(5, 4));
        nb_optimizer_zero_grad(t->opt);
        nb_backward(nb_sum(nb_tanh(nb_linear_forward(t->lin, x))), NULL);
        nb_optimizer_step(t->opt);
        nb_scope_end();
    }
}

static void test_resume_with_optimizer_state_is_exact(void) {
    char path[] = "/tmp/nabla_resume_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_TRUE_FATAL(fd >= 0);
    close(fd);
    tiny_trainer straight, first, resumed;
    tiny_new(&straight);
    tiny_steps(&straight, 0, 6);
    tiny_new(&first);
    tiny_steps(&first, 0, 3);
    CU_ASSERT_TRUE(nb_module_save_with(first.model, first.opt, path));
    tiny_new(&resumed);
    tiny_steps(&resumed, 0, 1); /* different state, all of which the load must replace */
    CU_ASSERT_TRUE(nb_module_load_with(resumed.model, resumed.opt, path));
    tiny_steps(&resumed, 3, 6);
    NBT_ASSERT_CLOSE(resumed.lin->weight, straight.lin->weight, 0, 0);
    NBT_ASSERT_CLOSE(resumed.lin->bias, straight.lin->bias, 0, 0);
    /* A plain nb_module_load refuses the file: it holds tensors the model does not have. */
    tiny_trainer naive;
    tiny_new(&naive);
    CU_ASSERT_TRUE(nb_module_load(naive.model, path) == false); /* the file has more tensors */
    NBT_ASSERT_ERROR("optim.");
    remove(path);
    tiny_trainer *all[] = {&straight, &first, &resumed, &naive};
    for (int i = 0; i < 4; i++) {
        nb_optimizer_free(all[i]->opt);
        nb_module_free(all[i]->model);
    }
}

int main(void) {
    const nbtest_case cases[] = {
        {"dotted names, stable order, counts", test_names_order_and_count},
        {"Linear init within 1/sqrt(fan_in), seeded", test_linear_init_bounds},
        {"MHA rejects d_out not divisible by heads", test_mha_rejects_bad_heads},
        {"gradcheck Linear, LayerNorm, FeedForward", test_gradcheck_linear_layernorm_ff},
        {"gradcheck MHA causal and fully padded", test_gradcheck_mha},
        {"gradcheck Embedding and cross-attention", test_gradcheck_embedding_and_cross_attention},
        {"gradcheck TransformerBlock", test_gradcheck_block},
        {"resume from a checkpoint with optimizer state", test_resume_with_optimizer_state_is_exact},
    };
    return nbtest_run("nn", cases, sizeof cases / sizeof cases[0]);
}
