/* Unary elementwise kernels, and the driver that maps any contiguous-array kernel of one or
 * two inputs over any layout (nbt_map2 runs the derivative kernels, which live with their ops
 * in autograd/elementwise.c).
 *
 * Every kernel works on contiguous arrays: a contiguous tensor is handed over in one call,
 * and the runs nbt_iterate produces for a strided one are gathered into chunk buffers
 * first. That keeps exp, log, tanh and erf on SLEEF's vector loops for every layout.
 * Formulas and their operation order follow PyTorch's CPU kernels, so float results agree
 * to rounding. */
#include "elementwise_kernels.h"
#include "simd.h"
#include "vecmath.h"

#include <math.h>
#include <string.h>

/* Indexed by nbt_unary_op: every table here is made from NBT_UNARY_OPS (elementwise_ops.h). */
#define NAME(ENUM, name, derivative) [NBT_##ENUM] = #name,
static const char *const names[] = {NBT_UNARY_OPS(NAME)};
#undef NAME
_Static_assert(sizeof names / sizeof names[0] == NBT_NUM_UNARY, "a name per nbt_unary_op");

const char *nbt_unary_name(nbt_unary_op op) {
    return (unsigned)op < NBT_NUM_UNARY ? names[op] : "unary";
}

/* ---- forward kernels: y[i] = f(x[i]) on contiguous arrays; y may alias x ---------------- */
/* S: dtype suffix; T: element type; FN(name): the libm function for T. In NBT_VFOR's body
 * V(S, p) loads a vector and ST(S, p, v) stores one; SPLAT(S, x) broadcasts a scalar. */
#define V(S, p) NBT_VLOAD(S, p)
#define ST(S, p, v) NBT_VSTORE(S, p, v)
#define SPLAT(S, x) nbt_vsplat_##S(x)
#define FORWARD_KERNELS(S, T, FN)                                                                  \
    static void neg_##S(int64_t n, T *y, const T *x, T p) {                                        \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, ST(S, y + i, -V(S, x + i)));                                             \
    }                                                                                              \
    static void add_scalar_##S(int64_t n, T *y, const T *x, T p) {                                 \
        const nbt_v##S vp = SPLAT(S, p);                                                           \
        NBT_VFOR(S, i, n, ST(S, y + i, V(S, x + i) + vp));                                         \
    }                                                                                              \
    static void mul_scalar_##S(int64_t n, T *y, const T *x, T p) {                                 \
        const nbt_v##S vp = SPLAT(S, p);                                                           \
        NBT_VFOR(S, i, n, ST(S, y + i, V(S, x + i) * vp));                                         \
    }                                                                                              \
    static void pow_scalar_##S(int64_t n, T *y, const T *x, T p) {                                 \
        if (p == 2) { /* squares are common and x * x is exactly rounded */                        \
            NBT_VFOR(S, i, n, ST(S, y + i, V(S, x + i) * V(S, x + i)));                            \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++) y[i] = FN(pow)(x[i], p);                                   \
    }                                                                                              \
    static void exp_##S(int64_t n, T *y, const T *x, T p) {                                        \
        (void)p;                                                                                   \
        nbt_vexp_##S(y, x, n);                                                                     \
    }                                                                                              \
    static void log_##S(int64_t n, T *y, const T *x, T p) {                                        \
        (void)p;                                                                                   \
        nbt_vlog_##S(y, x, n);                                                                     \
    }                                                                                              \
    static void sqrt_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        for (int64_t i = 0; i < n; i++) y[i] = FN(sqrt)(x[i]);                                     \
    }                                                                                              \
    static void tanh_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        nbt_vtanh_##S(y, x, n);                                                                    \
    }                                                                                              \
    /* 1 / (1 + exp(-x)): exp overflows to inf for very negative x, giving exactly 0. */           \
    static void sigmoid_##S(int64_t n, T *y, const T *x, T p) {                                    \
        (void)p;                                                                                   \
        nbt_vsigmoid_##S(y, x, n);                                                                 \
    }                                                                                              \
    /* Keeps x unless x < 0, so NaN and -0 pass through. */                                        \
    static void relu_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        NBT_VFOR(S, i, n, nbt_v##S v = V(S, x + i);                                                \
                 ST(S, y + i, nbt_vselect_##S(~(nbt_vmask_##S)(v < 0), v)));                       \
    }                                                                                              \
    /* The activations around one SLEEF function, each in one pass of the set's widest vectors     \
     * (vecmath.h: kernels/activations.c). */                                                      \
    static void gelu_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        nbt_vgelu_##S(y, x, n);                                                                    \
    }                                                                                              \
    static void gelu_tanh_##S(int64_t n, T *y, const T *x, T p) {                                  \
        (void)p;                                                                                   \
        nbt_vgelu_tanh_##S(y, x, n);                                                               \
    }                                                                                              \
    static void silu_##S(int64_t n, T *y, const T *x, T p) {                                       \
        (void)p;                                                                                   \
        nbt_vsilu_##S(y, x, n);                                                                    \
    }

