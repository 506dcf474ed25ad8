/* MultiHeadAttention as PyTorch users expect it, beyond the PyTorch goldens of
 * tests/goldens/modules_mha.json (test_module_parity): f64 gradchecks with every mask shape,
 * float masks and the head mask as checked inputs; which path each mask takes; how causal
 * aligns when T_q != T_k; the mask forms that must agree; biases switched off (also through
 * the KV cache); and the errors bad masks give. */
#include "harness.h"
#include "autograd/node.h" /* nba_set_record_hook: which attention path ran */

#include <stdio.h>

enum { D = 6, H = 2, B = 2 };

static nb_mha *make_mha(nb_module *model, bool bias) {
    nb_mha_config cfg = nb_mha_defaults(D, D, H);
    cfg.qkv_bias = cfg.out_bias = bias;
    return nb_mha_new_config(model, "attn", &cfg);
}

/* A model of dtype dt holding one MHA "attn" (biases as asked), and rng seeded. */
static nb_mha *fixture(nb_dtype dt, uint64_t seed, bool bias, nb_rng *rng, nb_module **model) {
    nb_rng_seed(rng, seed);
    *model = nb_model_new(dt, seed);
    nb_mha *m = make_mha(*model, bias);
    CU_ASSERT_PTR_NOT_NULL(m);
    return m;
}

static void test_bias_switches(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_mha *none = make_mha(model, false);
    nb_mha_config cfg = nb_mha_defaults(D, D, H);
    nb_mha *defaults = nb_mha_new_config(model, "defaults", &cfg);
    nb_mha *old = nb_mha_new(model, "old", D, D, H, true, 0.0);
    CU_ASSERT_TRUE_FATAL(none && defaults && old);
    nb_param p[16];
    /* bias=False: the four weights and nothing else. */
    CU_ASSERT_EQUAL(nb_module_named_params(&none->base, p, 16), 4);
    CU_ASSERT_STRING_EQUAL(p[3].name, "attn.out_proj.weight");
    CU_ASSERT_PTR_NULL(none->out_proj->bias);
    /* The tutorials' defaults: out_proj has a bias, the projections do not. */
    CU_ASSERT_EQUAL(nb_module_named_params(&defaults->base, p, 16), 5);
    CU_ASSERT_STRING_EQUAL(p[4].name, "defaults.out_proj.bias");
    CU_ASSERT_PTR_NULL(defaults->W_query->bias);
    /* The old constructor keeps its out_proj bias. */
    CU_ASSERT_EQUAL(nb_module_named_params(&old->base, p, 16), 8);
    CU_ASSERT_PTR_NOT_NULL(old->out_proj->bias);
    nb_module_free(model);
}

/* ---- gradchecks: inputs are x (or x_q then x_kv), then the optional float mask and head
 * mask, then the module's parameters. */
typedef struct {
    nb_mha *m;
    bool cross, causal, float_mask_input, head_mask_input;
    bool transpose_mask;        /* the float mask input is read as its (2, 3) transpose */
    int64_t Tq;                 /* cross: the first Tq rows of in[0] are queries */
    const nb_tensor *bool_mask; /* fixed attn_mask, or NULL */
    const nb_tensor *padding;
} grad_case;

static nb_tensor *run(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    grad_case *c = vctx;
    int next = 1;
    nb_mha_opts o = {
        .causal = c->causal, .attn_mask = c->bool_mask, .key_padding_mask = c->padding};
    if (c->float_mask_input)
        o.attn_mask = c->transpose_mask ? nb_transpose(in[next++], 2, 3) : in[next++];
    if (c->head_mask_input) o.head_mask = in[next++];
    if (!c->cross) return nb_mha_forward(c->m, in[0], &o);
    int64_t T = in[0]->shape[1];
    return nb_mha_forward_cross(c->m, nb_narrow(in[0], 1, 0, c->Tq),
                                nb_narrow(in[0], 1, c->Tq, T - c->Tq), &o);
}

static void gradcheck_case(grad_case *c, nb_tensor *x, nb_tensor *float_mask, nb_tensor *head_mask,
                           const char *what) {
    nb_tensor *inputs[32];
    int n = 0;
    inputs[n++] = nb_requires_grad_(x, true);
    if (float_mask) inputs[n++] = nb_requires_grad_(float_mask, true);
    if (head_mask) inputs[n++] = nb_requires_grad_(head_mask, true);
    c->float_mask_input = float_mask != NULL;
    c->head_mask_input = head_mask != NULL;
    nb_param params[16];
    int np = nb_module_named_params(&c->m->base, params, 16);
    for (int i = 0; i < np; i++) inputs[n++] = params[i].tensor;
    nb_gradcheck_result res;
    bool ok = nb_gradcheck(run, n, inputs, c, NULL, &res);
    printf("\n  %s: %s", what, res.message);
    CU_ASSERT_TRUE(ok);
}

