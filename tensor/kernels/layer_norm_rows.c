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
typedef double ln_v8d __attribute__((vector_size(64)));

/* Unaligned, aliasing views for loads and stores, as the intrinsics headers define them. */
typedef float ln_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
typedef double ln_v8d_u __attribute__((vector_size(64), aligned(8), may_alias));
#define LN_LOAD8(p) (*(const ln_v8f_u *)(p))
#define LN_STORE8(p, v) (*(ln_v8f_u *)(p) = (v))
#define LN_LOAD8D(p) (*(const ln_v8d_u *)(p))
#define LN_STORE8D(p, v) (*(ln_v8d_u *)(p) = (v))
#define LN_WIDEN(v) __builtin_convertvector(v, ln_v8d)
#define LN_SPLAT8(x) ((ln_v8f){x, x, x, x, x, x, x, x})
#define LN_SPLAT8D(x) ((ln_v8d){x, x, x, x, x, x, x, x})
#define LN_COMBINE(a) (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])))

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
        ln_v8d sum = {0};
        for (int64_t j = 0; j < Dv; j += 8) sum += LN_WIDEN(LN_LOAD8(x + j));
        double tail[8] = {0};
        for (int64_t j = Dv; j < D; j++) tail[j - Dv] = (double)x[j];
        sum += LN_LOAD8D(tail);
        const double mu = LN_COMBINE(sum) / (double)D;
        const ln_v8d vmu = LN_SPLAT8D(mu);
        ln_v8d sq = {0};
        for (int64_t j = 0; j < Dv; j += 8) {
            ln_v8d d = LN_WIDEN(LN_LOAD8(x + j)) - vmu;
            sq += d * d;
        }
        double sq_tail[8] = {0};
        for (int64_t j = Dv; j < D; j++)
            sq_tail[j - Dv] = ((double)x[j] - mu) * ((double)x[j] - mu);
        sq += LN_LOAD8D(sq_tail);
        const double rs = 1.0 / sqrt(LN_COMBINE(sq) / (double)D + eps);
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
        ln_v8d sum_gh = {0}, sum_ghxh = {0};
        for (int64_t j = 0; j < Dv; j += 8) {
            ln_v8f xh = (LN_LOAD8(x + j) - vm) * vq, gv = LN_LOAD8(g + j);
            ln_v8f gh = w ? gv * LN_LOAD8(w + j) : gv;
            ln_v8d xd = LN_WIDEN(xh), ghd = LN_WIDEN(gh);
            sum_gh += ghd, sum_ghxh += ghd * xd;
            if (dw) LN_STORE8D(dw + j, LN_LOAD8D(dw + j) + LN_WIDEN(gv) * xd);
            if (db) LN_STORE8D(db + j, LN_LOAD8D(db + j) + LN_WIDEN(gv));
        }
        double ta[8] = {0}, tc[8] = {0};
        for (int64_t j = Dv; j < D; j++) {
            const float xh = (x[j] - m) * q, gh = w ? g[j] * w[j] : g[j];
            ta[j - Dv] = gh, tc[j - Dv] = (double)gh * (double)xh;
            if (dw) dw[j] += (double)g[j] * (double)xh;
            if (db) db[j] += g[j];
        }
        sum_gh += LN_LOAD8D(ta), sum_ghxh += LN_LOAD8D(tc);
        if (!dx) continue;
        const float a = (float)(LN_COMBINE(sum_gh) / (double)D),
                    c = (float)(LN_COMBINE(sum_ghxh) / (double)D);
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
