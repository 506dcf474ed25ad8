/* sgemm throughput of nabla's own kernels (or of the system BLAS in a -Dblas=openblas build)
 * at square sizes, next to the FMA peak of this machine measured with a tight loop of
 * independent FMAs on one core (times the thread count); then the time per call of the
 * products the bench workloads make, from seed's tiny ones to mid's attention heads.
 * Usage: gemm_bench [--isa avx512|avx2|generic] [--reps N] [--threads N] [--peak]
 *                   [--sizes N,N,...] [--shapes TEXT] [--cpu-time]
 * --peak prints only the one-core FMA peak (best of reps runs), for bench/compare's header.
 * --sizes replaces the square sizes (0: none); --shapes keeps the products whose name contains
 * TEXT ("none": none), so two builds can be timed in turn on a few lines. --cpu-time times
 * by the thread's CPU time (one thread), which a busy shared machine disturbs far less.
 * A timing is an output, never a pass/fail check. The machine may be shared: each figure is
 * the best of a few repetitions. */
#include "tensor/gemm.h"
#include "tensor/isa.h"

#include <immintrin.h>
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --cpu-time: the calling thread's CPU time instead of the wall clock, so that time spent
 * descheduled on a shared machine is not counted (one thread only). */
static bool cpu_time;

static double now(void) {
    struct timespec ts;
    clock_gettime(cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Independent accumulators in named registers, more than FMA latency times FMA ports on
 * current x86 cores, so the loop is bound by FMA throughput alone: 16 of the 32 zmm
 * registers, 12 of the 16 ymm ones. */
#define PEAK_ITERS 5000000L
#define ACCS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define ACCS16(X) ACCS12(X) X(12) X(13) X(14) X(15)

#define PEAK_LOOP(V, SET1, STORE, LANES, ACCS, NACCS)                                              \
    ACCS(DECL)                                                                                     \
    V x = SET1(0.999999f), y = SET1(1e-7f);                                                        \
    double t0 = now();                                                                             \
    for (long it = 0; it < PEAK_ITERS; it++) {                                                     \
        ACCS(STEP)                                                                                 \
    }                                                                                              \
    double t = now() - t0;                                                                         \
    V s = SET1(0.0f);                                                                              \
    ACCS(SUM)                                                                                      \
    float sink[LANES];                                                                             \
    STORE(sink, s);                                                                                \
    if (sink[0] == 12345.0f) puts(""); /* keeps the loop alive */                                  \
    return 2.0 * LANES * NACCS * (double)PEAK_ITERS / t * 1e-9;

__attribute__((target("avx512f"))) static double peak_avx512(float seed) {
#define DECL(i) __m512 a##i = _mm512_set1_ps(seed + (float)(i));
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    PEAK_LOOP(__m512, _mm512_set1_ps, _mm512_storeu_ps, 16, ACCS16, 16)
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx2,fma"))) static double peak_avx2(float seed) {
#define DECL(i) __m256 a##i = _mm256_set1_ps(seed + (float)(i));
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    PEAK_LOOP(__m256, _mm256_set1_ps, _mm256_storeu_ps, 8, ACCS12, 12)
#undef DECL
#undef STEP
#undef SUM
}

/* Scalar multiply-adds (what the generic kernels are measured against). */
static double peak_scalar(float seed) {
    volatile float v = seed;
    float acc[12];
    for (int i = 0; i < 12; i++) acc[i] = v + (float)i;
    double t0 = now();
    for (long it = 0; it < PEAK_ITERS; it++)
        for (int i = 0; i < 12; i++) acc[i] = acc[i] * 0.999999f + 1e-7f;
    double t = now() - t0;
    float s = 0;
    for (int i = 0; i < 12; i++) s += acc[i];
    v = s;
    return 2.0 * 12 * (double)PEAK_ITERS / t * 1e-9;
}

/* One timed run of the peak loop (about 0.1 s). */
static double peak_once(nbt_isa isa) {
    return isa == NBT_ISA_AVX512 ? peak_avx512(1.0f)
           : isa == NBT_ISA_AVX2 ? peak_avx2(1.0f)
                                 : peak_scalar(1.0f);
}

static float *random_matrix(int64_t n, unsigned *state) {
    float *m = aligned_alloc(64, (size_t)(n * n * 4 + 63) / 64 * 64);
    for (int64_t i = 0; i < n * n; i++) {
        *state = *state * 1664525u + 1013904223u;
        m[i] = (float)(*state >> 8) / 16777216.0f - 0.5f;
    }
    return m;
}

/* Best GFLOP/s of C = A * B over reps timed runs of about 0.1 s each. Each run is
 * followed by a run of the peak loop, so both see the same conditions on a shared machine;
 * *peak gets the best of those. */
static double sgemm_gflops(int64_t n, int reps, nbt_isa isa, double *peak) {
    unsigned state = 7;
    float *A = random_matrix(n, &state), *B = random_matrix(n, &state),
          *C = random_matrix(n, &state);
    double flops = 2.0 * (double)n * (double)n * (double)n, best = 0;
    nbt_sgemm(false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n); /* warm-up */
    int calls = (int)(0.1 * 50e9 / flops) + 1;
    *peak = 0;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now();
        for (int c = 0; c < calls; c++)
            nbt_sgemm(false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        double g = flops * calls / (now() - t0) * 1e-9;
        if (g > best) best = g;
        double p = peak_once(isa);
        if (p > *peak) *peak = p;
    }
    free(A), free(B), free(C);
    return best;
}

/* Microseconds per call of one strided-batched product (batch 1: a plain product), the best
 * of reps runs of about 0.05 s each. A and B are read in place; C is written. Each run is
 * followed by a run of the peak loop, as in sgemm_gflops; *peak gets the best of those. */
static double product_us(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch, int reps,
                         nbt_isa isa, double *peak) {
    unsigned state = 11;
    int64_t sa = M * K, sb = K * N, sc = M * N, side = 1;
    while (side * side < batch * (sa > sb ? (sa > sc ? sa : sc) : (sb > sc ? sb : sc))) side++;
    float *A = random_matrix(side, &state), *B = random_matrix(side, &state),
          *C = random_matrix(side, &state);
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    nbt_sgemm_batched(ta, tb, M, N, K, 1.0f, A, lda, sa, B, ldb, sb, 0.0f, C, N, sc, batch);
    double flops = 2.0 * (double)(M * N * K * batch), best = 1e30;
    int calls = (int)(0.05 * 20e9 / (flops + 2e4)) + 1;
    *peak = 0;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now();
        for (int c = 0; c < calls; c++)
            nbt_sgemm_batched(ta, tb, M, N, K, 1.0f, A, lda, sa, B, ldb, sb, 0.0f, C, N, sc, batch);
        double us = (now() - t0) / calls * 1e6;
        if (us < best) best = us;
        double p = peak_once(isa);
        if (p > *peak) *peak = p;
    }
    free(A), free(B), free(C);
    return best;
}

int main(int argc, char **argv) {
    int reps = 5, threads = 1;
    bool peak_only = false;
    int64_t sizes[16] = {64, 128, 256, 384, 512, 768, 1024};
    int nsizes = 7;
    const char *only = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
            const char *name = argv[++i];
            nbt_isa isa = strcmp(name, "avx512") == 0 ? NBT_ISA_AVX512
                          : strcmp(name, "avx2") == 0 ? NBT_ISA_AVX2
                                                      : NBT_ISA_GENERIC;
            if (strcmp(nbt_isa_name(isa), name) != 0 || !nbt_isa_force(isa)) {
                fprintf(stderr, "gemm_bench: this CPU cannot run '%s'\n", name);
                return 1;
            }
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1) reps = 1;
        } else if (strcmp(argv[i], "--peak") == 0) {
            peak_only = true;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
            if (threads < 1) threads = 1;
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            nsizes = 0;
            for (char *s = argv[++i], *end; *s && nsizes < 16; s = *end ? end + 1 : end) {
                long long n = strtoll(s, &end, 10);
                if (n > 0) sizes[nsizes++] = n;
                if (end == s) break;
            }
        } else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--cpu-time") == 0) {
            cpu_time = true;
        } else {
            fprintf(stderr,
                    "usage: %s [--isa avx512|avx2|generic] [--reps N] [--threads N] [--peak] "
                    "[--sizes N,N,...] [--shapes TEXT] [--cpu-time]\n",
                    argv[0]);
            return 1;
        }
    }
    if (cpu_time && threads != 1) {
        fprintf(stderr, "gemm_bench: --cpu-time times one thread only\n");
        return 1;
    }
    nb_set_num_threads(threads);
    nbt_isa isa = nbt_isa_current();
    if (peak_only) {
        double best = 0;
        for (int rep = 0; rep < reps; rep++) {
            double p = peak_once(isa);
            if (p > best) best = p;
        }
        printf("FMA peak of one core: %.1f GFLOP/s fp32 (%s, best of %d runs)\n", best,
               isa == NBT_ISA_GENERIC ? "scalar" : nbt_isa_name(isa), reps);
        return 0;
    }
    const char *blas = nbt_gemm_blas();
    char what[64];
    snprintf(what, sizeof what, "%s%s", blas ? blas : "the ", blas ? "" : nbt_isa_name(isa));
    printf("sgemm with %s%s on %d thread(s), against %d x the FMA peak of one core (%s),\n"
           "each the best of %d runs taken in turn\n",
           what, blas ? "" : " kernels", threads, threads,
           isa == NBT_ISA_GENERIC ? "scalar" : nbt_isa_name(isa), reps);
    printf("%6s %10s %10s %10s\n", "n", "GFLOP/s", "peak", "% of peak");
    for (int i = 0; i < nsizes; i++) {
        double p, g = sgemm_gflops(sizes[i], reps, isa, &p);
        p *= threads;
        printf("%6lld %10.1f %10.1f %9.1f%%\n", (long long)sizes[i], g, p, 100.0 * g / p);
    }
    /* The products of the bench workloads: seed's projections and their gradients, its two
     * heads, toy's projections, its weight gradients and its 128 attention heads, mid's 64 heads in
     * one call each; vector products; lm's, mid's and lmbig's projections and the products of
     * their backward (dx = g W, dW = g^T x). */
    static const struct {
        const char *name;
        bool ta, tb;
        int64_t M, N, K, batch;
    } shapes[] = {
        {"seed x W^T      3x6x6", false, true, 3, 6, 6, 1},
        {"seed g W        3x6x6", false, false, 3, 6, 6, 1},
        {"seed g^T x      6x6x3", true, false, 6, 6, 3, 1},
        {"seed heads  2 x 3x3x3", false, true, 3, 3, 3, 2},
        {"toy heads 128 x 16x16x16", false, true, 16, 16, 16, 128},
        {"toy x W^T   512x64x64", false, true, 512, 64, 64, 1},
        {"toy g^T x   64x64x512", true, false, 64, 64, 512, 1},
        {"mid heads  64 x 128x128x32", false, true, 128, 128, 32, 64},
        {"row        1x1024x1024", false, false, 1, 1024, 1024, 1},
        {"column     1024x1x1024", false, false, 1024, 1, 1024, 1},
        {"gen x W1^T  1x512x128", false, true, 1, 512, 128, 1},
        {"gen h W2^T  1x128x512", false, true, 1, 128, 512, 1},
        {"lm x W1^T   1024x512x128", false, true, 1024, 512, 128, 1},
        {"lm h W2^T   1024x128x512", false, true, 1024, 128, 512, 1},
        {"lm g W1     1024x128x512", false, false, 1024, 128, 512, 1},
        {"lm g^T x    512x128x1024", true, false, 512, 128, 1024, 1},
        {"lm g^T x    128x128x1024", true, false, 128, 128, 1024, 1},
        {"lm g^T h    128x512x1024", true, false, 128, 512, 1024, 1},
        {"lm x Wq^T   1024x128x128", false, true, 1024, 128, 128, 1},
        {"lm heads 64 x 64x64x32", false, true, 64, 64, 32, 64},
        {"mid x W1^T  1024x1024x256", false, true, 1024, 1024, 256, 1},
        {"mid g W1    1024x256x1024", false, false, 1024, 256, 1024, 1},
        {"mid g^T x   1024x256x1024", true, false, 1024, 256, 1024, 1},
        {"mid g^T x   256x256x1024", true, false, 256, 256, 1024, 1},
        {"lmbig x W^T 2048x1152x384", false, true, 2048, 1152, 384, 1},
        {"lmbig x W1^T 2048x1536x384", false, true, 2048, 1536, 384, 1},
        {"lmbig x W1  2048x1536x384", false, false, 2048, 1536, 384, 1},
        {"lmbig h W2^T 2048x384x1536", false, true, 2048, 384, 1536, 1},
        {"lmbig g W1  2048x384x1536", false, false, 2048, 384, 1536, 1},
        {"lmbig g^T x 1536x384x2048", true, false, 1536, 384, 2048, 1},
        {"lmbig g^T h 384x1536x2048", true, false, 384, 1536, 2048, 1},
    };
    if (strcmp(only, "none") == 0) return 0;
    printf("%-28s %12s %10s %10s\n", "product", "us/call", "GFLOP/s", "% of peak");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (!strstr(shapes[i].name, only)) continue;
        double peak, us = product_us(shapes[i].ta, shapes[i].tb, shapes[i].M, shapes[i].N,
                                     shapes[i].K, shapes[i].batch, reps, isa, &peak);
        peak *= threads;
        double flops = 2.0 * (double)(shapes[i].M * shapes[i].N * shapes[i].K * shapes[i].batch);
        printf("%-28s %12.3f %10.1f %9.1f%%\n", shapes[i].name, us, flops / us * 1e-3,
               100.0 * flops / us * 1e-3 / peak);
    }
    return 0;
}