static void test_gradchecks(void) {
    nb_rng rng;
    nb_rng_seed(&rng, 5);
    nb_module *model = nb_model_new(NB_F64, 3);
    nb_mha *m = make_mha(model, true), *bare = make_mha(nb_module_container(model, "b"), false);
    CU_ASSERT_TRUE_FATAL(m && bare);
    const int64_t T = 4;

    /* Float [T, T] mask with -inf and finite values, itself checked, and a head mask. */
    nb_tensor *fm = nb_randn(&rng, NB_F64, NB_SHAPE(T, T));
    nb_set(fm, NB_IDX(0, 2), -INFINITY);
    nb_set(fm, NB_IDX(3, 1), -INFINITY);
    grad_case c = {.m = m};
    gradcheck_case(&c, nb_randn(&rng, NB_F64, NB_SHAPE(B, T, D)), fm,
                   nb_from_array(NB_F64, NB_SHAPE(H), (double[]){0.75, -1.5}),
                   "float mask [T, T] and head mask");

    /* Float [B, H, T_q, T_k] read through a transposed (non-contiguous) view, cross-attention
     * T_q 3 < T_k 5, causal, no biases. */
    grad_case cr = {.m = bare, .cross = true, .causal = true, .Tq = 3, .transpose_mask = true};
    gradcheck_case(&cr, nb_randn(&rng, NB_F64, NB_SHAPE(B, 8, D)),
                   nb_randn(&rng, NB_F64, NB_SHAPE(B, H, 5, 3)), NULL,
                   "float mask [B, H, 3, 5], causal cross-attention, bias=False");

    /* Bool [B * H, T, T] (PyTorch's form) with key padding and a head mask on the fused
     * path. */
    uint8_t bh[B * H * 4 * 4] = {0};
    bh[1] = bh[2 * T * T + 3 * T] = bh[3 * T * T + 5] = 1;
    grad_case cb = {
        .m = m,
        .bool_mask = nb_from_array(NB_BOOL, NB_SHAPE(B * H, T, T), bh),
        .padding = nb_from_array(NB_BOOL, NB_SHAPE(B, T), (uint8_t[]){0, 0, 0, 1, 0, 0, 0, 0})};
    gradcheck_case(&cb, nb_randn(&rng, NB_F64, NB_SHAPE(B, T, D)), NULL,
                   nb_from_array(NB_F64, NB_SHAPE(H), (double[]){1.0, 0.0}),
                   "bool mask [B * H, T, T], key padding, head mask");
    nb_module_free(model);
}

/* ---- which path, and forms that must agree ------------------------------------------- */
static bool saw_attention, saw_masked_softmax;
static void record(const char *op) {
    if (strcmp(op, "attention") == 0) saw_attention = true;
    if (strcmp(op, "masked_softmax") == 0) saw_masked_softmax = true;
}

static nb_tensor *forward_recorded(nb_mha *m, const nb_tensor *x, const nb_mha_opts *o) {
    saw_attention = saw_masked_softmax = false;
    nba_set_record_hook(record);
    nb_tensor *y = nb_mha_forward(m, x, o);
    nba_set_record_hook(NULL);
    return y;
}