#define FN_F32(name) name##f
#define FN_F64(name) name
FORWARD_KERNELS(f32, float, FN_F32)
FORWARD_KERNELS(f64, double, FN_F64)

/* ---- tables, indexed by nbt_unary_op ---- */
typedef void (*fwd_f32)(int64_t, float *, const float *, float);
typedef void (*fwd_f64)(int64_t, double *, const double *, double);

#define FORWARD_F32(ENUM, name, derivative) [NBT_##ENUM] = name##_f32,
#define FORWARD_F64(ENUM, name, derivative) [NBT_##ENUM] = name##_f64,
static const fwd_f32 forward_f32[] = {NBT_UNARY_OPS(FORWARD_F32)};
static const fwd_f64 forward_f64[] = {NBT_UNARY_OPS(FORWARD_F64)};
_Static_assert(sizeof forward_f32 / sizeof forward_f32[0] == NBT_NUM_UNARY, "forward_f32");
_Static_assert(sizeof forward_f64 / sizeof forward_f64[0] == NBT_NUM_UNARY, "forward_f64");

/* ---- driver: out = kernel(in0[, in1]) over any layout ---- */
typedef struct {
    nb_dtype dtype;
    nbt_unary_op op;
    const nbt_map2_kernel *k2; /* a kernel of two inputs; NULL: the forward of op */
    double param;
} map_ctx;

/* Runs the kernel on m contiguous elements. */
static void apply(const map_ctx *c, int64_t m, char *out, const char *in0, const char *in1) {
    if (c->dtype == NB_F32) {
        float p = (float)c->param;
        if (c->k2)
            c->k2->f32(m, (float *)out, (const float *)in0, (const float *)in1, p);
        else
            forward_f32[c->op](m, (float *)out, (const float *)in0, p);
    } else {
        if (c->k2)
            c->k2->f64(m, (double *)out, (const double *)in0, (const double *)in1, c->param);
        else
            forward_f64[c->op](m, (double *)out, (const double *)in0, c->param);
    }
}

/* Contiguous runs this long are split across threads (each element is independent). */
#define PARALLEL_GRAIN 16384

typedef struct {
    const map_ctx *c;
    char *out;
    const char *in0, *in1;
    size_t es;
} apply_ctx;

static void apply_range(int64_t begin, int64_t end, void *vctx) {
    const apply_ctx *a = vctx;
    int64_t off = begin * (int64_t)a->es;
    apply(a->c, end - begin, a->out + off, a->in0 + off, a->in1 ? a->in1 + off : NULL);
}

/* Copies m elements of size es from a strided run into a contiguous buffer, or back. */
static void gather(char *dst, const char *src, int64_t stride, int64_t m, size_t es) {
    if (es == 4)
        for (int64_t i = 0; i < m; i++) ((float *)dst)[i] = *(const float *)(src + i * stride);
    else
        for (int64_t i = 0; i < m; i++) ((double *)dst)[i] = *(const double *)(src + i * stride);
}

