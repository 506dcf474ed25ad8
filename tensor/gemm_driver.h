/* The GEMM driver, instantiated by gemm.c for float and double. Expects: T, KSET (the
 * nbt_gemm_kernels_* type), UKR (its kernel type), KC, MB, NB (block sizes), FN(name) (name
 * with a type suffix), and from gemm.c TINY, path_t, split_t, part_t, gemm_part, the
 * workspace functions and the GEMM_* limits. No include guard: included once per element
 * type.
 *
 * Large products follow BLIS with the roles of A and B swapped for row-major C: the
 * microkernel tile is MR rows by NR columns with NR the vector direction, the MR x KC
 * micro-panel of A stays in L1 while it sweeps the KC x NB block of packed B in L2, and the
 * MB x KC block of A sits in L3. An untransposed A is read where it lies (gemm_blocked), a
 * transposed one packed (or read in place when in_place_pays). Loop nest, outermost first: ic (M by
 * MB), pc (K by KC; pack A), jc (N by NB; pack B), ir (M by MR), jr (N by NR; one kernel call).
 *
 * Small products (K <= KC, N <= NB) skip packing where it costs more than it saves: A and
 * an untransposed B are read where they lie, and only a transposed B is packed (a transposed A
 * only where reading it in place pays, small_reads_a; elsewhere the blocked path packs it). Tiny
 * ones (at most TINY multiply-adds), one-row or one-column ones, and ones with only a few rows (at
 * most half a tile) go to the rows and dots kernels, which need no workspace unless a transposed B
 * must be packed.
 *
 * Threads (run): each gets whole products of a batch, or a block of C's rows or columns
 * (at tile boundaries) for every product, with its own pack buffers; a weight gradient with
 * a small C and a long K is instead summed in fixed chunks of K (k_chunks). The path, the kernel
 * and the K blocks depend only on the product's shape, and every kernel computes an element
 * the same way wherever its tile lies, so results are bitwise the same for any number of
 * threads. */

/* Type-suffixed names for this instantiation (undefined again at the end). */
#define a_at FN(a_at)
#define b_at FN(b_at)
#define imin FN(imin)
#define kernel_t FN(kernel_t)
#define pick FN(pick)
#define scale_c FN(scale_c)
#define pack_a FN(pack_a)
#define pack_b FN(pack_b)
#define gemm_blocked FN(gemm_blocked)
#define gemm_small FN(gemm_small)
#define gemm_tiny FN(gemm_tiny)
#define buffers_t FN(buffers_t)
#define is_tiny FN(is_tiny)
#define gemm FN(gemm)
#define gemm_batched FN(gemm_batched)
#define gemm_bias FN(gemm_bias)
#define bias_fill FN(bias_fill)
#define bias_fill_t FN(bias_fill_t)
#define run FN(run)
#define run_part FN(run_part)
#define parts_t FN(parts_t)
#define run_part_task FN(run_part_task)
#define product FN(product)
#define problem_t FN(problem_t)
#define choose_path FN(choose_path)
#define buffers_in FN(buffers_in)
#define kblock_of FN(kblock_of)
#define shared_elems FN(shared_elems)
#define pack_shared_task FN(pack_shared_task)
#define shared_pack_t FN(shared_pack_t)
#define in_place_pays FN(in_place_pays)
#define wide_tile FN(wide_tile)
#define k_chunks FN(k_chunks)
#define chunks_t FN(chunks_t)
#define run_chunk_task FN(run_chunk_task)
#define chunk_sum_t FN(chunk_sum_t)
#define sum_chunks FN(sum_chunks)
#define run_split_k FN(run_split_k)
#define small_packs_b FN(small_packs_b)
#define small_reads_a FN(small_reads_a)
#define chunks_in_turn FN(chunks_in_turn)
#define weight_grad_packs FN(weight_grad_packs)

