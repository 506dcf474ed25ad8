/* Module errors keep the first cause of a chain and name the innermost module's path: an
 * out-of-vocabulary token, a bad key_padding_mask, float64 input into a float32 model, and
 * failing constructors each report what really went wrong, not a later "NULL input". */
#include "harness.h"
#include "module_table.h"

static nb_module *model;
static nb_transformer_lm *lm;

static void build(void) {
    nb_module_free(model);
    model = nb_model_new(NB_F32, 1);
    lm = nb_transformer_lm_new(model, "lm", 10, 8, 8, 2, 2, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
}

static nb_tensor *tokens(const int64_t *ids) {
    return nb_from_array(NB_I64, NB_SHAPE(2, 3), ids);
}

static void expect(nb_tensor *out, const char *message) {
    CU_ASSERT_PTR_NULL(out);
    if (!strstr(nb_last_error(), message))
        fprintf(stderr, "\n  expected '%s'\n  got      '%s'\n", message, nb_last_error());
    NBT_ASSERT_ERROR(message);
    nb_clear_error();
}

static void test_out_of_vocabulary_token(void) {
    build();
    nb_clear_error();
    expect(nb_transformer_lm_forward(lm, tokens((int64_t[]){1, 2, 12, 3, 4, 5}), true, NULL, NULL),
           "Embedding 'lm.tok_emb': embedding: index 12 at position [0, 2] is out of range for "
           "V = 10");
}

static void test_bad_key_padding_mask(void) {
    build();
    const nb_tensor *ok = tokens((int64_t[]){1, 2, 3, 3, 4, 5});
    expect(nb_transformer_lm_forward(lm, ok, true, nb_zeros(NB_BOOL, NB_SHAPE(2, 4)), NULL),
           "MultiHeadAttention 'lm.blocks.0.attn': key_padding_mask must be bool [2, 3], got "
           "bool [2, 4]");
    expect(nb_transformer_lm_forward(lm, ok, true, nb_zeros(NB_I64, NB_SHAPE(2, 3)), NULL),
           "key_padding_mask must be bool [2, 3], got int64 [2, 3]");
}

static void test_float64_input_into_float32_modules(void) {
    build();
    nb_tensor *x64 = nb_zeros(NB_F64, NB_SHAPE(2, 3, 8));
    expect(nb_transformer_block_forward(lm->blocks[1], x64, &(nb_mha_opts){0}),
           "LayerNorm 'lm.blocks.1.norm1': layer_norm: dtype mismatch");
    expect(nb_mha_forward(lm->blocks[0]->attn, x64, NULL),
           "Linear 'lm.blocks.0.attn.W_query': linear: dtype mismatch");
    expect(nb_feedforward_forward(lm->blocks[0]->ff, x64),
           "Linear 'lm.blocks.0.ff.fc1': linear: dtype mismatch");
}

static void test_wrong_shapes_name_the_module(void) {
    build();
    expect(nb_linear_forward(lm->head, nb_zeros(NB_F32, NB_SHAPE(2, 7))),
           "Linear 'lm.head': expects inputs [..., 8], got [2, 7]");
    expect(nb_transformer_lm_forward(lm, nb_zeros(NB_I64, NB_SHAPE(2, 9)), false, NULL, NULL),
           "TransformerLM 'lm': expects int64 tokens [B, T] with T <= 8, got int64 [2, 9]");
}

static void test_a_null_input_keeps_the_earlier_error(void) {
    build();
    nb_clear_error();
    expect(nb_linear_forward(lm->head, NULL), "Linear 'lm.head': NULL input");
    nb_tensor *failed =
        nb_matmul(nb_zeros(NB_F32, NB_SHAPE(2, 3)), nb_zeros(NB_F32, NB_SHAPE(4, 5)));
    CU_ASSERT_PTR_NULL(failed);
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", nb_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(cause, "matmul"));
    expect(nb_layer_norm_forward(lm->norm_f, nb_linear_forward(lm->head, failed)), cause);
}

static void test_empty_sequence(void) {
    build();
    nb_tensor *out =
        nb_transformer_lm_forward(lm, nb_zeros(NB_I64, NB_SHAPE(2, 0)), false, NULL, NULL);
    NBT_ASSERT_SHAPE(out, 2, 0, 10);
}

static void test_constructors_report_the_first_cause(void) {
    build();
    /* The weight's size overflows; the bias (which would fit) is not even tried. */
    expect((nb_tensor *)nb_linear_new(model, "big", 1LL << 40, 1LL << 40, true),
           "Linear: 'big': parameter 'weight': uniform: shape [1099511627776, 1099511627776] "
           "overflows");
    expect((nb_tensor *)nb_mha_new(model, "attn", 8, 8, 2, false, 1.0),
           "MultiHeadAttention 'attn': Dropout: p must be in [0, 1), got 1");
    nb_module *group = nb_module_container(model, "group");
    expect((nb_tensor *)nb_transformer_block_new(group, "0", 8, 3, 0.0),
           "TransformerBlock 'group.0': MultiHeadAttention: d_out 8 is not divisible by "
           "num_heads 3");
}

/* Every built-in module of the table (module_table.h), built from its row's example config:
 * its type is the row's, a NULL module names the type, and a NULL input names the module's
 * path (the innermost module) without a later error hiding it. */
static void test_every_module_names_itself(void) {
    for (int r = 0; r < nbtest_module_count; r++) {
        const nbtest_module *row = &nbtest_modules[r];
        nb_module *root = nb_model_new(NB_F32, 1);
        nb_module *outer = nb_module_container(root, "outer");
        json_t *config = json_loads(row->example, 0, NULL);
        CU_ASSERT_TRUE_FATAL(config && nbtest_only_keys(config, "example", row->config_keys));
        nb_module *m = row->build(outer, "inner", config);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_STRING_EQUAL(m->type, row->type);

        char message[256];
        nb_clear_error();
        CU_ASSERT_PTR_NULL(row->forward(NULL, &(nbtest_call){0}));
        snprintf(message, sizeof message, "%s: NULL module", row->type);
        expect(NULL, message);
        snprintf(message, sizeof message, "%s 'outer.inner': NULL ", row->type);
        expect(row->forward(m, &(nbtest_call){0}), message);
        json_decref(config);
        nb_module_free(root);
    }
}

int main(void) {
    const nbtest_case cases[] = {
        {"out-of-vocabulary token", test_out_of_vocabulary_token},
        {"bad key_padding_mask", test_bad_key_padding_mask},
        {"float64 input into float32 modules", test_float64_input_into_float32_modules},
        {"wrong shapes name the module", test_wrong_shapes_name_the_module},
        {"a NULL input keeps the earlier error", test_a_null_input_keeps_the_earlier_error},
        {"empty sequence", test_empty_sequence},
        {"constructors report the first cause", test_constructors_report_the_first_cause},
        {"every built-in module names itself", test_every_module_names_itself},
    };
    int rc = nbtest_run("module errors", cases, sizeof cases / sizeof cases[0]);
    nb_module_free(model);
    return rc;
}
