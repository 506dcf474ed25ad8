/* GEMM entry points: picks the instruction set's kernels once, owns the pack buffers, and
 * instantiates the blocked driver (gemm_driver.h) for float and double. */
#include "gemm.h"
#include "gemm_kernels.h"
#include "nbt.h"

#include <stddef.h>
#include <string.h>

/* ---- kernels for the instruction set in use ---- */
static nbt_gemm_isa current_isa = NBT_GEMM_GENERIC;
static bool chosen;
static nbt_gemm_kernels_f32 kernels_f32;
static nbt_gemm_kernels_f64 kernels_f64;

bool nbt_gemm_isa_supported(nbt_gemm_isa isa) {
    __builtin_cpu_init();
    switch (isa) {
    case NBT_GEMM_AVX512:
        return __builtin_cpu_supports("avx512f");
    case NBT_GEMM_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case NBT_GEMM_GENERIC:
        return true;
    }
    return false;
}

static void use(nbt_gemm_isa isa) {
    switch (isa) {
    case NBT_GEMM_AVX512:
        nbt_gemm_kernels_avx512f(&kernels_f32, &kernels_f64);
        break;
    case NBT_GEMM_AVX2:
        nbt_gemm_kernels_avx2(&kernels_f32, &kernels_f64);
        break;
    case NBT_GEMM_GENERIC:
        nbt_gemm_kernels_generic(&kernels_f32, &kernels_f64);
        break;
    }
    current_isa = isa;
    chosen = true;
}

static void choose(void) {
    if (chosen) return;
    use(nbt_gemm_isa_supported(NBT_GEMM_AVX512) ? NBT_GEMM_AVX512
        : nbt_gemm_isa_supported(NBT_GEMM_AVX2) ? NBT_GEMM_AVX2
                                                : NBT_GEMM_GENERIC);
}

nbt_gemm_isa nbt_gemm_current_isa(void) {
    choose();
    return current_isa;
}

bool nbt_gemm_force_isa(nbt_gemm_isa isa) {
    if (!nbt_gemm_isa_supported(isa)) return false;
    use(isa);
    return true;
}

const char *nbt_gemm_isa_name(nbt_gemm_isa isa) {
    switch (isa) {
    case NBT_GEMM_AVX512:
        return "avx512f";
    case NBT_GEMM_AVX2:
        return "avx2";
    case NBT_GEMM_GENERIC:
        return "generic";
    }
    return "unknown";
}

/* ---- pack buffers ---- */
/* Block sizes (elements). MR x KC of A stays in L1 (24 KB of 48 KB here) and KC x NB of B
 * in L2 (1 MB of 2 MB); MB x KC of A is the L3 block. MB and NB are multiples of every MR and
 * NR. KC = 512 measured faster than 384 at n = 1024 here. */
#define KC_F32 512
#define MB_F32 1536
#define NB_F32 512
#define KC_F64 256
#define MB_F64 768
#define NB_F64 256

static size_t max_size(size_t a, size_t b) {
    return a > b ? a : b;
}

/* One buffer big enough for either type's largest blocks, made on first use. Its pages are
 * only touched (and only count in RSS) as far as a product needs them. */
static void *workspace(void) {
    static char *raw;
    static char *aligned;
    if (!raw) {
        size_t f32 =
            ((size_t)MB_F32 * KC_F32 + (size_t)KC_F32 * NB_F32 + (size_t)NBT_GEMM_MAX_MR * KC_F32) *
            sizeof(float);
        size_t f64 =
            ((size_t)MB_F64 * KC_F64 + (size_t)KC_F64 * NB_F64 + (size_t)NBT_GEMM_MAX_MR * KC_F64) *
            sizeof(double);
        raw = nbt_malloc(max_size(f32, f64) + 64);
        if (!raw) return NULL;
        aligned = raw + (64 - (uintptr_t)raw % 64) % 64;
    }
    return aligned;
}

/* ---- the driver, once per element type ---- */
/* Products of at most this many multiply-adds skip the tiles (measured here: a 4x4x4 product
 * is faster as plain dot products, a 6x6x6 one in a tile). */
#define TINY 128
#define T float
#define KSET nbt_gemm_kernels_f32
#define UKR nbt_gemm_ukr_f32
#define KC KC_F32
#define MB MB_F32
#define NB NB_F32
#define FN(name) name##_f32
#include "gemm_driver.h"
#undef T
#undef KSET
#undef UKR
#undef KC
#undef MB
#undef NB
#undef FN

#define T double
#define KSET nbt_gemm_kernels_f64
#define UKR nbt_gemm_ukr_f64
#define KC KC_F64
#define MB MB_F64
#define NB NB_F64
#define FN(name) name##_f64
#include "gemm_driver.h"

bool nbt_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
               int64_t ldc) {
    choose();
    return gemm_f32(&kernels_f32, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool nbt_dgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const double *A, int64_t lda, const double *B, int64_t ldb, double beta, double *C,
               int64_t ldc) {
    choose();
    return gemm_f64(&kernels_f64, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

bool nbt_sgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, int64_t stride_a, const float *B, int64_t ldb,
                       int64_t stride_b, float beta, float *C, int64_t ldc, int64_t stride_c,
                       int64_t batch) {
    choose();
    return gemm_batched_f32(&kernels_f32, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B,
                            ldb, stride_b, beta, C, ldc, stride_c, batch);
}

bool nbt_dgemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                       const double *A, int64_t lda, int64_t stride_a, const double *B, int64_t ldb,
                       int64_t stride_b, double beta, double *C, int64_t ldc, int64_t stride_c,
                       int64_t batch) {
    choose();
    return gemm_batched_f64(&kernels_f64, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B,
                            ldb, stride_b, beta, C, ldc, stride_c, batch);
}
