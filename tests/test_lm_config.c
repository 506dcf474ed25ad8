/* TransformerLM configurations: output sizes other than the vocabulary, tied weights, and
 * checkpoints that carry their configuration. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
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
    CU_ASSERT_EQUAL(nb_module_param_numel(&t->base), nb_module_param_numel(&untied->base) - 7 * 8);
    /* the gradient of the shared weight collects both uses: compare with finite differences */
    nb_tensor *y = nb_transformer_lm_forward(t, tokens, true, NULL, NULL);
    NBT_ASSERT_SHAPE(y, 2, 3, 7);
    nb_tensor *x = nb_f_embedding(t->tok_emb->weight, tokens);
    x = nb_add(x, nb_f_embedding(t->pos_emb->weight, nb_arange(NB_I64, 0, 3, 1)));
    x = nb_transformer_block_forward(t->blocks[0], x, &(nb_mha_opts){.causal = true});
    nb_tensor *want = nb_add(
        nb_matmul(nb_layer_norm_forward(t->norm_f, x), nb_transpose(t->tok_emb->weight, 0, 1)),
        t->head_bias);
    NBT_ASSERT_CLOSE(y, want, 1e-12, 1e-12);

    cfg.tie_weights = true; /* 12 outputs cannot share a 7-row embedding */
    CU_ASSERT_PTR_NULL(nb_transformer_lm_new_config(model, "bad", &cfg, 0.0));
    NBT_ASSERT_ERROR("tied weights need out_features == vocab");
    CU_ASSERT_PTR_NULL(nb_module_child(model, 2)); /* nothing left behind */
    nb_module_free(m2);
    nb_module_free(model);
}

/* A head without bias (GPT-2's): no head.bias, tied or not, logits norm_f(x) W^T by hand; a
 * checkpoint says so, and a model with the bias refuses it naming the field. */
