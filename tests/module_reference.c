/* The golden spec's two functions per module (module_table.h): the parameters a case must
 * hold, under the names and with the shapes nabla's modules use, from the config alone; and
 * the module's computation written with nabla's functional ops (matmul, masked_softmax,
 * layer_norm, ...), which must reproduce PyTorch's outputs and gradients before the module
 * itself is compared (test_module_goldens). */
#include "module_table.h"

#include <math.h>
#include <stdio.h>

static int64_t config_int(const json_t *c, const char *key) {
    return json_integer_value(json_object_get(c, key));
}
static bool config_bool(const json_t *c, const char *key) {
    return json_is_true(json_object_get(c, key));
}
static double config_double(const json_t *c, const char *key) {
    return json_number_value(json_object_get(c, key));
}

/* ---- parameter lists --------------------------------------------------------------------- */
/* Appends "<prefix>.<leaf>" (or leaf when prefix is "") with shape {d0[, d1]}. */
static int add(nbtest_param *out, int n, int max, const char *prefix, const char *leaf, int ndim,
               int64_t d0, int64_t d1) {
    if (n < 0 || n >= max) return -1;
    snprintf(out[n].name, sizeof out[n].name, "%s%s%s", prefix, *prefix ? "." : "", leaf);
    out[n].ndim = ndim;
    out[n].shape[0] = d0;
    out[n].shape[1] = d1;
    return n + 1;
}

static int linear_params(nbtest_param *out, int n, int max, const char *prefix, int64_t in,
                         int64_t outf, bool bias) {
    n = add(out, n, max, prefix, "weight", 2, outf, in);
    return bias ? add(out, n, max, prefix, "bias", 1, outf, 0) : n;
}

static int layernorm_params(nbtest_param *out, int n, int max, const char *prefix, int64_t d) {
    return add(out, add(out, n, max, prefix, "weight", 1, d, 0), max, prefix, "bias", 1, d, 0);
}

static int mha_params(nbtest_param *out, int n, int max, const char *prefix, int64_t d_in,
                      int64_t d_out, bool qkv_bias) {
    static const char *const proj[] = {"W_query", "W_key", "W_value"};
    char p[64];
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s%s", prefix, proj[k]);
        n = linear_params(out, n, max, p, d_in, d_out, qkv_bias);
    }
    snprintf(p, sizeof p, "%sout_proj", prefix);
    return linear_params(out, n, max, p, d_out, d_out, true);
}

int nbtest_linear_params(const json_t *c, nbtest_param *out, int max) {
    return linear_params(out, 0, max, "", config_int(c, "in_features"),
                         config_int(c, "out_features"), config_bool(c, "bias"));
}
int nbtest_layernorm_params(const json_t *c, nbtest_param *out, int max) {
    return layernorm_params(out, 0, max, "", config_int(c, "normalized_shape"));
}
int nbtest_embedding_params(const json_t *c, nbtest_param *out, int max) {
    return add(out, 0, max, "", "weight", 2, config_int(c, "num_embeddings"),
               config_int(c, "embedding_dim"));
}
int nbtest_mha_params(const json_t *c, nbtest_param *out, int max) {
    return mha_params(out, 0, max, "", config_int(c, "d_in"), config_int(c, "d_out"),
                      config_bool(c, "qkv_bias"));
}
int nbtest_block_params(const json_t *c, nbtest_param *out, int max) {
    int64_t d = config_int(c, "d_model"), h = config_int(c, "ff_hidden");
    int n = layernorm_params(out, 0, max, "norm1", d);
    n = mha_params(out, n, max, "attn.", d, d, config_bool(c, "qkv_bias"));
    n = layernorm_params(out, n, max, "norm2", d);
    n = linear_params(out, n, max, "ff.fc1", d, h, true);
    return linear_params(out, n, max, "ff.fc2", h, d, true);
}

/* ---- the computations from functional ops ------------------------------------------------ */
typedef struct {
    const golden_named *list;
    int n;
} params_of;

static nb_tensor *param(params_of p, const char *prefix, const char *leaf) {
    char name[128];
    snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "." : "", leaf);
    return nbtest_named(p.list, p.n, name);
}

static nb_tensor *linear(params_of p, const char *prefix, nb_tensor *x) {
    nb_tensor *y = nb_matmul(x, nb_transpose(param(p, prefix, "weight"), 0, 1));
    nb_tensor *b = param(p, prefix, "bias");
    return b ? nb_add(y, b) : y;
}

static nb_tensor *layer_norm(params_of p, const char *prefix, nb_tensor *x, double eps) {
    return nb_f_layer_norm(x, param(p, prefix, "weight"), param(p, prefix, "bias"), eps);
}

