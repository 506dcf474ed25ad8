/* Layer norm's float32 rows for one instruction set (kernels.h), called by
 * autograd/layer_norm.c: the same formulas as its float64 rows on eight floats at a time, the
 * double sums in eight lanes (lane j % 8, combined in a fixed order as nbt_row_sum does), so
 * results never depend on the thread count. AVX-512 holds the eight doubles in one register,
 * AVX2 in two, SSE2 in four; every lane computes the same operations in the same order in each
 * build, and nothing is fused, so all three give the same bits as each other. Rows of D
 * contiguous elements; w and b may be NULL. */
#include "kernels.h"

#include <math.h>

typedef float ln_v8f __attribute__((vector_size(32)));
typedef float ln_v4f __attribute__((vector_size(16)));
typedef double ln_v4d __attribute__((vector_size(32)));

/* Unaligned, aliasing views for loads and stores, as the intrinsics headers define them. */
typedef float ln_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
typedef float ln_v4f_u __attribute__((vector_size(16), aligned(4), may_alias));
typedef double ln_v4d_u __attribute__((vector_size(32), aligned(8), may_alias));
#define LN_LOAD8(p) (*(const ln_v8f_u *)(p))
#define LN_STORE8(p, v) (*(ln_v8f_u *)(p) = (v))
#define LN_LOAD4D(p) (*(const ln_v4d_u *)(p))
#define LN_STORE4D(p, v) (*(ln_v4d_u *)(p) = (v))
#define LN_SPLAT8(x) ((ln_v8f){x, x, x, x, x, x, x, x})
#define LN_SPLAT4D(x) ((ln_v4d){x, x, x, x})

/* Eight double lanes as two halves of four. One 64-byte vector of eight, on AVX2 (two
 * registers) and SSE2 (four), went through the stack element by element: 630 cycles a row of
 * 96 at [1024, 96], where these halves take (docs/performance.md). */
typedef struct {
    ln_v4d lo, hi;
} ln_d8;

static inline ln_d8 d8_zero(void) {
    return (ln_d8){{0}, {0}};
}
/* the eight floats at p, widened */
static inline ln_d8 d8_widen(const float *p) {
    return (ln_d8){__builtin_convertvector(*(const ln_v4f_u *)p, ln_v4d),
                   __builtin_convertvector(*(const ln_v4f_u *)(p + 4), ln_v4d)};
}
static inline ln_d8 d8_from(ln_v8f v) {
    ln_v4f lo = {v[0], v[1], v[2], v[3]}, hi = {v[4], v[5], v[6], v[7]};
    return (ln_d8){__builtin_convertvector(lo, ln_v4d), __builtin_convertvector(hi, ln_v4d)};
}
static inline ln_d8 d8_load(const double *p) {
    return (ln_d8){LN_LOAD4D(p), LN_LOAD4D(p + 4)};
}
static inline void d8_store(double *p, ln_d8 v) {
    LN_STORE4D(p, v.lo);
    LN_STORE4D(p + 4, v.hi);
}
static inline ln_d8 d8_add(ln_d8 a, ln_d8 b) {
    return (ln_d8){a.lo + b.lo, a.hi + b.hi};
}
static inline ln_d8 d8_sub(ln_d8 a, double b) {
    return (ln_d8){a.lo - LN_SPLAT4D(b), a.hi - LN_SPLAT4D(b)};
}
static inline ln_d8 d8_mul(ln_d8 a, ln_d8 b) {
    return (ln_d8){a.lo * b.lo, a.hi * b.hi};
}
/* the lanes' sum in nbt_row_sum's fixed order */
static inline double d8_combine(ln_d8 a) {
    return ((a.lo[0] + a.lo[1]) + (a.lo[2] + a.lo[3])) +
           ((a.hi[0] + a.hi[1]) + (a.hi[2] + a.hi[3]));
}

/* y = (x - mean) * rstd * w + b per row, keeping each row's mean and rstd. With res, the row
 * normalised is x + res, written to sum first (while the row is in cache). */
