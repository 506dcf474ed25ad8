/* The rows and dots kernels (gemm_kernels.h) for one SIMD instruction set and element type,
 * instantiated by gemm_kernels.c. Expects the same macros as gemm_ukr.h (T, V, W, VLOAD,
 * VSTORE, VSET1, VFMA, VMUL, VZERO, MASK, MAKE_MASK, MLOAD, MSTORE) and VHSUM(v) (the sum of
 * a vector's lanes in a fixed order), RNAME and DNAME (the functions to define). No include
 * guard: included once per element type. */

#define GR_CAT2(a, b) a##b
#define GR_CAT(a, b) GR_CAT2(a, b)
#define RBODY GR_CAT(RNAME, _body)
#define RSTORE GR_CAT(RNAME, _store)
#define DBODY GR_CAT(DNAME, _body)

/* C = alpha * acc + beta * C on the first `lanes` elements of a C row with a column stride
 * other than 1, through a contiguous copy: the tile kernels' three formulas. */
static inline __attribute__((always_inline)) void RSTORE(T *c, int64_t c_cs, int lanes, V acc, V va,
                                                         V vb, T beta) {
    T tmp[W];
    for (int j = 0; j < W; j++) tmp[j] = j < lanes && beta != 0 ? c[j * c_cs] : 0;
    V cv = VLOAD(tmp);
    VSTORE(tmp, beta == 0   ? VMUL(va, acc)
                : beta == 1 ? VFMA(va, acc, cv)
                            : VFMA(vb, cv, VMUL(va, acc)));
    for (int j = 0; j < lanes; j++) c[j * c_cs] = tmp[j];
}

/* Rows per group: 8 where 32 vector registers hold 8 x 2 accumulators (AVX-512), else 4.
 * Enough independent chains to keep both FMA ports busy through their latency; how rows are
 * grouped never changes an element's sum. */
#ifdef __AVX512F__
#define RGROUP 8
#else
#define RGROUP 4
#endif

/* R rows (1 to RGROUP) by NVEC vectors (1, 2, or 4 for one row) of C: one B load feeds R
 * multiply-adds, and there are R * NVEC independent chains of them. */
static inline __attribute__((always_inline)) void RBODY(int R, int NVEC, int64_t kc, const T *a,
                                                        int64_t a_rs, int64_t a_cs, const T *b,
                                                        int64_t ldb, T *c, int64_t ldc,
                                                        int64_t c_cs, int width, T alpha, T beta) {
    MASK mk[4];
    V acc[RGROUP][4];
#pragma GCC unroll 4
    for (int v = 0; v < NVEC; v++) mk[v] = MAKE_MASK(0, width - v * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NVEC; v++) acc[r][v] = VZERO();
    /* Whole vectors of B and C load plainly: AVX2's masked loads (vmaskmovps) cost Zen 3 more
     * than the multiply-adds they feed. */
    const bool full = width == NVEC * W;
#define RSTEP(LOAD_B)                                                                              \
    for (int64_t k = 0; k < kc; k++, a += a_cs, b += ldb) {                                        \
        V bv[4];                                                                                   \
        _Pragma("GCC unroll 4") for (int v = 0; v < NVEC; v++) bv[v] = LOAD_B;                     \
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                                      \
            V ar = VSET1(a[r * a_rs]);                                                             \
            _Pragma("GCC unroll 4") for (int v = 0; v < NVEC; v++) acc[r][v] =                     \
                VFMA(ar, bv[v], acc[r][v]);                                                        \
        }                                                                                          \
    }
    if (full)
        RSTEP(VLOAD(b + v * W))
    else
        RSTEP(MLOAD(b + v * W, mk[v]))