static void test_mask_forms_agree(void) {
    nb_rng rng;
    nb_module *model;
    nb_mha *m = fixture(NB_F32, 9, true, &rng, &model);
    if (!m) return;
    const int64_t T = 5;
    nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(B, T, D));
    /* A random bool [B, T, T] mask, its float 0/-inf twin, the [B, 1, T, T] and [B * H, T, T]
     * forms of it. */
    nb_tensor *bm = nb_lt(nb_rand(&rng, NB_F32, NB_SHAPE(B, T, T)), nb_scalar(NB_F32, 0.3));
    nb_tensor *fm = nb_masked_fill(nb_zeros(NB_F32, NB_SHAPE(B, T, T)), bm, -INFINITY);
    nb_tensor *bm4 = nb_view(bm, NB_SHAPE(B, 1, T, T));
    nb_tensor *bmh = nb_reshape(nb_expand(bm4, NB_SHAPE(B, H, T, T)), NB_SHAPE(B * H, T, T));

    nb_tensor *y_bool = forward_recorded(m, x, &(nb_mha_opts){.attn_mask = bm});
    CU_ASSERT_TRUE(saw_attention && !saw_masked_softmax);
    /* 0/-inf float masks are boolean masks: the fused op, bit for bit the same. */
    nb_tensor *y_float = forward_recorded(m, x, &(nb_mha_opts){.attn_mask = fm});
    CU_ASSERT_TRUE(saw_attention && !saw_masked_softmax);
    NBT_ASSERT_CLOSE(y_float, y_bool, 0, 0);
    NBT_ASSERT_CLOSE(nb_mha_forward(m, x, &(nb_mha_opts){.attn_mask = bm4}), y_bool, 0, 0);
    NBT_ASSERT_CLOSE(nb_mha_forward(m, x, &(nb_mha_opts){.attn_mask = bmh}), y_bool, 0, 0);

    /* Finite non-zero values take the op-by-op path (nn.h says so) and equal adding them by
     * hand... */
    nb_tensor *shift = nb_randn(&rng, NB_F32, NB_SHAPE(T, T));
    nb_tensor *w_op = NULL;
    nb_tensor *y_shift = forward_recorded(
        m, x, &(nb_mha_opts){.attn_mask = nb_add(fm, shift), .attn_weights = &w_op});
    CU_ASSERT_TRUE(!saw_attention && saw_masked_softmax);
    nb_tensor *q =
        nb_transpose(nb_view(nb_linear_forward(m->W_query, x), NB_SHAPE(B, T, H, 3)), 1, 2);
    nb_tensor *k =
        nb_transpose(nb_view(nb_linear_forward(m->W_key, x), NB_SHAPE(B, T, H, 3)), 1, 2);
    nb_tensor *scores = nb_mul_scalar(nb_matmul(q, nb_transpose(k, 2, 3)), 1 / sqrt(3.0));
    nb_tensor *by_hand =
        nb_softmax(nb_add(nb_add(scores, nb_view(fm, NB_SHAPE(B, 1, T, T))), shift), -1);
    NBT_ASSERT_CLOSE(w_op, by_hand, 1e-6, 1e-5);
    /* ...with or without the weights returned. */
    NBT_ASSERT_CLOSE(nb_mha_forward(m, x, &(nb_mha_opts){.attn_mask = nb_add(fm, shift)}), y_shift,
                     0, 0);
    nb_module_free(model);
}

/* causal with T_q != T_k blocks key j > query i (top-left), on both paths. */
static void test_causal_alignment(void) {
    nb_rng rng;
    nb_module *model;
    nb_mha *m = fixture(NB_F64, 11, true, &rng, &model);
    if (!m) return;
    const int64_t sizes[2][2] = {{3, 5}, {5, 3}};
    for (int s = 0; s < 2; s++) {
        const int64_t Tq = sizes[s][0], Tk = sizes[s][1];
        nb_tensor *xq = nb_randn(&rng, NB_F64, NB_SHAPE(B, Tq, D));
        nb_tensor *xkv = nb_randn(&rng, NB_F64, NB_SHAPE(B, Tk, D));
        nb_tensor *w = NULL;
        nb_tensor *y_op =
            nb_mha_forward_cross(m, xq, xkv, &(nb_mha_opts){.causal = true, .attn_weights = &w});
        nb_tensor *y_fused = nb_mha_forward_cross(m, xq, xkv, &(nb_mha_opts){.causal = true});
        NBT_ASSERT_CLOSE(y_fused, y_op, 1e-12, 1e-12);
        /* tril(ones(T_q, T_k)): query i sees keys 0..i, all of them once i >= T_k - 1. */
        bool aligned = true;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < Tq; i++)
                    for (int64_t j = 0; j < Tk; j++) {
                        double v = nb_get(w, NB_IDX(b, h, i, j));
                        aligned = aligned && (j > i ? v == 0 : v > 0);
                    }
        CU_ASSERT_TRUE(aligned);
        /* The same as the explicit mask triu(ones(T_q, T_k), 1). */
        nb_tensor *upper =
            nb_ne(nb_triu(nb_ones(NB_F64, NB_SHAPE(Tq, Tk)), 1), nb_scalar(NB_F64, 0));
        NBT_ASSERT_CLOSE(nb_mha_forward_cross(m, xq, xkv, &(nb_mha_opts){.attn_mask = upper}),
                         y_fused, 0, 0);
    }
    nb_module_free(model);
}

