/* PyTorch and Hugging Face weights loaded into nabla by their names, against goldens written
 * by tests/gen_interop_goldens.py: a GPT-style LM of nn.TransformerEncoderLayer blocks (q/k/v
 * biases, tanh GELU) into nabla's TransformerLM through nb_name_map_pytorch, a bare
 * nn.MultiheadAttention into nb_mha (its packed in_proj split), and a tiny Hugging Face Llama
 * into blk_llama_lm through nb_name_map_hf_llama. Each file holds F32 weights; the goldens are
 * the float64 outputs of exactly those weights, so a float64 model loading the file with
 * convert_dtype agrees to float64 rounding (the parity tolerance) and a float32 model to
 * float32 rounding. */
#include <nabla/blocks.h>
#include "golden.h"
#include "harness.h"

#include <stdio.h>

/* Float32 through two blocks and a vocabulary head: a few ulps per op, dozens of ops. */
#define F32_RTOL 1e-4
#define F32_ATOL 1e-5

static const json_t *interop_case(json_t *root, const char *name) {
    return root ? json_object_get(root, name) : NULL;
}
static int64_t config_int(const json_t *c, const char *key) {
    return json_integer_value(json_object_get(json_object_get(c, "config"), key));
}
static double config_double(const json_t *c, const char *key) {
    return json_number_value(json_object_get(json_object_get(c, "config"), key));
}

static const char *golden_path(const char *file) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", golden_dir(), file);
    return path;
}

/* The case's tokens as an NB_I64 [B, T] tensor. */
static nb_tensor *case_tokens(const json_t *c) {
    const json_t *rows = json_object_get(c, "tokens");
    const int64_t B = (int64_t)json_array_size(rows),
                  T = (int64_t)json_array_size(json_array_get(rows, 0));
    nb_tensor *t = nb_zeros(NB_I64, NB_SHAPE(B, T));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T; i++)
            nb_set(t, NB_IDX(b, i),
                   (double)json_integer_value(
                       json_array_get(json_array_get(rows, (size_t)b), (size_t)i)));
    return t;
}

static void expect_output(const nb_tensor *got, const json_t *expected, nb_dtype dt,
                          const char *what) {
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    golden_cmp r = dt == NB_F64
                       ? golden_compare(got, expected)
                       : golden_compare_tol(nb_to_dtype(got, NB_F64), expected, F32_RTOL, F32_ATOL);
    if (!r.ok) printf("\n    %s (%s): %s\n", what, nb_dtype_name(dt), r.message);
    CU_ASSERT_TRUE(r.ok);
}

/* A clean load: everything the model has was loaded, nothing skipped. */
static void expect_complete(const nb_load_report *r, int n, bool converted) {
    CU_ASSERT_EQUAL(r->n_loaded, n);
    CU_ASSERT_EQUAL(r->n_converted, converted ? n : 0);
    CU_ASSERT_EQUAL(r->n_missing + r->n_unexpected + r->n_mismatched, 0);
    if (r->n_missing + r->n_unexpected + r->n_mismatched) nb_load_report_fprint(stdout, r);
}

/* Loads golden file `file` into m through map (converting dtypes if asked) and expects a
 * complete load; the report is left in *r for more checks (the caller frees it). */
static void load_mapped(nb_module *m, const char *file, const nb_name_map *map, bool convert,
                        nb_load_report *r) {
    const nb_load_opts opts = {.name_map = map, .convert_dtype = convert};
    bool ok = nb_module_load_opts(m, NULL, golden_path(file), &opts, r);
    if (!ok) printf("\n    %s: %s\n", file, nb_last_error());
    CU_ASSERT_TRUE(ok);
    expect_complete(r, nb_module_param_count(m), convert);
}

/* ---- nn.TransformerEncoderLayer blocks into TransformerLM ---- */
static nb_lm_config encoder_config(const json_t *c) {
    return (nb_lm_config){.vocab = config_int(c, "vocab"),
                          .max_len = config_int(c, "context"),
                          .dim = config_int(c, "d_model"),
                          .num_heads = config_int(c, "heads"),
                          .layers = (int)config_int(c, "layers"),
                          .qkv_bias = true,
                          .gelu_tanh = true};
}

