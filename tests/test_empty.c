/* Zero-size dimensions in every op of ops.h, as PyTorch's empty tensors behave: an op on an
 * empty input returns an empty output of the right shape, its backward runs and gives every
 * input a zero gradient of the input's shape; reductions over nothing give sum 0 and mean NaN
 * and max is an error; a product over K = 0 is zeros (plus the bias). Expected values are by
 * hand: a sum over no elements is 0, a mean is 0/0. */
#include "autograd/op_def.h"
#include "harness.h"

#include <stdlib.h>

static nb_tensor *leaf(int nd, const int64_t *shape) {
    return nb_requires_grad_(nb_zeros(NB_F64, nd, shape), true);
}
#define LEAF(...) leaf(NB_SHAPE(__VA_ARGS__))
#define SHAPE_0D 0, NULL /* the shape of a 0-d tensor */

static bool all_equal(const nb_tensor *t, double v) {
    int64_t n = nb_numel(t);
    double *d = malloc(sizeof *d * (size_t)(n > 0 ? n : 1));
    bool ok = nb_to_doubles(t, d);
    for (int64_t i = 0; ok && i < n; i++) ok = isnan(v) ? isnan(d[i]) : d[i] == v;
    free(d);
    return ok;
}

/* out has shape (nd, shape), the backward of its sum succeeds, and each leaf gets a gradient
 * of its own shape filled with grad_value (0 when out is empty). */
static void check(const char *what, nb_tensor *out, int nd, const int64_t *shape, int nleaves,
                  nb_tensor *const *leaves, double grad_value) {
    if (!out) fprintf(stderr, "%s: %s\n", what, nb_last_error());
    CU_ASSERT_TRUE_FATAL(nbtest_has_shape(out, nd, shape));
    for (int i = 0; i < nleaves; i++) nb_zero_grad(leaves[i]);
    nb_tensor *s = nb_sum(out);
    bool ok = s && nb_backward(s, NULL);
    if (!ok) fprintf(stderr, "%s backward: %s\n", what, nb_last_error());
    CU_ASSERT_TRUE(ok);
    for (int i = 0; ok && i < nleaves; i++) {
        const nb_tensor *g = nb_grad(leaves[i]);
        bool good =
            g && nbtest_has_shape(g, leaves[i]->ndim, leaves[i]->shape) && all_equal(g, grad_value);
        if (!good) fprintf(stderr, "%s: gradient of input %d is wrong\n", what, i);
        CU_ASSERT_TRUE(good);
    }
}
#define CHECK(what, out, shape, value, ...)                                                        \
    check(what, out, shape, (int)(sizeof((nb_tensor *[]){__VA_ARGS__}) / sizeof(nb_tensor *)),     \
          (nb_tensor *[]){__VA_ARGS__}, value)

