/* The inner loop of column sums (tensor/reduce_kernels.c) for one instruction set (kernels.h):
 * a float32 row added into a row of double accumulators, eight columns at a time, written
 * once with vector types (AVX-512 holds the eight doubles in one register, AVX2 in two, SSE2
 * in four). Every build converts and adds each element as the plain loop would, so all give
 * the same bits. */
#include "kernels.h"

#include <string.h>

typedef float cols_v8f __attribute__((vector_size(32)));
typedef double cols_v8d __attribute__((vector_size(64)));

void NBK_FN(nbk_add_row_f32)(double *acc, const float *x, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        cols_v8f v;
        cols_v8d sum;
        memcpy(&v, x + k, sizeof v);
        memcpy(&sum, acc + k, sizeof sum);
        sum += __builtin_convertvector(v, cols_v8d);
        memcpy(acc + k, &sum, sizeof sum);
    }
    for (; k < n; k++) acc[k] += (double)x[k];
}
