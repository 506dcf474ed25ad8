/* nb_transformer_decoder_block: PyTorch's nn.TransformerDecoderLayer(norm_first=True) output
 * and gradients (tests/gen_decoder_goldens.py), finite differences in float64 on random,
 * broadcast-free and non-contiguous inputs, float32 against float64, and its errors. */
#include "harness.h"

#include <stdio.h>
#include <string.h>

#define GOLDEN(name) NBTEST_GOLDEN_DIR "/" name

static const nb_block_config cfg = {.dim = 8, .num_heads = 2, .qkv_bias = true};

/* x [2, 4, 8], memory [2, 5, 8], g, y, and the gradients from the golden file, in float64. */
typedef struct {
    nb_tensor *x, *memory, *g, *y, *grad_x, *grad_memory, *grad_wk;
} golden_io;

static golden_io read_io(void) {
    golden_io io = {nb_zeros(NB_F64, NB_SHAPE(2, 4, 8)), nb_zeros(NB_F64, NB_SHAPE(2, 5, 8)),
                    nb_zeros(NB_F64, NB_SHAPE(2, 4, 8)), nb_zeros(NB_F64, NB_SHAPE(2, 4, 8)),
                    nb_zeros(NB_F64, NB_SHAPE(2, 4, 8)), nb_zeros(NB_F64, NB_SHAPE(2, 5, 8)),
                    nb_zeros(NB_F64, NB_SHAPE(8, 8))};
    const nb_named_tensor into[] = {{"x", io.x},
                                    {"memory", io.memory},
                                    {"g", io.g},
                                    {"y", io.y},
                                    {"grad.x", io.grad_x},
                                    {"grad.memory", io.grad_memory},
                                    {"grad.cross_attn.W_key.weight", io.grad_wk}};
    CU_ASSERT_TRUE_FATAL(nb_safetensors_load(GOLDEN("decoder_block_io.safetensors"), 7, into));
    return io;
}

static nb_tensor *causal_forward(nb_transformer_decoder_block *b, const nb_tensor *x,
                                 const nb_tensor *memory) {
    return nb_transformer_decoder_block_forward(b, x, memory, &(nb_mha_opts){.causal = true}, NULL);
}

static void test_matches_pytorch(void) {
    nb_module *model = nb_model_new(NB_F64, 1);
    nb_transformer_decoder_block *b = nb_transformer_decoder_block_new(model, "dec", &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_TRUE_FATAL(nb_module_load(&b->base, GOLDEN("decoder_block.safetensors")));
    golden_io io = read_io();
    nb_requires_grad_(io.x, true), nb_requires_grad_(io.memory, true);
    nb_tensor *y = causal_forward(b, io.x, io.memory);
    NBT_ASSERT_CLOSE(y, io.y, 1e-12, 1e-10);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(y, io.g)), NULL));
    NBT_ASSERT_CLOSE(nb_grad(io.x), io.grad_x, 1e-12, 1e-10);
    NBT_ASSERT_CLOSE(nb_grad(io.memory), io.grad_memory, 1e-12, 1e-10);
    NBT_ASSERT_CLOSE(nb_grad(b->cross_attn->W_key->weight), io.grad_wk, 1e-12, 1e-10);

    /* float32 parameters and inputs: PyTorch's float64 output to float32's precision. */
    nb_module *model32 = nb_model_new(NB_F32, 1);
    nb_transformer_decoder_block *b32 = nb_transformer_decoder_block_new(model32, "", &cfg);
    CU_ASSERT_TRUE_FATAL(nb_module_load_opts(&b32->base, NULL, GOLDEN("decoder_block.safetensors"),
                                             &(nb_load_opts){.convert_dtype = true}, NULL));
    nb_tensor *y32 = causal_forward(b32, nb_to_dtype(io.x, NB_F32), nb_to_dtype(io.memory, NB_F32));
    NBT_ASSERT_CLOSE(nb_to_dtype(y32, NB_F64), io.y, 1e-5, 1e-4);
    nb_module_free(model32);
    nb_module_free(model);
}

/* memory is in[1] [2, 8, 3] transposed: [2, 3, 8], not contiguous. */
static nb_tensor *run_block(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    return causal_forward(ctx, in[0], nb_transpose(in[1], 1, 2));
}

/* Finite differences through x, memory (through a non-contiguous view) and the
 * cross-attention's key weight. */
static void test_gradcheck(void) {
    nb_module *model = nb_model_new(NB_F64, 3);
    nb_transformer_decoder_block *b = nb_transformer_decoder_block_new(model, "dec", &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    nb_rng rng;
    nb_rng_seed(&rng, 4);
    nb_tensor *in[3] = {nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(2, 4, 8)), true),
                        nb_requires_grad_(nb_randn(&rng, NB_F64, NB_SHAPE(2, 8, 3)), true),
                        b->cross_attn->W_key->weight};
    CU_ASSERT_FALSE(nb_is_contiguous(nb_transpose(in[1], 1, 2)));
    nb_gradcheck_result res;
    CU_ASSERT_TRUE(nb_gradcheck(run_block, 3, in, b, NULL, &res));
    printf("  %s\n", res.message);
    nb_module_free(model);
}

static void test_errors(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_transformer_decoder_block *b = nb_transformer_decoder_block_new(model, "dec", &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2, 4, 8));
    CU_ASSERT_PTR_NULL(causal_forward(b, x, nb_zeros(NB_F32, NB_SHAPE(2, 5, 6))));
    NBT_ASSERT_ERROR("dec");
    NBT_ASSERT_ERROR("[2, 5, 6]");
    nb_clear_error(); /* a NULL argument keeps an earlier error: most often its cause */
    CU_ASSERT_PTR_NULL(causal_forward(b, x, NULL));
    NBT_ASSERT_ERROR("memory");
    CU_ASSERT_PTR_NULL(nb_transformer_decoder_block_new(
        model, "bad", &(nb_block_config){.dim = 8, .num_heads = 3}));
    NBT_ASSERT_ERROR("bad");
    CU_ASSERT_EQUAL(nb_module_child_count(model), 1); /* the failed one left nothing behind */
    CU_ASSERT_PTR_NULL(nb_transformer_decoder_block_new(model, "none", NULL));
    NBT_ASSERT_ERROR("TransformerDecoderBlock");
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"matches nn.TransformerDecoderLayer(norm_first=True)", test_matches_pytorch},
        {"gradcheck in float64", test_gradcheck},
        {"errors", test_errors},
    };
    return nbtest_run("decoder block", cases, (int)(sizeof cases / sizeof cases[0]));
}