static void test_linear_and_matmul(void) {
    nb_tensor *x = LEAF(2, 0, 8), *w = LEAF(5, 8), *b = LEAF(5);
    CHECK("linear [2,0,8] (empty)", nb_f_linear(x, w, b), NB_SHAPE(2, 0, 5), 0, x, w, b);
    CHECK("linear no bias (empty)", nb_f_linear(x, w, NULL), NB_SHAPE(2, 0, 5), 0, x, w);
    /* The float32 kernels (the GEMM with the bias fused) take the same path. */
    nb_tensor *xf = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2, 0, 8)), true);
    nb_tensor *wf = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(5, 8)), true);
    nb_tensor *bf = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(5)), true);
    CHECK("linear f32 (empty)", nb_f_linear(xf, wf, bf), NB_SHAPE(2, 0, 5), 0, xf, wf, bf);
    /* in = 0: the output is the bias on every row; d(sum)/d(bias) counts the 3 rows. */
    nb_tensor *x0 = LEAF(3, 0), *w0 = LEAF(4, 0),
              *b0 = nb_requires_grad_(nb_full(NB_F64, NB_SHAPE(4), 1.5), true);
    nb_tensor *y = nb_f_linear(x0, w0, b0);
    CU_ASSERT_TRUE(all_equal(y, 1.5));
    CHECK("linear in=0 (bias) (empty)", y, NB_SHAPE(3, 4), 3, b0);
    CHECK("linear in=0 (x, W) (empty)", nb_f_linear(x0, w0, b0), NB_SHAPE(3, 4), 0, x0, w0);
    nb_tensor *w_out0 = LEAF(0, 8), *b_out0 = LEAF(0), *x1 = LEAF(3, 8);
    CHECK("linear out=0 (empty)", nb_f_linear(x1, w_out0, b_out0), NB_SHAPE(3, 0), 0, x1, w_out0,
          b_out0);

    nb_tensor *a = LEAF(2, 0), *c = LEAF(0, 3);
    nb_tensor *k0 = nb_matmul(a, c);
    CU_ASSERT_TRUE(all_equal(k0, 0));
    CHECK("matmul K=0 (empty)", k0, NB_SHAPE(2, 3), 0, a, c);
    nb_tensor *m0 = LEAF(0, 4), *r = LEAF(4, 3);
    CHECK("matmul M=0 (empty)", nb_matmul(m0, r), NB_SHAPE(0, 3), 0, m0, r);
    nb_tensor *bt = LEAF(0, 2, 4);
    CHECK("matmul batch 0 (empty)", nb_matmul(bt, r), NB_SHAPE(0, 2, 3), 0, bt, r);
    nb_tensor *u = LEAF(0), *v = LEAF(0);
    nb_tensor *dot = nb_matmul(u, v);
    CU_ASSERT_TRUE(all_equal(dot, 0));
    CHECK("dot of empties (empty)", dot, SHAPE_0D, 0, u, v);
}

static void test_reductions(void) {
    nb_tensor *x = LEAF(2, 0, 8);
    nb_tensor *s = nb_sum(x), *m = nb_mean(x);
    CU_ASSERT_EQUAL(nb_item(s), 0);
    CU_ASSERT_TRUE(isnan(nb_item(m)));
    CHECK("sum (empty)", s, SHAPE_0D, 0, x);
    nb_tensor *sd = nb_sum_dims(x, 1, (int[]){1}, false);
    CU_ASSERT_TRUE(all_equal(sd, 0));
    CHECK("sum over the empty dim (empty)", sd, NB_SHAPE(2, 8), 0, x);
    nb_tensor *md = nb_mean_dims(x, 1, (int[]){1}, true);
    CU_ASSERT_TRUE(all_equal(md, NAN));
    CU_ASSERT_TRUE(nbtest_has_shape(md, NB_SHAPE(2, 1, 8)));
    CHECK("mean over another dim (empty)", nb_mean_dims(x, 1, (int[]){2}, false), NB_SHAPE(2, 0), 0,
          x);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_max_dim(x, 1, false, NULL));
    NBT_ASSERT_ERROR("max_dim");
    NBT_ASSERT_ERROR("size 0");
    nb_tensor *idx;
    CHECK("max over another dim (empty)", nb_max_dim(x, 2, false, &idx), NB_SHAPE(2, 0), 0, x);
    CU_ASSERT_TRUE(nbtest_has_shape(idx, NB_SHAPE(2, 0)));
}

static void test_elementwise(void) {
    nb_tensor *x = LEAF(2, 0, 8), *row = LEAF(8), *y = LEAF(0, 3), *col = LEAF(1, 3);
    CHECK("add_scalar (empty)", nb_add_scalar(x, 1), NB_SHAPE(2, 0, 8), 0, x);
    CHECK("mul_scalar (empty)", nb_mul_scalar(x, 2), NB_SHAPE(2, 0, 8), 0, x);
    CHECK("pow_scalar (empty)", nb_pow_scalar(x, 2), NB_SHAPE(2, 0, 8), 0, x);
    CHECK("add broadcast (empty)", nb_add(x, row), NB_SHAPE(2, 0, 8), 0, x, row);
    CHECK("sub broadcast (empty)", nb_sub(x, row), NB_SHAPE(2, 0, 8), 0, x, row);
    CHECK("mul broadcast (empty)", nb_mul(y, col), NB_SHAPE(0, 3), 0, y, col);
    CHECK("div broadcast (empty)", nb_div(y, col), NB_SHAPE(0, 3), 0, y, col);
    /* Broadcasting a size-1 dim against 0 gives 0, as in PyTorch. */
    nb_tensor *one = LEAF(1, 8);
    CHECK("broadcast 1 against 0 (empty)", nb_add(one, LEAF(0, 1)), NB_SHAPE(0, 8), 0, one);
    CHECK("masked_fill (empty)", nb_masked_fill(x, nb_zeros(NB_BOOL, NB_SHAPE(0, 8)), -1),
          NB_SHAPE(2, 0, 8), 0, x);
}