#undef RSTEP
    V va = VSET1(alpha), vb = VSET1(beta);
    if (c_cs == 1) {
        /* Every C row is read before any is written: the rows of a narrow C share cache lines,
         * and a load from where a masked store has just gone waits for the store to retire
         * (5 such stalls were 2/3 of a 6-row kernel's time in the seed step). */
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NVEC; v++) {
                const T *cr = c + r * ldc + v * W;
                V cv = beta == 0 ? VZERO() : full ? VLOAD(cr) : MLOAD(cr, mk[v]);
                acc[r][v] = beta == 0   ? VMUL(va, acc[r][v])
                            : beta == 1 ? VFMA(va, acc[r][v], cv)
                                        : VFMA(vb, cv, VMUL(va, acc[r][v]));
            }
        if (full) {
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                for (int v = 0; v < NVEC; v++) VSTORE(c + r * ldc + v * W, acc[r][v]);
            return;
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NVEC; v++) MSTORE(c + r * ldc + v * W, mk[v], acc[r][v]);
        return;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NVEC; v++) {
            int lanes = width - v * W < W ? width - v * W : W;
            RSTORE(c + r * ldc + v * W * c_cs, c_cs, lanes, acc[r][v], va, vb, beta);
        }
}

/* One function per (R, NVEC): inlined into one body, the variants' address arithmetic was
 * hoisted to the entry and spilled, some 600 instructions per call before any work (most of
 * a tiny product's cost). */
#define RVAR(R, NVEC) GR_CAT(GR_CAT(GR_CAT(RNAME, _r), R), GR_CAT(_v, NVEC))
#define DEFINE_RVAR(R, NVEC)                                                                       \
    static __attribute__((noinline)) void RVAR(R, NVEC)(                                           \
        int64_t kc, const T *a, int64_t a_rs, int64_t a_cs, const T *b, int64_t ldb, T *c,         \
        int64_t ldc, int64_t c_cs, int width, T alpha, T beta) {                                   \
        RBODY(R, NVEC, kc, a, a_rs, a_cs, b, ldb, c, ldc, c_cs, width, alpha, beta);               \
    }
DEFINE_RVAR(1, 4)
DEFINE_RVAR(1, 2)
DEFINE_RVAR(2, 2)
DEFINE_RVAR(3, 2)
DEFINE_RVAR(4, 2)
DEFINE_RVAR(1, 1)
DEFINE_RVAR(2, 1)
DEFINE_RVAR(3, 1)
DEFINE_RVAR(4, 1)
#if RGROUP == 8
DEFINE_RVAR(5, 2)
DEFINE_RVAR(6, 2)
DEFINE_RVAR(7, 2)
DEFINE_RVAR(8, 2)
DEFINE_RVAR(5, 1)
DEFINE_RVAR(6, 1)
DEFINE_RVAR(7, 1)
DEFINE_RVAR(8, 1)
#endif
#undef DEFINE_RVAR

/* The variants by row count, for each vector count (index 0 unused). */
typedef void (*GR_CAT(RNAME, _variant))(int64_t kc, const T *a, int64_t a_rs, int64_t a_cs,
                                        const T *b, int64_t ldb, T *c, int64_t ldc, int64_t c_cs,
                                        int width, T alpha, T beta);
#if RGROUP == 8
#define RTABLE(NVEC)                                                                               \
    {                                                                                              \
        NULL, RVAR(1, NVEC), RVAR(2, NVEC), RVAR(3, NVEC), RVAR(4, NVEC), RVAR(5, NVEC),           \
            RVAR(6, NVEC), RVAR(7, NVEC), RVAR(8, NVEC)                                            \
    }
#else
#define RTABLE(NVEC)                                                                               \
    { NULL, RVAR(1, NVEC), RVAR(2, NVEC), RVAR(3, NVEC), RVAR(4, NVEC) }
#endif
static const GR_CAT(RNAME, _variant)
    GR_CAT(RNAME, _by_rows)[2][RGROUP + 1] = {RTABLE(1), RTABLE(2)};
#undef RTABLE

/* Rows 0 to m in groups of RGROUP, then the rest, over columns [j0, j0 + width). */
#define RROWS(NVEC)                                                                                \
    do {                                                                                           \
        const GR_CAT(RNAME, _variant) *by_rows = GR_CAT(RNAME, _by_rows)[(NVEC)-1];                \
        for (int64_t i = 0; i < m; i += RGROUP) {                                                  \
            int64_t rows = m - i < RGROUP ? m - i : RGROUP;                                        \
            by_rows[rows](kc, a + i * a_rs, a_rs, a_cs, bj, ldb, cj + i * ldc, ldc, c_cs, width,   \
                          alpha, beta);                                                            \
        }                                                                                          \
    } while (0)

