/* Prints the instruction sets this CPU runs, widest first, one per line: the NABLA_ISA values
 * scripts/test runs the unit suites under. */
#include "tensor/isa.h"

#include <stdio.h>

int main(void) {
    for (int isa = NBT_ISA_COUNT - 1; isa >= 0; isa--)
        if (nbt_isa_supported((nbt_isa)isa)) printf("%s\n", nbt_isa_name((nbt_isa)isa));
    return 0;
}