static void test_softmax_family(void) {
    nb_tensor *x = LEAF(2, 0, 8), *rows0 = LEAF(2, 0), *sq = LEAF(2, 0, 0);
    CHECK("softmax last (empty)", nb_softmax(x, -1), NB_SHAPE(2, 0, 8), 0, x);
    CHECK("softmax over 0 (empty)", nb_softmax(x, 1), NB_SHAPE(2, 0, 8), 0, x);
    CHECK("log_softmax over 0 (empty)", nb_log_softmax(rows0, -1), NB_SHAPE(2, 0), 0, rows0);
    CHECK("masked_softmax causal (empty)", nb_masked_softmax(x, NULL, true, 0.5), NB_SHAPE(2, 0, 8),
          0, x);
    CHECK("masked_softmax T=0 (empty)", nb_masked_softmax(sq, NULL, true, 1), NB_SHAPE(2, 0, 0), 0,
          sq);
}

static void test_views_and_joins(void) {
    nb_tensor *x = LEAF(2, 0, 8), *e = LEAF(0, 3), *full = LEAF(2, 3);
    CHECK("view (empty)", nb_view(x, NB_SHAPE(-1, 8)), NB_SHAPE(0, 8), 0, x);
    CHECK("reshape (empty)", nb_reshape(nb_transpose(x, 0, 2), NB_SHAPE(-1)), NB_SHAPE(0), 0, x);
    CHECK("permute (empty)", nb_permute(x, (int[]){2, 0, 1}), NB_SHAPE(8, 2, 0), 0, x);
    CHECK("unsqueeze (empty)", nb_unsqueeze(x, 0), NB_SHAPE(1, 2, 0, 8), 0, x);
    CHECK("squeeze_all (empty)", nb_squeeze_all(nb_unsqueeze(x, 0)), NB_SHAPE(2, 0, 8), 0, x);
    CHECK("expand (empty)", nb_expand(e, NB_SHAPE(4, 0, 3)), NB_SHAPE(4, 0, 3), 0, e);
    nb_tensor *w = LEAF(5, 8);
    CHECK("narrow to 0 (empty)", nb_narrow(w, 0, 5, 0), NB_SHAPE(0, 8), 0, w);
    CHECK("select (empty)", nb_select(x, 0, 1), NB_SHAPE(0, 8), 0, x);
    CHECK("contiguous (empty)", nb_contiguous(nb_transpose(x, 0, 2)), NB_SHAPE(8, 0, 2), 0, x);
    CHECK("concat with empty (empty)", nb_concat(2, (nb_tensor *[]){e, full}, 0), NB_SHAPE(2, 3), 1,
          e);
    CHECK("concat of empties (empty)", nb_concat(2, (nb_tensor *[]){e, e}, 1), NB_SHAPE(0, 6), 0,
          e);
    CHECK("stack of empties (empty)", nb_stack(2, (nb_tensor *[]){e, e}, 1), NB_SHAPE(0, 2, 3), 0,
          e);
    nb_tensor *parts[4];
    CU_ASSERT_EQUAL(nb_split(e, 2, 0, parts, 4), 1);
    CU_ASSERT_TRUE(nbtest_has_shape(parts[0], NB_SHAPE(0, 3)));
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_select(x, 1, 0));
    NBT_ASSERT_ERROR("out of range");
}