static void test_pytorch_encoder_lm(void) {
    json_t *root = golden_load("interop.json");
    const json_t *c = interop_case(root, "encoder");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const nb_lm_config cfg = encoder_config(c);
    const nb_dtype dts[] = {NB_F64, NB_F32};
    for (int d = 0; d < 2; d++) {
        /* The LM is the root's child "lm" and loads through the root in float64 (the file's
         * names take the model's prefix "lm."), and as the root's unnamed child in float32. */
        nb_module *model = nb_model_new(dts[d], 5);
        nb_transformer_lm *lm = nb_transformer_lm_new_config(model, d ? "" : "lm", &cfg, 0.0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
        nb_load_report report;
        load_mapped(model, "interop_encoder.safetensors", nb_name_map_pytorch(), d == 0, &report);
        CU_ASSERT_STRING_EQUAL(report.model_prefix, d ? "" : "lm.");
        CU_ASSERT_STRING_EQUAL(report.file_prefix, "");
        nb_load_report_free(&report);
        nb_module_train(model, false);
        expect_output(nb_transformer_lm_forward(lm, case_tokens(c), true, NULL, NULL),
                      json_object_get(c, "logits"), dts[d], "encoder LM logits");
        nb_module_free(model);
    }
    json_decref(root);
}

/* Without the map the names do not fit, and the error says which. */
static void test_pytorch_names_need_the_map(void) {
    json_t *root = golden_load("interop.json");
    const json_t *c = interop_case(root, "encoder");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const nb_lm_config cfg = encoder_config(c);
    nb_module *model = nb_model_new(NB_F32, 5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nb_transformer_lm_new_config(model, "", &cfg, 0.0));
    nb_load_report report;
    CU_ASSERT_FALSE(nb_module_load_opts(model, NULL, golden_path("interop_encoder.safetensors"),
                                        NULL, &report));
    /* The message lists what it holds and counts the rest; the report lists every one. */
    NBT_ASSERT_ERROR("40 tensors do not fit (24 missing, 16 unexpected, 0 mismatched)");
    NBT_ASSERT_ERROR("tensor 'blocks.0.attn.W_query.weight' is missing from the file");
    NBT_ASSERT_ERROR("more (an nb_load_report lists all)");
    bool listed = false;
    for (int k = 0; k < report.n_unexpected; k++)
        listed = listed || strcmp(report.unexpected[k], "blocks.1.self_attn.in_proj_weight") == 0;
    CU_ASSERT_TRUE(listed);
    /* Per block: 3 weights, 3 biases, out_proj's 2, fc1's and fc2's 4 missing; in_proj's 2,
     * out_proj's 2 and linear1/2's 4 unexpected. */
    CU_ASSERT_EQUAL(report.n_missing, 2 * 12);
    CU_ASSERT_EQUAL(report.n_unexpected, 2 * 8);
    CU_ASSERT_EQUAL(report.n_loaded, 0);
    nb_load_report_free(&report);
    nb_module_free(model);
    json_decref(root);
}

/* ---- a bare nn.MultiheadAttention ---- */
static void test_pytorch_mha(void) {
    json_t *root = golden_load("interop.json");
    const json_t *c = interop_case(root, "mha");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const int64_t d = config_int(c, "d_model"), h = config_int(c, "heads");
    nb_module *model = nb_model_new(NB_F64, 5);
    nb_mha_config cfg = nb_mha_defaults(d, d, h);
    cfg.qkv_bias = true;
    nb_mha *mha = nb_mha_new_config(model, "", &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mha);
    nb_load_report report;
    load_mapped(model, "interop_mha.safetensors", nb_name_map_pytorch(), true, &report);
    CU_ASSERT_EQUAL(report.n_loaded, 8); /* 3 weights and 3 biases split, out_proj's 2 */
    nb_load_report_free(&report);
    nb_tensor *x = golden_tensor(json_object_get(c, "input"), GOLDEN_CONTIGUOUS);
    const nb_mha_opts causal = {.causal = true};
    expect_output(nb_mha_forward(mha, x, &causal), json_object_get(c, "output"), NB_F64,
                  "MultiheadAttention output");
    nb_module_free(model);
    json_decref(root);
}

/* ---- Hugging Face's Llama into blk_llama_lm ---- */
static void test_hf_llama(void) {
    json_t *root = golden_load("interop.json");
    const json_t *c = interop_case(root, "hf_llama");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    const blk_llama_config cfg = {.dim = config_int(c, "dim"),
                                  .n_heads = config_int(c, "n_heads"),
                                  .n_kv_heads = config_int(c, "n_kv_heads"),
                                  .hidden = config_int(c, "hidden"),
                                  .norm_eps = config_double(c, "norm_eps"),
                                  .rope_base = config_double(c, "rope_base")};
    const nb_dtype dts[] = {NB_F64, NB_F32};
    for (int d = 0; d < 2; d++) {
        nb_module *model = nb_model_new(dts[d], 5);
        blk_llama_lm *lm = blk_llama_lm_new(model, "llama", config_int(c, "vocab"),
                                            (int)config_int(c, "n_layers"), &cfg);
        CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
        /* Every parameter loads; the rotary_emb.inv_freq buffers are dropped, not reported. */
        nb_load_report report;
        load_mapped(&lm->base, "interop_hf_llama.safetensors", nb_name_map_hf_llama(), d == 0,
                    &report);
        nb_load_report_free(&report);
        const blk_attn_opts causal = {.causal = true};
        expect_output(blk_llama_lm_forward(lm, case_tokens(c), &causal),
                      json_object_get(c, "logits"), dts[d], "HF Llama logits");
        nb_module_free(model);
    }
    json_decref(root);
}

/* ---- the block's options, differentiated ---- */
typedef struct {
    nb_transformer_block *block;
} block_ctx;

static nb_tensor *block_forward(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const nb_mha_opts causal = {.causal = true};
    return nb_transformer_block_forward(((block_ctx *)ctx)->block, in[0], &causal);
}

/* q/k/v biases and the tanh GELU: gradients of the input and of every parameter by finite
 * differences in float64, and float32 against float64. */
static void test_block_options_gradcheck(void) {
    const nb_block_config cfg = {.dim = 8, .num_heads = 2, .qkv_bias = true, .gelu_tanh = true};
    nb_module *model = nb_model_new(NB_F64, 9);
    block_ctx ctx = {nb_transformer_block_new_config(model, "", &cfg)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx.block);
    CU_ASSERT_PTR_NOT_NULL(ctx.block->attn->W_key->bias);
    CU_ASSERT_TRUE(ctx.block->ff->gelu_tanh);
    /* Biases away from their initial values, so their gradients are not a special case. */
    nb_rng rng;
    nb_rng_seed(&rng, 3);
    nb_param params[32];
    int np = nb_module_named_params(&ctx.block->base, params, 32);
    CU_ASSERT_EQUAL(np, 16);
    bool grad = nb_set_grad_enabled(false);
    for (int k = 0; k < np; k++) {
        const nb_tensor *p = params[k].tensor;
        nb_copy_(params[k].tensor,
                 nb_add(p, nb_mul_scalar(nb_randn(&rng, NB_F64, p->ndim, p->shape), 0.2)));
    }
    nb_set_grad_enabled(grad);
    nb_tensor *inputs[33];
    inputs[0] = nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(2, 4, 8)), true);
    for (int k = 0; k < np; k++) inputs[1 + k] = params[k].tensor;
    nb_gradcheck_result res;
    CU_ASSERT_TRUE(nb_gradcheck(block_forward, 1 + np, inputs, &ctx, NULL, &res));
    if (!res.ok) printf("\n    %s\n", res.message);

    /* The same block in float32 against the float64 result. */
    nb_module *model32 = nb_model_new(NB_F32, 9);
    block_ctx ctx32 = {nb_transformer_block_new_config(model32, "", &cfg)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx32.block);
    nb_param params32[32];
    CU_ASSERT_EQUAL(nb_module_named_params(&ctx32.block->base, params32, 32), np);
    grad = nb_set_grad_enabled(false);
    for (int k = 0; k < np; k++)
        nb_copy_(params32[k].tensor, nb_to_dtype(params[k].tensor, NB_F32));
    nb_set_grad_enabled(grad);
    nb_tensor *x32 = nb_to_dtype(inputs[0], NB_F32);
    nb_tensor *y64 = block_forward(inputs, 1, &ctx), *y32 = block_forward(&x32, 1, &ctx32);
    NBT_ASSERT_CLOSE(nb_to_dtype(y32, NB_F64), y64, 1e-5, 1e-5);
    nb_module_free(model);
    nb_module_free(model32);
}

int main(void) {
    const nbtest_case cases[] = {
        {"nn.TransformerEncoderLayer LM into TransformerLM", test_pytorch_encoder_lm},
        {"PyTorch names without the map are listed", test_pytorch_names_need_the_map},
        {"nn.MultiheadAttention's in_proj split", test_pytorch_mha},
        {"Hugging Face Llama into blk_llama_lm", test_hf_llama},
        {"block with q/k/v biases and tanh GELU gradchecked", test_block_options_gradcheck},
    };
    return nbtest_run("interop", cases, sizeof cases / sizeof cases[0]);
}
