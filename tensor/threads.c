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
