/* nb_matmul with torch.matmul's semantics, forward and backward, on nabla's GEMM.
 *
 * A 1-D left operand becomes a 1 x K row and a 1-D right operand a K x 1 column; the added
 * dim is left out of the result. Leading (batch) dims broadcast. Each operand goes to the
 * kernel as it lies whenever its last two dims form a row-major or a transposed matrix
 * (any leading dimension, any batch strides, 0 for broadcast); only other layouts are
 * copied. The backward products dA = dC B^T and dB = A^T dC use the same kernel with the
 * transpose flags flipped, and sum over broadcast batch dims inside the kernel (the
 * gradient's batch stride is 0 there), so no batch-sized temporary is made. */
#include "node.h"
#include "../tensor/gemm.h"

#include <string.h>

/* How a 1-D operand is made a matrix. */
typedef enum { AS_IS, AS_ROW, AS_COLUMN } promotion;

/* One operand as the kernel reads it: its first element, the matrix layout of its last two
 * dims, and its batch strides aligned to the product's batch dims (0 where broadcast). */
typedef struct {
    char *base;
    int64_t rows, cols;
    bool trans;
    int64_t ld;
    int64_t batch_strides[NB_MAX_DIMS];
} operand;

/* The product's batch dims. */
typedef struct {
    int ndim;
    int64_t shape[NB_MAX_DIMS];
} batch_shape;

/* Shape and strides of t with a 1-D t made a row or a column. */
static int promoted(const nb_tensor *t, promotion p, int64_t *shape, int64_t *strides) {
    if (p == AS_ROW) {
        shape[0] = 1, strides[0] = 0, shape[1] = t->shape[0], strides[1] = t->strides[0];
        return 2;
    }
    if (p == AS_COLUMN) {
        shape[0] = t->shape[0], strides[0] = t->strides[0], shape[1] = 1, strides[1] = 0;
        return 2;
    }
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    memcpy(strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
    return t->ndim;
}

/* The kernel reads a matrix whose rows are contiguous (ld = row stride) or whose columns
 * are (transposed, ld = column stride). A single row or column fits either way. */
static bool kernel_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *trans,
                          int64_t *ld) {
    if (cols <= 1 || cs == 1) {
        *trans = false, *ld = rows <= 1 ? (cols > 1 ? cols : 1) : rs;
        return true;
    }
    if (rows <= 1 || rs == 1) {
        *trans = true, *ld = cs;
        return true;
    }
    return false;
}

/* Describes *t for the kernel, replacing *t by a contiguous copy if its layout needs one. */
static bool make_operand(const nb_tensor **t, promotion p, const batch_shape *bs, operand *op) {
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    int nd = promoted(*t, p, shape, strides);
    op->rows = shape[nd - 2], op->cols = shape[nd - 1];
    if (!kernel_layout(op->rows, op->cols, strides[nd - 2], strides[nd - 1], &op->trans, &op->ld)) {
        const nb_tensor *copy = nbt_contiguous(*t);
        if (!copy) return false;
        *t = copy;
        nd = promoted(*t, p, shape, strides);
        kernel_layout(op->rows, op->cols, strides[nd - 2], strides[nd - 1], &op->trans, &op->ld);
    }
    op->base = nbt_ptr(*t);
    for (int i = 0; i < bs->ndim; i++) {
        int ti = nd - 2 - bs->ndim + i;
        op->batch_strides[i] = ti >= 0 && shape[ti] != 1 ? strides[ti] : 0;
    }
    return true;
}

/* C (contiguous, rows x cols matrices, batch strides given) = op(A) op(B) over the batch,
 * or summed into C where C's batch stride is 0. Batch dims that every operand steps through
 * evenly are merged; the innermost goes to one strided-batched kernel call. */