static void test_head_mask_values(void) {
    nb_rng rng;
    nb_module *model;
    nb_mha *m = fixture(NB_F32, 13, true, &rng, &model);
    if (!m) return;
    nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(B, 4, D));
    nb_tensor *plain = nb_mha_forward(m, x, NULL);
    /* Ones change nothing, bit for bit. */
    nb_tensor *ones = nb_ones(NB_F32, NB_SHAPE(H));
    NBT_ASSERT_CLOSE(nb_mha_forward(m, x, &(nb_mha_opts){.head_mask = ones}), plain, 0, 0);
    /* Zeros remove every head: what is left is out_proj's bias at every position. */
    nb_tensor *zeros = nb_zeros(NB_F32, NB_SHAPE(H));
    nb_tensor *none = nb_mha_forward(m, x, &(nb_mha_opts){.head_mask = zeros, .causal = true});
    NBT_ASSERT_CLOSE(none, nb_expand(m->out_proj->bias, NB_SHAPE(B, 4, D)), 0, 0);
    /* Head 1 removed equals head 1's value projection zeroed. */
    nb_tensor *y = nb_mha_forward(
        m, x, &(nb_mha_opts){.head_mask = nb_from_array(NB_F32, NB_SHAPE(H), (float[]){1, 0})});
    nb_tensor *wv = m->W_value->weight, *bv = m->W_value->bias;
    nb_fill_(nb_narrow(wv, 0, 3, 3), 0);
    nb_fill_(nb_narrow(bv, 0, 3, 3), 0);
    NBT_ASSERT_CLOSE(nb_mha_forward(m, x, NULL), y, 1e-6, 1e-5);
    nb_module_free(model);
}

/* Decoding through the KV cache works without biases. */
static void test_cache_without_bias(void) {
    nb_rng rng;
    nb_module *model;
    nb_mha *m = fixture(NB_F32, 17, false, &rng, &model);
    if (!m) return;
    const int64_t T = 6;
    nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(1, T, D));
    nb_tensor *full = nb_mha_forward(m, x, &(nb_mha_opts){.causal = true});
    nb_kv_cache *c = nb_kv_cache_for_mha(m, 1, T);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    for (int64_t t = 0; t < T; t++) {
        nb_tensor *y = nb_mha_forward(m, nb_narrow(x, 1, t, 1), &(nb_mha_opts){.cache = c});
        NBT_ASSERT_CLOSE(y, nb_narrow(full, 1, t, 1), 1e-6, 1e-5);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, 1));
    }
    nb_kv_cache_free(c);
    nb_module_free(model);
}

static void expect_error(nb_mha *m, const nb_tensor *x, const nb_mha_opts *o, const char *what) {
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_mha_forward(m, x, o));
    const char *err = nb_last_error();
    bool named = strstr(err, "MultiHeadAttention") && strstr(err, "'attn'") && strstr(err, what);
    if (!named) printf("\n    expected an error naming %s, got \"%s\"", what, err);
    CU_ASSERT_TRUE(named);
}

static void test_bad_masks(void) {
    nb_rng rng;
    nb_module *model;
    nb_mha *m = fixture(NB_F32, 19, true, &rng, &model);
    if (!m) return;
    const int64_t T = 3;
    nb_tensor *x = nb_randn(&rng, NB_F32, NB_SHAPE(B, T, D));
    /* 3 is neither B, 1 nor B * H. */
    expect_error(m, x, &(nb_mha_opts){.attn_mask = nb_zeros(NB_BOOL, NB_SHAPE(3, T, T))},
                 "[3, 3, 3]");
    expect_error(m, x, &(nb_mha_opts){.attn_mask = nb_zeros(NB_BOOL, NB_SHAPE(B, 3, T, T))},
                 "[2, 3, 3, 3]");
    expect_error(m, x, &(nb_mha_opts){.attn_mask = nb_zeros(NB_BOOL, NB_SHAPE(T, T + 1))}, "T_k 3");
    expect_error(m, x, &(nb_mha_opts){.attn_mask = nb_zeros(NB_I64, NB_SHAPE(T, T))}, "int64");
    expect_error(m, x, &(nb_mha_opts){.attn_mask = nb_zeros(NB_F64, NB_SHAPE(T, T))}, "float64");
    nb_tensor *nan_mask = nb_zeros(NB_F32, NB_SHAPE(T, T));
    nb_set(nan_mask, NB_IDX(1, 2), NAN);
    expect_error(m, x, &(nb_mha_opts){.attn_mask = nan_mask}, "element 5");
    nb_set(nan_mask, NB_IDX(1, 2), INFINITY);
    expect_error(m, x, &(nb_mha_opts){.attn_mask = nan_mask}, "element 5 is inf");
    expect_error(m, x, &(nb_mha_opts){.head_mask = nb_ones(NB_F32, NB_SHAPE(3))}, "head_mask");
    expect_error(m, x, &(nb_mha_opts){.head_mask = nb_ones(NB_F32, NB_SHAPE(1, H))}, "[1, 2]");
    expect_error(m, x, &(nb_mha_opts){.head_mask = nb_ones(NB_F64, NB_SHAPE(H))}, "float64");
    nb_module_free(model);
}

