/* The GEMM driver, instantiated by gemm.c for float and double. Expects: T, KSET (the
 * nbt_gemm_kernels_* type), UKR (its kernel type), KC, MB, NB (block sizes), and FN(name)
 * (name with a type suffix). No include guard: included once per element type.
 *
 * Large products follow BLIS with the roles of A and B swapped for row-major C: the
 * microkernel tile is MR rows by NR columns with NR the vector direction, the MR x KC
 * micro-panel of packed A stays in L1 while it sweeps the KC x NB block of packed B in L2,
 * and the MB x KC block of packed A sits in L3. Loop nest, outermost first: ic (M by MB),
 * pc (K by KC; pack A), jc (N by NB; pack B), ir (M by MR), jr (N by NR; one kernel call).
 * A threaded version splits ir across threads: each owns its tiles of C.
 *
 * Small products (K <= KC, N <= NB) skip packing where it costs more than it saves: A and
 * an untransposed B are read where they lie, and only a transposed B is packed. Tiny ones
 * (at most TINY multiply-adds) are plain dot products. */

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
#define get_buffers FN(get_buffers)
#define fits_small FN(fits_small)
#define is_tiny FN(is_tiny)
#define gemm FN(gemm)
#define gemm_batched FN(gemm_batched)

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

/* The kernel for a matrix N columns wide: the narrow one when it wastes fewer lanes. */
static kernel_t pick(const KSET *ks, int64_t N) {
    if (ks->narrow && N <= ks->narrow_nr)
        return (kernel_t){ks->narrow, ks->narrow_mr, ks->narrow_nr};
    return (kernel_t){ks->wide, ks->mr, ks->nr};
}

/* C = beta * C (K == 0 or alpha == 0); beta == 0 writes zeros without reading C. */
static void scale_c(int64_t M, int64_t N, T beta, T *C, int64_t ldc) {
    if (beta == 1) return;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0 : beta * C[i * ldc + j];
}

/* Panels of mr rows of op(A)[0:mc, 0:kc]: dst[p*kc + k*mr + i] = op(A)[p + i][k], rows past
 * mc zero. */