static void test_head_without_bias(void) {
    nb_module *model = nb_model_new(NB_F64, 4);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(1, 3), (int64_t[]){4, 0, 6});
    nb_transformer_lm *untied = NULL;
    for (int tie = 0; tie < 2; tie++) {
        const nb_lm_config cfg = {.vocab = 7,
                                  .max_len = 6,
                                  .dim = 8,
                                  .num_heads = 2,
                                  .layers = 1,
                                  .tie_weights = tie,
                                  .no_head_bias = true};
        nb_transformer_lm *m =
            nb_transformer_lm_new_config(model, tie ? "tied" : "untied", &cfg, 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        if (!tie) untied = m;
        CU_ASSERT_PTR_NULL(m->head_bias);
        CU_ASSERT_PTR_NULL(nb_module_param(model, tie ? "tied.head.bias" : "untied.head.bias"));
        CU_ASSERT_TRUE(nb_transformer_lm_config(m).no_head_bias);
        nb_tensor *x = nb_add(nb_f_embedding(m->tok_emb->weight, tokens),
                              nb_f_embedding(m->pos_emb->weight, nb_arange(NB_I64, 0, 3, 1)));
        x = nb_transformer_block_forward(m->blocks[0], x, &(nb_mha_opts){.causal = true});
        nb_tensor *want =
            nb_matmul(nb_layer_norm_forward(m->norm_f, x), nb_transpose(m->head_weight, 0, 1));
        NBT_ASSERT_CLOSE(nb_transformer_lm_forward(m, tokens, true, NULL, NULL), want, 1e-12,
                         1e-12);
    }
    const char *path = temp_path("no_head_bias");
    CU_ASSERT_TRUE_FATAL(nb_transformer_lm_save(untied, NULL, path, 0, NULL));
    nb_module *other = nb_model_new(NB_F64, 5);
    nb_transformer_lm *with_bias =
        nb_transformer_lm_new(other, "untied", 7, 6, 8, 2, 1, 0.0); /* head.bias, as before */
    CU_ASSERT_PTR_NOT_NULL(with_bias->head_bias);
    CU_ASSERT_FALSE(nb_transformer_lm_load(with_bias, NULL, path));
    NBT_ASSERT_ERROR("no_head_bias: checkpoint 1, model 0");
    unlink(path);
    nb_module_free(other);
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

/* nb_lm_config_read(path) fails with an error holding every string of want (NULL-ended). */
static void expect_config_error(const char *path, const char *const *want) {
    nb_lm_config cfg = {0};
    nb_clear_error();
    CU_ASSERT_FALSE(nb_lm_config_read(path, &cfg));
    for (int k = 0; want[k]; k++) {
        bool found = strstr(nb_last_error(), want[k]) != NULL;
        CU_ASSERT_TRUE(found);
        if (!found) fprintf(stderr, "\n  expected \"%s\" in \"%s\"\n", want[k], nb_last_error());
    }
}
#define EXPECT_CONFIG_ERROR(path, ...)                                                             \
    expect_config_error(path, (const char *const[]){__VA_ARGS__, NULL})

/* Rewrites the checkpoint src as dst with metadata key set to value (added if absent, removed
 * if value is NULL), the tensors unchanged. */
static void rewrite_metadata(const char *src, const char *dst, const char *key, const char *value) {
    nb_scope_begin();
    int nt, nm;
    nb_named_tensor *t = nb_safetensors_read(src, &nt);
    nb_metadata_entry *m = nb_safetensors_read_metadata(src, &nm);
    CU_ASSERT_FATAL(t && m);
    nb_metadata_entry *out = malloc(sizeof *out * (size_t)(nm + 1));
    int n = 0;
    bool set = false;
    for (int i = 0; i < nm; i++) {
        if (strcmp(m[i].key, key) != 0)
            out[n++] = m[i];
        else if (value)
            out[n++] = (nb_metadata_entry){key, value}, set = true;
    }
    if (!set && value) out[n++] = (nb_metadata_entry){key, value};
    CU_ASSERT_TRUE(nb_safetensors_save_with_metadata(dst, nt, t, n, out));
    free(out);
    nb_scope_end();
}

/* Issue 29, item 6: every number of the configuration is range-checked, never truncated
 * (layers 2^32 + 1 used to read as 1) and never taken with a sign, spaces or trailing text. */
static void test_config_numbers_range_checked(void) {
    nb_module *model = nb_model_new(NB_F32, 5);
    nb_lm_config cfg = {.vocab = 9, .max_len = 10, .dim = 8, .num_heads = 2, .layers = 2};
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "", &cfg, 0.0);
    const char *path = temp_path("ranges"), *bad = temp_path("ranges_bad");
    CU_ASSERT_TRUE_FATAL(nb_transformer_lm_save(lm, NULL, path, 0, NULL));
    static const struct {
        const char *key, *value, *why;
    } cases[] = {
        {"nabla.layers", "4294967297",
         "nabla.layers is '4294967297', not a whole number from 1 to 16"},
        {"nabla.layers", "4294967298", "not a whole number from 1 to 16"},
        {"nabla.layers", "17", "nabla.layers is '17', not a whole number from 1 to 16"},
        {"nabla.layers", "0", "nabla.layers is '0'"},
        {"nabla.layers", "-2", "nabla.layers is '-2'"},
        {"nabla.layers", " 2", "nabla.layers is ' 2'"},
        {"nabla.layers", "+2", "nabla.layers is '+2'"},
        {"nabla.layers", "2 ", "nabla.layers is '2 '"},
        {"nabla.layers", "02", "nabla.layers is '02'"},
        {"nabla.layers", "", "nabla.layers is ''"},
        {"nabla.layers", NULL, "metadata nabla.layers is missing"},
        {"nabla.vocab", "9223372036854775808",
         "nabla.vocab is '9223372036854775808', not a whole number >= 1"},
        {"nabla.vocab", "99999999999999999999999", "nabla.vocab is '99999999999999999999999'"},
        {"nabla.d_model", "0", "nabla.d_model is '0', not a whole number >= 1"},
        {"nabla.heads", "3", "d_model 8 is not divisible by heads 3"},
        {"nabla.context", "1e3", "nabla.context is '1e3'"},
        {"nabla.out_features", "0x9", "nabla.out_features is '0x9'"},
        {"nabla.tie_weights", "2", "nabla.tie_weights is '2', not a whole number from 0 to 1"},
        {"nabla.tie_weights", "true", "nabla.tie_weights is 'true'"},
        {"nabla.out_features", "12",
         "tensor 'head.weight' has shape [9, 8], but its configuration needs [12, 8]"},
        {"nabla.block", "post_ln", "not a TransformerLM with 'pre_ln' blocks"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rewrite_metadata(path, bad, cases[i].key, cases[i].value);
        EXPECT_CONFIG_ERROR(bad, bad, cases[i].why);
    }
    /* tied weights with 12 outputs: refused before any tensor is looked at */
    rewrite_metadata(path, bad, "nabla.tie_weights", "1");
    rewrite_metadata(bad, bad, "nabla.out_features", "12");
    EXPECT_CONFIG_ERROR(bad, "tied weights need out_features == vocab, got 12 and 9");
    /* loading into a model checks the same way */
    CU_ASSERT_FALSE(nb_transformer_lm_load(lm, NULL, bad));
    NBT_ASSERT_ERROR("tied weights need out_features == vocab");
    unlink(path);
    unlink(bad);
    nb_module_free(model);
}

/* Issue 29, item 2: the configuration must agree with the tensors in the same header, so that
 * building a model from it allocates no more than the file holds. The crafted file of the
 * issue said context 1048576 and d_model 4096 over tensors of a tiny model. */
static void test_config_agrees_with_tensors(void) {
    nb_module *model = nb_model_new(NB_F32, 5);
    nb_lm_config cfg = {.vocab = 9, .max_len = 10, .dim = 8, .num_heads = 2, .layers = 2};
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "", &cfg, 0.0);
    const char *path = temp_path("agree"), *bad = temp_path("agree_bad");
    CU_ASSERT_TRUE_FATAL(nb_transformer_lm_save(lm, NULL, path, 0, NULL));
    rewrite_metadata(path, bad, "nabla.context", "1048576");
    EXPECT_CONFIG_ERROR(bad, bad,
                        "tensor 'pos_emb.weight' has shape [10, 8], but its configuration "
                        "needs [1048576, 8]");
    rewrite_metadata(path, bad, "nabla.d_model", "4096");
    EXPECT_CONFIG_ERROR(bad, "tensor 'tok_emb.weight' has shape [9, 8], but its configuration "
                             "needs [9, 4096]");
    rewrite_metadata(path, bad, "nabla.vocab", "1000000");
    EXPECT_CONFIG_ERROR(bad, "needs [1000000, 8]");
    rewrite_metadata(path, bad, "nabla.layers", "16"); /* blocks 2..15 are not in the file */
    EXPECT_CONFIG_ERROR(bad, "tensor 'blocks.2.norm1.weight' is missing");
    rewrite_metadata(path, bad, "nabla.layers", "1"); /* block 1 is left over */
    EXPECT_CONFIG_ERROR(bad, "tensor 'blocks.1.norm1.weight' is not part of the TransformerLM");
    rewrite_metadata(path, bad, "nabla.heads", "8"); /* heads have no tensor: any divisor fits */
    nb_lm_config read;
    CU_ASSERT_TRUE(nb_lm_config_read(bad, &read));
    CU_ASSERT_EQUAL(read.num_heads, 8);

    /* A file of another layout entirely: tensors named like the model's but of other shapes,
     * or no tok_emb at all. */
    nb_named_tensor tiny[] = {{"tok_emb.weight", nb_zeros(NB_F32, NB_SHAPE(1, 4096))},
                              {"pos_emb.weight", nb_zeros(NB_F32, NB_SHAPE(0, 4096))},
                              {"blocks.0.norm1.weight", nb_zeros(NB_F32, NB_SHAPE(0))}};
    const nb_metadata_entry meta[] = {
        {"nabla.model", "TransformerLM"}, {"nabla.block", "pre_ln"},   {"nabla.vocab", "1"},
        {"nabla.d_model", "4096"},        {"nabla.heads", "1"},        {"nabla.layers", "16"},
        {"nabla.context", "1048576"},     {"nabla.out_features", "1"}, {"nabla.tie_weights", "0"}};
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save_with_metadata(bad, 3, tiny, 9, meta));
    EXPECT_CONFIG_ERROR(bad, "tensor 'pos_emb.weight' has shape [0, 4096], but its configuration "
                             "needs [1048576, 4096]");
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save_with_metadata(bad, 1, tiny + 2, 9, meta));
    EXPECT_CONFIG_ERROR(bad, "holds no tensor tok_emb.weight");

    /* One tensor in another dtype than the rest: refused, naming both. */
    nb_scope_begin();
    int nt, nm;
    nb_named_tensor *t = nb_safetensors_read(path, &nt);
    nb_metadata_entry *m = nb_safetensors_read_metadata(path, &nm);
    CU_ASSERT_FATAL(t && m);
    for (int i = 0; i < nt; i++)
        if (strcmp(t[i].name, "norm_f.bias") == 0) t[i].tensor = nb_to_dtype(t[i].tensor, NB_F64);
    CU_ASSERT_TRUE(nb_safetensors_save_with_metadata(bad, nt, t, nm, m));
    EXPECT_CONFIG_ERROR(bad, "tensor 'norm_f.bias' is F64, expected F32");
    nb_scope_end();
    unlink(path);
    unlink(bad);
    nb_module_free(model);
}

