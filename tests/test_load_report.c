/* Loading as PyTorch users expect (nabla/checkpoint.h, nabla/module.h): a refused load names
 * every missing, unexpected and mismatched tensor and changes nothing; a partial load reports
 * what it skipped; F32 and F64 convert when asked; a checkpoint loads into a model whatever
 * its module's name; name maps split and rename; TransformerLM checkpoints carry the block's
 * q/k/v bias and GELU options. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

/* A small model: Linear "a" 4 -> 3, Linear "b" 3 -> 2 (no bias), LayerNorm "n" of 3. */
typedef struct {
    nb_module *root;
    nb_linear *a, *b;
    nb_layer_norm *n;
} small_model;

static small_model small_new(nb_dtype dt, uint64_t seed) {
    small_model m = {.root = nb_model_new(dt, seed)};
    m.a = nb_linear_new(m.root, "a", 4, 3, true);
    m.b = nb_linear_new(m.root, "b", 3, 2, false);
    m.n = nb_layer_norm_new(m.root, "n", 3);
    CU_ASSERT_FATAL(m.a && m.b && m.n);
    return m;
}

/* Saves m to a new file, to check later that a refused load changed nothing. */
static const char *saved_state(const nb_module *m) {
    const char *path = nbtest_tmp_path("before.safetensors");
    CU_ASSERT_FATAL(nb_module_save(m, path));
    return path;
}

/* Does m hold, bit for bit, what was saved at path? */
static bool unchanged(const nb_module *m, const char *path) {
    int n = 0, now_n = 0;
    nb_named_tensor *before = nb_safetensors_read(path, &n);
    const char *now_path = nbtest_tmp_path("now.safetensors");
    nb_named_tensor *now =
        nb_module_save(m, now_path) ? nb_safetensors_read(now_path, &now_n) : NULL;
    bool same = before && now && n == now_n && n > 0;
    for (int k = 0; same && k < n; k++)
        same = strcmp(before[k].name, now[k].name) == 0 &&
               nbtest_close(now[k].tensor, before[k].tensor, 0, 0);
    return same;
}

/* Is name among the n strings? */
static bool listed(char *const *items, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(items[k], name) == 0) return true;
    return false;
}

/* A file for the small model with two tensors missing (b.weight, n.bias), two extra (c.weight,
 * d) and two misshapen (a.bias [2], n.weight [4]); a.weight fits. */
static const char *write_flawed_file(void) {
    const char *path = nbtest_tmp_path("flawed.safetensors");
    const nb_named_tensor t[] = {
        {"a.weight", nb_full(NB_F32, NB_SHAPE(3, 4), 0.5)},
        {"a.bias", nb_full(NB_F32, NB_SHAPE(2), 1)},
        {"n.weight", nb_full(NB_F32, NB_SHAPE(4), 2)},
        {"c.weight", nb_full(NB_F32, NB_SHAPE(2, 2), 3)},
        {"d", nb_full(NB_F32, NB_SHAPE(1), 4)},
    };
    CU_ASSERT_FATAL(nb_safetensors_save(path, 5, t));
    return path;
}