static void pack_a(const KSET *ks, bool ta, const T *A, int64_t lda, int64_t mc, int64_t kc, int mr,
                   T *restrict dst) {
    for (int64_t p = 0; p < mc; p += mr, dst += (int64_t)mr * kc) {
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

/* Panels of nr columns of op(B)[0:kc, 0:nc]: dst[q*kc + k*nr + j] = op(B)[k][q + j], columns
 * past nc zero. */
static void pack_b(const KSET *ks, bool tb, const T *B, int64_t ldb, int64_t kc, int64_t nc, int nr,
                   T *restrict dst) {
    for (int64_t q = 0; q < nc; q += nr, dst += (int64_t)nr * kc) {
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
        } else if (ks->pack_n) {
            ks->pack_n(B + q, ldb, kc, n, nr, dst);
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

static void gemm_blocked(const KSET *ks, kernel_t kern, bool ta, bool tb, int64_t M, int64_t N,
                         int64_t K, T alpha, const T *A, int64_t lda, const T *B, int64_t ldb,
                         T beta, T *C, int64_t ldc, T *apack, T *bpack) {
    int mr = kern.mr, nr = kern.nr;
    for (int64_t ic = 0; ic < M; ic += MB) {
        int64_t mc = imin(M - ic, MB);
        /* K in equal blocks of at most KC: no short last block */
        int64_t kblock = (K + (K + KC - 1) / KC - 1) / ((K + KC - 1) / KC);
        for (int64_t pc = 0; pc < K; pc += kblock) {
            int64_t kc = imin(K - pc, kblock);
            T beta_pc = pc == 0 ? beta : 1; /* later K blocks add to the first */
            pack_a(ks, ta, a_at(ta, A, lda, ic, pc), lda, mc, kc, mr, apack);
            for (int64_t jc = 0; jc < N; jc += NB) {
                int64_t nc = imin(N - jc, NB);
                pack_b(ks, tb, b_at(tb, B, ldb, pc, jc), ldb, kc, nc, nr, bpack);
                for (int64_t ir = 0; ir < mc; ir += mr) {
                    int m = (int)imin(mc - ir, mr);
                    for (int64_t jr = 0; jr < nc; jr += nr) {
                        int n = (int)imin(nc - jr, nr);
                        nbt_gemm_rect edge = {0, m, 0, n};
                        kern.fn(kc, apack + ir * kc, 1, mr, bpack + jr * kc, nr,
                                C + (ic + ir) * ldc + jc + jr, ldc, alpha, beta_pc,
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
 * when B is read in place. Only a matrix narrower than one tile needs a zero-padded copy. */
static void gemm_small(const KSET *ks, kernel_t kern, bool ta, bool tb, int64_t M, int64_t N,
                       int64_t K, T alpha, const T *A, int64_t lda, const T *B, int64_t ldb,
                       const T *bpack, T beta, T *C, int64_t ldc, T *aedge) {
    int mr = kern.mr, nr = kern.nr;
    const T *a_tiny = NULL;
    if (M < mr) { /* shorter than one strip: pad it */
        pack_a(ks, ta, A, lda, M, K, mr, aedge);
        a_tiny = aedge;
    }
    bool b_packed = tb || N < nr;
    for (int64_t ir = 0; ir < M; ir += mr) {
        int64_t top = a_tiny ? 0 : imin(ir, M - mr);
        const T *a = a_tiny ? a_tiny : a_at(ta, A, lda, top, 0);
        int64_t a_rs = a_tiny ? 1 : ta ? 1 : lda, a_cs = a_tiny ? mr : ta ? lda : 1;
        int r0 = (int)(ir - top), r1 = (int)(imin(ir + mr, M) - top);
        for (int64_t jr = 0; jr < N; jr += nr) {
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
}

/* Products so small that setting up tiles costs more than the arithmetic: dot products
 * read in place. */
static void gemm_tiny(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T *A,
                      int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
    int64_t a_rs = ta ? 1 : lda, a_cs = ta ? lda : 1, b_rs = tb ? 1 : ldb, b_cs = tb ? ldb : 1;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            T sum = 0;
            for (int64_t k = 0; k < K; k++) sum += A[i * a_rs + k * a_cs] * B[k * b_rs + j * b_cs];
            C[i * ldc + j] = beta == 0 ? alpha * sum : alpha * sum + beta * C[i * ldc + j];
        }
}

/* Buffers for one call: packed A block, packed B block, and a strip of A. */
typedef struct {
    T *apack, *bpack, *aedge;
} buffers_t;

static bool get_buffers(buffers_t *b) {
    size_t a = (size_t)MB * KC, bsz = (size_t)KC * NB;
    T *base = workspace();
    if (!base) return false;
    b->apack = base, b->bpack = base + a, b->aedge = base + a + bsz;
    return true;
}

static bool fits_small(int64_t N, int64_t K) {
    return K <= KC && N <= NB;
}

static bool is_tiny(int64_t M, int64_t N, int64_t K) { /* without overflowing M * N * K */
    return M <= TINY && N <= TINY && K <= TINY && M * N * K <= TINY;
}

static bool gemm(const KSET *ks, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                 const T *A, int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return true;
    if (K <= 0 || alpha == 0) {
        scale_c(M, N, beta, C, ldc);
        return true;
    }
    if (is_tiny(M, N, K)) {
        gemm_tiny(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return true;
    }
    buffers_t buf;
    if (!get_buffers(&buf)) return false;
    kernel_t kern = pick(ks, N);
    if (fits_small(N, K)) {
        if (tb || N < kern.nr) pack_b(ks, tb, B, ldb, K, N, kern.nr, buf.bpack);
        gemm_small(ks, kern, ta, tb, M, N, K, alpha, A, lda, B, ldb, buf.bpack, beta, C, ldc,
                   buf.aedge);
    } else {
        gemm_blocked(ks, kern, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, buf.apack,
                     buf.bpack);
    }
    return true;
}

static bool gemm_batched(const KSET *ks, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                         const T *A, int64_t lda, int64_t sa, const T *B, int64_t ldb, int64_t sb,
                         T beta, T *C, int64_t ldc, int64_t sc, int64_t batch) {
    if (batch <= 0 || M <= 0 || N <= 0) return true;
    if (batch == 1) return gemm(ks, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    /* One B for every product, and the A and C matrices stacked row after row: one tall
     * product (the shape of x[b, t, :] @ W). */
    if (sb == 0 && !ta && sc != 0 && sa == M * lda && sc == M * ldc)
        return gemm(ks, ta, tb, M * batch, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    /* Summed into one C, with A's and B's K rows stacked: one product with a long K (the
     * shape of the weight gradient x^T @ dy over a batch). */
    if (sc == 0 && ta && !tb && sa == K * lda && sb == K * ldb)
        return gemm(ks, ta, tb, M, N, K * batch, alpha, A, lda, B, ldb, beta, C, ldc);
    if (K <= 0 || alpha == 0) {
        for (int64_t b = 0; b < (sc == 0 ? 1 : batch); b++) scale_c(M, N, beta, C + b * sc, ldc);
        return true;
    }
    if (is_tiny(M, N, K)) {
        for (int64_t b = 0; b < batch; b++)
            gemm_tiny(ta, tb, M, N, K, alpha, A + b * sa, lda, B + b * sb, ldb,
                      sc == 0 && b > 0 ? 1 : beta, C + b * sc, ldc);
        return true;
    }
    if (!fits_small(N, K)) {
        for (int64_t b = 0; b < batch; b++) {
            T beta_b = sc == 0 && b > 0 ? 1 : beta;
            if (!gemm(ks, ta, tb, M, N, K, alpha, A + b * sa, lda, B + b * sb, ldb, beta_b,
                      C + b * sc, ldc))
                return false;
        }
        return true;
    }
    /* Small products share one setup; a broadcast B is packed once. A threaded version
     * splits b here when sc != 0 (the products are then independent). */
    kernel_t kern = pick(ks, N);
    buffers_t buf;
    if (!get_buffers(&buf)) return false;
    bool pack = tb || N < kern.nr;
    for (int64_t b = 0; b < batch; b++) {
        T beta_b = sc == 0 && b > 0 ? 1 : beta;
        const T *Bb = B + b * sb;
        if (pack && (b == 0 || sb != 0)) pack_b(ks, tb, Bb, ldb, K, N, kern.nr, buf.bpack);
        gemm_small(ks, kern, ta, tb, M, N, K, alpha, A + b * sa, lda, Bb, ldb, buf.bpack, beta_b,
                   C + b * sc, ldc, buf.aedge);
    }
    return true;
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
#undef get_buffers
#undef fits_small
#undef is_tiny
#undef gemm
#undef gemm_batched
