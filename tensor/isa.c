/* The process-wide choice of instruction set (isa.h). */
#include "isa.h"
#include "nabla/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {
    [NBT_ISA_GENERIC] = "generic", [NBT_ISA_AVX2] = "avx2", [NBT_ISA_AVX512] = "avx512"};
_Static_assert(sizeof names / sizeof names[0] == NBT_ISA_COUNT, "a name per nbt_isa");

static nbt_kernel_table tables[NBT_ISA_COUNT];
static unsigned supported_sets; /* bit i: the CPU runs set i; written once, under `once` */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic(const nbt_kernel_table *) current;
static char refusal[256]; /* why NABLA_ISA was refused; "" when it was not */
static atomic_bool refused;

/* The sets this CPU runs: each needs every extension its build's -m flags allow. */
static unsigned cpu_sets(void) {
    __builtin_cpu_init();
    unsigned s = 1u << NBT_ISA_GENERIC;
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2) s |= 1u << NBT_ISA_AVX2;
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        s |= 1u << NBT_ISA_AVX512;
    return s;
}

bool nbt_isa_parse(const char *name, unsigned supported, nbt_isa *isa, char *why, size_t n) {
    int found = -1;
    for (int i = 0; i < NBT_ISA_COUNT; i++)
        if (strcmp(name, names[i]) == 0) found = i;
    if (found < 0) {
        snprintf(why, n,
                 "NABLA_ISA=\"%s\" is not an instruction set nabla has kernels for "
                 "(avx512, avx2 or generic)",
                 name);
        return false;
    }
    if (!(supported & (1u << found))) {
        char runs[64] = "";
        for (int i = NBT_ISA_COUNT - 1; i >= 0; i--)
            if (supported & (1u << i))
                snprintf(runs + strlen(runs), sizeof runs - strlen(runs), "%s%s",
                         runs[0] ? ", " : "", names[i]);
        snprintf(why, n, "NABLA_ISA=%s: this CPU cannot run the %s kernels (it runs: %s)", name,
                 name, runs);
        return false;
    }
    *isa = (nbt_isa)found;
    return true;
}

static void choose(void) {
    supported_sets = cpu_sets();
    nbt_kernels_generic(&tables[NBT_ISA_GENERIC]);
    if (supported_sets & (1u << NBT_ISA_AVX2)) nbt_kernels_avx2(&tables[NBT_ISA_AVX2]);
    if (supported_sets & (1u << NBT_ISA_AVX512)) nbt_kernels_avx512(&tables[NBT_ISA_AVX512]);
    nbt_isa isa = supported_sets & (1u << NBT_ISA_AVX512) ? NBT_ISA_AVX512
                  : supported_sets & (1u << NBT_ISA_AVX2) ? NBT_ISA_AVX2
                                                          : NBT_ISA_GENERIC;
    const char *env = getenv("NABLA_ISA");
    if (env && *env && !nbt_isa_parse(env, supported_sets, &isa, refusal, sizeof refusal)) {
        /* The generic kernels run anywhere, while every tensor allocation reports the refusal;
         * said once on stderr too, for a program that does not check its calls. */
        isa = NBT_ISA_GENERIC;
        atomic_store(&refused, true);
        fprintf(stderr, "nabla: %s; every call that makes a tensor will fail\n", refusal);
    }
    atomic_store_explicit(&current, &tables[isa], memory_order_release);
}

const nbt_kernel_table *nbt_kernels(void) {
    const nbt_kernel_table *k = atomic_load_explicit(&current, memory_order_acquire);
    if (k) return k;
    pthread_once(&once, choose);
    return atomic_load_explicit(&current, memory_order_acquire);
}

nbt_isa nbt_isa_current(void) {
    return (nbt_isa)(nbt_kernels() - tables);
}

bool nbt_isa_supported(nbt_isa isa) {
    pthread_once(&once, choose);
    return isa >= 0 && isa < NBT_ISA_COUNT && (supported_sets & (1u << isa));
}

bool nbt_isa_force(nbt_isa isa) {
    if (!nbt_isa_supported(isa)) return false;
    atomic_store(&refused, false);
    atomic_store_explicit(&current, &tables[isa], memory_order_release);
    return true;
}

const char *nbt_isa_name(nbt_isa isa) {
    return isa >= 0 && isa < NBT_ISA_COUNT ? names[isa] : "unknown";
}

const char *nb_simd_set(void) {
    return nbt_isa_name(nbt_isa_current());
}

const char *nbt_isa_error(void) {
    nbt_kernels();
    return atomic_load(&refused) ? refusal : NULL;
}
