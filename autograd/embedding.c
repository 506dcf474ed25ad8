/* Embedding lookup: out[..., :] = weight[indices[...], :]. The backward scatter-adds each
 * output row's gradient into the weight row it came from, so repeated indices accumulate. */
#include "node.h"

#include <string.h>

/* saved[0]: the contiguous indices. */
static void embedding_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *w = n->inputs[0], *idx = n->saved[0];
    nb_tensor *gw = nb_zeros(w->dtype, 2, w->shape);
    /* gout [..., D] is, read contiguous, [count, D]: index_add's source along dim 0 */
    if (!gw || !nba_index_add(gw, 0, idx, gout, 1.0)) return;
    nba_accumulate(n, 0, gw);
}

nb_tensor *nb_f_embedding(const nb_tensor *weight, const nb_tensor *indices) {
    const char *op = "embedding";
    if (!nba_check_inputs(op, 2, (const nb_tensor *[]){weight, indices})) return NULL;
    if (!nba_check_float(op, weight)) return NULL;
    if (weight->ndim != 2)
        return nbt_error(op, "weight must be [V, D], got shape %s", nbt_shape(weight));
    if (indices->dtype != NB_I64)
        return nbt_error(op, "indices must be int64, got %s of shape %s",
                         nb_dtype_name(indices->dtype), nbt_shape(indices));
    if (indices->ndim >= NB_MAX_DIMS)
        return nbt_error(op, "indices of shape %s leave no room for the embedding dim",
                         nbt_shape(indices));
    nb_tensor *idx = nbt_contiguous(indices);
    if (!idx) return NULL;
    const int64_t *iv = (const int64_t *)nbt_ptr(idx);
    int64_t count = nbt_numel(idx), V = weight->shape[0], D = weight->shape[1];
    for (int64_t k = 0; k < count; k++) {
        if (iv[k] >= 0 && iv[k] < V) continue;
        int64_t pos[NB_MAX_DIMS], rest = k;
        for (int i = idx->ndim - 1; i >= 0; i--) {
            pos[i] = rest % idx->shape[i];
            rest /= idx->shape[i];
        }
        return nbt_error(op, "index %lld at position %s is out of range for V = %lld (weight %s)",
                         (long long)iv[k], nbt_dims(idx->ndim, pos), (long long)V,
                         nbt_shape(weight));
    }
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, indices->shape, sizeof(int64_t) * (size_t)indices->ndim);
    shape[indices->ndim] = D;
    nb_tensor *out = nbt_new(op, weight->dtype, indices->ndim + 1, shape);
    if (!out) return NULL;
    size_t es = nbt_esize(weight->dtype);
    const char *base = nbt_ptr(weight);
    char *dst = nbt_ptr(out);
    int64_t row_stride = weight->strides[0] * (int64_t)es, col_stride = weight->strides[1];
    for (int64_t k = 0; k < count; k++, dst += D * (int64_t)es) {
        const char *src = base + iv[k] * row_stride;
        if (col_stride == 1) {
            memcpy(dst, src, (size_t)D * es);
        } else {
            for (int64_t j = 0; j < D; j++)
                memcpy(dst + j * (int64_t)es, src + j * col_stride * (int64_t)es, es);
        }
    }
    nb_node *n = nba_record(op, out, 1, &weight, embedding_backward);
    if (n) n->saved[0] = idx;
    return out;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h): V = 6, indices built inside each function (constants of the
 * check), repeated so their rows' gradients accumulate ---- */
#include "op_def.h"

#define IDX(...) ((const int64_t[]){__VA_ARGS__})

static nb_tensor *cat_embedding(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_embedding(in[0], nb_from_array(NB_I64, NB_SHAPE(2, 3), IDX(1, 4, 1, 0, 5, 4)));
}
static nb_tensor *cat_embedding_flat(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_embedding(in[0], nb_from_array(NB_I64, NB_SHAPE(4), IDX(2, 2, 2, 0)));
}

static int golden_embedding(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_f_embedding(c->input(c, "weight", true), c->input(c, "indices", true));
    return 1;
}

/* clang-format off */
static const nba_entry embedding_entries[] = {
    {"embedding [6,3] with indices [2,3], repeated", NBA_RANDOM, cat_embedding, 1, {IN(6, 3)}, NULL},
    {"embedding of a transposed [6,3]", NBA_STRIDED, cat_embedding, 1, {IN_T(6, 3)}, NULL},
    {"embedding of a sliced [3,2], one index three times", NBA_STRIDED, cat_embedding_flat, 1, {IN_S(3, 2)}, NULL},
};
/* clang-format on */
static const nba_golden_case embedding_cases[] = {
    {"weight: [10,4]; indices: i64 [[1,3,1],[9,0,3]]", ""},
    {"weight: [5,3]; indices: i64 [4,4,2,0]", ""},
    {"weight: [6,2]; indices: i64 5", ""},
    {"weight: [7,3]; indices: i64 [[[0,6]],[[6,6]]]", ""}};
static const nba_golden embedding_goldens[] = {
    NBA_GOLDEN("f_embedding", golden_embedding, "F.embedding(indices, weight)", embedding_cases)};
NBA_OP_DEF(nba_op_embedding, "embedding", embedding_entries, embedding_goldens,
           .not_applicable = {[NBA_BROADCAST] = "one differentiable input, the weight table, "
                                                "gathered by index: nothing broadcasts"});
#endif /* NABLA_TESTS */