static void test_refused_load_lists_everything(void) {
    small_model m = small_new(NB_F32, 1);
    const char *path = write_flawed_file();
    const char *before = saved_state(m.root);
    nb_load_report r;
    nb_clear_error();
    CU_ASSERT_FALSE(nb_module_load_opts(m.root, NULL, path, NULL, &r));
    /* The error names every one... */
    NBT_ASSERT_ERROR(path);
    NBT_ASSERT_ERROR("6 tensors do not fit (2 missing, 2 unexpected, 2 mismatched)");
    NBT_ASSERT_ERROR("tensor 'b.weight' is missing from the file");
    NBT_ASSERT_ERROR("tensor 'n.bias' is missing from the file");
    NBT_ASSERT_ERROR("tensor 'c.weight' is in the file but not expected");
    NBT_ASSERT_ERROR("tensor 'd' is in the file but not expected");
    NBT_ASSERT_ERROR("tensor 'a.bias': shape [2] in the file, expected [3]");
    NBT_ASSERT_ERROR("tensor 'n.weight': shape [4] in the file, expected [3]");
    /* ...so does the report... */
    CU_ASSERT_EQUAL(r.n_loaded, 0);
    CU_ASSERT_EQUAL(r.n_missing, 2);
    CU_ASSERT_TRUE(listed(r.missing, r.n_missing, "b.weight"));
    CU_ASSERT_TRUE(listed(r.missing, r.n_missing, "n.bias"));
    CU_ASSERT_EQUAL(r.n_unexpected, 2);
    CU_ASSERT_TRUE(listed(r.unexpected, r.n_unexpected, "c.weight"));
    CU_ASSERT_TRUE(listed(r.unexpected, r.n_unexpected, "d"));
    CU_ASSERT_EQUAL(r.n_mismatched, 2);
    CU_ASSERT_TRUE(listed(r.mismatched, r.n_mismatched,
                          "tensor 'a.bias': shape [2] in the file, expected [3]"));
    /* ...and nothing changed, a.weight included. */
    CU_ASSERT_TRUE(unchanged(m.root, before));
    nb_load_report_free(&r);
    CU_ASSERT_EQUAL(r.n_missing, 0);
    CU_ASSERT_PTR_NULL(r.missing);
    nb_load_report_free(&r); /* twice, and NULL: harmless */
    nb_load_report_free(NULL);

    /* A partial load skips the missing and extra tensors, but a shape mismatch is still an
     * error (as PyTorch's strict=False): still nothing changes. */
    const nb_load_opts partial = {.partial = true};
    nb_clear_error();
    CU_ASSERT_FALSE(nb_module_load_opts(m.root, NULL, path, &partial, &r));
    NBT_ASSERT_ERROR("2 tensors do not fit (0 missing, 0 unexpected, 2 mismatched)");
    CU_ASSERT_PTR_NULL(strstr(nb_last_error(), "b.weight"));
    CU_ASSERT_EQUAL(r.n_missing, 2);
    CU_ASSERT_EQUAL(r.n_mismatched, 2);
    CU_ASSERT_TRUE(unchanged(m.root, before));
    nb_load_report_free(&r);
    nb_module_free(m.root);
}

static void test_partial_load_reports_skipped(void) {
    small_model m = small_new(NB_F32, 1);
    const char *path = nbtest_tmp_path("partial.safetensors");
    const nb_named_tensor t[] = {
        {"a.weight", nb_full(NB_F32, NB_SHAPE(3, 4), 0.5)},
        {"n.bias", nb_full(NB_F32, NB_SHAPE(3), -1)},
        {"extra.weight", nb_full(NB_F32, NB_SHAPE(2), 3)},
    };
    CU_ASSERT_FATAL(nb_safetensors_save(path, 3, t));
    nb_tensor *b_before = nb_clone(m.b->weight), *a_bias_before = nb_clone(m.a->bias);
    nb_load_report r;
    const nb_load_opts partial = {.partial = true};
    CU_ASSERT_TRUE(nb_module_load_opts(m.root, NULL, path, &partial, &r));
    CU_ASSERT_EQUAL(r.n_loaded, 2);
    CU_ASSERT_EQUAL(r.n_converted, 0);
    CU_ASSERT_EQUAL(r.n_missing, 3); /* a.bias, b.weight, n.weight */
    CU_ASSERT_TRUE(listed(r.missing, r.n_missing, "a.bias"));
    CU_ASSERT_TRUE(listed(r.missing, r.n_missing, "b.weight"));
    CU_ASSERT_TRUE(listed(r.missing, r.n_missing, "n.weight"));
    CU_ASSERT_EQUAL(r.n_unexpected, 1);
    CU_ASSERT_TRUE(listed(r.unexpected, r.n_unexpected, "extra.weight"));
    CU_ASSERT_EQUAL(r.n_mismatched, 0);
    /* Loaded where the file had them, untouched elsewhere. */
    NBT_ASSERT_VALUES(m.n->bias, 0, -1, -1, -1);
    CU_ASSERT_EQUAL(nb_get(m.a->weight, NB_IDX(2, 3)), 0.5);
    NBT_ASSERT_CLOSE(m.b->weight, b_before, 0, 0);
    NBT_ASSERT_CLOSE(m.a->bias, a_bias_before, 0, 0);
    NBT_ASSERT_VALUES(m.n->weight, 0, 1, 1, 1);
    /* The report prints every skipped name. */
    FILE *f = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    nb_load_report_fprint(f, &r);
    char text[2048] = "";
    rewind(f);
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "loaded 2 tensors (0 converted), 3 missing, 1 unexpected"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "    b.weight\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "    extra.weight\n"));
    nb_load_report_free(&r);
    nb_module_free(m.root);
}

