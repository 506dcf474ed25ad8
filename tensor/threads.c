/* The thread budget kernels may use. Kernels split work only above a size threshold and
 * give each thread whole outputs (rows, tiles, batch entries), never parts of one sum, so
 * results are bitwise identical for any thread count. */
#include "nbt.h"

#include <omp.h>

void nb_set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : omp_get_num_procs()); }

int nb_get_num_threads(void) { return omp_get_max_threads(); }

int nbt_threads_for(int64_t work, int64_t min_work_per_thread) {
    int max = omp_in_parallel() ? 1 : omp_get_max_threads();
    int64_t by_work = min_work_per_thread > 0 ? work / min_work_per_thread : max;
    if (by_work < 1) return 1;
    return by_work < max ? (int)by_work : max;
}

void nbt_parallel_ranges(int64_t n, int64_t grain, nbt_range_fn fn, void *ctx) {
    int nt = nbt_threads_for(n, grain);
    if (nt <= 1) {
        if (n > 0) fn(0, n, ctx);
        return;
    }
    /* Equal slices rounded to 16 elements so that no two threads share a cache line of floats;
     * indices coarser than that (a grain under 16: rows, chunks) are not rounded, or a few
     * of them would all land in the first slice. */
    int64_t unit = grain >= 16 ? 16 : 1;
    int64_t slice = ((n + nt - 1) / nt + unit - 1) / unit * unit;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t begin = (int64_t)t * slice, end = begin + slice < n ? begin + slice : n;
        if (begin < end) fn(begin, end, ctx);
    }
}
