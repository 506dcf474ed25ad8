/* The thread budget kernels may use. Kernels split work only above a size threshold and
 * reduce in a fixed order, so results do not depend on this number. */
#include "nbt.h"

#include <unistd.h>

static int requested;

void nb_set_num_threads(int n) { requested = n > 0 ? n : 0; }

int nb_get_num_threads(void) {
    if (requested > 0) return requested;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 0 ? (int)cores : 1;
}