/* More problems than a message holds: the message counts the rest, the report has all. */
static void test_many_problems(void) {
    nb_module *root = nb_model_new(NB_F32, 1);
    for (int i = 0; i < 60; i++) {
        char name[32];
        snprintf(name, sizeof name, "layer_with_a_long_name_%d", i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(nb_linear_new(root, name, 2, 2, false));
    }
    const char *path = nbtest_tmp_path("other.safetensors");
    CU_ASSERT_FATAL(nb_safetensors_save(
        path, 1, (nb_named_tensor[]){{"unrelated", nb_zeros(NB_F32, NB_SHAPE(1))}}));
    nb_load_report r;
    CU_ASSERT_FALSE(nb_module_load_opts(root, NULL, path, NULL, &r));
    NBT_ASSERT_ERROR("61 tensors do not fit (60 missing, 1 unexpected, 0 mismatched)");
    NBT_ASSERT_ERROR("tensor 'layer_with_a_long_name_0.weight' is missing");
    NBT_ASSERT_ERROR("more (an nb_load_report lists all)");
    CU_ASSERT_EQUAL(r.n_missing, 60);
    CU_ASSERT_TRUE(listed(r.missing, r.n_missing, "layer_with_a_long_name_59.weight"));
    CU_ASSERT_EQUAL(r.n_unexpected, 1);
    nb_load_report_free(&r);
    nb_module_free(root);
}

/* ---- dtype conversion ---- */
static void test_dtype_conversion(void) {
    const char *path = nbtest_tmp_path("f64.safetensors");
    /* 0.1 is not a float32: it rounds to nearest, 0.100000001490116... */
    nb_tensor *w = nb_from_array(NB_F64, NB_SHAPE(2), (double[]){0.1, -3.0});
    CU_ASSERT_FATAL(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"w", w}}));
    nb_tensor *into = nb_zeros(NB_F32, NB_SHAPE(2));
    CU_ASSERT_FALSE(nb_safetensors_load(path, 1, (nb_named_tensor[]){{"w", into}}));
    NBT_ASSERT_ERROR("tensor 'w': dtype F64 in the file, expected F32 (nb_load_opts.convert_dtype "
                     "converts F32 and F64)");
    nb_load_report r;
    const nb_load_opts convert = {.convert_dtype = true};
    CU_ASSERT_TRUE(
        nb_safetensors_load_opts(path, 1, (nb_named_tensor[]){{"w", into}}, &convert, &r));
    CU_ASSERT_EQUAL(r.n_loaded, 1);
    CU_ASSERT_EQUAL(r.n_converted, 1);
    nb_load_report_free(&r);
    CU_ASSERT_EQUAL(((const float *)nb_data(into))[0], 0.1f);
    CU_ASSERT_EQUAL(((const float *)nb_data(into))[1], -3.0f);

    /* F32 into F64 is exact. */
    const char *path32 = nbtest_tmp_path("f32.safetensors");
    CU_ASSERT_FATAL(nb_safetensors_save(path32, 1, (nb_named_tensor[]){{"w", into}}));
    nb_tensor *wide = nb_zeros(NB_F64, NB_SHAPE(2));
    CU_ASSERT_TRUE(
        nb_safetensors_load_opts(path32, 1, (nb_named_tensor[]){{"w", wide}}, &convert, NULL));
    CU_ASSERT_EQUAL(nb_get(wide, NB_IDX(0)), (double)0.1f);

    /* A finite double past float32's range is an error, and nothing changes. */
    nb_tensor *huge = nb_from_array(NB_F64, NB_SHAPE(2), (double[]){1.0, 1e300});
    CU_ASSERT_FATAL(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"w", huge}}));
    CU_ASSERT_FALSE(
        nb_safetensors_load_opts(path, 1, (nb_named_tensor[]){{"w", into}}, &convert, NULL));
    NBT_ASSERT_ERROR("tensor 'w': element 1 is 1e+300, beyond float32's range");
    CU_ASSERT_EQUAL(((const float *)nb_data(into))[0], 0.1f);
    /* Integers never convert. */
    nb_tensor *ints = nb_zeros(NB_I64, NB_SHAPE(2));
    CU_ASSERT_FALSE(
        nb_safetensors_load_opts(path, 1, (nb_named_tensor[]){{"w", ints}}, &convert, NULL));
    NBT_ASSERT_ERROR("tensor 'w': dtype F64 in the file, expected I64");
}

