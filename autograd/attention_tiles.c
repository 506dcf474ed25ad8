/* The memory-efficient attention's block products on the GEMM's microkernel (see
 * attention_tiles.h). Calling the GEMM for each block of queries repacked the keys, transposed,
 * for every block (pack_t, 7% of the long workload at one thread) and computed whole 64 x 64
 * blocks on the causal diagonal; here each head's keys and values are packed once, the
 * queries and scores are read where they lie, and a tile is skipped when all of it is above
 * the diagonal. Each element is one microkernel sum over its k in order, so the result does
 * not depend on the thread running it. */
#include "attention_tiles.h"
#include "../tensor/isa.h"
#include "../tensor/nbt.h"

nba_tiles nba_tiles_for(nb_dtype dt) {
    const nbt_kernel_table *k = nbt_kernels();
    nba_tiles t = {.dtype = dt,
                   .es = nbt_esize(dt),
                   .pack_t_f32 = k->gemm_f32.pack_t,
                   .pack_n_f32 = k->gemm_f32.pack_n,
                   .pack_n_f64 = k->gemm_f64.pack_n};
    if (dt == NB_F32)
        t.mr = k->gemm_f32.mr, t.nr = k->gemm_f32.nr, t.f32 = k->gemm_f32.wide;
    else
        t.mr = k->gemm_f64.mr, t.nr = k->gemm_f64.nr, t.f64 = k->gemm_f64.wide;
    return t;
}

int64_t nba_tiles_packed_size(const nba_tiles *t, int64_t n, int64_t hd) {
    return nba_round_up(n, t->nr) * nba_round_up(hd, t->nr);
}

/* Plain C for the sets without packing kernels (and float64's transposed panels): the
 * writes in order, the reads in L1. */
