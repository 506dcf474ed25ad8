/* A refused NABLA_ISA, end to end: meson runs this program with NABLA_ISA=not-a-set (see
 * tests/meson.build). Nothing crashes: the kernels run the generic set, and every call that
 * makes a tensor fails with an error naming the op and what was wrong with NABLA_ISA. */
#include "harness.h"
#include "tensor/isa.h"

#include <stdlib.h>

static void test_refused(void) {
    const char *env = getenv("NABLA_ISA");
    CU_ASSERT_TRUE_FATAL(env && strcmp(env, "not-a-set") == 0);
    CU_ASSERT_PTR_NULL(nb_zeros(NB_F32, NB_SHAPE(2, 3)));
    NBT_ASSERT_ERROR("zeros: NABLA_ISA=\"not-a-set\" is not an instruction set nabla has "
                     "kernels for (avx512, avx2 or generic)");
    CU_ASSERT_PTR_NULL(nb_from_array(NB_F64, NB_SHAPE(1), (double[]){1}));
    NBT_ASSERT_ERROR("from_array: NABLA_ISA=");
    CU_ASSERT_PTR_NOT_NULL(nbt_isa_error());
    CU_ASSERT_EQUAL(nbt_isa_current(), NBT_ISA_GENERIC);
    float x[3] = {0, 1, -1}; /* the kernels themselves still run (generic) */
    nbt_kernels()->vexp_f32(x, x, 3);
    CU_ASSERT_EQUAL(x[0], 1.0f);
    /* Forcing a set the CPU runs lifts the refusal. */
    CU_ASSERT_TRUE(nbt_isa_force(NBT_ISA_GENERIC));
    CU_ASSERT_PTR_NULL(nbt_isa_error());
    CU_ASSERT_PTR_NOT_NULL(nb_zeros(NB_F32, NB_SHAPE(2, 3)));
}

int main(void) {
    const nbtest_case cases[] = {
        {"NABLA_ISA=not-a-set: every tensor allocation fails, saying why", test_refused},
    };
    return nbtest_run("refused instruction set", cases, sizeof cases / sizeof cases[0]);
}
