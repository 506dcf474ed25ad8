/* sgemm throughput of nabla's own kernels at square sizes, next to the single-core FMA peak
 * of this machine measured with a tight loop of independent FMAs.
 * Usage: gemm_bench [--isa avx512f|avx2|generic] [--reps N]
 * A timing is an output, never a pass/fail check. The machine may be shared: each figure is
 * the best of a few repetitions. */
#include "tensor/gemm.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 16 independent accumulators in named registers: more than FMA latency times FMA ports on
 * current x86 cores, so the loop is bound by FMA throughput alone. */
#define PEAK_ACCS 16
#define PEAK_ITERS 20000000L
#define ACCS(X)                                                                                    \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

#define PEAK_LOOP(V, SET1, FMA, ADD, STORE, LANES)                                                 \
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
    return 2.0 * LANES * PEAK_ACCS * (double)PEAK_ITERS / t * 1e-9;

__attribute__((target("avx512f"))) static double peak_avx512(float seed) {
#define DECL(i) __m512 a##i = _mm512_set1_ps(seed + (float)(i));
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    PEAK_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps, 16)
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx2,fma"))) static double peak_avx2(float seed) {
#define DECL(i) __m256 a##i = _mm256_set1_ps(seed + (float)(i));
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    PEAK_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps, 8)
#undef DECL
#undef STEP
#undef SUM
}

/* Scalar multiply-adds (what the generic kernels are measured against). */
static double peak_scalar(float seed) {
    volatile float v = seed;
    float acc[PEAK_ACCS];
    for (int i = 0; i < PEAK_ACCS; i++) acc[i] = v + (float)i;
    double t0 = now();
    long iters = PEAK_ITERS / 4;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < PEAK_ACCS; i++) acc[i] = acc[i] * 0.999999f + 1e-7f;
    double t = now() - t0;
    float s = 0;
    for (int i = 0; i < PEAK_ACCS; i++) s += acc[i];
    v = s;
    return 2.0 * PEAK_ACCS * (double)iters / t * 1e-9;
}

static double peak(nbt_gemm_isa isa) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double p = isa == NBT_GEMM_AVX512 ? peak_avx512(1.0f)
                   : isa == NBT_GEMM_AVX2 ? peak_avx2(1.0f)
                                          : peak_scalar(1.0f);
        if (p > best) best = p;
    }
    return best;
}

static float *random_matrix(int64_t n, unsigned *state) {
    float *m = aligned_alloc(64, (size_t)(n * n * 4 + 63) / 64 * 64);
    for (int64_t i = 0; i < n * n; i++) {
        *state = *state * 1664525u + 1013904223u;
        m[i] = (float)(*state >> 8) / 16777216.0f - 0.5f;
    }
    return m;
}

/* Best GFLOP/s of C = A * B over reps timed runs of about 0.1 s each. */
static double sgemm_gflops(int64_t n, int reps) {
    unsigned state = 7;
    float *A = random_matrix(n, &state), *B = random_matrix(n, &state),
          *C = random_matrix(n, &state);
    double flops = 2.0 * (double)n * (double)n * (double)n, best = 0;
    nbt_sgemm(false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n); /* warm-up */
    int calls = (int)(0.1 * 50e9 / flops) + 1;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now();
        for (int c = 0; c < calls; c++)
            nbt_sgemm(false, false, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        double g = flops * calls / (now() - t0) * 1e-9;
        if (g > best) best = g;
    }
    free(A), free(B), free(C);
    return best;
}

/* Attention's per-head products (toy workload: 128 heads of 16x16 times 16x16) in one call. */
static double batched_us(int64_t heads, int64_t n, int reps) {
    unsigned state = 11;
    float *A = random_matrix(n * 12, &state), *B = random_matrix(n * 12, &state),
          *C = random_matrix(n * 12, &state);
    double best = 1e30;
    int calls = 2000;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now();
        for (int c = 0; c < calls; c++)
            nbt_sgemm_batched(false, true, n, n, n, 1.0f, A, n, n * n, B, n, n * n, 0.0f, C, n,
                              n * n, heads);
        double us = (now() - t0) / calls * 1e6;
        if (us < best) best = us;
    }
    free(A), free(B), free(C);
    return best;
}

int main(int argc, char **argv) {
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
            const char *name = argv[++i];
            nbt_gemm_isa isa = strcmp(name, "avx512f") == 0 ? NBT_GEMM_AVX512
                               : strcmp(name, "avx2") == 0  ? NBT_GEMM_AVX2
                                                            : NBT_GEMM_GENERIC;
            if (strcmp(nbt_gemm_isa_name(isa), name) != 0 || !nbt_gemm_force_isa(isa)) {
                fprintf(stderr, "gemm_bench: this CPU cannot run '%s'\n", name);
                return 1;
            }
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1) reps = 1;
        } else {
            fprintf(stderr, "usage: %s [--isa avx512f|avx2|generic] [--reps N]\n", argv[0]);
            return 1;
        }
    }
    nbt_gemm_isa isa = nbt_gemm_current_isa();
    double p = peak(isa);
    printf("sgemm, %s kernels, 1 thread; FMA peak of one core (%s): %.1f GFLOP/s\n",
           nbt_gemm_isa_name(isa), isa == NBT_GEMM_GENERIC ? "scalar" : nbt_gemm_isa_name(isa), p);
    printf("%6s %10s %10s\n", "n", "GFLOP/s", "% of peak");
    const int64_t sizes[] = {64, 128, 256, 512, 1024};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        double g = sgemm_gflops(sizes[i], reps);
        printf("%6lld %10.1f %9.1f%%\n", (long long)sizes[i], g, 100.0 * g / p);
    }
    double us = batched_us(128, 16, reps);
    printf("batched 128 x (16x16 @ 16x16^T): %.2f us per call, %.1f GFLOP/s\n", us,
           2.0 * 128 * 16 * 16 * 16 / us * 1e-3);
    return 0;
}