static void RNAME(int64_t m, int64_t n, int64_t kc, const T *a, int64_t a_rs, int64_t a_cs,
                  const T *b, int64_t ldb, T *c, int64_t ldc, int64_t c_cs, T alpha, T beta) {
    /* one row: four vectors at a time, else the multiply-adds wait on each other */
    int64_t step = m == 1 ? 4 * W : 2 * W;
    for (int64_t j0 = 0; j0 < n; j0 += step) {
        int width = n - j0 < step ? (int)(n - j0) : (int)step;
        const T *bj = b + j0;
        T *cj = c + j0 * c_cs;
        if (width > 2 * W)
            RVAR(1, 4)(kc, a, a_rs, a_cs, bj, ldb, cj, ldc, c_cs, width, alpha, beta);
        else if (width > W)
            RROWS(2);
        else
            RROWS(1);
    }
}
#undef RROWS
#undef RVAR
#undef RGROUP

/* R (1, 4 or 8) dot products sharing each load of x. x is contiguous here. Each product keeps
 * one accumulator, so its sum's order does not depend on R; eight products in flight keep
 * both FMA pipes busy where four waited on the adds' latency (AVX2: a product of K = 128 is
 * a chain of 16 dependent FMAs). */
static inline __attribute__((always_inline)) void DBODY(int R, int64_t kc, const T *x, const T *mat,
                                                        int64_t ldm, V acc[8]) {
    int64_t k = 0;
    for (; k + W <= kc; k += W) {
        V xv = VLOAD(x + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[r] = VFMA(xv, VLOAD(mat + r * ldm + k), acc[r]);
    }
    if (k < kc) {
        MASK tail = MAKE_MASK(0, (int)(kc - k));
        V xv = MLOAD(x + k, tail);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[r] = VFMA(xv, MLOAD(mat + r * ldm + k, tail), acc[r]);
    }
}

/* x in pieces of this many elements: a strided x is copied piece by piece, which does not
 * change the order of any sum (each lane keeps its partial sum across pieces). */
#define DOT_PIECE 512

static void DNAME(int64_t n, int64_t kc, const T *x, int64_t incx, const T *mat, int64_t ldm, T *y,
                  int64_t incy, T alpha, T beta) {
    T xbuf[DOT_PIECE];
    /* Groups of eight rows, then at most one of four, then single rows. */
    for (int64_t j = 0, R; j < n; j += R) {
        R = n - j >= 8 ? 8 : n - j >= 4 ? 4 : 1;
        V acc[8] = {VZERO(), VZERO(), VZERO(), VZERO(), VZERO(), VZERO(), VZERO(), VZERO()};
        const T *rows = mat + j * ldm;
        for (int64_t k0 = 0; k0 < kc; k0 += DOT_PIECE) {
            int64_t kk = kc - k0 < DOT_PIECE ? kc - k0 : DOT_PIECE;
            const T *xs = x + k0;
            if (incx != 1) {
                for (int64_t k = 0; k < kk; k++) xbuf[k] = x[(k0 + k) * incx];
                xs = xbuf;
            }
            if (R == 8)
                DBODY(8, kk, xs, rows + k0, ldm, acc);
            else if (R == 4)
                DBODY(4, kk, xs, rows + k0, ldm, acc);
            else
                DBODY(1, kk, xs, rows + k0, ldm, acc);
        }
        for (int64_t r = 0; r < R; r++) {
            T s = VHSUM(acc[r]), *yr = y + (j + r) * incy;
            *yr = beta == 0 ? alpha * s : alpha * s + beta * *yr;
        }
    }
}

#undef DOT_PIECE
#undef RBODY
#undef RSTORE
#undef DBODY
#undef GR_CAT
#undef GR_CAT2