static inline const T *a_at(bool ta, const T *A, int64_t lda, int64_t i, int64_t k) {
    return ta ? A + k * lda + i : A + i * lda + k;
}
static inline const T *b_at(bool tb, const T *B, int64_t ldb, int64_t k, int64_t j) {
    return tb ? B + j * ldb + k : B + k * ldb + j;
}
static inline int64_t imin(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* A kernel and its tile shape. */
typedef struct {
    UKR fn;
    int mr, nr;
} kernel_t;

/* The kernel for an M x N product: the narrow one when it wastes fewer lanes; for a few
 * rows (one to four wide strips) the flat one when its strips cover M computing fewer rows
 * (the last strip of a product slides up over rows already done). Every tile sums an element
 * the same way, so this changes no result. */
static kernel_t pick(const KSET *ks, int64_t M, int64_t N) {
    if (ks->narrow && N <= ks->narrow_nr)
        return (kernel_t){ks->narrow, ks->narrow_mr, ks->narrow_nr};
    int64_t mr = ks->mr, fr = ks->flat_mr;
    if (ks->flat && M >= mr && M < 4 * mr && (M + fr - 1) / fr * fr < (M + mr - 1) / mr * mr)
        return (kernel_t){ks->flat, ks->flat_mr, ks->nr};
    return (kernel_t){ks->wide, ks->mr, ks->nr};
}

/* C = beta * C (K == 0 or alpha == 0); beta == 0 writes zeros without reading C. */
static void scale_c(int64_t M, int64_t N, T beta, T *C, int64_t ldc) {
    if (beta == 1) return;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
}

/* Panels of mr rows of op(A)[0:mc, 0:kc], pstride (>= mr * kc) apart: panel p / mr holds
 * d[k*mr + i] = op(A)[p + i][k], rows past mc zero. */
static void pack_a(const KSET *ks, bool ta, const T *A, int64_t lda, int64_t mc, int64_t kc, int mr,
                   int64_t pstride, T *restrict dst) {
    if (ta && ks->pack_n) { /* rows of the stored matrix are columns of op(A) */
        ks->pack_n(A, lda, kc, (int)mc, mr, pstride, dst);
        return;
    }
    for (int64_t p = 0; p < mc; p += mr, dst += pstride) {
        int m = (int)imin(mr, mc - p);
        if (!ta && ks->pack_t) {
            ks->pack_t(A + p * lda, lda, kc, m, mr, dst);
            continue;
        }
        for (int64_t k = 0; k < kc; k++) {
            T *d = dst + k * mr;
            if (ta) {
                memcpy(d, A + k * lda + p, sizeof(T) * (size_t)m);
            } else {
                const T *src = A + p * lda + k;
                for (int i = 0; i < m; i++) d[i] = src[i * lda];
            }
            for (int i = m; i < mr; i++) d[i] = 0;
        }
    }
}

/* Panels of nr columns of op(B)[0:kc, 0:nc], pstride (>= nr * kc) apart: panel q / nr holds
 * d[k*nr + j] = op(B)[k][q + j], columns past nc zero. */
static void pack_b(const KSET *ks, bool tb, const T *B, int64_t ldb, int64_t kc, int64_t nc, int nr,
                   int64_t pstride, T *restrict dst) {
    if (!tb && ks->pack_n) {
        ks->pack_n(B, ldb, kc, (int)nc, nr, pstride, dst);
        return;
    }
    for (int64_t q = 0; q < nc; q += nr, dst += pstride) {
        int n = (int)imin(nr, nc - q);
        if (tb && ks->pack_t) {
            ks->pack_t(B + q * ldb, ldb, kc, n, nr, dst);
        } else if (tb) {
            /* Row j of the stored matrix is column j of op(B): read it along k. */
            for (int j = 0; j < n; j++) {
                const T *src = B + (q + j) * ldb;
                for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = src[k];
            }
            for (int64_t k = 0; k < kc; k++)
                for (int j = n; j < nr; j++) dst[k * nr + j] = 0;
        } else {
            for (int64_t k = 0; k < kc; k++) {
                const T *src = B + k * ldb + q;
                T *d = dst + k * nr;
                for (int j = 0; j < n; j++) d[j] = src[j];
                for (int j = n; j < nr; j++) d[j] = 0;
            }
        }
    }
}

/* The AVX-512 tile (12 x 32 floats) or one as large, against the AVX2 one (6 x 16): the small
 * and blocked paths choose whether to pack by it. */
static bool wide_tile(kernel_t kern) {
    return kern.mr * kern.nr * (int)sizeof(T) >= 12 * 32 * 4;
}

/* Whether the blocked path reads a transposed A's and an untransposed B's full panels where
 * they lie rather than packing them. Both are already panel-shaped there (each k a run of mr or
 * nr elements, lda or ldb apart), and the microkernel takes any row stride. Packing costs
 * about 1/N of the arithmetic for A and 1/M for B, and with threads a separate job to pack the
 * shared operand; reading in place costs the kernel some stalls (strided rows, more cache lines
 * per panel). Measured on Zen 4 with the AVX-512 tile (12 x 32): products with a small C and a
 * long K (the weight gradients of a batch, dY^T X at 128x128x1024 to 512x128x1024 and
 * 256x256x1024) ran 0-15% faster on one thread and 15-40% faster on two; large square ones
 * (1000 and more) 10-20% slower. The AVX2 tile (6 x 16), which loads twice the bytes per
 * multiply-add, ran some of the same products slower in place on one thread (128x512x1024,
 * 256x256x1024 and 2048), so it keeps packing there; but where C has at most 128 x 128
 * elements each packed element is used only a few times (M / mr, N / nr) and the packing was
 * 30% of the time (perf, 128x128x1024): read in place, lm's dW products ran, one thread, best
 * of three, two alternating rounds on the shared Xeon of 2026-11-28, 128x128x1024 62.6/72.2 ->
 * 89.4/89.6% and the head's 65x128x1024 66.2/62.9 -> 90.3/79.2% of peak (512x128x1024 and
 * 128x512x1024 no better, 1024x256x1024 and lmbig's 50-70% worse). The kernel computes the same
 * sums either way, so this changes no result. */
static bool in_place_pays(kernel_t kern, int64_t M, int64_t N) {
    return M * N <= (wide_tile(kern) ? 128 * 1024 : 128 * 128);
}

/* K in equal blocks of at most KC: no short last block. */
static int64_t kblock_of(int64_t K) {
    return (K + (K + KC - 1) / KC - 1) / ((K + KC - 1) / KC);
}

/* The blocked path's packed panels are a cache line longer than their data: panels a whole
 * number of 4 KB pages long (KC x 32 floats) all fell in one set of the L1 cache, and the
 * packing loops, which write a row of every panel in turn, missed on every store. */
#define PANEL_PAD (64 / (int)sizeof(T))

/* ashared or bshared, when not NULL, is all of op(A) or op(B) already packed
 * (pack_shared_task): the K blocks one after another, each as its panels of mr rows or nr
 * columns, kblock * mr (nr) + PANEL_PAD elements apart (kblock_of(K); a shorter last block
 * leaves the end of each of its panels unused). */
static void gemm_blocked(const KSET *ks, kernel_t kern, bool ta, bool tb, int64_t M, int64_t N,
                         int64_t K, T alpha, const T *A, int64_t lda, const T *B, int64_t ldb,
                         T beta, T *C, int64_t ldc, T *apack, T *bpack, const T *ashared,
                         const T *bshared, bool in_place, const T *bias) {
    int mr = kern.mr, nr = kern.nr;
    int64_t apanels = (M + mr - 1) / mr, panels = (N + nr - 1) / nr, kblock = kblock_of(K);
    /* An untransposed A's strips are read where they lie, as the small path reads them (each
     * tile row a run along k): packing them cost up to a tenth of a large product's time
     * (reading A from L3 once more and writing the copy), more than the kernel loses reading
     * twelve (six) rows at once. Measured on the Xeon of 2026-11-28, best of five alternating
     * runs: n = 1024 83.8 -> 88.2% of peak (AVX-512), 83.2 -> 88.4% (AVX2); dx = g W at
     * 2048 x 384 x 1536 72.5 -> 82.6% and 80.3 -> 85.8%. A transposed A keeps its packing
     * unless in_place_pays: read in place along its rows, mid's weight gradient (1024 x 256 x
     * 1024) fell from about 70% to 50%. */
    bool a_here = (!ta || in_place) && !ashared, b_here = in_place && !tb && !bshared;
    for (int64_t ic = 0; ic < M; ic += MB) {
        int64_t mc = imin(M - ic, MB);
        int64_t afull = a_here ? mc / mr * mr : 0; /* panels read in place */
        for (int64_t pc = 0; pc < K; pc += kblock) {
            int64_t kc = imin(K - pc, kblock);
            /* panel strides; a shared operand's are its full K blocks' */
            int64_t as = (ashared ? kblock : kc) * mr + PANEL_PAD;
            int64_t bs = (bshared ? kblock : kc) * nr + PANEL_PAD;
            T beta_pc = pc == 0 ? beta : 1; /* later K blocks add to the first */
            const T *ablock = ashared ? ashared + (pc / kblock * apanels + ic / mr) * as : apack;
            if (!ashared && afull < mc)
                pack_a(ks, ta, a_at(ta, A, lda, ic + afull, pc), lda, mc - afull, kc, mr, as,
                       apack + afull / mr * as);
            for (int64_t jc = 0; jc < N; jc += NB) {
                int64_t nc = imin(N - jc, NB);
                int64_t bfull = b_here ? nc / nr * nr : 0;
                const T *bblock = bshared ? bshared + (pc / kblock * panels + jc / nr) * bs : bpack;
                if (!bshared && bfull < nc)
                    pack_b(ks, tb, b_at(tb, B, ldb, pc, jc + bfull), ldb, kc, nc - bfull, nr, bs,
                           bpack + bfull / nr * bs);
                for (int64_t ir = 0; ir < mc; ir += mr) {
                    int m = (int)imin(mc - ir, mr);
                    bool ah = ir < afull;
                    /* the strip's part of C starts as the bias just before its first K block
                     * adds to it (beta is then 1), as gemm_small does */
                    for (int64_t r = ic + ir; bias && pc == 0 && r < ic + ir + m; r++)
                        memcpy(C + r * ldc + jc, bias + jc, sizeof(T) * (size_t)nc);
                    const T *a = ah ? a_at(ta, A, lda, ic + ir, pc) : ablock + ir / mr * as;
                    for (int64_t jr = 0; jr < nc; jr += nr) {
                        int n = (int)imin(nc - jr, nr);
                        bool bh = jr < bfull;
                        const T *b = bh ? b_at(tb, B, ldb, pc, jc + jr) : bblock + jr / nr * bs;
                        nbt_gemm_rect edge = {0, m, 0, n};
                        kern.fn(kc, a, ah && !ta ? lda : 1, ah ? (ta ? lda : 1) : mr, b,
                                bh ? ldb : nr, C + (ic + ir) * ldc + jc + jr, ldc, alpha, beta_pc,
                                m == mr && n == nr ? NULL : &edge);
                    }
                }
            }
        }
    }
}

/* The tile grid of a small product. A strip of mr rows starting at ir: when fewer than mr
 * rows remain, the strip slides up to end at row M (recomputing rows of the strip before,
 * storing only the new ones), so A is never read past its end. Columns slide the same way
 * when B is read in place (b_packed: bpack holds op(B) in panels of nr columns, K * nr apart).
 * Only a matrix narrower than one tile needs a zero-padded copy. */
static void gemm_small(const KSET *ks, kernel_t kern, bool ta, int64_t M, int64_t N, int64_t K,
                       T alpha, const T *A, int64_t lda, const T *B, int64_t ldb, bool b_packed,
                       const T *bpack, T beta, T *C, int64_t ldc, T *aedge, const T *bias) {
    int mr = kern.mr, nr = kern.nr;
    const T *a_tiny = NULL;
    if (M < mr) { /* shorter than one strip: pad it */
        pack_a(ks, ta, A, lda, M, K, mr, K * mr, aedge);
        a_tiny = aedge;
    }
    /* A last column panel of at most narrow_nr columns (lm's head, N = 65: 96 columns computed
     * for 65) goes to the narrow kernel in strips of its own after the others (80 for 65).
     * Every kernel sums an element the same way, so this changes no result. */
    int64_t rem = N % nr, nmr = ks->narrow_mr;
    bool tail = ks->narrow && kern.fn != ks->narrow && rem > 0 && rem <= ks->narrow_nr &&
                M >= nmr && N >= nr && !a_tiny;
    int64_t n_tiles = tail ? N - rem : N;
    for (int64_t ir = 0; ir < M; ir += mr) {
        int64_t top = a_tiny ? 0 : imin(ir, M - mr);
        const T *a = a_tiny ? a_tiny : a_at(ta, A, lda, top, 0);
        int64_t a_rs = a_tiny ? 1 : ta ? 1 : lda, a_cs = a_tiny ? mr : ta ? lda : 1;
        int r0 = (int)(ir - top), r1 = (int)(imin(ir + mr, M) - top);
        /* C's rows start as the bias just before the strip adds to them, while in cache */
        for (int64_t r = ir; bias && r < imin(ir + mr, M); r++)
            memcpy(C + r * ldc, bias, sizeof(T) * (size_t)N);
        for (int64_t jr = 0; jr < n_tiles; jr += nr) {
            int64_t left = b_packed ? jr : imin(jr, N - nr);
            const T *b = b_packed ? bpack + jr * K : B + left;
            int64_t b_rs = b_packed ? nr : ldb;
            int c0 = (int)(jr - left), c1 = (int)(imin(jr + nr, N) - left);
            nbt_gemm_rect part = {r0, r1, c0, c1};
            bool whole = r0 == 0 && r1 == mr && c0 == 0 && c1 == nr;
            kern.fn(K, a, a_rs, a_cs, b, b_rs, C + top * ldc + left, ldc, alpha, beta,
                    whole ? NULL : &part);
        }
    }
    /* the tail: packed, its panel's first narrow_nr columns; in place, slid left to end at N */
    int64_t left = b_packed ? n_tiles : N - ks->narrow_nr;
    const T *b = b_packed ? bpack + n_tiles * K : B + left;
    for (int64_t ir = 0; tail && ir < M; ir += nmr) {
        int64_t top = imin(ir, M - nmr);
        nbt_gemm_rect part = {(int)(ir - top), (int)(imin(ir + nmr, M) - top),
                              (int)(n_tiles - left), (int)(N - left)};
        ks->narrow(K, a_at(ta, A, lda, top, 0), ta ? 1 : lda, ta ? lda : 1, b, b_packed ? nr : ldb,
                   C + top * ldc + left, ldc, alpha, beta, &part);
    }
}

/* Products so small that setting up tiles costs more than the arithmetic: whole rows of C
 * in axpy form, B read where it lies (a transposed B is first copied, transposed, to the
 * stack: K * N <= TINY / 2 as M >= 2). No workspace, no packing of A. */
static void gemm_tiny(const KSET *ks, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                      const T *A, int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
    T bt[TINY / 2];
    if (tb) {                             /* K x N, row k = column k of the stored rows */
        if (ks->pack_t && K * N >= 128) { /* below that the plain loop is quicker */
            ks->pack_t(B, ldb, K, (int)N, (int)N, bt);
        } else {
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++) bt[k * N + j] = B[j * ldb + k];
        }
        B = bt, ldb = N;
    }
    ks->rows(M, N, K, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc, 1, alpha, beta);
}

