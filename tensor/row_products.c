/* Several one-row products of one input as one job (row_products.h). Decoding one token
 * multiplies its row by the query, key and value weights: 16K multiply-adds each at the
 * bench's size, each too small for a second thread to pay for itself (the GEMM splits one-row
 * products from 32K), so all three ran on the calling thread. As one job of 48K they split. */
#include "row_products.h"
#include "gemm.h"
#include "nbt.h"
#include "pool.h"
#include "vecmath.h"

#include <string.h>

/* Split as the GEMM splits a one-row product (gemm.h): at least GEMM_MIN_WORK_PER_THREAD_ROW
 * multiply-adds a thread, parts on multiples of GEMM_VECTOR_UNIT outputs. */

typedef struct {
    bool f64, gated; /* gated: p[0]'s outputs times p[1]'s, output by output (the count is 2) */
    int64_t K, incx, total;
    const void *x;
    int count, parts;
    const nbt_row_product *p;
} group_job;

/* The activation of n outputs at out, in place: elementwise, so a part's outputs get the bits
 * the whole output would (the decoded token's GELU then runs on both threads, each on the
 * outputs it just wrote, instead of as a pass of its own on the calling thread). */
static void activate(nbt_activation act, bool f64, void *out, int64_t n) {
    switch (act) {
    case NBT_ACT_GELU:
        f64 ? nbt_vgelu_f64(out, out, n) : nbt_vgelu_f32(out, out, n);
        break;
    case NBT_ACT_GELU_TANH:
        f64 ? nbt_vgelu_tanh_f64(out, out, n) : nbt_vgelu_tanh_f32(out, out, n);
        break;
    case NBT_ACT_SILU:
        f64 ? nbt_vsilu_f64(out, out, n) : nbt_vsilu_f32(out, out, n);
        break;
    case NBT_ACT_NONE:
        break;
    }
}

/* Outputs [a, b) of product p. */
static void run_product(const group_job *j, const nbt_row_product *p, int64_t a, int64_t b) {
    const size_t es = j->f64 ? sizeof(double) : sizeof(float);
    char *out = (char *)p->out + es * (size_t)a;
    const char *w = (const char *)p->w + es * (size_t)(a * p->ldw);
    /* the bias first, then the product added onto it: nbt_*gemm_bias's one-row path */
    if (p->bias) memcpy(out, (const char *)p->bias + es * (size_t)a, es * (size_t)(b - a));
    if (j->f64)
        nbt_dgemm_rows(true, 1, b - a, j->K, 1.0, j->x, 0, j->incx, (const double *)w, p->ldw,
                       p->bias ? 1.0 : 0.0, (double *)out, b - a);
    else
        nbt_sgemm_rows(true, 1, b - a, j->K, 1.0f, j->x, 0, j->incx, (const float *)w, p->ldw,
                       p->bias ? 1.0f : 0.0f, (float *)out, b - a);
    activate(p->act, j->f64, out, b - a);
}

/* out[i] *= by[i] for i in [a, b): the gate, one rounding per output as the elementwise
 * product rounds it. */
static void gate_outputs(bool f64, void *out, const void *by, int64_t a, int64_t b) {
    if (f64)
        for (int64_t i = a; i < b; i++) ((double *)out)[i] *= ((const double *)by)[i];
    else
        for (int64_t i = a; i < b; i++) ((float *)out)[i] *= ((const float *)by)[i];
}

/* Outputs [lo, hi) of the products laid end to end; gated, outputs [lo, hi) of both and their
 * products. */
static void run_outputs(const group_job *j, int64_t lo, int64_t hi) {
    if (j->gated) {
        run_product(j, &j->p[0], lo, hi);
        run_product(j, &j->p[1], lo, hi);
        gate_outputs(j->f64, j->p[0].out, j->p[1].out, lo, hi);
        return;
    }
    int64_t start = 0;
    for (int i = 0; i < j->count && start < hi; start += j->p[i].n, i++) {
        const nbt_row_product *p = &j->p[i];
        const int64_t a = lo > start ? lo - start : 0, b = hi - start < p->n ? hi - start : p->n;
        if (a < b) run_product(j, p, a, b);
    }
}

static void run_part(int64_t part, int worker, void *ctx) {
    (void)worker;
    const group_job *j = ctx;
    run_outputs(j, nbt_gemm_boundary((int)part, j->parts, j->total, GEMM_VECTOR_UNIT),
                nbt_gemm_boundary((int)part + 1, j->parts, j->total, GEMM_VECTOR_UNIT));
}

/* A system BLAS takes each product whole, as nb_f_linear hands it over (x as a one-row
 * matrix: K apart when its elements are contiguous, else transposed). */
static void blas_products(const group_job *j) {
    const bool ta = j->incx != 1;
    const int64_t lda = ta ? j->incx : j->K;
    for (int i = 0; i < j->count; i++) {
        const nbt_row_product *p = &j->p[i];
        if (j->f64 && p->bias)
            nbt_dgemm_bias(ta, true, 1, p->n, j->K, j->x, lda, p->w, p->ldw, p->bias, p->out, p->n);
        else if (j->f64)
            nbt_dgemm(ta, true, 1, p->n, j->K, 1.0, j->x, lda, p->w, p->ldw, 0.0, p->out, p->n);
        else if (p->bias)
            nbt_sgemm_bias(ta, true, 1, p->n, j->K, j->x, lda, p->w, p->ldw, p->bias, p->out, p->n);
        else
            nbt_sgemm(ta, true, 1, p->n, j->K, 1.0f, j->x, lda, p->w, p->ldw, 0.0f, p->out, p->n);
        activate(p->act, j->f64, p->out, p->n);
    }
    if (j->gated) gate_outputs(j->f64, j->p[0].out, j->p[1].out, 0, j->p[0].n);
}

static void run_job(group_job *j) {
    if (j->total <= 0) return;
    if (nbt_gemm_blas()) {
        blas_products(j);
        return;
    }
    const int64_t K = j->K;
    const double work = (double)j->total * (double)K * (j->gated ? 2 : 1);
    const int threads = nbt_gemm_threads_for(work, GEMM_MIN_WORK_PER_THREAD_ROW);
    const int64_t units = (j->total + GEMM_VECTOR_UNIT - 1) / GEMM_VECTOR_UNIT;
    j->parts = nbt_gemm_part_count(work, threads, j->total, GEMM_VECTOR_UNIT);
    if (j->parts > units) j->parts = (int)units;
    if (j->parts <= 1) {
        run_outputs(j, 0, j->total);
        return;
    }
    nbt_run_tasks(j->parts, threads, run_part, j);
}

void nbt_row_products(bool f64, int64_t K, const void *x, int64_t incx, int count,
                      const nbt_row_product *products) {
    group_job j = {.f64 = f64, .K = K, .incx = incx, .x = x, .count = count, .p = products};
    for (int i = 0; i < count; i++) j.total += products[i].n;
    run_job(&j);
}

void nbt_row_products_gated(bool f64, int64_t K, const void *x, int64_t incx,
                            const nbt_row_product pair[2]) {
    group_job j = {.f64 = f64,
                   .gated = true,
                   .K = K,
                   .incx = incx,
                   .x = x,
                   .count = 2,
                   .total = pair[0].n,
                   .p = pair};
    run_job(&j);
}
