/* Several one-row products of one input as one job (row_products.h). Decoding one token
 * multiplies its row by the query, key and value weights: 16K multiply-adds each at the
 * bench's size, each too small for a second thread to pay for itself (the GEMM splits one-row
 * products from 32K), so all three ran on the calling thread. As one job of 48K they split. */
#include "row_products.h"
#include "gemm.h"
#include "nbt.h"
#include "pool.h"

#include <string.h>

/* As the GEMM's one-row path (gemm.c): a thread takes at least this many multiply-adds, parts
 * fall on multiples of GROUP_UNIT outputs, and there are more parts than threads (up to
 * NBT_PIECES_PER_THREAD a thread) only for work of GROUP_WORK_PER_PART multiply-adds a part. */

#define GROUP_MIN_WORK_PER_THREAD (16 * 1024)
#define GROUP_WORK_PER_PART (256 * 1024)
#define GROUP_UNIT 64

typedef struct {
    bool f64;
    int64_t K, incx, total;
    const void *x;
    int count, parts;
    const nbt_row_product *p;
} group_job;

/* Outputs [lo, hi) of the products laid end to end. */
static void run_outputs(const group_job *j, int64_t lo, int64_t hi) {
    const size_t es = j->f64 ? sizeof(double) : sizeof(float);
    int64_t start = 0;
    for (int i = 0; i < j->count && start < hi; start += j->p[i].n, i++) {
        const nbt_row_product *p = &j->p[i];
        const int64_t a = lo > start ? lo - start : 0, b = hi - start < p->n ? hi - start : p->n;
        if (a >= b) continue;
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
    }
}

/* Output i of n parts' boundaries: near-equal numbers of whole units. */
static int64_t part_boundary(const group_job *j, int64_t part) {
    const int64_t units = (j->total + GROUP_UNIT - 1) / GROUP_UNIT,
                  at = units * part / j->parts * GROUP_UNIT;
    return at < j->total ? at : j->total;
}

static void run_part(int64_t part, int worker, void *ctx) {
    (void)worker;
    const group_job *j = ctx;
    run_outputs(j, part_boundary(j, part), part_boundary(j, part + 1));
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
    }
}

void nbt_row_products(bool f64, int64_t K, const void *x, int64_t incx, int count,
                      const nbt_row_product *products) {
    group_job j = {.f64 = f64, .K = K, .incx = incx, .x = x, .count = count, .p = products};
    for (int i = 0; i < count; i++) j.total += products[i].n;
    if (j.total <= 0) return;
    if (nbt_gemm_blas()) {
        blas_products(&j);
        return;
    }
    const double work = (double)j.total * (double)K;
    const int threads = work < 2.0 * GROUP_MIN_WORK_PER_THREAD
                            ? 1
                            : nbt_threads_for(work > 1e18 ? (int64_t)1e18 : (int64_t)work,
                                              GROUP_MIN_WORK_PER_THREAD);
    const int64_t units = (j.total + GROUP_UNIT - 1) / GROUP_UNIT;
    double most = (double)threads * NBT_PIECES_PER_THREAD;
    most = work / GROUP_WORK_PER_PART < most ? work / GROUP_WORK_PER_PART : most;
    most = (double)units < most ? (double)units : most;
    j.parts = most > threads ? (int)most : threads;
    if (j.parts > units) j.parts = (int)units;
    if (j.parts <= 1) {
        run_outputs(&j, 0, j.total);
        return;
    }
    nbt_run_tasks(j.parts, threads, run_part, &j);
}