/* Buffers for one thread: packed A block, packed B block, and a strip of A. */
typedef struct {
    T *apack, *bpack, *aedge;
} buffers_t;

static buffers_t buffers_in(void *base) {
    size_t a = (size_t)MB * KC + PAD_SLACK(MB), b = (size_t)KC * NB + PAD_SLACK(NB);
    T *t = base;
    return (buffers_t){t, t + a, t + a + b};
}

/* At least two rows and two columns (one-row and one-column products have paths of their
 * own) and at most TINY multiply-adds, without overflowing M * N * K. */
static bool is_tiny(int64_t M, int64_t N, int64_t K) {
    return M > 1 && N > 1 && M <= TINY && N <= TINY && K <= TINY && M * N * K <= TINY;
}

/* The small path sweeps all of op(B) (K x N, read in place or packed whole) for every strip of
 * A, so B must stay in L2: at most half of Zen 3's 512 KB, the smallest L2 of the machines
 * here. A larger B goes to the blocked path, which packs it in panels; with K <= KC it sums
 * every element as the small path does. On Zen 3 (AVX2, one thread, three rounds of best of
 * three) n = 384 went from 62-72% of peak to 74-90% and n = 512 from 63-70% to 73-88%. */
#define SMALL_B_BYTES (256 * 1024)

