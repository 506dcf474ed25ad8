/* One SIMD microkernel, instantiated by gemm_kernels.c for each element type, vector width
 * and tile shape. Expects: T (element), V (vector), W (lanes), NV (1 or 2 vectors per row),
 * MR, ROWS(X) (X(i, g, o) for each row i = 3g + o < MR) and GROUPS(X) (X(g) for each group
 * of three rows), VLOAD, VSTORE, VSET1, VFMA(a, b, c) = a*b + c, VMUL,
 * VZERO, MASK (a lane mask type), MAKE_MASK(lo, hi) (lanes lo <= l < hi; any ints),
 * MLOAD(p, m), MSTORE(p, m, v), and KNAME (the function to define). No include guard: it is
 * included once per kernel. */

#define GK_CAT2(a, b) a##b
#define GK_CAT(a, b) GK_CAT2(a, b)
#define KBODY GK_CAT(KNAME, _body)

#if NV == 2
#define GK_DECL(i, g, o) V c##i##_0 = VZERO(), c##i##_1 = VZERO();
#define GK_STEP(i, g, o)                                                                           \
    {                                                                                              \
        V ai = VSET1(a##g[(o)*a_rs]);                                                              \
        c##i##_0 = VFMA(ai, b0, c##i##_0);                                                         \
        c##i##_1 = VFMA(ai, b1, c##i##_1);                                                         \
    }
#define GK_LOAD_B V b0 = VLOAD(b), b1 = VLOAD(b + W);
/* Whole rows: beta 0 (C not read), beta 1, any beta. */
#define GK_STORE0(i, g, o)                                                                         \
    VSTORE(c + (i)*ldc, VMUL(va, c##i##_0));                                                       \
    VSTORE(c + (i)*ldc + W, VMUL(va, c##i##_1));
#define GK_STORE1(i, g, o)                                                                         \
    VSTORE(c + (i)*ldc, VFMA(va, c##i##_0, VLOAD(c + (i)*ldc)));                                   \
    VSTORE(c + (i)*ldc + W, VFMA(va, c##i##_1, VLOAD(c + (i)*ldc + W)));
#define GK_STOREB(i, g, o)                                                                         \
    VSTORE(c + (i)*ldc, VFMA(vb, VLOAD(c + (i)*ldc), VMUL(va, c##i##_0)));                         \
    VSTORE(c + (i)*ldc + W, VFMA(vb, VLOAD(c + (i)*ldc + W), VMUL(va, c##i##_1)));
/* Part of a tile: rows outside [r0, r1) untouched, lanes outside the masks untouched. The
 * same three formulas as whole rows, so an element's value never depends on where its tile
 * lies (which is what lets threads split C anywhere). */
#define GK_STOREM(i, g, o)                                                                         \
    if ((i) >= r0 && (i) < r1) {                                                                   \
        T *ci = c + (i)*ldc;                                                                       \
        GK_PART(c##i##_0, ci, m0, l0);                                                             \
        GK_PART(c##i##_1, ci + W, m1, l1);                                                         \
    }
#else
#define GK_DECL(i, g, o) V c##i##_0 = VZERO();
#define GK_STEP(i, g, o)                                                                           \
    {                                                                                              \
        V ai = VSET1(a##g[(o)*a_rs]);                                                              \
        c##i##_0 = VFMA(ai, b0, c##i##_0);                                                         \
    }
#define GK_LOAD_B V b0 = VLOAD(b);
#define GK_STORE0(i, g, o) VSTORE(c + (i)*ldc, VMUL(va, c##i##_0));
#define GK_STORE1(i, g, o) VSTORE(c + (i)*ldc, VFMA(va, c##i##_0, VLOAD(c + (i)*ldc)));
#define GK_STOREB(i, g, o) VSTORE(c + (i)*ldc, VFMA(vb, VLOAD(c + (i)*ldc), VMUL(va, c##i##_0)));
#define GK_STOREM(i, g, o)                                                                         \
    if ((i) >= r0 && (i) < r1) {                                                                   \
        T *ci = c + (i)*ldc;                                                                       \
        GK_PART(c##i##_0, ci, m0, l0);                                                             \
    }
#endif
/* alpha * acc + beta * C, C loaded by LOAD, as GK_STORE0, GK_STORE1 and GK_STOREB compute it. */
#define GK_MIX(acc, LOAD)                                                                          \
    (beta == 0 ? VMUL(va, acc) : beta == 1 ? VFMA(va, acc, LOAD) : VFMA(vb, LOAD, VMUL(va, acc)))
/* One vector of a row of a part tile, with all (GK_ALL), some (GK_SOME) or none (GK_NONE) of
 * its lanes in the part. All in: plain moves, since AVX2's masked ones (vmaskmovps) are
 * microcoded on Zen 3; a strip slid up over rows already done (gemm_small) has whole rows. */
#ifndef GK_ALL /* (kept across inclusions) */
#define GK_NONE 0
#define GK_SOME 1
#define GK_ALL 2
#endif
#define GK_LANES(lo, hi)                                                                           \
    ((lo) <= 0 && (hi) >= W ? GK_ALL : (hi) <= 0 || (lo) >= W || (hi) <= (lo) ? GK_NONE : GK_SOME)
#define GK_PART(acc, p, m, lanes)                                                                  \
    do {                                                                                           \
        if ((lanes) == GK_ALL)                                                                     \
            VSTORE(p, GK_MIX(acc, VLOAD(p)));                                                      \
        else if ((lanes) == GK_SOME)                                                               \
            MSTORE(p, m, GK_MIX(acc, MLOAD(p, m)));                                                \
    } while (0)

/* Inlined four times below: with the packed strides as constants (every broadcast is then a
 * fixed offset from one pointer), with A read in place along its rows (a_cs 1) or across them
 * (a_rs 1: a transposed A, whose tile rows are then fixed offsets again), and with any
 * strides. */
static inline __attribute__((always_inline)) void
KBODY(int64_t kc, const T *restrict a, int64_t a_rs, int64_t a_cs, const T *restrict b,
      int64_t b_rs, T *restrict c, int64_t ldc, T alpha, T beta, const nbt_gemm_rect *rect) {
    ROWS(GK_DECL)
    /* C's tile rows are fetched now, kc steps before they are read or written: a tile of a large
     * C starts out of cache, and its loads at the end wait for it. On Zen 3 (one process timing
     * both in turns, medians of ten rounds) products of 512-2048 took from 0.4% more to 7% less
     * time, most about 1% less. Not below kc = 256, where the fetches cost 2-3% of a call and C
     * is mostly in cache; nor for a part tile, whose rows may lie past C. */
#define GK_FETCH(i, g, o)                                                                          \
    __builtin_prefetch(c + (i)*ldc, 1, 3), __builtin_prefetch(c + (i)*ldc + NV * W - 1, 1, 3);
    if (!rect && kc >= 256) {
        ROWS(GK_FETCH)
    }
#undef GK_FETCH
    /* A row pointer per group of three rows, the others at 1 and 2 row strides from it: x86
     * addressing reaches all three without spilling addresses when A is read in place. */
#define GK_BASE(g) const T *a##g = a + 3 * (g)*a_rs;
#define GK_NEXT(g) a##g += a_cs;
    GROUPS(GK_BASE)
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        GK_LOAD_B
        ROWS(GK_STEP)
        GROUPS(GK_NEXT)
        b += b_rs;
    }
    V va = VSET1(alpha), vb = VSET1(beta);
    if (rect) {
        int r0 = rect->r0, r1 = rect->r1;
        MASK m0 = MAKE_MASK(rect->c0, rect->c1);
        int l0 = GK_LANES(rect->c0, rect->c1);
#if NV == 2
        MASK m1 = MAKE_MASK(rect->c0 - W, rect->c1 - W);
        int l1 = GK_LANES(rect->c0 - W, rect->c1 - W);
#endif
        ROWS(GK_STOREM)
    } else if (beta == 0) {
        ROWS(GK_STORE0)
    } else if (beta == 1) {
        ROWS(GK_STORE1)
    } else {
        ROWS(GK_STOREB)
    }
}

static void KNAME(int64_t kc, const T *a, int64_t a_rs, int64_t a_cs, const T *b, int64_t b_rs,
                  T *c, int64_t ldc, T alpha, T beta, const nbt_gemm_rect *rect) {
    if (a_rs == 1 && a_cs == MR && b_rs == NV * W)
        KBODY(kc, a, 1, MR, b, NV * W, c, ldc, alpha, beta, rect);
    else if (a_cs == 1) /* A read in place along its rows (small path, blocked path) */
        KBODY(kc, a, a_rs, 1, b, b_rs, c, ldc, alpha, beta, rect);
    else if (a_rs == 1) /* a transposed A read in place (the blocked path's weight gradients) */
        KBODY(kc, a, 1, a_cs, b, b_rs, c, ldc, alpha, beta, rect);
    else
        KBODY(kc, a, a_rs, a_cs, b, b_rs, c, ldc, alpha, beta, rect);
}

#undef GK_DECL
#undef GK_BASE
#undef GK_NEXT
#undef GK_STEP
#undef GK_STORE0
#undef GK_STORE1
#undef GK_STOREB
#undef GK_STOREM
#undef GK_MIX
#undef GK_PART
#undef GK_LANES
#undef GK_LOAD_B
#undef KBODY
#undef GK_CAT
#undef GK_CAT2
