/* TransformerLM configurations: output sizes other than the vocabulary, tied weights, and
 * checkpoints that carry their configuration. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char *temp_path(const char *tag) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 256, "/tmp/nabla_lm_config_%d_%s.safetensors", (int)getpid(), tag);
    return p;
}

static void test_out_features_and_tying(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    nb_lm_config cfg = {
        .vocab = 7, .max_len = 6, .dim = 8, .num_heads = 2, .layers = 1, .out_features = 12};
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "counter", &cfg, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(2, 3), (int64_t[]){0, 1, 6, 5, 4, 3});
    nb_tensor *logits = nb_transformer_lm_forward(lm, tokens, true, NULL, NULL);
    NBT_ASSERT_SHAPE(logits, 2, 3, 12); /* more classes than tokens */
    CU_ASSERT_EQUAL(nb_transformer_lm_config(lm).out_features, 12);
    NBT_ASSERT_SHAPE(nb_module_param(model, "counter.head.weight"), 12, 8);

    /* Tied: the head multiplies by tok_emb.weight, which is one parameter, and only head.bias
     * is new; logits are norm_f(x) E^T + b by hand. */
    nb_lm_config tied = {
        .vocab = 7, .max_len = 6, .dim = 8, .num_heads = 2, .layers = 1, .tie_weights = true};
    nb_transformer_lm *t = nb_transformer_lm_new_config(model, "tied", &tied, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_PTR_NULL(t->head);
    CU_ASSERT_PTR_EQUAL(t->head_weight, t->tok_emb->weight);
    CU_ASSERT_PTR_NULL(nb_module_param(model, "tied.head.weight"));
    NBT_ASSERT_SHAPE(nb_module_param(model, "tied.head.bias"), 7);
    /* one parameter fewer than the untied model of the same sizes (7 x 8 weight shared) */
    nb_module *m2 = nb_model_new(NB_F64, 3);
    nb_transformer_lm *untied = nb_transformer_lm_new(m2, "", 7, 6, 8, 2, 1, 0.0);
    CU_ASSERT_EQUAL(nb_module_numel(&t->base), nb_module_numel(&untied->base) - 7 * 8);
    /* the gradient of the shared weight collects both uses: compare with finite differences */
    nb_tensor *y = nb_transformer_lm_forward(t, tokens, true, NULL, NULL);
    NBT_ASSERT_SHAPE(y, 2, 3, 7);
    nb_tensor *x = nb_embedding(t->tok_emb->weight, tokens);
    x = nb_add(x, nb_embedding(t->pos_emb->weight, nb_arange(NB_I64, 0, 3, 1)));
    x = nb_transformer_block_forward(t->blocks[0], x, &(nb_mha_opts){.causal = true});
    nb_tensor *want = nb_add(
        nb_matmul(nb_layernorm_forward(t->norm_f, x), nb_transpose(t->tok_emb->weight, 0, 1)),
        t->head_bias);
    NBT_ASSERT_CLOSE(y, want, 1e-12, 1e-12);

    cfg.tie_weights = true; /* 12 outputs cannot share a 7-row embedding */
    CU_ASSERT_PTR_NULL(nb_transformer_lm_new_config(model, "bad", &cfg, 0.0));
    NBT_ASSERT_ERROR("tied weights need out_features == vocab");
    CU_ASSERT_PTR_NULL(nb_module_child(model, 2)); /* nothing left behind */
    nb_module_free(m2);
    nb_module_free(model);
}

/* d loss / d tok_emb.weight of a tied model: the embedding lookup and the head both use it. */
static nb_transformer_lm *grad_lm;
static nb_tensor *grad_tokens;
static nb_tensor *tied_loss(nb_tensor *const *in, int n, void *ctx) {
    (void)in, (void)n, (void)ctx;
    return nb_sum(nb_transformer_lm_forward(grad_lm, grad_tokens, true, NULL, NULL));
}

static void test_tied_gradcheck(void) {
    nb_module *model = nb_model_new(NB_F64, 4);
    nb_lm_config tied = {
        .vocab = 5, .max_len = 4, .dim = 4, .num_heads = 2, .layers = 1, .tie_weights = true};
    grad_lm = nb_transformer_lm_new_config(model, "", &tied, 0.0);
    grad_tokens = nb_from_array(NB_I64, NB_SHAPE(1, 3), (int64_t[]){2, 0, 2});
    nb_gradcheck_result res;
    nb_tensor *w = grad_lm->tok_emb->weight;
    CU_ASSERT_TRUE(nb_gradcheck(tied_loss, 1, &w, NULL, NULL, &res));
    if (!res.ok) printf("%s\n", res.message);
    nb_module_free(model);
}