/* The tensors nb_lm_config_read expects are those the models it describes really have: files
 * saved from models of several configurations (tied, with another output size, 1 and 16
 * layers, nested under a name, f64, with optimizer state) read back, and the model built from
 * the configuration read holds no more bytes (f32) than the file. */
static void test_config_read_of_saved_models(void) {
    static const struct {
        nb_lm_config cfg;
        const char *name;
        nb_dtype dtype;
        bool with_optimizer;
    } cases[] = {
        {{.vocab = 5, .max_len = 3, .dim = 4, .num_heads = 2, .layers = 1}, "", NB_F32, false},
        {{.vocab = 5, .max_len = 3, .dim = 4, .num_heads = 4, .layers = 16, .tie_weights = true},
         "lm",
         NB_F64,
         false},
        {{.vocab = 7, .max_len = 6, .dim = 6, .num_heads = 3, .layers = 2, .out_features = 11},
         "",
         NB_F32,
         true},
        {{.vocab = 5, .max_len = 3, .dim = 4, .num_heads = 2, .layers = 1, .no_head_bias = true},
         "",
         NB_F32,
         true},
        {{.vocab = 5,
          .max_len = 3,
          .dim = 4,
          .num_heads = 2,
          .layers = 1,
          .tie_weights = true,
          .no_head_bias = true},
         "lm",
         NB_F64,
         false},
    };
    const char *path = temp_path("saved");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nb_module *model = nb_model_new(cases[i].dtype, 3);
        nb_transformer_lm *lm =
            nb_transformer_lm_new_config(model, cases[i].name, &cases[i].cfg, 0.0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
        int np;
        nb_tensor **params = nb_module_param_tensors(model, &np);
        nb_optimizer *opt =
            cases[i].with_optimizer ? nb_adamw_new(np, params, nb_adamw_defaults(1e-3)) : NULL;
        CU_ASSERT_TRUE_FATAL(nb_transformer_lm_save(lm, opt, path, 0, NULL));
        nb_lm_config read;
        nb_clear_error();
        CU_ASSERT_TRUE(nb_lm_config_read(path, &read));
        if (nb_last_error()[0]) fprintf(stderr, "\n  case %zu: %s\n", i, nb_last_error());
        nb_lm_config want = cases[i].cfg;
        if (!want.out_features) want.out_features = want.vocab;
        CU_ASSERT_TRUE(read.vocab == want.vocab && read.max_len == want.max_len &&
                       read.dim == want.dim && read.num_heads == want.num_heads &&
                       read.layers == want.layers && read.out_features == want.out_features &&
                       read.tie_weights == want.tie_weights &&
                       read.no_head_bias == want.no_head_bias);
        struct stat st;
        CU_ASSERT_EQUAL(stat(path, &st), 0);
        CU_ASSERT_TRUE(nb_module_param_numel(&lm->base) * 4 <= st.st_size);
        CU_ASSERT_TRUE(nb_transformer_lm_load(lm, opt, path));
        nb_optimizer_free(opt);
        free(params);
        nb_module_free(model);
    }
    unlink(path);
}

int main(void) {
    const nbtest_case cases[] = {
        {"out_features and tied weights", test_out_features_and_tying},
        {"tied weights gradcheck", test_tied_gradcheck},
        {"a head without bias", test_head_without_bias},
        {"checkpoints carry the configuration", test_checkpoint_carries_config},
        {"configuration numbers are range-checked", test_config_numbers_range_checked},
        {"configuration agrees with the tensors", test_config_agrees_with_tensors},
        {"configuration read of saved models", test_config_read_of_saved_models},
    };
    return nbtest_run("lm_config", cases, (int)(sizeof cases / sizeof cases[0]));
}