static void test_losses_and_layers(void) {
    nb_tensor *logits = LEAF(0, 3), *none = nb_zeros(NB_I64, NB_SHAPE(0));
    nb_tensor *ce_sum = nb_cross_entropy(logits, none, -100, NB_REDUCE_SUM);
    CU_ASSERT_EQUAL(nb_item(ce_sum), 0);
    CHECK("cross_entropy sum (empty)", ce_sum, SHAPE_0D, 0, logits);
    CHECK("cross_entropy none (empty)", nb_cross_entropy(logits, none, -100, NB_REDUCE_NONE),
          NB_SHAPE(0), 0, logits);
    /* Mean over no counted target: 0, the documented rule for every-target-ignored. */
    CU_ASSERT_EQUAL(nb_item(nb_cross_entropy(logits, none, -100, NB_REDUCE_MEAN)), 0);

    nb_tensor *a = LEAF(2, 0, 8), *b = LEAF(8);
    CU_ASSERT_TRUE(isnan(nb_item(nb_mse_loss(a, b, NB_REDUCE_MEAN))));
    nb_tensor *mse = nb_mse_loss(a, b, NB_REDUCE_SUM);
    CU_ASSERT_EQUAL(nb_item(mse), 0);
    CHECK("mse sum (empty)", mse, SHAPE_0D, 0, a, b);
    CHECK("mse none (empty)", nb_mse_loss(a, b, NB_REDUCE_NONE), NB_SHAPE(2, 0, 8), 0, a, b);

    nb_tensor *g = LEAF(8), *beta = LEAF(8), *d0 = LEAF(2, 0), *g0 = LEAF(0), *b0 = LEAF(0);
    CHECK("layer_norm no rows (empty)", nb_f_layer_norm(a, g, beta, 1e-5), NB_SHAPE(2, 0, 8), 0, a,
          g, beta);
    CHECK("layer_norm D=0 (empty)", nb_f_layer_norm(d0, g0, b0, 1e-5), NB_SHAPE(2, 0), 0, d0, g0,
          b0);

    nb_tensor *table = LEAF(5, 8), *narrow = LEAF(5, 0), *empty_table = LEAF(0, 4);
    CHECK("embedding of no tokens (empty)", nb_f_embedding(table, nb_zeros(NB_I64, NB_SHAPE(2, 0))),
          NB_SHAPE(2, 0, 8), 0, table);
    CHECK("embedding D=0 (empty)", nb_f_embedding(narrow, nb_zeros(NB_I64, NB_SHAPE(3))),
          NB_SHAPE(3, 0), 0, narrow);
    CHECK("embedding V=0 (empty)", nb_f_embedding(empty_table, none), NB_SHAPE(0, 4), 0,
          empty_table);
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    CHECK("dropout (empty)", nb_f_dropout(&rng, a, 0.5, true), NB_SHAPE(2, 0, 8), 0, a);
}

static void test_attention_without_causal_mask(void) {
    /* (The causal T_q = 0 case is covered with the attention kernels' own tests.) */
    nb_tensor *q = LEAF(2, 0, 4), *k = LEAF(2, 3, 4), *v = LEAF(2, 3, 4);
    CHECK("attention T_q=0 (empty)", nb_f_attention(q, k, v, 2, NULL, false, 0.5),
          NB_SHAPE(2, 0, 4), 0, q, k, v);
    nb_tensor *q3 = LEAF(2, 3, 4), *k0 = LEAF(2, 0, 4), *v0 = LEAF(2, 0, 4);
    nb_tensor *o = nb_f_attention(q3, k0, v0, 2, NULL, false, 0.5);
    CU_ASSERT_TRUE(all_equal(o, 0)); /* no keys: every row fully blocked gives zeros */
    CHECK("attention T_k=0 (empty)", o, NB_SHAPE(2, 3, 4), 0, q3, k0, v0);
    nb_tensor *qb = LEAF(0, 3, 4);
    CHECK("attention B=0 (empty)", nb_f_attention(qb, qb, qb, 2, NULL, false, 0.5),
          NB_SHAPE(0, 3, 4), 0, qb);
}