static void scatter(char *dst, int64_t stride, const char *src, int64_t m, size_t es) {
    if (es == 4)
        for (int64_t i = 0; i < m; i++) *(float *)(dst + i * stride) = ((const float *)src)[i];
    else
        for (int64_t i = 0; i < m; i++) *(double *)(dst + i * stride) = ((const double *)src)[i];
}

/* Elements of a strided run gathered into a contiguous buffer at a time (on the stack). */
#define GATHER_CHUNK 256

/* One run from nbt_iterate: p[0] is the output, p[1] (and p[2] for two inputs) the inputs. */
static void map_inner(int64_t n, char **p, const int64_t *s, void *vctx) {
    const map_ctx *c = vctx;
    size_t es = nbt_esize(c->dtype);
    int nin = c->k2 ? 2 : 1;
    bool unit = true;
    for (int k = 0; k <= nin; k++) unit = unit && s[k] == (int64_t)es;
    if (unit) {
        apply_ctx ac = {c, p[0], p[1], nin > 1 ? p[2] : NULL, es};
        nbt_parallel_ranges(n, PARALLEL_GRAIN, apply_range, &ac);
        return;
    }
    _Alignas(64) double buf[3][GATHER_CHUNK]; /* room for GATHER_CHUNK doubles or floats */
    for (int64_t i0 = 0; i0 < n; i0 += GATHER_CHUNK) {
        int64_t m = n - i0 < GATHER_CHUNK ? n - i0 : GATHER_CHUNK;
        const char *in[2] = {NULL, NULL};
        for (int k = 1; k <= nin; k++) {
            const char *src = p[k] + i0 * s[k];
            if (s[k] == (int64_t)es)
                in[k - 1] = src;
            else {
                gather((char *)buf[k], src, s[k], m, es);
                in[k - 1] = (const char *)buf[k];
            }
        }
        char *dst = p[0] + i0 * s[0];
        bool direct = s[0] == (int64_t)es;
        apply(c, m, direct ? dst : (char *)buf[0], in[0], in[1]);
        if (!direct) scatter(dst, s[0], (const char *)buf[0], m, es);
    }
}

/* out = f(ins) with each input broadcast to out's shape (already checked). */
static void map(nb_tensor *out, int nin, const nb_tensor *const *ins, const map_ctx *c) {
    int64_t n = nbt_numel(out);
    if (n == 0) return;
    bool flat = nb_is_contiguous(out);
    for (int k = 0; k < nin; k++) flat = flat && nb_is_contiguous(ins[k]) && nbt_numel(ins[k]) == n;
    if (flat) {
        apply_ctx ac = {c, nbt_ptr(out), nbt_ptr(ins[0]), nin > 1 ? nbt_ptr(ins[1]) : NULL,
                        nbt_esize(out->dtype)};
        nbt_parallel_ranges(n, PARALLEL_GRAIN, apply_range, &ac);
        return;
    }
    size_t es = nbt_esize(out->dtype);
    nbt_operands ops = {.nops = nin + 1, .base = {nbt_ptr(out)}, .elem = {es, es, es}};
    memcpy(ops.strides[0], out->strides, sizeof(int64_t) * (size_t)out->ndim);
    for (int k = 0; k < nin; k++) {
        ops.base[k + 1] = nbt_ptr(ins[k]);
        nbt_broadcast_strides(ins[k], out->ndim, out->shape, ops.strides[k + 1]);
    }
    nbt_iterate(out->ndim, out->shape, &ops, map_inner, (void *)c);
}

