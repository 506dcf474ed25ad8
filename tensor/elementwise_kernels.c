/* Binary elementwise kernels (add, sub, mul, div) with broadcasting.
 *
 * Three paths, fastest first: every operand contiguous with the output's shape, or one of
 * them a single element (one flat loop); one operand contiguous and full-size with the other
 * contiguous and repeating every row (the bias-add pattern [N, D] op [D]: one flat loop per
 * row); and nbt_iterate for everything else, whose runs still hit the unit-stride and
 * stride-0 loops. */
#include "elementwise_kernels.h"
#include "simd.h"

#include <string.h>

#define NAME(ENUM, name) [NBT_##ENUM] = #name,
static const char *const names[] = {NBT_BINARY_OPS(NAME)};
#undef NAME
_Static_assert(sizeof names / sizeof names[0] == NBT_NUM_BINARY, "a name per nbt_binary_op");

const char *nbt_binary_name(nbt_binary_op op) {
    return (unsigned)op < NBT_NUM_BINARY ? names[op] : "binary";
}

/* One run of n elements; strides in elements. The unit-stride and broadcast-scalar cases run
 * on whole vectors (simd.h); the output may be one of the inputs itself, as each vector is
 * loaded before its own position is stored. */
#define BINARY_RUN(fname, S, T, EXPR)                                                              \
    static void fname(int64_t n, T *o, int64_t so, const T *a, int64_t sa, const T *b,             \
                      int64_t sb) {                                                                \
        if (so == 1 && sa == 1 && sb == 1) {                                                       \
            NBT_VFOR(S, i, n,                                                                      \
                     NBT_VSTORE(S, o + i, EXPR(NBT_VLOAD(S, a + i), NBT_VLOAD(S, b + i))));        \
            return;                                                                                \
        }                                                                                          \
        if (so == 1 && sa == 1 && sb == 0) {                                                       \
            const T y = *b;                                                                        \
            const nbt_v##S vy = nbt_vsplat_##S(y);                                                 \
            NBT_VFOR(S, i, n, NBT_VSTORE(S, o + i, EXPR(NBT_VLOAD(S, a + i), vy)));                \
            return;                                                                                \
        }                                                                                          \
        if (so == 1 && sa == 0 && sb == 1) {                                                       \
            const T x = *a;                                                                        \
            const nbt_v##S vx = nbt_vsplat_##S(x);                                                 \
            NBT_VFOR(S, i, n, NBT_VSTORE(S, o + i, EXPR(vx, NBT_VLOAD(S, b + i))));                \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++) o[i * so] = EXPR(a[i * sa], b[i * sb]);                    \
    }

#define ADD(x, y) ((x) + (y))
#define SUB(x, y) ((x) - (y))
#define MUL(x, y) ((x) * (y))
#define DIV(x, y) ((x) / (y))
BINARY_RUN(add_f32, f32, float, ADD)
BINARY_RUN(sub_f32, f32, float, SUB)
BINARY_RUN(mul_f32, f32, float, MUL)
BINARY_RUN(div_f32, f32, float, DIV)
BINARY_RUN(add_f64, f64, double, ADD)
BINARY_RUN(sub_f64, f64, double, SUB)
BINARY_RUN(mul_f64, f64, double, MUL)
BINARY_RUN(div_f64, f64, double, DIV)

typedef void (*run_f32)(int64_t, float *, int64_t, const float *, int64_t, const float *, int64_t);
typedef void (*run_f64)(int64_t, double *, int64_t, const double *, int64_t, const double *,
                        int64_t);
/* Indexed by nbt_binary_op, from NBT_BINARY_OPS: an op without its runs does not compile. */
#define RUN_F32(ENUM, name) [NBT_##ENUM] = name##_f32,
#define RUN_F64(ENUM, name) [NBT_##ENUM] = name##_f64,
static const run_f32 runs_f32[] = {NBT_BINARY_OPS(RUN_F32)};
static const run_f64 runs_f64[] = {NBT_BINARY_OPS(RUN_F64)};
_Static_assert(sizeof runs_f32 / sizeof runs_f32[0] == NBT_NUM_BINARY, "a run per binary op");
_Static_assert(sizeof runs_f64 / sizeof runs_f64[0] == NBT_NUM_BINARY, "a run per binary op");

typedef struct {
    nbt_binary_op op;
    nb_dtype dtype;
} binary_ctx;

/* Calls the run loop on n elements at raw pointers with strides in elements. */
static void run(const binary_ctx *c, int64_t n, char *o, int64_t so, const char *a, int64_t sa,
                const char *b, int64_t sb) {
    if (c->dtype == NB_F32)
        runs_f32[c->op](n, (float *)o, so, (const float *)a, sa, (const float *)b, sb);
    else
        runs_f64[c->op](n, (double *)o, so, (const double *)a, sa, (const double *)b, sb);
}

/* Flat contiguous operands (stride 1, or 0 for a single element) split across threads. */
typedef struct {
    const binary_ctx *c;
    char *o;
    const char *a, *b;
    int64_t sa, sb;
} flat_ctx;

static void flat_range(int64_t begin, int64_t end, void *vctx) {
    const flat_ctx *f = vctx;
    int64_t es = (int64_t)nbt_esize(f->c->dtype);
    run(f->c, end - begin, f->o + begin * es, 1, f->a + begin * es * f->sa, f->sa,
        f->b + begin * es * f->sb, f->sb);
}