/* Whether the small path may take a product with a transposed A, which it reads in place: a
 * column of op(A) per k, mr elements of a row lda apart. Under the AVX2 tile, where C has more
 * than 128 x 128 elements and at least two tiles' columns, the blocked path, which packs A into
 * contiguous panels first, ran the weight gradients' K chunks faster (k_chunks; one process
 * timing both in turns on Zen 3, median of 31 rounds, time blocked / small): 512x128x1024 0.78
 * on one thread, 0.90 on two; 256x256x1024 0.91, 0.93; 500x128x1024 0.85, 384x128x1024 0.88;
 * 256x256x256 0.96; 1024x32x1024 0.87, 0.97; 4096x32x256 0.88. Narrower ones lost, each packed
 * element then used by one tile or two: 2048x16x512 1.45, 4096x8x256 1.22, 1024x24x512 1.12; and
 * so did 128x128x1024 and 64x64x512, 0.99-1.08. In the steps (the same, blocks of 50 ms): llama
 * 0.960 on one thread, 0.984 on two; lm 0.982, 0.992; mid 0.999, 0.996. The AVX-512 tile was not
 * measured (no machine here has it now), so it keeps the small path. With one K block
 * (K <= KC) the blocked path makes one kernel call over all of K per tile, as the small path
 * does: the same sums. */
static bool small_reads_a(kernel_t kern, bool ta, int64_t M, int64_t N) {
    return !ta || wide_tile(kern) || M * N <= 128 * 128 || N < 2 * kern.nr;
}

/* How each product is computed; chosen from the whole product's shape only, so a thread's
 * part of C is computed exactly as it would be without threads. */
static path_t choose_path(kernel_t kern, bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
    if (is_tiny(M, N, K)) return PATH_TINY;
    if (M == 1) return PATH_ROW;
    if (N == 1) return PATH_COL;
    if (2 * M <= kern.mr && (!tb || (K <= KC && N <= NB))) return PATH_THIN;
    if (K <= KC && N <= NB && K * N * (int64_t)sizeof(T) <= SMALL_B_BYTES &&
        small_reads_a(kern, ta, M, N))
        return PATH_SMALL;
    return PATH_BLOCKED;
}

/* A batch of products C_b = alpha op(A_b) op(B_b) + beta_b C_b, as gemm_batched was given it. */
typedef struct {
    const KSET *ks;
    kernel_t kern;
    path_t path;
    bool ta, tb;
    int64_t M, N, K;
    T alpha, beta;
    const T *A;
    int64_t lda, sa;
    const T *B;
    int64_t ldb, sb;
    T *C;
    int64_t ldc, sc;
    int64_t batch;
    const T *bias; /* PATH_SMALL, PATH_BLOCKED: C's rows are set to it first (beta is then 1) */
    const T *ashared, *bshared; /* op(A) or op(B) packed once for every part (run), or NULL */
    bool in_place; /* PATH_BLOCKED: full panels of a transposed A and an untransposed B are
                    * read where they lie (in_place_pays) */
} problem_t;

/* Whether the small path packs op(B) for a part n columns wide of an M x N product: a transposed
 * B and a part narrower than a tile. A weight gradient's B (A transposed; each K chunk of
 * k_chunks is such a product) stays in place: packing it under the AVX2 tile paid only where C is
 * larger than 128 x 128 (Xeon, 2026-11-28: 512x128x1024 74.4 -> 79.8% of peak, but 128x128x1024
 * 89.0 -> 81.7 and 64x64x512 88.0 -> 74.3, few uses of each packed element), and those products
 * now take the blocked path, which packs both operands (small_reads_a); the AVX-512 tile lost
 * packing it on three of four lm shapes. The AVX2 tile packs an untransposed
 * B whose rows do not start on cache lines (a view at an odd offset) under at least
 * SMALL_PACK_ROWS rows of C: each tile's 64-byte row of B then spans two lines. One process
 * timing both in turns on a quiet Zen 3 (median of twelve rounds, time packed / in place): B
 * 16 bytes past a line, 1024x128x512 0.75, 1024x256x256 0.71, 256x256x256 0.87, 1024x64x512
 * 0.88; on lines 0.95-1.01 (in place reached 87-95 GFLOP/s, up to 98% of the peak); under 256
 * rows packing lost even off lines (64^3 1.23, 96x96x32 1.14). The kernel computes the same
 * sums either way, so this changes no result. */