static bool run_gemm(nb_dtype dt, const operand *A, bool ta, const operand *B, bool tb, char *C,
                     int64_t ldc, const int64_t *c_strides, const batch_shape *bs) {
    int64_t M = ta ? A->cols : A->rows, K = ta ? A->rows : A->cols, N = tb ? B->rows : B->cols;
    /* coalesce, innermost first */
    int64_t size[NB_MAX_DIMS], sa[NB_MAX_DIMS], sb[NB_MAX_DIMS], sc[NB_MAX_DIMS];
    int nd = 0;
    bool sums = false;
    for (int i = bs->ndim - 1; i >= 0; i--) {
        if (bs->shape[i] == 1) continue;
        if (bs->shape[i] == 0) return true;
        sums = sums || c_strides[i] == 0;
        int64_t s = bs->shape[i], a = A->batch_strides[i], b = B->batch_strides[i],
                c = c_strides[i];
        if (nd > 0 && a == sa[nd - 1] * size[nd - 1] && b == sb[nd - 1] * size[nd - 1] &&
            c == sc[nd - 1] * size[nd - 1]) {
            size[nd - 1] *= s;
            continue;
        }
        size[nd] = s, sa[nd] = a, sb[nd] = b, sc[nd] = c;
        nd++;
    }
    size_t es = nbt_esize(dt);
    int64_t inner = nd > 0 ? size[0] : 1, idx[NB_MAX_DIMS] = {0};
    bool ab = A->trans != ta, bb = B->trans != tb; /* the stored layout decides the flag */
    /* A C that receives several products was zeroed by the caller: every product adds. */
    double beta = sums ? 1.0 : 0.0;
    for (;;) {
        int64_t oa = 0, ob = 0, oc = 0;
        for (int d = 1; d < nd; d++)
            oa += idx[d] * sa[d], ob += idx[d] * sb[d], oc += idx[d] * sc[d];
        const char *pa = A->base + oa * (int64_t)es, *pb = B->base + ob * (int64_t)es;
        char *pc = C + oc * (int64_t)es;
        int64_t isa = nd > 0 ? sa[0] : 0, isb = nd > 0 ? sb[0] : 0, isc = nd > 0 ? sc[0] : 0;
        bool ok = dt == NB_F32 ? nbt_sgemm_batched(ab, bb, M, N, K, 1.0f, (const float *)pa, A->ld,
                                                   isa, (const float *)pb, B->ld, isb, (float)beta,
                                                   (float *)pc, ldc, isc, inner)
                               : nbt_dgemm_batched(ab, bb, M, N, K, 1.0, (const double *)pa, A->ld,
                                                   isa, (const double *)pb, B->ld, isb, beta,
                                                   (double *)pc, ldc, isc, inner);
        if (!ok) return nbt_error("matmul", "out of memory for the GEMM pack buffers"), false;
        int d = 1;
        while (d < nd && ++idx[d] == size[d]) idx[d++] = 0;
        if (d >= nd) return true;
    }
}

/* True when some of C's matrices receive several products (stride 0 over a batch dim) or
 * none at all (an empty batch): C must start from zero. */
static bool needs_zeroing(const batch_shape *bs, const int64_t *strides) {
    for (int i = 0; i < bs->ndim; i++)
        if ((bs->shape[i] > 1 && strides[i] == 0) || bs->shape[i] == 0) return true;
    return false;
}

static promotion left_promotion(const nb_tensor *a) {
    return a->ndim == 1 ? AS_ROW : AS_IS;
}
static promotion right_promotion(const nb_tensor *b) {
    return b->ndim == 1 ? AS_COLUMN : AS_IS;
}

/* gout viewed with the dims a 1-D operand dropped put back: [batch..., M, N]. */
static nb_tensor *promoted_grad(const nb_tensor *gout, const nb_tensor *a, const nb_tensor *b) {
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    int nd = gout->ndim;
    memcpy(shape, gout->shape, sizeof(int64_t) * (size_t)nd);
    memcpy(strides, gout->strides, sizeof(int64_t) * (size_t)nd);
    if (a->ndim == 1) { /* M = 1 goes before N, or last if N was dropped too */
        int at = b->ndim == 1 ? nd : nd - 1;
        memmove(shape + at + 1, shape + at, sizeof(int64_t) * (size_t)(nd - at));
        memmove(strides + at + 1, strides + at, sizeof(int64_t) * (size_t)(nd - at));
        shape[at] = 1, strides[at] = 0, nd++;
    }
    if (b->ndim == 1) shape[nd] = 1, strides[nd] = 0, nd++;
    return nbt_alias(gout, nd, shape, strides, gout->offset);
}

