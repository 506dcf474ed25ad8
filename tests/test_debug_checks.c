/* Built only with meson -Ddebug_checks=true (scripts/test's sanitizer pass): a tensor used
 * after its scope ended is reported by the call that used it, instead of silently reading
 * whatever tensor reuses its memory, at every entry point (every build has this check;
 * tests/test_scope.c tests it there), and scopes made by nb_scope_new are never reused. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The call failed with "op: the tensor ... was released". */
#define EXPECT_RELEASED(op)                                                                        \
    do {                                                                                           \
        bool named_ = strncmp(nb_last_error(), op ": ", strlen(op ": ")) == 0;                     \
        bool says_ = strstr(nb_last_error(), "was released") != NULL;                              \
        CU_ASSERT_TRUE(named_ &&says_);                                                            \
        if (!named_ || !says_) fprintf(stderr, "\n  %s: got \"%s\"\n", op, nb_last_error());       \
        nb_clear_error();                                                                          \
    } while (0)

static nb_tensor *released_tensor(void) {
    nb_scope_begin();
    nb_tensor *t = nb_requires_grad_(nb_ones(NB_F32, NB_SHAPE(2, 3)), true);
    nb_scope_end();
    return t;
}

static void test_use_after_scope_end_is_reported(void) {
    nb_tensor *t = released_tensor();
    /* New tensors made meanwhile never get the released struct back (quarantine). */
    nb_tensor *other = nb_full(NB_F32, NB_SHAPE(2, 3), 5);
    CU_ASSERT_PTR_NOT_EQUAL(other, t);
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_add(t, other));
    EXPECT_RELEASED("add");
    CU_ASSERT_PTR_NULL(nb_sum(t));
    EXPECT_RELEASED("sum");
    CU_ASSERT_PTR_NULL(nb_matmul(other, nb_transpose(t, 0, 1)));
    EXPECT_RELEASED("transpose");
    CU_ASSERT_PTR_NULL(nb_view(t, NB_SHAPE(6)));
    EXPECT_RELEASED("view");
    /* greedy sampling reads float32 logits [V] in place, so it checks them itself */
    nb_scope_begin();
    nb_tensor *logits = nb_full(NB_F32, NB_SHAPE(4), 1);
    nb_scope_end();
    nb_generate_opts greedy = nb_generate_defaults(1);
    nb_rng rng;
    nb_rng_seed(&rng, 0);
    CU_ASSERT_EQUAL(nb_sample_logits(&rng, logits, &greedy), -1);
    EXPECT_RELEASED("sample_logits");
    CU_ASSERT_TRUE(isnan(nb_get(t, NB_IDX(0, 0))));
    EXPECT_RELEASED("get");
    CU_ASSERT_FALSE(nb_set(t, NB_IDX(0, 0), 1.0));
    EXPECT_RELEASED("set");
    CU_ASSERT_TRUE(isnan(nb_item(t)));
    EXPECT_RELEASED("item");
    CU_ASSERT_PTR_NULL(nb_data(t));
    EXPECT_RELEASED("data");
    CU_ASSERT_FALSE(nb_fill_(t, 2.0));
    EXPECT_RELEASED("fill_");
    CU_ASSERT_FALSE(nb_copy_(other, t));
    EXPECT_RELEASED("copy_");
    double out[6];
    CU_ASSERT_FALSE(nb_to_doubles(t, out));
    EXPECT_RELEASED("to_doubles");
    CU_ASSERT_PTR_NULL(nb_clone(t));
    EXPECT_RELEASED("clone");
    CU_ASSERT_PTR_NULL(nb_keep(t));
    EXPECT_RELEASED("nb_keep");
    CU_ASSERT_PTR_NULL(nb_grad(t));
    EXPECT_RELEASED("grad");
    CU_ASSERT_PTR_NULL(nb_requires_grad_(t, true));
    EXPECT_RELEASED("requires_grad_");
    CU_ASSERT_FALSE(nb_backward(t, NULL));
    EXPECT_RELEASED("backward");
    char *text = nb_to_string(t);
    CU_ASSERT_STRING_EQUAL(text, "tensor(released)\n");
    EXPECT_RELEASED("nb_fprint");
    free(text);
    char path[] = "/tmp/nabla_debug_XXXXXX";
    close(mkstemp(path));
    CU_ASSERT_FALSE(nb_safetensors_save(path, 1, (nb_named_tensor[]){{"t", t}}));
    EXPECT_RELEASED("nb_safetensors_save");
    CU_ASSERT_FALSE(nb_safetensors_load(path, 1, (nb_named_tensor[]){{"t", t}}));
    EXPECT_RELEASED("nb_safetensors_load");
    unlink(path);
    /* The live tensor is untouched by all of this. */
    NBT_ASSERT_VALUES(other, 0, 5, 5, 5, 5, 5, 5);
}

/* A tensor of a destroyed long-lived scope, and a view that outlived its base's scope. */
static void test_destroyed_scope_and_views(void) {
    nb_scope *params = nb_scope_new();
    nb_scope_push(params);
    nb_tensor *w = nb_zeros(NB_F64, NB_SHAPE(4));
    nb_scope_pop();
    nb_scope_begin();
    nb_tensor *v = nb_narrow(w, 0, 1, 2);
    nb_scope_end();
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_mul(v, v));
    EXPECT_RELEASED("mul");
    CU_ASSERT_PTR_NOT_NULL(nb_mul(w, w)); /* its base is alive */
    nb_scope_free(params);
    CU_ASSERT_PTR_NULL(nb_exp(w));
    EXPECT_RELEASED("exp");
    /* Created scopes are never reused in this build, so destroying twice is always caught,
     * however many scopes were made in between. */
    for (int k = 0; k < 3; k++) nb_scope_free(nb_scope_new());
    nb_scope_free(params);
    NBT_ASSERT_ERROR("nb_scope_free: the scope was already destroyed");
}

int main(void) {
    const nbtest_case cases[] = {
        {"use after scope end is reported", test_use_after_scope_end_is_reported},
        {"destroyed scope and views", test_destroyed_scope_and_views},
    };
    return nbtest_run("debug checks", cases, sizeof cases / sizeof cases[0]);
}