void NBK_FN(nbk_layer_norm_rows_f32)(int64_t rows, int64_t D, const float *x0, const float *res,
                                     const float *w, const float *b, double eps, float *y,
                                     float *sum_out, float *mean, float *rstd) {
    int64_t Dv = D / 8 * 8;
    for (int64_t r = 0; r < rows; r++, y += D) {
        const float *x = x0 + r * D;
        if (res) {
            const float *c = res + r * D;
            float *s = sum_out + r * D;
            for (int64_t j = 0; j < Dv; j += 8) LN_STORE8(s + j, LN_LOAD8(x + j) + LN_LOAD8(c + j));
            for (int64_t j = Dv; j < D; j++) s[j] = x[j] + c[j];
            x = s; /* the row's other passes read the sum */
        }
        ln_d8 sum = d8_zero();
        for (int64_t j = 0; j < Dv; j += 8) sum = d8_add(sum, d8_widen(x + j));
        double tail[8] = {0};
        for (int64_t j = Dv; j < D; j++) tail[j - Dv] = (double)x[j];
        sum = d8_add(sum, d8_load(tail));
        const double mu = d8_combine(sum) / (double)D;
        ln_d8 sq = d8_zero();
        for (int64_t j = 0; j < Dv; j += 8) {
            ln_d8 d = d8_sub(d8_widen(x + j), mu);
            sq = d8_add(sq, d8_mul(d, d));
        }
        double sq_tail[8] = {0};
        for (int64_t j = Dv; j < D; j++)
            sq_tail[j - Dv] = ((double)x[j] - mu) * ((double)x[j] - mu);
        sq = d8_add(sq, d8_load(sq_tail));
        const double rs = 1.0 / sqrt(d8_combine(sq) / (double)D + eps);
        const float m = (float)mu, q = (float)rs;
        mean[r] = m, rstd[r] = q;
        const ln_v8f vm = LN_SPLAT8(m), vq = LN_SPLAT8(q);
        for (int64_t j = 0; j < Dv; j += 8) {
            ln_v8f v = (LN_LOAD8(x + j) - vm) * vq;
            if (w) v *= LN_LOAD8(w + j);
            if (b) v += LN_LOAD8(b + j);
            LN_STORE8(y + j, v);
        }
        for (int64_t j = Dv; j < D; j++) {
            float v = (x[j] - m) * q;
            if (w) v *= w[j];
            if (b) v += b[j];
            y[j] = v;
        }
    }
}
/* With g_sum (add_layer_norm), dx also gets the sum's own gradient: dx + g_sum. */
void NBK_FN(nbk_layer_norm_backward_rows_f32)(int64_t rows, int64_t D, const float *x,
                                              const float *w, const float *mean, const float *rstd,
                                              const float *g, const float *g_sum, float *dx,
                                              double *dw, double *db) {
    int64_t Dv = D / 8 * 8;
    for (int64_t r = 0; r < rows; r++, x += D, g += D) {
        const float m = mean[r], q = rstd[r];
        const ln_v8f vm = LN_SPLAT8(m), vq = LN_SPLAT8(q);
        ln_d8 sum_gh = d8_zero(), sum_ghxh = d8_zero();
        for (int64_t j = 0; j < Dv; j += 8) {
            ln_v8f xh = (LN_LOAD8(x + j) - vm) * vq, gv = LN_LOAD8(g + j);
            ln_v8f gh = w ? gv * LN_LOAD8(w + j) : gv;
            ln_d8 xd = d8_from(xh), ghd = d8_from(gh), gd = d8_widen(g + j);
            sum_gh = d8_add(sum_gh, ghd), sum_ghxh = d8_add(sum_ghxh, d8_mul(ghd, xd));
            if (dw) d8_store(dw + j, d8_add(d8_load(dw + j), d8_mul(gd, xd)));
            if (db) d8_store(db + j, d8_add(d8_load(db + j), gd));
        }
        double ta[8] = {0}, tc[8] = {0};
        for (int64_t j = Dv; j < D; j++) {
            const float xh = (x[j] - m) * q, gh = w ? g[j] * w[j] : g[j];
            ta[j - Dv] = gh, tc[j - Dv] = (double)gh * (double)xh;
            if (dw) dw[j] += (double)g[j] * (double)xh;
            if (db) db[j] += g[j];
        }
        sum_gh = d8_add(sum_gh, d8_load(ta)), sum_ghxh = d8_add(sum_ghxh, d8_load(tc));
        if (!dx) continue;
        const float a = (float)(d8_combine(sum_gh) / (double)D),
                    c = (float)(d8_combine(sum_ghxh) / (double)D);
        const ln_v8f va = LN_SPLAT8(a), vc = LN_SPLAT8(c);
        for (int64_t j = 0; j < Dv; j += 8) {
            ln_v8f xh = (LN_LOAD8(x + j) - vm) * vq, gv = LN_LOAD8(g + j);
            ln_v8f gh = w ? gv * LN_LOAD8(w + j) : gv;
            ln_v8f v = vq * (gh - va - xh * vc);
            if (g_sum) v += LN_LOAD8(g_sum + j);
            LN_STORE8(dx + j, v);
        }
        for (int64_t j = Dv; j < D; j++) {
            const float xh = (x[j] - m) * q, gh = w ? g[j] * w[j] : g[j];
            dx[j] = q * (gh - a - xh * c);
            if (g_sum) dx[j] += g_sum[j];
        }
        dx += D;
        if (g_sum) g_sum += D;
    }
}
