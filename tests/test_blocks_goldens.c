/* The blocks (nn/blocks/) against PyTorch: tests/goldens/blocks.json, written by
 * tests/gen_blocks_goldens.py from references written there from the formulas (RMSNorm,
 * rotate-half RoPE, SwiGLU, grouped-query attention with repeat_interleave, the block and the
 * LM), tests/goldens/mla.json, by tests/gen_mla_goldens.py (DeepSeek-V2's multi-head latent
 * attention), tests/goldens/moe.json, by tests/gen_moe_goldens.py (the mixture of
 * experts), and tests/goldens/deepseek.json, by tests/gen_deepseek_goldens.py (the
 * DeepSeek-style LM). Each case builds the nabla module from the case's config, copies PyTorch's
 * parameters in under their names (every module parameter must be matched by name and shape),
 * runs forward, backpropagates the case's output gradient (plus the load-balancing loss of a
 * case that has one) and compares the output, that loss, every parameter gradient and the
 * input gradient. */
#include <nabla/blocks.h>
#include "golden.h"
#include "harness.h"

#include <stdio.h>

#define MAX_NAMED 64

static int64_t config_int(const json_t *c, const char *key) {
    return json_integer_value(json_object_get(json_object_get(c, "config"), key));
}
static double config_double(const json_t *c, const char *key) {
    return json_number_value(json_object_get(json_object_get(c, "config"), key));
}
static bool forward_bool(const json_t *c, const char *key) {
    return json_is_true(json_object_get(json_object_get(c, "forward"), key));
}
static int64_t forward_int(const json_t *c, const char *key) {
    return json_integer_value(json_object_get(json_object_get(c, "forward"), key));
}

static blk_llama_config llama_config(const json_t *c) {
    return (blk_llama_config){.dim = config_int(c, "dim"),
                              .n_heads = config_int(c, "n_heads"),
                              .n_kv_heads = config_int(c, "n_kv_heads"),
                              .hidden = config_int(c, "hidden"),
                              .norm_eps = config_double(c, "eps"),
                              .rope_base = config_double(c, "rope_base")};
}

static blk_mla_config mla_config(const json_t *c) {
    return (blk_mla_config){.dim = config_int(c, "dim"),
                            .n_heads = config_int(c, "n_heads"),
                            .q_rank = config_int(c, "q_rank"),
                            .kv_rank = config_int(c, "kv_rank"),
                            .nope_dim = config_int(c, "nope_dim"),
                            .rope_dim = config_int(c, "rope_dim"),
                            .v_dim = config_int(c, "v_dim"),
                            .norm_eps = config_double(c, "eps"),
                            .rope_base = config_double(c, "rope_base")};
}

static blk_moe_config moe_config(const json_t *c) {
    return (blk_moe_config){.dim = config_int(c, "dim"),
                            .hidden = config_int(c, "hidden"),
                            .n_experts = config_int(c, "n_experts"),
                            .top_k = config_int(c, "top_k"),
                            .n_shared = config_int(c, "n_shared"),
                            .aux_alpha = config_double(c, "aux_alpha"),
                            .tile_rows = config_int(c, "tile_rows")};
}

/* Builds the case's module as child "m" of root; NULL for RoPE, which has no parameters. */
static void *build(const json_t *c, nb_module *root) {
    const char *module = json_string_value(json_object_get(c, "module"));
    blk_llama_config cfg = llama_config(c);
    if (strcmp(module, "RMSNorm") == 0)
        return blk_rms_norm_new(root, "m", config_int(c, "dim"), config_double(c, "eps"));
    if (strcmp(module, "SwiGLU") == 0)
        return blk_swiglu_new(root, "m", config_int(c, "dim"), config_int(c, "hidden"));
    if (strcmp(module, "Attention") == 0)
        return blk_attention_new(root, "m", config_int(c, "dim"), config_int(c, "n_heads"),
                                 config_int(c, "n_kv_heads"), config_double(c, "rope_base"));
    if (strcmp(module, "Block") == 0) return blk_llama_block_new(root, "m", &cfg);
    if (strcmp(module, "MLA") == 0) {
        blk_mla_config mla = mla_config(c);
        return blk_mla_new(root, "m", &mla);
    }
    if (strcmp(module, "LlamaLM") == 0)
        return blk_llama_lm_new(root, "m", config_int(c, "vocab"), (int)config_int(c, "n_layers"),
                                &cfg);
    if (strcmp(module, "MoE") == 0) {
        blk_moe_config moe = moe_config(c);
        return blk_moe_new(root, "m", &moe);
    }
    if (strcmp(module, "DeepSeekLM") == 0) {
        blk_deepseek_config ds = {.attn = mla_config(c),
                                  .moe = moe_config(c),
                                  .n_dense_layers = (int)config_int(c, "n_dense_layers"),
                                  .dense_hidden = config_int(c, "dense_hidden"),
                                  .norm_eps = config_double(c, "eps")};
        return blk_deepseek_lm_new(root, "m", config_int(c, "vocab"),
                                   (int)config_int(c, "n_layers"), &ds);
    }
    return NULL;
}