/* Gradient of one input: grad = op(X) op(Y) summed to the input's (promoted) shape, then
 * viewed as the input. */
static void input_grad(nb_node *n, int which, const nb_tensor *input, promotion p, const operand *X,
                       bool tx, const operand *Y, bool ty, const batch_shape *bs) {
    int64_t shape[NB_MAX_DIMS], strides[NB_MAX_DIMS];
    int nd = promoted(input, p, shape, strides);
    const nb_tensor *g = nbt_new("matmul", input->dtype, nd, shape);
    operand G; /* contiguous: its batch strides are what the kernel writes to */
    if (!g || !make_operand(&g, AS_IS, bs, &G)) return;
    if (needs_zeroing(bs, G.batch_strides)) nb_fill_((nb_tensor *)g, 0.0);
    if (run_gemm(input->dtype, X, tx, Y, ty, G.base, shape[nd - 1], G.batch_strides, bs))
        nba_accumulate(n, which, nbt_view(g, input->ndim, input->shape));
}

static void matmul_backward(nb_node *n, const nb_tensor *gout) {
    const nb_tensor *a = n->inputs[0], *b = n->inputs[1];
    const nb_tensor *ka = n->saved[0], *kb = n->saved[1]; /* as the forward pass read them */
    batch_shape bs = {.ndim = (int)n->i[0]};
    memcpy(bs.shape, n->i + 1, sizeof(int64_t) * (size_t)bs.ndim);
    const nb_tensor *g = promoted_grad(gout, a, b);
    operand A, B, G;
    if (!g || !make_operand(&ka, left_promotion(a), &bs, &A) ||
        !make_operand(&kb, right_promotion(b), &bs, &B) || !make_operand(&g, AS_IS, &bs, &G))
        return;
    if (nba_input_needs_grad(n, 0)) /* dA = dC B^T */
        input_grad(n, 0, a, left_promotion(a), &G, false, &B, true, &bs);
    if (nba_input_needs_grad(n, 1)) /* dB = A^T dC */
        input_grad(n, 1, b, right_promotion(b), &A, true, &G, false, &bs);
}

static bool check_operands(const nb_tensor *a, const nb_tensor *b) {
    if (!nba_check_inputs("matmul", 2, (const nb_tensor *[]){a, b})) return false;
    if (a->ndim == 0 || b->ndim == 0)
        return nbt_error("matmul", "both arguments need at least 1 dimension, got shapes %s and %s",
                         nbt_shape(a), nbt_shape(b)),
               false;
    if (!nb_is_float(a) || !nb_is_float(b))
        return nbt_error("matmul", "expected float32 or float64 tensors, got %s %s and %s %s",
                         nbt_shape(a), nb_dtype_name(a->dtype), nbt_shape(b),
                         nb_dtype_name(b->dtype)),
               false;
    if (a->dtype != b->dtype)
        return nbt_error("matmul", "dtype mismatch: %s %s and %s %s; cast one with nb_to_dtype",
                         nbt_shape(a), nb_dtype_name(a->dtype), nbt_shape(b),
                         nb_dtype_name(b->dtype)),
               false;
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
    if (ka != kb)
        return nbt_error("matmul", "shapes %s and %s cannot be multiplied (%lld != %lld)",
                         nbt_shape(a), nbt_shape(b), (long long)ka, (long long)kb),
               false;
    return true;
}