#define SMALL_PACK_ROWS 256
static bool small_packs_b(const problem_t *p, int64_t n) {
    if (p->tb || n < p->kern.nr) return true;
    if (wide_tile(p->kern) || p->ta) return false;
    bool on_lines = (uintptr_t)p->B % 64 == 0 && p->ldb * (int64_t)sizeof(T) % 64 == 0 &&
                    p->sb * (int64_t)sizeof(T) % 64 == 0;
    return !on_lines && p->M >= SMALL_PACK_ROWS;
}

/* Rows [m0, m1) and columns [n0, n1) of product b. *b_ready says the packed B in buf is
 * already this part's (a broadcast B is packed once per part). */
static void product(const problem_t *p, int64_t b, T beta, const part_t *q, const buffers_t *buf,
                    bool *b_ready) {
    const KSET *ks = p->ks;
    bool ta = p->ta, tb = p->tb;
    int64_t K = p->K, lda = p->lda, ldb = p->ldb, ldc = p->ldc;
    const T *A = p->A + b * p->sa, *B = p->B + b * p->sb;
    T *C = p->C + b * p->sc;
    int64_t m0 = q->m0, n0 = q->n0, m = q->m1 - q->m0, n = q->n1 - q->n0;
    switch (p->path) {
    case PATH_TINY:
        gemm_tiny(ks, ta, tb, p->M, p->N, K, p->alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    case PATH_ROW: /* one row: axpy over B's rows, or dot products with a transposed B's rows */
        if (!tb)
            ks->rows(1, n, K, A, 0, ta ? lda : 1, B + n0, ldb, C + n0, 0, 1, p->alpha, beta);
        else
            ks->dots(n, K, A, ta ? lda : 1, B + n0 * ldb, ldb, C + n0, 1, p->alpha, beta);
        return;
    case PATH_COL: /* one column: the same with the roles of A and B exchanged */
        if (ta)
            ks->rows(1, m, K, B, 0, tb ? 1 : ldb, A + m0, lda, C + m0 * ldc, 0, ldc, p->alpha,
                     beta);
        else
            ks->dots(m, K, B, tb ? 1 : ldb, A + m0 * lda, lda, C + m0 * ldc, ldc, p->alpha, beta);
        return;
    case PATH_THIN: /* a few rows: axpy over B's rows, a transposed B packed first */
        if (!tb) {
            ks->rows(p->M, n, K, A, ta ? 1 : lda, ta ? lda : 1, B + n0, ldb, C + n0, ldc, 1,
                     p->alpha, beta);
            return;
        }
        if (!(*b_ready && p->sb == 0))
            pack_b(ks, tb, B + n0 * ldb, ldb, K, n, p->kern.nr, K * p->kern.nr, buf->bpack);
        *b_ready = true;
        for (int64_t q = 0; q < n; q += p->kern.nr)
            ks->rows(p->M, imin(p->kern.nr, n - q), K, A, ta ? 1 : lda, ta ? lda : 1,
                     buf->bpack + q * K, p->kern.nr, C + n0 + q, ldc, 1, p->alpha, beta);
        return;
    case PATH_SMALL:
    case PATH_BLOCKED:
        break;
    }
    A = a_at(ta, A, lda, m0, 0), B = b_at(tb, B, ldb, 0, n0), C += m0 * ldc + n0;
    if (p->path == PATH_BLOCKED) {
        gemm_blocked(ks, p->kern, ta, tb, m, n, K, p->alpha, A, lda, B, ldb, beta, C, ldc,
                     buf->apack, buf->bpack, p->ashared, p->bshared, p->in_place,
                     p->bias ? p->bias + n0 : NULL);
        return;
    }
    bool b_packed = small_packs_b(p, n);
    if (b_packed && !(*b_ready && p->sb == 0) && !p->bshared)
        pack_b(ks, tb, B, ldb, K, n, p->kern.nr, K * p->kern.nr, buf->bpack);
    *b_ready = true;
    gemm_small(ks, p->kern, ta, m, n, K, p->alpha, A, lda, B, ldb, b_packed,
               p->bshared ? p->bshared : buf->bpack, beta, C, ldc, buf->aedge,
               p->bias ? p->bias + n0 : NULL);
}

/* One part: its products in order of b, so products summed into one C add in a fixed order. */
static void run_part(const problem_t *p, const part_t *q, void *workspace) {
    buffers_t buf = workspace ? buffers_in(workspace) : (buffers_t){NULL, NULL, NULL};
    bool b_ready = false;
    for (int64_t b = q->b0; b < q->b1; b++)
        product(p, b, p->sc == 0 && b > 0 ? 1 : p->beta, q, &buf, &b_ready);
}

/* The parts of one product split among threads (run), as pool tasks. */
typedef struct {
    const problem_t *p;
    split_t split;
    int64_t unit;
    int parts;
    void **ws;
} parts_t;

static void run_part_task(int64_t task, int worker, void *arg) {
    const parts_t *s = arg;
    const problem_t *p = s->p;
    part_t q = gemm_part(s->split, (int)task, s->parts, s->unit, p->batch, p->M, p->N);
    if (q.b0 < q.b1 && q.m0 < q.m1 && q.n0 < q.n1) run_part(p, &q, s->ws[worker]);
}

/* Elements of op(A) (a) or op(B) packed whole (K blocks of all of its panels), or 0 when the
 * product does not pack it or it would not fit a workspace. A is packed only by the blocked
 * path (the small path reads it in place). */
static int64_t shared_elems(const problem_t *p, bool a) {
    bool blocked = p->path == PATH_BLOCKED;
    bool packs = a ? blocked : blocked || (p->path == PATH_SMALL && small_packs_b(p, p->N));
    if (!packs || p->batch != 1) return 0;
    if (p->in_place && (a ? p->ta : !p->tb)) return 0; /* read where it lies */
    if (a && !p->ta) return 0;                         /* the blocked path reads it in place */
    int64_t width = a ? p->kern.mr : p->kern.nr, along = a ? p->M : p->N;
    int64_t panels = (along + width - 1) / width, elems = p->K * panels * width;
    if (blocked) { /* whole K blocks of padded panels (gemm_blocked) */
        int64_t kblock = kblock_of(p->K), blocks = (p->K + kblock - 1) / kblock;
        elems = blocks * panels * (kblock * width + PANEL_PAD);
    }
    return elems <= (int64_t)(workspace_bytes() / sizeof(T)) - 64 ? elems : 0;
}

/* Packing op(A) or op(B) whole, as pool tasks: task t packs panels [t * per, (t + 1) * per)
 * of every K block, laid out as gemm_blocked reads them (the small path: one K block,
 * unpadded). */
typedef struct {
    const problem_t *p;
    bool a;
    T *dst;
    int64_t per; /* panels per task */
} shared_pack_t;

static void pack_shared_task(int64_t task, int worker, void *arg) {
    (void)worker;
    const shared_pack_t *s = arg;
    const problem_t *p = s->p;
    int width = s->a ? p->kern.mr : p->kern.nr;
    bool blocked = p->path == PATH_BLOCKED;
    int64_t K = p->K, along = s->a ? p->M : p->N, panels = (along + width - 1) / width;
    int64_t i0 = task * s->per * width, i1 = imin(along, i0 + s->per * width);
    int64_t kblock = blocked ? kblock_of(K) : K, pad = blocked ? PANEL_PAD : 0;
    for (int64_t pc = 0; i0 < i1 && pc < K; pc += kblock) {
        int64_t kc = imin(K - pc, kblock);
        int64_t stride = kblock * width + pad;
        T *dst = s->dst + (pc / kblock * panels + i0 / width) * stride;
        if (s->a)
            pack_a(p->ks, p->ta, a_at(p->ta, p->A, p->lda, i0, pc), p->lda, i1 - i0, kc, width,
                   stride, dst);
        else
            pack_b(p->ks, p->tb, b_at(p->tb, p->B, p->ldb, pc, i0), p->ldb, kc, i1 - i0, width,
                   stride, dst);
    }
}

/* A weight gradient's product, op(A)^T B summed over many tokens into a small C (lm's
 * 128 x 128 x 1024, toy's 64 x 64 x 512), is summed in fixed chunks of K_CHUNK tokens, each
 * chunk's C computed whole by one task and the chunks then added in order. Split by C's rows
 * or columns instead, every thread read all of both operands, and half of them had just been
 * written by the other core, which the ops before split by tokens: in toy's step at two
 * threads these products ran no faster than on one (reading 256 KB another core wrote took
 * 15.6 us here, against 2.7 us from this core's own cache). Split by tokens, each thread
 * reads the tokens it wrote itself. The chunks depend on the shape alone, so the sums, and
 * the results, are the same for any thread count. Returns the number of chunks (1: none). */
#define K_CHUNK 256
static int64_t k_chunks(const problem_t *p) {
    int64_t M = p->M, N = p->N, K = p->K, chunks = K / K_CHUNK;
    if (!p->ta || p->tb || p->batch != 1 || p->bias || chunks < 2 ||
        (p->path != PATH_SMALL && p->path != PATH_BLOCKED) || M * N > 64 * K ||
        (double)M * (double)N * (double)K < 2.0 * GEMM_MIN_WORK_PER_THREAD)
        return 1;
    /* every chunk but the first is summed in one more workspace */
    return (chunks - 1) * M * N <= (int64_t)(workspace_bytes() / sizeof(T)) - 64 ? chunks : 1;
}

/* Whether the weight gradient A^T B (C M x N, K tokens, both operands on lines) packs an
 * operand: its path, or each K chunk's, packs B or is the blocked path reading neither in
 * place. */
static bool weight_grad_packs(const KSET *ks, int64_t M, int64_t N, int64_t K) {
    if (M <= 0 || N <= 0 || K <= 0) return false;
    kernel_t kern = pick(ks, M, N);
    problem_t p = {.ks = ks,
                   .kern = kern,
                   .ta = true,
                   .M = M,
                   .N = N,
                   .K = K,
                   .alpha = 1,
                   .batch = 1,
                   .path = choose_path(kern, true, false, M, N, K)};
    const int64_t chunks = k_chunks(&p), k = (K + chunks - 1) / chunks;
    const path_t path = choose_path(kern, true, false, M, N, k);
    if (path == PATH_SMALL) return small_packs_b(&p, N);
    return path == PATH_BLOCKED && !in_place_pays(kern, M, N);
}

typedef struct {
    const problem_t *p;
    int64_t chunks;
    T *partials; /* chunk c >= 1 at (c - 1) M N, rows N apart; NULL: added to C in turn */
    void **ws;
} chunks_t;

/* Chunk c: its K range of the product, into C with beta (c = 0), into its partial, or (no
 * partials) added to C (beta 1). */
static void run_chunk_task(int64_t c, int worker, void *arg) {
    const chunks_t *s = arg;
    problem_t q = *s->p;
    int64_t k0 = nbt_gemm_boundary((int)c, (int)s->chunks, q.K, 1);
    int64_t k1 = nbt_gemm_boundary((int)c + 1, (int)s->chunks, q.K, 1);
    q.A = a_at(q.ta, q.A, q.lda, 0, k0), q.B = b_at(q.tb, q.B, q.ldb, k0, 0), q.K = k1 - k0;
    q.path = choose_path(q.kern, q.ta, q.tb, q.M, q.N, q.K);
    q.in_place = q.path == PATH_BLOCKED && in_place_pays(q.kern, q.M, q.N);
    if (c > 0 && s->partials) q.C = s->partials + (c - 1) * q.M * q.N, q.ldc = q.N, q.beta = 0;
    if (c > 0 && !s->partials) q.beta = 1;
    part_t all = {0, 1, 0, q.M, 0, q.N};
    run_part(&q, &all, s->ws[worker]);
}

typedef struct {
    T *C;
    int64_t ldc, M, N, chunks;
    const T *partials;
} chunk_sum_t;

/* Rows [r0, r1) of C plus every partial, added in chunk order. */
static void sum_chunks(int64_t r0, int64_t r1, void *arg) {
    const chunk_sum_t *s = arg;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 1; c < s->chunks; c++) {
            T *restrict row = s->C + r * s->ldc;
            const T *restrict add = s->partials + (c - 1) * s->M * s->N + r * s->N;
            for (int64_t j = 0; j < s->N; j++) row[j] += add[j];
        }
}