/* ---- names: whatever the module's name ---- */
static void test_names_relative_to_the_module(void) {
    const nb_lm_config cfg = {.vocab = 7, .max_len = 5, .dim = 8, .num_heads = 2, .layers = 1};
    /* As char_lm saves: the LM is the root's unnamed child. */
    nb_module *saved = nb_model_new(NB_F32, 1);
    nb_transformer_lm *src = nb_transformer_lm_new_config(saved, "", &cfg, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(src);
    const char *path = nbtest_tmp_path("char_lm.safetensors");
    CU_ASSERT_FATAL(nb_transformer_lm_save(src, NULL, path, 0, NULL));
    const int64_t probe[] = {0, 3};
    const double expected = nb_get(src->tok_emb->weight, probe);

    /* Into a model named "lm": through the LM itself, and through the root. */
    for (int through_root = 0; through_root < 2; through_root++) {
        nb_module *model = nb_model_new(NB_F32, 2);
        nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "lm", &cfg, 0.0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
        nb_load_report r;
        bool ok = through_root ? nb_module_load_opts(model, NULL, path, NULL, &r)
                               : nb_transformer_lm_load(lm, NULL, path);
        if (!ok) printf("\n    %s\n", nb_last_error());
        CU_ASSERT_TRUE(ok);
        CU_ASSERT_EQUAL(nb_get(lm->tok_emb->weight, probe), expected);
        if (through_root) {
            CU_ASSERT_STRING_EQUAL(r.model_prefix, "lm.");
            CU_ASSERT_EQUAL(r.n_loaded, nb_module_param_count(model));
            nb_load_report_free(&r);
        }
        /* Saving the LM writes names relative to it, without "lm.". */
        const char *again = nbtest_tmp_path("again.safetensors");
        CU_ASSERT_TRUE(nb_module_save(&lm->base, again));
        int count = 0;
        nb_named_tensor *names = nb_safetensors_read(again, &count);
        CU_ASSERT_TRUE(names && count == nb_module_param_count(model));
        CU_ASSERT_STRING_EQUAL(names[0].name, "tok_emb.weight");
        nb_module_free(model);
    }

    /* A file saved from a root holding the LM as "lm" ("lm.tok_emb.weight") loads into an
     * unnamed LM: the file's prefix is removed. */
    nb_module *outer = nb_model_new(NB_F32, 3);
    nb_transformer_lm *named = nb_transformer_lm_new_config(outer, "lm", &cfg, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(named);
    const char *prefixed = nbtest_tmp_path("prefixed.safetensors");
    CU_ASSERT_TRUE(nb_module_save(outer, prefixed));
    nb_load_report r;
    CU_ASSERT_TRUE(nb_module_load_opts(&src->base, NULL, prefixed, NULL, &r));
    CU_ASSERT_STRING_EQUAL(r.file_prefix, "lm.");
    CU_ASSERT_STRING_EQUAL(r.model_prefix, "");
    nb_load_report_free(&r);
    CU_ASSERT_EQUAL(nb_get(src->tok_emb->weight, probe), nb_get(named->tok_emb->weight, probe));
    nb_module_free(outer);
    nb_module_free(saved);
}

/* ---- name maps ---- */
static void test_name_map_rules(void) {
    const char *path = nbtest_tmp_path("packed.safetensors");
    nb_tensor *packed = nb_view(nb_arange(NB_F32, 0, 12, 1), NB_SHAPE(6, 2));
    const nb_named_tensor t[] = {{"qkv", packed}, {"junk", nb_zeros(NB_F32, NB_SHAPE(1))}};
    CU_ASSERT_FATAL(nb_safetensors_save(path, 2, t));
    /* qkv [6, 2] splits into three [2, 2] slices, rows 0-1, 2-3, 4-5; junk is dropped. */
    const nb_name_rule rules[] = {{"qkv", {"q", "k", "v"}, 3}, {"ju*", {NULL}, 0}};
    const nb_name_map map = {"test", 2, rules};
    nb_tensor *q = nb_zeros(NB_F32, NB_SHAPE(2, 2)), *k = nb_zeros(NB_F32, NB_SHAPE(2, 2)),
              *v = nb_zeros(NB_F32, NB_SHAPE(2, 2));
    const nb_named_tensor into[] = {{"q", q}, {"k", k}, {"v", v}};
    const nb_load_opts opts = {.name_map = &map};
    CU_ASSERT_TRUE(nb_safetensors_load_opts(path, 3, into, &opts, NULL));
    NBT_ASSERT_VALUES(q, 0, 0, 1, 2, 3);
    NBT_ASSERT_VALUES(k, 0, 4, 5, 6, 7);
    NBT_ASSERT_VALUES(v, 0, 8, 9, 10, 11);
    /* Four parts do not divide 6 rows: a mismatch naming the file's tensor. */
    const nb_name_rule four[] = {{"qkv", {"q", "k", "v", "w"}, 4}, {"junk", {NULL}, 0}};
    const nb_name_map map4 = {"four", 2, four};
    const nb_load_opts opts4 = {.name_map = &map4, .partial = true};
    CU_ASSERT_FALSE(nb_safetensors_load_opts(path, 3, into, &opts4, NULL));
    NBT_ASSERT_ERROR("tensor 'q': file tensor 'qkv' of shape [6, 2] does not split into 4 equal "
                     "parts along dim 0");
    /* A renamed tensor the destination does not take is reported under both names. */
    const nb_name_rule rename[] = {{"q*", {"query*"}, 1}};
    const nb_name_map map_rename = {"rename", 1, rename};
    const nb_load_opts partial = {.name_map = &map_rename, .partial = true};
    nb_load_report r;
    CU_ASSERT_TRUE(nb_safetensors_load_opts(path, 3, into, &partial, &r));
    CU_ASSERT_TRUE(listed(r.unexpected, r.n_unexpected, "qkv (as 'querykv')"));
    CU_ASSERT_TRUE(listed(r.unexpected, r.n_unexpected, "junk"));
    CU_ASSERT_EQUAL(r.n_missing, 3);
    nb_load_report_free(&r);
    /* Malformed maps are refused before the file is read. */
    const nb_name_rule bad[][1] = {{{"a*b*", {"x"}, 1}},
                                   {{"a", {"x"}, 5}},
                                   {{"a", {NULL}, 1}},
                                   {{NULL, {"x"}, 1}},
                                   {{"a", {"x*y*"}, 1}}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        const nb_name_map bad_map = {"bad", 1, bad[b]};
        const nb_load_opts bad_opts = {.name_map = &bad_map};
        nb_clear_error();
        CU_ASSERT_FALSE(nb_safetensors_load_opts(path, 3, into, &bad_opts, NULL));
        NBT_ASSERT_ERROR("name map 'bad', rule 0");
    }
}

/* ---- TransformerLM checkpoints carry the block options ---- */
static void test_lm_block_options_in_checkpoints(void) {
    const nb_lm_config cfg = {.vocab = 7,
                              .max_len = 5,
                              .dim = 8,
                              .num_heads = 2,
                              .layers = 2,
                              .qkv_bias = true,
                              .gelu_tanh = true};
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "", &cfg, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_PTR_NOT_NULL(nb_module_param(model, "blocks.1.attn.W_value.bias"));
    const char *path = nbtest_tmp_path("gpt2ish.safetensors");
    CU_ASSERT_FATAL(nb_transformer_lm_save(lm, NULL, path, 0, NULL));
    nb_lm_config read;
    CU_ASSERT_TRUE_FATAL(nb_lm_config_read(path, &read));
    CU_ASSERT_TRUE(read.qkv_bias && read.gelu_tanh);
    nb_lm_config mine = nb_transformer_lm_config(lm);
    CU_ASSERT_TRUE(mine.qkv_bias && mine.gelu_tanh);
    /* A model without the options refuses the file and says which differ. */
    const nb_lm_config plain_cfg = {
        .vocab = 7, .max_len = 5, .dim = 8, .num_heads = 2, .layers = 2};
    nb_module *plain = nb_model_new(NB_F32, 2);
    nb_transformer_lm *other = nb_transformer_lm_new_config(plain, "", &plain_cfg, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(other);
    CU_ASSERT_FALSE(nb_transformer_lm_load(other, NULL, path));
    NBT_ASSERT_ERROR("qkv_bias: checkpoint 1, model 0; gelu_tanh: checkpoint 1, model 0");
    /* A file without the two keys (saved before they existed) reads them as 0. */
    const char *old = nbtest_tmp_path("old.safetensors");
    const nb_metadata_entry meta[] = {
        {"nabla.model", "TransformerLM"}, {"nabla.block", "pre_ln"},   {"nabla.vocab", "7"},
        {"nabla.d_model", "8"},           {"nabla.heads", "2"},        {"nabla.layers", "2"},
        {"nabla.context", "5"},           {"nabla.out_features", "7"}, {"nabla.tie_weights", "0"}};
    CU_ASSERT_FATAL(nb_module_save_with_metadata(&other->base, NULL, old, 9, meta));
    CU_ASSERT_TRUE(nb_lm_config_read(old, &read));
    CU_ASSERT_FALSE(read.qkv_bias || read.gelu_tanh);
    CU_ASSERT_TRUE(nb_transformer_lm_load(other, NULL, old));
    nb_module_free(model);
    nb_module_free(plain);
}

int main(void) {
    const nbtest_case cases[] = {
        {"a refused load lists everything and changes nothing", test_refused_load_lists_everything},
        {"a partial load reports what it skipped", test_partial_load_reports_skipped},
        {"more problems than a message holds", test_many_problems},
        {"F32 and F64 convert when asked", test_dtype_conversion},
        {"names are relative to the module", test_names_relative_to_the_module},
        {"name map rules: split, drop, rename, refuse", test_name_map_rules},
        {"TransformerLM checkpoints carry block options", test_lm_block_options_in_checkpoints},
    };
    return nbtest_run("load_report", cases, sizeof cases / sizeof cases[0]);
}