nb_tensor *nb_matmul(const nb_tensor *a, const nb_tensor *b) {
    if (!check_operands(a, b)) return NULL;
    /* batch dims: everything before the matrix dims, broadcast */
    int a_batch = a->ndim >= 2 ? a->ndim - 2 : 0, b_batch = b->ndim >= 2 ? b->ndim - 2 : 0;
    batch_shape bs;
    if (!nbt_broadcast_shape("matmul", a_batch, a->shape, b_batch, b->shape, &bs.ndim, bs.shape))
        return nbt_error("matmul", "batch dims of shapes %s and %s cannot be broadcast",
                         nbt_shape(a), nbt_shape(b));
    int64_t M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
    int64_t N = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    int64_t shape[NB_MAX_DIMS];
    int nd = bs.ndim; /* at most NB_MAX_DIMS - 2 */
    memcpy(shape, bs.shape, sizeof(int64_t) * (size_t)nd);
    if (a->ndim > 1) shape[nd++] = M;
    if (b->ndim > 1) shape[nd++] = N;
    nb_tensor *out = nbt_new("matmul", a->dtype, nd, shape);
    if (!out) return NULL;
    const nb_tensor *ka = a, *kb = b;
    operand A, B;
    if (!make_operand(&ka, left_promotion(a), &bs, &A) ||
        !make_operand(&kb, right_promotion(b), &bs, &B))
        return NULL;
    /* out as [batch..., M, N], contiguous */
    int64_t cs[NB_MAX_DIMS], stride = M * N;
    for (int i = bs.ndim - 1; i >= 0; i--) cs[i] = stride, stride *= bs.shape[i];
    if (!run_gemm(a->dtype, &A, false, &B, false, nbt_ptr(out), N, cs, &bs)) return NULL;
    nb_node *n = nba_record("matmul", out, 2, (const nb_tensor *[]){a, b}, matmul_backward);
    if (n) {
        n->saved[0] = (nb_tensor *)ka, n->saved[1] = (nb_tensor *)kb;
        n->i[0] = bs.ndim;
        memcpy(n->i + 1, bs.shape, sizeof(int64_t) * (size_t)bs.ndim);
    }
    return out;
}

#ifdef NABLA_TESTS /* the test build only: see op_def.h */
/* ---- test metadata (op_def.h): every torch.matmul shape case, transposed and sliced
 * operands, broadcast batches, a non-contiguous output gradient, and products big enough for
 * the tiled kernels ---- */
#include "op_def.h"

static nb_tensor *cat_matmul(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_matmul(in[0], in[1]);
}
/* The right operand read through a transpose view: a flag for the kernel, not a copy. */
static nb_tensor *cat_matmul_bt(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_matmul(in[0], nb_transpose(in[1], -1, -2));
}
/* The output transposed afterwards: its gradient arrives transposed. */
static nb_tensor *cat_matmul_then_t(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_transpose(nb_matmul(in[0], in[1]), -1, -2);
}
/* A batch made by expand: batch stride 0, gradient summed over it. */
static nb_tensor *cat_matmul_expanded(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_matmul(nb_expand(in[0], NB_SHAPE(3, -1, -1)), in[1]);
}
/* Attention's pattern: scores = q k^T, then scores v, all batched over heads. */
static nb_tensor *cat_attention_products(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_matmul(nb_matmul(in[0], nb_transpose(in[1], -1, -2)), in[2]);
}

static int golden_matmul(nba_golden_call *c, nb_tensor **out) {
    out[0] = nb_matmul(c->input(c, "a", true), c->input(c, "b", true));
    return 1;
}