/* The output of the case's module m (built by build) for input x (or tokens); *aux receives
 * the MoE's (or the DeepSeek LM's summed) load-balancing loss (NULL for the others). */
static nb_tensor *forward(const json_t *c, void *m, nb_tensor *x, const nb_tensor *kpm,
                          nb_tensor **aux) {
    const char *module = json_string_value(json_object_get(c, "module"));
    blk_attn_opts opts = {.causal = forward_bool(c, "causal"),
                          .key_padding_mask = kpm,
                          .offset = forward_int(c, "offset")};
    if (strcmp(module, "RoPE") == 0) /* x [B, H, T, hd]: positions along dim -2 */
        return blk_rope(x, -2, config_int(c, "offset"), config_double(c, "base"));
    if (strcmp(module, "RMSNorm") == 0) return blk_rms_norm_forward(m, x);
    if (strcmp(module, "SwiGLU") == 0) return blk_swiglu_forward(m, x);
    if (strcmp(module, "Attention") == 0) return blk_attention_forward(m, x, &opts);
    if (strcmp(module, "Block") == 0) return blk_llama_block_forward(m, x, &opts);
    if (strcmp(module, "MLA") == 0) return blk_mla_forward(m, x, &opts);
    if (strcmp(module, "LlamaLM") == 0) return blk_llama_lm_forward(m, x, &opts);
    if (strcmp(module, "MoE") == 0) {
        blk_moe_routing routing;
        nb_tensor *y = blk_moe_forward(m, x, &routing);
        *aux = routing.aux_loss;
        return y;
    }
    if (strcmp(module, "DeepSeekLM") == 0) return blk_deepseek_lm_forward(m, x, &opts, aux);
    return NULL;
}

/* Copies every golden parameter into the module parameter of the same name;
 * false unless names and shapes match one to one. */
static bool copy_params(nb_module *root, const golden_named *params, int n) {
    if (n != nb_module_param_count(root)) {
        printf("    %d golden parameters for %d module parameters\n", n,
               nb_module_param_count(root));
        return false;
    }
    for (int k = 0; k < n; k++) {
        char name[160];
        snprintf(name, sizeof name, "m.%.100s", params[k].name);
        nb_tensor *p = nb_module_param(root, name);
        if (!p || !nb_copy_(p, params[k].tensor)) {
            printf("    parameter %s: %s\n", name, nb_last_error());
            return false;
        }
    }
    return true;
}

static void note(double *max_ratio, bool *ok, golden_cmp r, const char *what) {
    if (r.worst_ratio > *max_ratio) *max_ratio = r.worst_ratio;
    if (!r.ok) printf("    %s: %s\n", what, r.message), *ok = false;
}