/* On one thread the chunks are added to C in turn, each as its kernels' beta-1 store, with no
 * partials and no summing pass: that store computes alpha * sum + C with one rounding, which
 * for alpha 1 is the sum_chunks addition of the exact partial (beta 0 stores 1 * sum), as long
 * as each chunk is one K block (a second block would be added to the chunk's first one before
 * C). So the bits are those of the threads' partials. Measured on the shared Xeon of
 * 2026-11-28 (docs/performance.md): the weight gradients with long K ran up to 10% faster. */
static bool chunks_in_turn(const problem_t *p, int64_t chunks) {
    return p->alpha == 1 && (p->K + chunks - 1) / chunks <= KC;
}

static bool run_split_k(const problem_t *p, int64_t chunks) {
    double work = (double)p->M * (double)p->N * (double)p->K;
    int threads = nbt_gemm_threads_for(work, GEMM_MIN_WORK_PER_THREAD);
    if (threads > chunks) threads = (int)chunks;
    if (threads > GEMM_MAX_THREADS - 1) threads = GEMM_MAX_THREADS - 1;
    if (threads == 1 && chunks_in_turn(p, chunks)) {
        void *ws[1];
        int slots[1];
        if (!gemm_workspaces_acquire(1, ws, slots)) return false;
        last_threads = 1;
        chunks_t s = {p, chunks, NULL, ws};
        for (int64_t c = 0; c < chunks; c++) run_chunk_task(c, 0, &s);
        gemm_workspaces_release(1, slots);
        return true;
    }
    void *ws[GEMM_MAX_THREADS];
    int slots[GEMM_MAX_THREADS];
    if (!gemm_workspaces_acquire(threads + 1, ws, slots)) return false;
    last_threads = threads;
    chunks_t s = {p, chunks, ws[threads], ws};
    nbt_run_tasks(chunks, threads, run_chunk_task, &s);
    chunk_sum_t sum = {p->C, p->ldc, p->M, p->N, chunks, ws[threads]};
    nbt_parallel_ranges(p->M, GEMM_MIN_WORK_PER_THREAD / 8 / p->N + 1, sum_chunks, &sum);
    gemm_workspaces_release(threads + 1, slots);
    return true;
}