/* TransformerLM passes row l of a [layers, heads] head mask to layer l. */
static nb_tensor *run_lm(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    nb_transformer_lm *lm = vctx;
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(2, 4), (int64_t[]){1, 4, 2, 0, 3, 3, 1, 2});
    return nb_transformer_lm_forward_opts(
        lm, tokens, &(nb_lm_forward_opts){.causal = true, .head_mask = in[0]});
}

static void test_lm_head_mask(void) {
    nb_module *model = nb_model_new(NB_F64, 21);
    nb_transformer_lm *lm = nb_transformer_lm_new(model, "lm", 5, 8, 8, 2, 2, 0.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    nb_tensor *tokens = nb_from_array(NB_I64, NB_SHAPE(2, 4), (int64_t[]){1, 4, 2, 0, 3, 3, 1, 2});
    nb_tensor *plain = nb_transformer_lm_forward(lm, tokens, true, NULL, NULL);
    nb_tensor *ones = nb_ones(NB_F64, NB_SHAPE(2, 2));
    NBT_ASSERT_CLOSE(nb_transformer_lm_forward_opts(
                         lm, tokens, &(nb_lm_forward_opts){.causal = true, .head_mask = ones}),
                     plain, 0, 0);
    /* Layer 1's head 0 off equals that head's mask in layer 1 alone. */
    nb_tensor *hm = nb_from_array(NB_F64, NB_SHAPE(2, 2), (double[]){1, 1, 0, 1});
    nb_tensor *y = nb_transformer_lm_forward_opts(
        lm, tokens, &(nb_lm_forward_opts){.causal = true, .head_mask = hm});
    CU_ASSERT_FALSE(nbtest_close(y, plain, 1e-6, 0));
    nb_fill_(nb_narrow(lm->blocks[1]->attn->W_value->weight, 0, 0, 4), 0);
    NBT_ASSERT_CLOSE(nb_transformer_lm_forward(lm, tokens, true, NULL, NULL), y, 1e-12, 1e-12);

    nb_tensor *grad_hm = nb_requires_grad_(
        nb_from_array(NB_F64, NB_SHAPE(2, 2), (double[]){1, 0.5, -0.25, 2}), true);
    nb_gradcheck_result res;
    bool ok = nb_gradcheck(run_lm, 1, &grad_hm, lm, NULL, &res);
    printf("\n  TransformerLM head mask: %s", res.message);
    CU_ASSERT_TRUE(ok);

    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_transformer_lm_forward_opts(
        lm, tokens, &(nb_lm_forward_opts){.head_mask = nb_ones(NB_F64, NB_SHAPE(2))}));
    NBT_ASSERT_ERROR("'lm': head_mask must be [2, 2] (layers, heads), got [2]");
    nb_module_free(model);
}

int main(void) {
    const nbtest_case cases[] = {
        {"bias=False switches every bias off; the defaults keep out_proj's", test_bias_switches},
        {"gradchecks: float masks, [B*H] and [B,H] masks, head mask, causal T_q != T_k",
         test_gradchecks},
        {"mask forms agree; 0/-inf float masks are fused, finite ones op by op",
         test_mask_forms_agree},
        {"causal with T_q != T_k is top-left aligned on both paths", test_causal_alignment},
        {"head mask: ones change nothing, zeros leave the bias, 0 removes a head",
         test_head_mask_values},
        {"the KV cache decodes an MHA without biases", test_cache_without_bias},
        {"bad masks are errors naming the module and the shapes", test_bad_masks},
        {"TransformerLM: a [layers, heads] head mask, gradchecked", test_lm_head_mask},
    };
    return nbtest_run("MultiHeadAttention options", cases, sizeof cases / sizeof cases[0]);
}
