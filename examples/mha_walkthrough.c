/* The tutorials' worked example, step by step: 3 tokens, d_in = d_out = 6, 2 heads of 3.
 * Each stage prints its shape and values, as the PyTorch notebooks do. */
#include <nabla/nabla.h>

#include <math.h>
#include <stdio.h>

static void stage(const char *title, const nb_tensor *t) {
    printf("\n--- %s\n", title);
    if (!t) {
        printf("error: %s\n", nb_last_error());
        return;
    }
    nb_print(t);
}

/* The same attention, one head at a time, with plain 2-D matmuls. */
static nb_tensor *per_head_loop(nb_mha *m, const nb_tensor *x) {
    nb_tensor *x2 = nb_select(x, 0, 0); /* [3, 6] */
    nb_tensor *q = nb_linear_forward(m->W_query, x2), *k = nb_linear_forward(m->W_key, x2),
              *v = nb_linear_forward(m->W_value, x2);
    nb_tensor *heads[8];
    nb_tensor *causal = nb_to_dtype(nb_triu(nb_ones(NB_F64, NB_SHAPE(3, 3)), 1), NB_BOOL);
    for (int64_t h = 0; h < m->num_heads; h++) {
        nb_tensor *qh = nb_narrow(q, 1, h * m->head_dim, m->head_dim);
        nb_tensor *kh = nb_narrow(k, 1, h * m->head_dim, m->head_dim);
        nb_tensor *vh = nb_narrow(v, 1, h * m->head_dim, m->head_dim);
        nb_tensor *s =
            nb_mul_scalar(nb_matmul(qh, nb_transpose(kh, 0, 1)), 1.0 / sqrt((double)m->head_dim));
        heads[h] = nb_matmul(nb_softmax(nb_masked_fill(s, causal, -INFINITY), -1), vh);
    }
    nb_tensor *ctx = nb_concat((int)m->num_heads, heads, 1); /* [3, 6] */
    return nb_unsqueeze(nb_linear_forward(m->out_proj, ctx), 0);
}

typedef struct {
    nb_mha *mha;
} check_ctx;

static nb_tensor *attention_fn(nb_tensor *const *in, int n, void *vctx) {
    (void)n;
    check_ctx *c = vctx;
    return nb_mha_forward(c->mha, in[0], &(nb_mha_opts){.causal = true});
}

int main(void) {
    nb_module *model = nb_model_new(NB_F64, 123);
    nb_mha *mha = nb_mha_new(model, "attn", 6, 6, 2, false, 0.0);
    if (!mha) {
        fprintf(stderr, "%s\n", nb_last_error());
        return 1;
    }
    nb_scope_begin();
    const double x_data[] = {1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1, 1, 1, 1, 1, 1, 1};
    nb_tensor *x = nb_from_array(NB_F64, NB_SHAPE(1, 3, 6), x_data);
    const int64_t B = 1, T = 3, H = 2, hd = 3, D = 6;
    stage("x: batch 1, 3 tokens, d_in 6", x);

    nb_tensor *Q = nb_linear_forward(mha->W_query, x), *K = nb_linear_forward(mha->W_key, x),
              *V = nb_linear_forward(mha->W_value, x);
    stage("Q = W_query(x) [1, 3, 6]", Q);
    stage("K = W_key(x) [1, 3, 6]", K);
    stage("V = W_value(x) [1, 3, 6]", V);

    nb_tensor *Qh = nb_view(Q, NB_SHAPE(B, T, H, hd));
    stage("Q.view(1, 3, 2, 3): split the last dim into 2 heads of 3", Qh);
    Qh = nb_transpose(Qh, 1, 2);
    nb_tensor *Kh = nb_transpose(nb_view(K, NB_SHAPE(B, T, H, hd)), 1, 2);
    nb_tensor *Vh = nb_transpose(nb_view(V, NB_SHAPE(B, T, H, hd)), 1, 2);
    stage("Q.transpose(1, 2): [batch, head, token, head_dim] (a view, no copy)", Qh);

    nb_tensor *scores = nb_matmul(Qh, nb_transpose(Kh, 2, 3));
    stage("scores = Q @ K.transpose(2, 3) [1, 2, 3, 3]", scores);
    scores = nb_mul_scalar(scores, 1.0 / sqrt((double)hd));
    stage("scores / sqrt(3)", scores);
    nb_tensor *mask = nb_to_dtype(nb_triu(nb_ones(NB_F64, NB_SHAPE(T, T)), 1), NB_BOOL);
    scores = nb_masked_fill(scores, mask, -INFINITY);
    stage("causal mask: -inf above the diagonal", scores);
    nb_tensor *weights = nb_softmax(scores, -1);
    stage("softmax over the keys (each row sums to 1)", weights);
    stage("row sums", nb_sum_dims(weights, 1, (int[]){-1}, false));

    nb_tensor *ctx = nb_matmul(weights, Vh);
    stage("context = weights @ V [1, 2, 3, 3]", ctx);
    ctx = nb_transpose(ctx, 1, 2);
    stage("context.transpose(1, 2) [1, 3, 2, 3]", ctx);
    ctx = nb_view(nb_contiguous(ctx), NB_SHAPE(B, T, D));
    stage("context.contiguous().view(1, 3, 6): heads merged", ctx);
    nb_tensor *out = nb_linear_forward(mha->out_proj, ctx);
    stage("out_proj(context) [1, 3, 6]", out);

    /* Three routes to the same numbers. */
    nb_tensor *loop = per_head_loop(mha, x);
    nb_tensor *module = nb_mha_forward(mha, x, &(nb_mha_opts){.causal = true});
    double a[18], b[18], c[18], worst_loop = 0, worst_module = 0;
    nb_to_doubles(out, a);
    nb_to_doubles(loop, b);
    nb_to_doubles(module, c);
    for (int i = 0; i < 18; i++) {
        worst_loop = fmax(worst_loop, fabs(a[i] - b[i]));
        worst_module = fmax(worst_module, fabs(a[i] - c[i]));
    }
    printf("\n--- checks\nbatched vs per-head loop: max difference %.3g\n", worst_loop);
    printf("step by step vs nb_mha_forward (fused masked softmax): max difference %.3g\n",
           worst_module);

    /* Backpropagate, then check every gradient against finite differences. */
    nb_tensor *xg = nb_requires_grad_(nb_clone(x), true);
    nb_tensor *loss = nb_sum(nb_mha_forward(mha, xg, &(nb_mha_opts){.causal = true}));
    nb_backward(loss, NULL);
    stage("d sum(out) / d x", nb_grad(xg));
    nb_param params[8];
    int np = nb_module_named_params(&mha->base, params, 8);
    nb_tensor *inputs[9] = {xg};
    for (int i = 0; i < np; i++) inputs[i + 1] = params[i].tensor;
    nb_gradcheck_result res;
    check_ctx cc = {mha};
    bool ok = nb_gradcheck(attention_fn, np + 1, inputs, &cc, NULL, &res);
    printf("%s\n", res.message);
    bool same = worst_loop < 1e-12 && worst_module < 1e-12;
    nb_scope_end();
    nb_module_free(model);
    nb_shutdown();
    return ok && same ? 0 : 1;
}