static bool check_case(const json_t *c) {
    const char *name = json_string_value(json_object_get(c, "name"));
    const char *dtype = json_string_value(json_object_get(c, "dtype"));
    golden_named params[MAX_NAMED], inputs[4];
    double ratio = 0;
    nb_scope_begin();
    int np = golden_named_tensors(c, "parameters", params, MAX_NAMED);
    int ni = golden_named_tensors(c, "inputs", inputs, 4);
    bool ok = np >= 0 && ni >= 1;
    nb_tensor *x = ok ? inputs[0].tensor : NULL, *kpm = NULL, *aux = NULL;
    for (int k = 1; k < ni && k < 4; k++) /* ni <= 4, but gcc -O3 cannot see it */
        if (strcmp(inputs[k].name, "key_padding_mask") == 0) kpm = inputs[k].tensor;
    nb_module *root = nb_model_new(strcmp(dtype, "f64") == 0 ? NB_F64 : NB_F32, 1);
    void *m = ok ? build(c, root) : NULL;
    if (ok && np > 0) ok = m && copy_params(root, params, np);
    nb_tensor *out = ok ? forward(c, m, x, kpm, &aux) : NULL;
    if (ok && !out) printf("    forward: %s\n", nb_last_error()), ok = false;
    note(&ratio, &ok, golden_compare(out, json_object_get(c, "output")), "output");
    const json_t *aux_spec = json_object_get(c, "aux_loss");
    if (ok && aux_spec) note(&ratio, &ok, golden_compare(aux, aux_spec), "aux loss");
    nb_tensor *g = golden_tensor(json_object_get(c, "grad_output"), GOLDEN_CONTIGUOUS);
    /* the gradients of sum(out * g), plus the loss where there is one */
    bool back = ok && (aux_spec ? nb_backward(nb_add(nb_sum(nb_mul(out, g)), aux), NULL)
                                : nb_backward(out, g));
    if (ok && !back) printf("    backward: %s\n", nb_last_error()), ok = false;
    for (int k = 0; ok && k < np; k++) {
        char pname[160];
        snprintf(pname, sizeof pname, "m.%.100s", params[k].name);
        note(&ratio, &ok,
             golden_compare(nb_grad(nb_module_param(root, pname)),
                            golden_named_spec(c, "parameter_grads", params[k].name)),
             params[k].name);
    }
    if (ok && x->requires_grad)
        note(&ratio, &ok, golden_compare(nb_grad(x), golden_named_spec(c, "input_grads", "x")),
             "input gradient");
    nb_module_free(root);
    nb_scope_end();
    printf("  %-4s %-44s %.2g of tolerance\n", ok ? "ok" : "FAIL", name ? name : "(unnamed)",
           ratio);
    return ok;
}

/* Checks every case of a golden file, which must hold n_cases. */
static void check_file(const char *file, size_t n_cases) {
    json_t *root = golden_load(file);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const json_t *cases = json_object_get(root, "cases");
    int failures = 0;
    for (size_t k = 0; k < json_array_size(cases); k++)
        failures += !check_case(json_array_get(cases, k));
    CU_ASSERT_EQUAL(json_array_size(cases), n_cases);
    CU_ASSERT_EQUAL(failures, 0);
    json_decref(root);
}

/* RMSNorm x2, RoPE x2, SwiGLU, Attention x5, Block, LlamaLM; in f32 and f64. */
static void test_goldens(void) {
    check_file("blocks.json", 24);
}

/* MLA without and with the query low-rank path (tests/gen_mla_goldens.py); f32 and f64. */
static void test_mla_goldens(void) {
    check_file("mla.json", 6);
}

/* Three MoEs (top-2 with a shared expert, top-1, top-3 of 8 in tiles of 2); f32 and f64. */
static void test_moe_goldens(void) {
    check_file("moe.json", 6);
}

/* A two-layer DeepSeek-style LM, all MoE or its first block dense (tests/gen_deepseek_goldens.py):
 * logits, the summed aux loss and every gradient; f32 and f64. */
static void test_deepseek_goldens(void) {
    check_file("deepseek.json", 4);
}

int main(void) {
    const nbtest_case cases[] = {
        {"the blocks match PyTorch's outputs and gradients", test_goldens},
        {"MLA matches PyTorch's outputs and gradients", test_mla_goldens},
        {"the mixture of experts matches PyTorch's output, loss and gradients", test_moe_goldens},
        {"the DeepSeek-style LM matches PyTorch's logits, aux loss and gradients",
         test_deepseek_goldens},
    };
    return nbtest_run("blocks goldens", cases, sizeof cases / sizeof cases[0]);
}