static void test_qkv_attention(void) {
    nb_tensor *w = LEAF(4, 4), *w2 = LEAF(4, 4), *w3 = LEAF(4, 4);
    nb_tensor *x = LEAF(2, 0, 4); /* T = 0 */
    CHECK("qkv_attention T=0 (empty)", nb_f_qkv_attention(x, w, w2, w3, 2, true, 0.5),
          NB_SHAPE(2, 0, 4), 0, x, w, w2, w3);
    /* D_in = 0: q, k, v are zeros, so each row averages zero values */
    nb_tensor *x0 = LEAF(2, 3, 0), *v0[3] = {LEAF(4, 0), LEAF(4, 0), LEAF(4, 0)};
    nb_tensor *o = nb_f_qkv_attention(x0, v0[0], v0[1], v0[2], 2, true, 0.5);
    CU_ASSERT_TRUE(all_equal(o, 0));
    CHECK("qkv_attention D_in=0 (empty)", o, NB_SHAPE(2, 3, 4), 0, x0, v0[0], v0[1], v0[2]);
    nb_tensor *x3 = LEAF(2, 3, 4), *e[3] = {LEAF(0, 4), LEAF(0, 4), LEAF(0, 4)}; /* D = 0 */
    CHECK("qkv_attention D=0 (empty)", nb_f_qkv_attention(x3, e[0], e[1], e[2], 2, false, 0.5),
          NB_SHAPE(2, 3, 0), 0, x3, e[0], e[1], e[2]);
}

/* Every registered op (autograd/op_list.h), through its catalogue entries of kind random with
 * the leading (batch) dim of its inputs made 0: the op returns a tensor whose backward runs
 * and gives each input a gradient of its shape, or NULL with a message (e.g. a max over an
 * empty dim); never a crash and never NULL without a message. */
static void test_every_registered_op_on_an_empty_batch(void) {
    int tried = 0, errors = 0;
    for (int o = 0; o < nba_op_registry_count; o++) {
        const nba_op_def *op = nba_op_registry[o];
        for (int e = 0; e < op->nentries; e++) {
            const nba_entry *entry = &op->entries[e];
            const nba_input_spec *first = &entry->inputs[0];
            if (entry->kind != NBA_RANDOM || first->ndim < 2) continue;
            nb_scope_begin();
            nb_tensor *inputs[NBA_MAX_INPUTS];
            for (int i = 0; i < entry->ninputs; i++) {
                const nba_input_spec *spec = &entry->inputs[i];
                int64_t shape[NB_MAX_DIMS];
                memcpy(shape, spec->shape, sizeof shape);
                if (spec->ndim >= 2 && shape[0] == first->shape[0]) shape[0] = 0;
                inputs[i] = nb_requires_grad_(nb_zeros(NB_F64, spec->ndim, shape), !spec->constant);
            }
            nb_clear_error();
            nb_tensor *out = entry->fn(inputs, entry->ninputs, (void *)entry->ctx);
            tried++;
            if (!out) {
                errors++;
                printf("  %s [%s]: %s\n", op->name, entry->name, nb_last_error());
                if (!nb_last_error()[0]) fprintf(stderr, "%s: NULL without a message\n", op->name);
                CU_ASSERT_NOT_EQUAL(nb_last_error()[0], '\0');
            } else if (out->requires_grad) {
                nb_tensor *s = nb_sum(out);
                bool ok = s && nb_backward(s, NULL);
                if (!ok)
                    fprintf(stderr, "%s [%s] backward: %s\n", op->name, entry->name,
                            nb_last_error());
                CU_ASSERT_TRUE(ok);
                for (int i = 0; ok && i < entry->ninputs; i++) {
                    const nb_tensor *g = nb_grad(inputs[i]);
                    if (inputs[i]->requires_grad && g)
                        CU_ASSERT_TRUE(nbtest_has_shape(g, inputs[i]->ndim, inputs[i]->shape));
                }
            }
            nb_scope_end();
        }
    }
    printf("  %d entries run on an empty batch, %d refused with a message\n", tried, errors);
    CU_ASSERT_TRUE(tried > 20);
}

int main(void) {
    const nbtest_case cases[] = {
        {"linear and matmul", test_linear_and_matmul},
        {"reductions", test_reductions},
        {"elementwise", test_elementwise},
        {"softmax family", test_softmax_family},
        {"views and joins", test_views_and_joins},
        {"losses and layers", test_losses_and_layers},
        {"attention without causal mask", test_attention_without_causal_mask},
        {"qkv_attention: T, D_in and D of 0", test_qkv_attention},
        {"every registered op on an empty batch", test_every_registered_op_on_an_empty_batch},
    };
    return nbtest_run("empty", cases, sizeof cases / sizeof cases[0]);
}