/* Splits the work into parts and runs them on the pool, whichever thread is free taking the
 * next part: up to NBT_PIECES_PER_THREAD parts a thread, none under GEMM_MIN_WORK_PER_THREAD
 * multiply-adds or a unit. Independent products are split by batch entry; otherwise C is
 * split by rows or by columns at multiples of the tile size, and every part runs all products
 * for its piece of C. Never along K, so every part owns whole outputs (k_chunks' products
 * go to run_split_k first: its chunks are fixed by the shape, not by the threads). */
static bool run(problem_t *p) {
    const int64_t chunks = k_chunks(p);
    if (chunks > 1) return run_split_k(p, chunks);
    int64_t M = p->M, N = p->N, batch = p->batch;
    double work = (double)batch * (double)M * (double)N * (double)p->K;
    /* A one-row or one-column product (decoding's linear layers) packs nothing and streams its
     * matrix once, so a thread pays for itself at far less work than a tiled product's. */
    const int64_t min_work = (p->path == PATH_ROW || p->path == PATH_COL) && p->batch == 1
                                 ? GEMM_MIN_WORK_PER_THREAD_ROW
                                 : GEMM_MIN_WORK_PER_THREAD;
    int threads = nbt_gemm_threads_for(work, min_work);
    split_t split = SPLIT_NONE;
    int64_t unit = 1;
    if (threads > 1) {
        int64_t mr = p->kern.mr, nr = p->kern.nr;
        if (p->sc != 0 && batch >= threads)
            split = SPLIT_BATCH;
        else if (p->path == PATH_ROW && N >= 2 * GEMM_VECTOR_UNIT)
            split = SPLIT_COLS, unit = GEMM_VECTOR_UNIT;
        else if (p->path == PATH_COL && M >= 2 * GEMM_VECTOR_UNIT)
            split = SPLIT_ROWS, unit = GEMM_VECTOR_UNIT;
        else if (p->path == PATH_THIN && N >= 2 * nr)
            split = SPLIT_COLS, unit = nr;
        else if ((p->path == PATH_SMALL || p->path == PATH_BLOCKED) && M >= 2 * mr &&
                 (M / mr >= N / nr || N < 2 * nr))
            split = SPLIT_ROWS, unit = mr;
        else if ((p->path == PATH_SMALL || p->path == PATH_BLOCKED) && N >= 2 * nr)
            split = SPLIT_COLS, unit = nr;
        if (split == SPLIT_NONE) threads = 1;
    }
    bool packs =
        p->path == PATH_SMALL || p->path == PATH_BLOCKED || (p->path == PATH_THIN && p->tb);
    void *ws[GEMM_MAX_THREADS + 1];
    int slots[GEMM_MAX_THREADS + 1];
    if (threads > GEMM_MAX_THREADS) threads = GEMM_MAX_THREADS;
    /* Parts split by rows would each pack all of op(B) for their few rows, and parts split by
     * columns all of op(A) (blocked path): pack it once, the threads taking panels, into one
     * more workspace that every part reads. The parts' kernel calls are the same, so are the
     * results. */
    bool share_a = split == SPLIT_COLS;
    int64_t shared = (split == SPLIT_ROWS || split == SPLIT_COLS) && threads < GEMM_MAX_THREADS
                         ? shared_elems(p, share_a)
                         : 0;
    int nws = threads + (shared > 0);
    for (int i = 0; i < nws; i++) ws[i] = NULL;
    if (packs && !gemm_workspaces_acquire(nws, ws, slots)) return false;
    last_threads = threads;
    if (shared > 0) {
        int width = share_a ? p->kern.mr : p->kern.nr;
        int64_t panels = ((share_a ? p->M : p->N) + width - 1) / width;
        int64_t tasks = imin(panels, (int64_t)threads * NBT_PIECES_PER_THREAD);
        shared_pack_t sp = {p, share_a, ws[threads], (panels + tasks - 1) / tasks};
        nbt_run_tasks((panels + sp.per - 1) / sp.per, threads, pack_shared_task, &sp);
        *(share_a ? &p->ashared : &p->bshared) = ws[threads];
    }
    if (threads == 1) {
        part_t all = {0, batch, 0, M, 0, N};
        run_part(p, &all, ws[0]);
    } else {
        int64_t along = split == SPLIT_BATCH ? batch : split == SPLIT_ROWS ? M : N;
        int nparts = nbt_gemm_part_count(work, threads, along, unit);
        parts_t parts = {p, split, unit, nparts, ws};
        nbt_run_tasks(nparts, threads, run_part_task, &parts);
    }
    if (packs) gemm_workspaces_release(nws, slots);
    p->ashared = p->bshared = NULL;
    return true;
}