/* [B, T, H*hd] -> [B, H, T, hd] */
static nb_tensor *split_heads(nb_tensor *y, int64_t heads) {
    if (!y) return NULL;
    int64_t b = y->shape[0], t = y->shape[1], hd = y->shape[2] / heads;
    return nb_transpose(nb_view(y, NB_SHAPE(b, t, heads, hd)), 1, 2);
}

/* key padding [B, T_k] and attention mask [T_q, T_k] as one [B, 1, T_q, T_k] mask (or NULL). */
static nb_tensor *combined_mask(const nb_tensor *kpm, const nb_tensor *am, int64_t b, int64_t tq,
                                int64_t tk) {
    if (!kpm && !am) return NULL;
    nb_tensor *mask = nb_zeros(NB_BOOL, NB_SHAPE(b, 1, tq, tk));
    for (int64_t i = 0; i < b; i++)
        for (int64_t q = 0; q < tq; q++)
            for (int64_t k = 0; k < tk; k++) {
                bool blocked = (kpm && nb_get(kpm, NB_IDX(i, k)) != 0) ||
                               (am && nb_get(am, NB_IDX(q, k)) != 0);
                nb_set(mask, NB_IDX(i, 0, q, k), blocked);
            }
    return mask;
}

static nb_tensor *attention(params_of p, const char *prefix, nb_tensor *xq, nb_tensor *xkv,
                            int64_t heads, const nbtest_call *call) {
    static const char *const proj[] = {"W_query", "W_key", "W_value"};
    char name[96];
    nb_tensor *qkv[3];
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s%s", prefix, proj[k]);
        qkv[k] = split_heads(linear(p, name, k == 0 ? xq : xkv), heads);
    }
    if (!qkv[0] || !qkv[1] || !qkv[2]) return NULL;
    int64_t b = xq->shape[0], tq = xq->shape[1], tk = xkv->shape[1], hd = qkv[0]->shape[3];
    nb_tensor *mask =
        combined_mask(call->in[NBTEST_KEY_PADDING], call->in[NBTEST_ATTN_MASK], b, tq, tk);
    nb_tensor *scores = nb_matmul(qkv[0], nb_transpose(qkv[1], -2, -1));
    nb_tensor *attn = nb_masked_softmax(scores, mask, call->causal, 1.0 / sqrt((double)hd));
    if (call->weights) *call->weights = attn;
    nb_tensor *context = nb_transpose(nb_matmul(attn, qkv[2]), 1, 2);
    snprintf(name, sizeof name, "%sout_proj", prefix);
    return linear(p, name, nb_view(nb_contiguous(context), NB_SHAPE(b, tq, hd * heads)));
}

nb_tensor *nbtest_linear_reference(const json_t *c, const golden_named *list, int n,
                                   const nbtest_call *call) {
    (void)c;
    return linear((params_of){list, n}, "", call->in[NBTEST_X]);
}
nb_tensor *nbtest_layernorm_reference(const json_t *c, const golden_named *list, int n,
                                      const nbtest_call *call) {
    return layer_norm((params_of){list, n}, "", call->in[NBTEST_X], config_double(c, "eps"));
}
nb_tensor *nbtest_embedding_reference(const json_t *c, const golden_named *list, int n,
                                      const nbtest_call *call) {
    (void)c;
    return nb_f_embedding(nbtest_named(list, n, "weight"), call->in[NBTEST_INDICES]);
}
nb_tensor *nbtest_mha_reference(const json_t *c, const golden_named *list, int n,
                                const nbtest_call *call) {
    nb_tensor *const *x = call->in;
    nb_tensor *xq = x[NBTEST_X] ? x[NBTEST_X] : x[NBTEST_X_Q];
    nb_tensor *xkv = x[NBTEST_X] ? x[NBTEST_X] : x[NBTEST_X_KV];
    return attention((params_of){list, n}, "", xq, xkv, config_int(c, "num_heads"), call);
}
nb_tensor *nbtest_block_reference(const json_t *c, const golden_named *list, int n,
                                  const nbtest_call *call) {
    params_of p = {list, n};
    double eps = config_double(c, "eps");
    nb_tensor *x = call->in[NBTEST_X], *n1 = layer_norm(p, "norm1", x, eps);
    x = nb_add(x, attention(p, "attn.", n1, n1, config_int(c, "num_heads"), call));
    nb_tensor *hidden = nb_gelu(linear(p, "ff.fc1", layer_norm(p, "norm2", x, eps)));
    return nb_add(x, linear(p, "ff.fc2", hidden));
}