/* clang-format off */
static const nba_entry matmul_entries[] = {
    {"matmul 1-D . 1-D [5] [5]", NBA_RANDOM, cat_matmul, 2, {IN(5), IN(5)}, NULL},
    {"matmul 1-D . 1-D sliced [4] [4]", NBA_STRIDED, cat_matmul, 2, {IN_S(4), IN_S(4)}, NULL},
    {"matmul 2-D [3,4]@[4,5]", NBA_RANDOM, cat_matmul, 2, {IN(3, 4), IN(4, 5)}, NULL},
    {"matmul 2-D transposed [3,4]@[4,5]", NBA_STRIDED, cat_matmul, 2, {IN_T(3, 4), IN_T(4, 5)}, NULL},
    {"matmul 2-D sliced (copied) [3,4]@[4,2]", NBA_STRIDED, cat_matmul, 2, {IN_S(3, 4), IN_S(4, 2)}, NULL},
    {"matmul 2-D [4,3]@transpose([5,3])", NBA_RANDOM, cat_matmul_bt, 2, {IN(4, 3), IN(5, 3)}, NULL},
    {"matmul 1-D@2-D [4]@[4,3]", NBA_STRIDED, cat_matmul, 2, {IN(4), IN_T(4, 3)}, NULL},
    {"matmul 2-D@1-D [3,4]@[4]", NBA_STRIDED, cat_matmul, 2, {IN_T(3, 4), IN_S(4)}, NULL},
    {"matmul 1-D@3-D [4]@[2,4,3]", NBA_BROADCAST, cat_matmul, 2, {IN(4), IN(2, 4, 3)}, NULL},
    {"matmul 3-D@1-D [2,3,4]@[4]", NBA_STRIDED, cat_matmul, 2, {IN_S(2, 3, 4), IN(4)}, NULL},
    {"matmul batched [2,3,4]@[2,4,5]", NBA_STRIDED, cat_matmul, 2, {IN(2, 3, 4), IN_T(2, 4, 5)}, NULL},
    {"matmul batched, both T [2,3,4]@[2,4,5]", NBA_STRIDED, cat_matmul, 2, {IN_T(2, 3, 4), IN_T(2, 4, 5)}, NULL},
    {"matmul broadcast [2,1,3,4]@[5,4,6]", NBA_BROADCAST, cat_matmul, 2, {IN(2, 1, 3, 4), IN(5, 4, 6)}, NULL},
    {"matmul broadcast right [2,3,4]@[4,5]", NBA_BROADCAST, cat_matmul, 2, {IN(2, 3, 4), IN(4, 5)}, NULL},
    {"matmul broadcast left [3,4]@[2,4,5]", NBA_STRIDED, cat_matmul, 2, {IN_T(3, 4), IN(2, 4, 5)}, NULL},
    {"matmul broadcast [1,3,4]@[2,1,4,2]", NBA_STRIDED, cat_matmul, 2, {IN(1, 3, 4), IN_S(2, 1, 4, 2)}, NULL},
    {"matmul expanded [3,4]->[3,3,4]@[3,4,2]", NBA_BROADCAST, cat_matmul_expanded, 2, {IN(3, 4), IN(3, 4, 2)}, NULL},
    {"matmul constant left [3,4]@[4,2]", NBA_RANDOM, cat_matmul, 2, {IN_C(3, 4), IN(4, 2)}, NULL},
    {"matmul constant right [2,3,4]@[4,2]", NBA_BROADCAST, cat_matmul, 2, {IN(2, 3, 4), IN_C(4, 2)}, NULL},
    {"matmul then transpose [2,3,4]@[2,4,5]", NBA_RANDOM, cat_matmul_then_t, 2, {IN(2, 3, 4), IN(2, 4, 5)}, NULL},
    /* big enough for the tiled kernels (the products above take the tiny-product path) */
    {"matmul tiled [2,9,17]@[17,13]", NBA_STRIDED, cat_matmul, 2, {IN(2, 9, 17), IN_T(17, 13)}, NULL},
    {"matmul tiled [2,1,9,16]@[3,16,12]^T", NBA_STRIDED, cat_matmul_bt, 2, {IN_S(2, 1, 9, 16), IN(3, 12, 16)}, NULL},
    {"matmul q k^T v", NBA_STRIDED, cat_attention_products, 3, {IN(2, 2, 3, 4), IN_T(2, 2, 3, 4), IN_S(2, 2, 3, 2)}, NULL},
};
/* clang-format on */
static const nba_golden_case matmul_cases[] = {
    {"a: [4]; b: [4]", ""},           {"a: [3,4]; b: [4,5]", ""},
    {"a: [4]; b: [4,5]", ""},         {"a: [3,4]; b: [4]", ""},
    {"a: [1,1]; b: [1,1]", ""},       {"a: [2,3,4]; b: [4,5]", ""},
    {"a: [3,4]; b: [2,4,5]", ""},     {"a: [2,3,4]; b: [2,4,5]", ""},
    {"a: [2,1,3,4]; b: [3,4,2]", ""}, {"a: [2,3,4]; b: [4]", ""},
    {"a: [4]; b: [2,4,3]", ""},       {"a: [7,9]; b: [9,6]", ""},
    {"a: [3,4]; b: [4,5] const", ""}};
static const nba_golden matmul_goldens[] = {
    NBA_GOLDEN("matmul", golden_matmul, "torch.matmul(a, b)", matmul_cases)};
NBA_OP_DEF(nba_op_matmul, "matmul", matmul_entries, matmul_goldens);
#endif /* NABLA_TESTS */
