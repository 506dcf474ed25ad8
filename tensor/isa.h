/* The one choice of instruction set behind every raw kernel (tensor/kernels/kernels.h):
 * vector math, GEMM, small attention heads, layer norm rows, column sums.
 *
 * Made once per process, at the first kernel call: the set named by the environment variable
 * NABLA_ISA ("avx512", "avx2" or "generic"), else the widest this CPU runs (as the OS, or
 * valgrind, reports it). A NABLA_ISA this CPU cannot run, or an unknown name, is an error:
 * the kernels then run the generic set (every CPU runs it), every call that makes a tensor
 * fails with nb_last_error() saying why (nbt_isa_error), and the first kernel call says it once
 * on stderr. */
#ifndef NABLA_ISA_H
#define NABLA_ISA_H

#include "kernels/kernels.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum { NBT_ISA_GENERIC = 0, NBT_ISA_AVX2 = 1, NBT_ISA_AVX512 = 2, NBT_ISA_COUNT } nbt_isa;

/* The kernels of the set in use. Static; safe from any thread. */
const nbt_kernel_table *nbt_kernels(void);
/* The set in use. */
nbt_isa nbt_isa_current(void);
/* True if this CPU (as the OS or valgrind reports it) runs isa's kernels. */
bool nbt_isa_supported(nbt_isa isa);
/* Uses isa's kernels from now on (tests and benchmarks); false, with nothing changed, if the
 * CPU cannot run them. Forcing a set clears a NABLA_ISA error. */
bool nbt_isa_force(nbt_isa isa);
/* "avx512", "avx2" or "generic" (the NABLA_ISA spellings); static. */
const char *nbt_isa_name(nbt_isa isa);
/* Why NABLA_ISA was refused, or NULL when it was not set or names a set this CPU runs.
 * Static. */
const char *nbt_isa_error(void);
/* The set that NABLA_ISA value `name` asks for on a CPU running the sets in `supported`
 * (bit i for nbt_isa i): true with *isa set, or false with the reason in why[n] (the logic of
 * the process-wide choice, callable on any pretended CPU). */
bool nbt_isa_parse(const char *name, unsigned supported, nbt_isa *isa, char *why, size_t n);

#endif