#define DEFINE_PACKS(T, SUF)                                                                       \
    static void pack_rows_##SUF(int width, T *dst, const T *X, int64_t x_row, int64_t n,           \
                                int64_t hd) {                                                      \
        for (int64_t p = 0; p < n; p += width, dst += hd * width) {                                \
            const int w = n - p < width ? (int)(n - p) : width;                                    \
            const T *x = X + p * x_row;                                                            \
            for (int64_t k = 0; k < hd; k++) {                                                     \
                T *d = dst + k * width;                                                            \
                for (int j = 0; j < w; j++) d[j] = x[j * x_row + k];                               \
                for (int j = w; j < width; j++) d[j] = 0;                                          \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void pack_cols_##SUF(int nr, T *dst, const T *X, int64_t x_row, int64_t n,              \
                                int64_t hd) {                                                      \
        for (int64_t p = 0; p < hd; p += nr, dst += n * nr)                                        \
            for (int64_t s = 0; s < n; s++)                                                        \
                for (int j = 0; j < nr; j++)                                                       \
                    dst[s * nr + j] = p + j < hd ? X[s * x_row + p + j] : 0;                       \
    }
DEFINE_PACKS(float, f32)
DEFINE_PACKS(double, f64)

/* Scalar gathers of strided rows took 10% of mid's step at one thread (AVX-512); the GEMM's
 * kernel transposes 16 x 16 (8 x 8) blocks in registers. A head's rows are a few cache lines
 * each, a whole row of q, k and v apart, too short for the hardware prefetcher to follow, so
 * the next panel's rows are fetched while this one is transposed: mid's step 0.988-0.992 of
 * the time, in turns in one process (Zen 3, 2026-11-29; long 0.990-0.998). */
void nba_tiles_pack_rows(const nba_tiles *t, void *dst, const void *X, int64_t x_row, int64_t n,
                         int64_t hd, int width) {
    if (t->dtype == NB_F64) {
        pack_rows_f64(width, dst, X, x_row, n, hd);
    } else if (!t->pack_t_f32) {
        pack_rows_f32(width, dst, X, x_row, n, hd);
    } else {
        float *d = dst;
        const float *x = X;
        for (int64_t p = 0; p < n; p += width, d += hd * width) {
            for (int64_t i = p + width; i < n && i < p + 2 * width; i++)
                for (int64_t c = 0; c < hd; c += 64 / (int64_t)sizeof(float))
                    __builtin_prefetch(x + i * x_row + c);
            t->pack_t_f32(x + p * x_row, x_row, hd, n - p < width ? (int)(n - p) : width, width, d);
        }
    }
}

void nba_tiles_pack_cols(const nba_tiles *t, void *dst, const void *X, int64_t x_row, int64_t n,
                         int64_t hd) {
    const int nr = t->nr;
    if (t->dtype == NB_F32)
        t->pack_n_f32 ? t->pack_n_f32(X, x_row, n, (int)hd, nr, n * nr, dst)
                      : pack_cols_f32(nr, dst, X, x_row, n, hd);
    else
        t->pack_n_f64 ? t->pack_n_f64(X, x_row, n, (int)hd, nr, n * nr, dst)
                      : pack_cols_f64(nr, dst, X, x_row, n, hd);
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* Strip i's rows of A and the part of the sum it takes. */
typedef struct {
    int64_t top, seen, k0, k1;
    int r0, r1;
    const char *a;
    int64_t a_rs, a_cs;
} strip_t;

static strip_t strip_at(const nba_tiles *t, const nba_tile_product *p, int64_t i) {
    const int mr = t->mr;
    strip_t s;
    /* A last strip shorter than mr slides up to end at row M, storing only its new rows,
     * so A is never read past row M (when M >= mr; a packed A has whole panels). */
    s.top = !p->a_packed && p->M >= mr && i + mr > p->M ? p->M - mr : i;
    s.r0 = (int)(i - s.top), s.r1 = (int)(min64(s.top + mr, p->M) - s.top);
    /* The keys this strip of queries sees (SUM_TO, COLUMNS), or the first query that sees
     * its keys (SUM_FROM). */
    s.seen = p->diag + s.top + s.r1;
    s.k0 = 0, s.k1 = p->K;
    if (p->cut == NBA_CUT_SUM_TO) s.k1 = min64(s.k1, s.seen);
    if (p->cut == NBA_CUT_SUM_FROM) s.k0 = s.top > p->diag ? min64(s.top - p->diag, p->K) : 0;
    s.a = (const char *)p->A + t->es * (size_t)(p->a_packed ? s.top * p->K + s.k0 * mr
                                                            : s.top * p->a_rs + s.k0 * p->a_cs);
    s.a_rs = p->a_packed ? 1 : p->a_rs, s.a_cs = p->a_packed ? mr : p->a_cs;
    return s;
}

/* The tile of strip s and the panel of columns from jc. */
static void tile(const nba_tiles *t, const nba_tile_product *p, const strip_t *s, int64_t jc) {
    const int mr = t->mr, nr = t->nr;
    const size_t es = t->es;
    const int cols = (int)min64(nr, p->N - jc);
    const char *b = (const char *)p->B + es * (size_t)(jc / nr * p->b_panel + s->k0 * nr);
    char *c = (char *)p->C + es * (size_t)(s->top * p->ldc + jc);
    const nbt_gemm_rect part = {s->r0, s->r1, 0, cols};
    const nbt_gemm_rect *rect = s->r0 == 0 && s->r1 == mr && cols == nr ? NULL : &part;
    if (t->dtype == NB_F32)
        t->f32(s->k1 - s->k0, (const float *)s->a, s->a_rs, s->a_cs, (const float *)b, nr,
               (float *)c, p->ldc, (float)p->alpha, (float)p->beta, rect);
    else
        t->f64(s->k1 - s->k0, (const double *)s->a, s->a_rs, s->a_cs, (const double *)b, nr,
               (double *)c, p->ldc, p->alpha, p->beta, rect);
}

void nba_tiles_multiply(const nba_tiles *t, const nba_tile_product *p) {
    for (int64_t i = 0; i < p->M; i += t->mr) {
        const strip_t s = strip_at(t, p, i);
        for (int64_t jc = 0; jc < p->N; jc += t->nr) {
            if (p->cut == NBA_CUT_COLUMNS && jc >= s.seen) break; /* the rest above the diagonal */
            tile(t, p, &s, jc);
        }
    }
}