/* Checks t is a float tensor of out's dtype whose shape broadcasts to out's. */
static bool check_input(const char *name, const nb_tensor *t, const nb_tensor *out) {
    if (!t) return nbt_error(name, "NULL input"), false;
    if (!nb_is_float(t))
        return nbt_error(name, "expected a float32 or float64 tensor, got %s of shape %s",
                         nb_dtype_name(t->dtype), nbt_shape(t)),
               false;
    if (!out) return true;
    if (t->dtype != out->dtype)
        return nbt_error(name, "dtype mismatch: %s %s and %s %s", nbt_shape(t),
                         nb_dtype_name(t->dtype), nbt_shape(out), nb_dtype_name(out->dtype)),
               false;
    int64_t shape[NB_MAX_DIMS];
    int nd;
    if (!nbt_broadcast_shape(name, out->ndim, out->shape, t->ndim, t->shape, &nd, shape) ||
        nd != out->ndim || memcmp(shape, out->shape, sizeof(int64_t) * (size_t)nd) != 0)
        return nbt_error(name, "shape %s does not broadcast to %s", nbt_shape(t), nbt_shape(out)),
               false;
    return true;
}

bool nbt_unary_into(nb_tensor *out, nbt_unary_op op, const nb_tensor *a, double param) {
    const char *name = nbt_unary_name(op);
    if (!out) return nbt_error(name, "NULL output"), false;
    if (!check_input(name, a, out)) return false;
    map_ctx c = {out->dtype, op, NULL, param};
    map(out, 1, &a, &c);
    return true;
}

nb_tensor *nbt_unary(nbt_unary_op op, const nb_tensor *a, double param) {
    const char *name = nbt_unary_name(op);
    if (!check_input(name, a, NULL)) return NULL;
    nb_tensor *out = nbt_new(name, a->dtype, a->ndim, a->shape);
    if (!out || !nbt_unary_into(out, op, a, param)) return NULL;
    return out;
}

nb_tensor *nbt_map2(const char *name, const nbt_map2_kernel *kernel, const nb_tensor *a,
                    const nb_tensor *b, double param) {
    if (!check_input(name, a, NULL)) return NULL;
    nb_tensor *out = nbt_new(name, a->dtype, a->ndim, a->shape);
    if (!out || !check_input(name, b, out)) return NULL;
    map_ctx c = {out->dtype, NBT_NEG, kernel, param};
    map(out, 2, (const nb_tensor *[]){a, b}, &c);
    return out;
}

/* ---- gelu with its derivative kept for the backward: the backward is then one product g * d
 * instead of a pass that reads x and erf again (kernels/gelu_rows.c takes both in one pass) ---- */
/* Contiguous operands of the fused gelu kernel: y, d, x. */
typedef struct {
    nb_dtype dtype;
    char *y, *d;
    const char *x;
} gelu_job;

static void gelu_range(int64_t begin, int64_t end, void *vjob) {
    const gelu_job *j = vjob;
    int64_t n = end - begin;
    if (j->dtype == NB_F32)
        nbt_vgelu_derivative_f32((float *)j->y + begin, (float *)j->d + begin,
                                 (const float *)j->x + begin, n);
    else
        nbt_vgelu_derivative_f64((double *)j->y + begin, (double *)j->d + begin,
                                 (const double *)j->x + begin, n);
}

nb_tensor *nbt_gelu_with_derivative(const nb_tensor *x, nb_tensor **derivative) {
    if (!check_input("gelu", x, NULL)) return NULL;
    const nb_tensor *xc = nbt_contiguous(x);
    nb_tensor *y = nbt_new("gelu", x->dtype, x->ndim, x->shape);
    nb_tensor *d = nbt_new("gelu", x->dtype, x->ndim, x->shape);
    if (!xc || !y || !d) return NULL;
    gelu_job j = {x->dtype, nbt_ptr(y), nbt_ptr(d), nbt_ptr(xc)};
    nbt_parallel_ranges(nbt_numel(y), PARALLEL_GRAIN, gelu_range, &j);
    *derivative = d;
    return y;
}