static void test_checkpoint_carries_config(void) {
    nb_module *model = nb_model_new(NB_F32, 5);
    nb_lm_config cfg = {
        .vocab = 9, .max_len = 10, .dim = 8, .num_heads = 2, .layers = 2, .tie_weights = true};
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "", &cfg, 0.0);
    const char *path = temp_path("cfg");
    nb_metadata_entry extra = {"char_lm.vocabulary", "abc xyz!"};
    CU_ASSERT_TRUE_FATAL(nb_transformer_lm_save(lm, NULL, path, 1, &extra));
    nb_lm_config read;
    CU_ASSERT_TRUE_FATAL(nb_lm_config_read(path, &read));
    CU_ASSERT_EQUAL(read.vocab, 9);
    CU_ASSERT_EQUAL(read.max_len, 10);
    CU_ASSERT_EQUAL(read.dim, 8);
    CU_ASSERT_EQUAL(read.num_heads, 2);
    CU_ASSERT_EQUAL(read.layers, 2);
    CU_ASSERT_EQUAL(read.out_features, 9);
    CU_ASSERT_TRUE(read.tie_weights);
    int n;
    nb_metadata_entry *meta = nb_safetensors_read_metadata(path, &n);
    bool seen = false;
    for (int i = 0; meta && i < n; i++)
        seen |= strcmp(meta[i].key, "char_lm.vocabulary") == 0 &&
                strcmp(meta[i].value, "abc xyz!") == 0;
    CU_ASSERT_TRUE(seen);

    /* Rebuilt from the file alone: same logits. */
    nb_module *again = nb_model_new(NB_F32, 99);
    nb_transformer_lm *lm2 = nb_transformer_lm_new_config(again, "", &read, 0.0);
    CU_ASSERT_TRUE(nb_transformer_lm_load(lm2, NULL, path));
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, 4), (int64_t[]){1, 8, 0, 3});
    NBT_ASSERT_CLOSE(nb_transformer_lm_forward(lm2, tokens, true, NULL, NULL),
                     nb_transformer_lm_forward(lm, tokens, true, NULL, NULL), 0, 0);

    /* Another configuration: refused, naming what differs, and nothing changes. */
    nb_module *other = nb_model_new(NB_F32, 7);
    nb_lm_config cfg3 = cfg;
    cfg3.dim = 12;
    cfg3.max_len = 11;
    nb_transformer_lm *lm3 = nb_transformer_lm_new_config(other, "", &cfg3, 0.0);
    nb_tensor *before = nb_clone(lm3->tok_emb->weight);
    CU_ASSERT_FALSE(nb_transformer_lm_load(lm3, NULL, path));
    NBT_ASSERT_ERROR("d_model: checkpoint 8, model 12");
    NBT_ASSERT_ERROR("context: checkpoint 10, model 11");
    NBT_ASSERT_CLOSE(lm3->tok_emb->weight, before, 0, 0);

    /* A plain checkpoint has no configuration: reading one says so; loading still works. */
    const char *plain = temp_path("plain");
    CU_ASSERT_TRUE(nb_module_save(model, plain));
    CU_ASSERT_FALSE(nb_lm_config_read(plain, &read));
    NBT_ASSERT_ERROR("carries no model configuration");
    CU_ASSERT_TRUE(nb_transformer_lm_load(lm2, NULL, plain));
    CU_ASSERT_FALSE(nb_lm_config_read(temp_path("missing"), &read));
    unlink(path);
    unlink(plain);
    nb_module_free(model);
    nb_module_free(again);
    nb_module_free(other);
}

int main(void) {
    const nbtest_case cases[] = {
        {"out_features and tied weights", test_out_features_and_tying},
        {"tied weights gradcheck", test_tied_gradcheck},
        {"checkpoints carry the configuration", test_checkpoint_carries_config},
    };
    return nbtest_run("lm_config", cases, (int)(sizeof cases / sizeof cases[0]));
}