static void flat(const binary_ctx *c, int64_t n, char *o, const char *a, int64_t sa, const char *b,
                 int64_t sb) {
    flat_ctx f = {c, o, a, b, sa, sb};
    nbt_parallel_ranges(n, 32768, flat_range, &f);
}

static void binary_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    const binary_ctx *c = vctx;
    int64_t es = (int64_t)nbt_esize(c->dtype);
    run(c, n, p[0], s[0] / es, p[1], s[1] / es, p[2], s[2] / es);
}

static bool check_operands(const char *name, const nb_tensor *a, const nb_tensor *b) {
    if (!a || !b) return nbt_error(name, "NULL input"), false;
    if (!nb_is_float(a) || !nb_is_float(b))
        return nbt_error(name, "expected float32 or float64 tensors, got %s %s and %s %s",
                         nbt_shape(a), nb_dtype_name(a->dtype), nbt_shape(b),
                         nb_dtype_name(b->dtype)),
               false;
    if (a->dtype != b->dtype)
        return nbt_error(name, "dtype mismatch: %s %s and %s %s; cast one with nb_to_dtype",
                         nbt_shape(a), nb_dtype_name(a->dtype), nbt_shape(b),
                         nb_dtype_name(b->dtype)),
               false;
    return true;
}

/* True if t's shape, with leading 1s dropped, is the trailing part of out's shape: t then
 * repeats every numel(t) elements of a row-major out. */
static bool is_trailing_block(const nb_tensor *t, const nb_tensor *out) {
    int lead = 0;
    while (lead < t->ndim && t->shape[lead] == 1) lead++;
    int rest = t->ndim - lead;
    if (rest > out->ndim) return false;
    return memcmp(t->shape + lead, out->shape + out->ndim - rest, sizeof(int64_t) * rest) == 0;
}

/* out = full op block, where block repeats every m elements (or block op full if swapped). */
static void rows(const binary_ctx *c, int64_t n, char *o, const char *full, const char *block,
                 int64_t m, bool swapped) {
    int64_t bytes = m * (int64_t)nbt_esize(c->dtype);
    for (int64_t k = 0; k < n; k += m, o += bytes, full += bytes) {
        if (swapped)
            run(c, m, o, 1, block, 1, full, 1);
        else
            run(c, m, o, 1, full, 1, block, 1);
    }
}

bool nbt_binary_into(nb_tensor *out, nbt_binary_op op, const nb_tensor *a, const nb_tensor *b) {
    const char *name = nbt_binary_name(op);
    if (!check_operands(name, a, b)) return false;
    if (!out || out->dtype != a->dtype)
        return nbt_error(name, "output must be a %s tensor", nb_dtype_name(a->dtype)), false;
    int64_t bshape[NB_MAX_DIMS];
    int bnd;
    if (!nbt_broadcast_shape(name, a->ndim, a->shape, b->ndim, b->shape, &bnd, bshape))
        return false;
    int64_t oshape[NB_MAX_DIMS];
    int ond;
    if (!nbt_broadcast_shape(name, out->ndim, out->shape, bnd, bshape, &ond, oshape) ||
        ond != out->ndim || memcmp(oshape, out->shape, sizeof(int64_t) * ond) != 0)
        return nbt_error(name, "%s and %s do not broadcast to the output shape %s", nbt_shape(a),
                         nbt_shape(b), nbt_shape(out)),
               false;
    int64_t n = nbt_numel(out);
    if (n == 0) return true;
    binary_ctx c = {op, out->dtype};
    if (nb_is_contiguous(out) && nb_is_contiguous(a) && nb_is_contiguous(b)) {
        int64_t na = nbt_numel(a), nbn = nbt_numel(b);
        if (na == n && nbn == n) {
            flat(&c, n, nbt_ptr(out), nbt_ptr(a), 1, nbt_ptr(b), 1);
            return true;
        }
        if (na == n && nbn == 1) {
            flat(&c, n, nbt_ptr(out), nbt_ptr(a), 1, nbt_ptr(b), 0);
            return true;
        }
        if (nbn == n && na == 1) {
            flat(&c, n, nbt_ptr(out), nbt_ptr(a), 0, nbt_ptr(b), 1);
            return true;
        }
        if (na == n && is_trailing_block(b, out)) {
            rows(&c, n, nbt_ptr(out), nbt_ptr(a), nbt_ptr(b), nbn, false);
            return true;
        }
        if (nbn == n && is_trailing_block(a, out)) {
            rows(&c, n, nbt_ptr(out), nbt_ptr(b), nbt_ptr(a), na, true);
            return true;
        }
    }
    size_t es = nbt_esize(out->dtype);
    nbt_operands ops = {
        .nops = 3, .base = {nbt_ptr(out), nbt_ptr(a), nbt_ptr(b)}, .elem = {es, es, es}};
    memcpy(ops.strides[0], out->strides, sizeof(int64_t) * (size_t)out->ndim);
    nbt_broadcast_strides(a, out->ndim, out->shape, ops.strides[1]);
    nbt_broadcast_strides(b, out->ndim, out->shape, ops.strides[2]);
    nbt_iterate(out->ndim, out->shape, &ops, binary_inner, &c);
    return true;
}

nb_tensor *nbt_binary(nbt_binary_op op, const nb_tensor *a, const nb_tensor *b) {
    const char *name = nbt_binary_name(op);
    if (!check_operands(name, a, b)) return NULL;
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (!nbt_broadcast_shape(name, a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) return NULL;
    nb_tensor *out = nbt_new(name, a->dtype, nd, shape);
    if (!out || !nbt_binary_into(out, op, a, b)) return NULL;
    return out;
}
