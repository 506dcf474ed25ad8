/* The one monotonic clock of the library (the pool's back-off, the trainer's progress line). */
#define _POSIX_C_SOURCE 200809L
#include "nbt.h"

#include <time.h>

int64_t nbt_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