static bool gemm_batched(const KSET *ks, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                         const T *A, int64_t lda, int64_t sa, const T *B, int64_t ldb, int64_t sb,
                         T beta, T *C, int64_t ldc, int64_t sc, int64_t batch) {
    last_threads = 1;
    if (batch <= 0 || M <= 0 || N <= 0) return true;
    if (K <= 0 || alpha == 0) {
        for (int64_t b = 0; b < (sc == 0 ? 1 : batch); b++) scale_c(M, N, beta, C + b * sc, ldc);
        return true;
    }
    if (batch == 1) {
        sa = sb = sc = 0;
    } else if (sb == 0 && !ta && sc != 0 && sa == M * lda && sc == M * ldc) {
        /* One B for every product, and the A and C matrices stacked row after row: one tall
         * product (the shape of x[b, t, :] @ W). */
        M *= batch, batch = 1;
    } else if (sc == 0 && ta && !tb && sa == K * lda && sb == K * ldb) {
        /* Summed into one C, with A's and B's K rows stacked: one product with a long K (the
         * shape of the weight gradient x^T @ dy over a batch). */
        K *= batch, batch = 1;
    }
    /* Small models: a few tiny products, no setup. */
    if (is_tiny(M, N, K) && (double)(M * N * K) * (double)batch < 2.0 * GEMM_MIN_WORK_PER_THREAD) {
        for (int64_t b = 0; b < batch; b++)
            gemm_tiny(ks, ta, tb, M, N, K, alpha, A + b * sa, lda, B + b * sb, ldb,
                      sc == 0 && b > 0 ? 1 : beta, C + b * sc, ldc);
        return true;
    }
    kernel_t kern = pick(ks, M, N);
    path_t path = choose_path(kern, ta, tb, M, N, K);
    problem_t p = {.ks = ks,
                   .kern = kern,
                   .path = path,
                   .in_place = path == PATH_BLOCKED && in_place_pays(kern, M, N),
                   .ta = ta,
                   .tb = tb,
                   .M = M,
                   .N = N,
                   .K = K,
                   .alpha = alpha,
                   .beta = beta,
                   .A = A,
                   .lda = lda,
                   .sa = sa,
                   .B = B,
                   .ldb = ldb,
                   .sb = sb,
                   .C = C,
                   .ldc = ldc,
                   .sc = sc,
                   .batch = batch};
    return run(&p);
}

static bool gemm(const KSET *ks, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                 const T *A, int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
    return gemm_batched(ks, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

/* Rows [r0, r1) of C set to the bias. */
typedef struct {
    T *C;
    int64_t ldc, N;
    const T *bias;
} bias_fill_t;

static void bias_fill(int64_t r0, int64_t r1, void *vjob) {
    const bias_fill_t *j = vjob;
    for (int64_t r = r0; r < r1; r++) memcpy(j->C + r * j->ldc, j->bias, sizeof(T) * (size_t)j->N);
}

/* C = op(A) op(B) + bias over the rows. A small or blocked product sets each strip of C to the
 * bias just before its first K block adds to it (no pass over C of its own: 1.6% of lm's step
 * was that pass's memcpy); any other fills C first (threads taking rows), then adds the
 * product. The kernels add the product to C as they would to a C filled first, so the bits
 * are the same either way. */
static bool gemm_bias(const KSET *ks, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A,
                      int64_t lda, const T *B, int64_t ldb, const T *bias, T *C, int64_t ldc) {
    last_threads = 1;
    if (M <= 0 || N <= 0) return true;
    kernel_t kern = pick(ks, M, N);
    path_t path = K <= 0 ? PATH_TINY : choose_path(kern, ta, tb, M, N, K);
    problem_t p = {.ks = ks,
                   .kern = kern,
                   .path = path,
                   .in_place = path == PATH_BLOCKED && in_place_pays(kern, M, N),
                   .ta = ta,
                   .tb = tb,
                   .M = M,
                   .N = N,
                   .K = K,
                   .alpha = 1,
                   .beta = 1,
                   .A = A,
                   .lda = lda,
                   .B = B,
                   .ldb = ldb,
                   .C = C,
                   .ldc = ldc,
                   .batch = 1};
    /* a product nbt_*gemm would sum in chunks of K is summed so here too, after the fill */
    if ((path != PATH_SMALL && path != PATH_BLOCKED) || k_chunks(&p) > 1) {
        bias_fill_t job = {C, ldc, N, bias};
        nbt_parallel_ranges(M, GEMM_MIN_WORK_PER_THREAD / 8 / N + 1, bias_fill, &job);
        return gemm(ks, ta, tb, M, N, K, 1, A, lda, B, ldb, 1, C, ldc);
    }
    p.bias = bias;
    return run(&p);
}

#undef a_at
#undef b_at
#undef imin
#undef kernel_t
#undef pick
#undef scale_c
#undef pack_a
#undef pack_b
#undef gemm_blocked
#undef gemm_small
#undef gemm_tiny
#undef buffers_t
#undef is_tiny
#undef gemm
#undef gemm_batched
#undef gemm_bias
#undef bias_fill
#undef bias_fill_t
#undef run
#undef run_part
#undef parts_t
#undef run_part_task
#undef product
#undef problem_t
#undef choose_path
#undef buffers_in
#undef kblock_of
#undef shared_elems
#undef pack_shared_task
#undef shared_pack_t
#undef in_place_pays
#undef k_chunks
#undef chunks_t
#undef run_chunk_task
#undef chunk_sum_t
#undef sum_chunks
#undef run_split_k
#undef small_packs_b
#undef small_reads_a
#undef wide_tile
#undef chunks_in_turn
#undef weight_grad_packs
#undef SMALL_B_BYTES
#undef SMALL_PACK_ROWS
#undef PANEL_PAD
