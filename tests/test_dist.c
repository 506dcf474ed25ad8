/* nabla/dist.h in a world of one (the plain suite) and of two ranks (suite "mpi", under
 * mpirun -np 2). Expected values are worked out by hand from small exact numbers. */
#include "harness.h"

static int rank_, size_;

/* Fills p's gradient with base * (j + 1) for element j (exact in f32 for small j). */
static void set_grad(nb_tensor *p, float base) {
    float *g = nb_data(nb_grad(p));
    for (int64_t j = 0; j < nb_numel(p); j++) g[j] = base * (float)(j + 1);
}

static void test_world(void) {
    CU_ASSERT_TRUE(rank_ >= 0 && rank_ < size_);
    double v[2] = {rank_ + 1.0, 0.5};
    CU_ASSERT_TRUE(nb_dist_sum_doubles(2, v));
    /* 1 + 2 + ... + size, and 0.5 * size */
    CU_ASSERT_EQUAL(v[0], size_ * (size_ + 1) / 2.0);
    CU_ASSERT_EQUAL(v[1], 0.5 * size_);
    CU_ASSERT_TRUE(nb_dist_all_ok(true));
    CU_ASSERT_FALSE(nb_dist_all_ok(rank_ != size_ - 1)); /* the last rank says no */
    CU_ASSERT_FALSE(nb_dist_set_timeout(0));
    NBT_ASSERT_ERROR("timeout");
    CU_ASSERT_FALSE(nb_dist_sum_doubles(3, NULL));
}

/* Averages over micro-batches and ranks: rank r adds micro-batches whose gradients are
 * (r + 1) * 0.25 * (j + 1) and (r + 1) * 0.5 * (j + 1); the average over 2 micro-batches and
 * size ranks is 0.375 * (j + 1) * (1 + ... + size) / size. Tiny buckets make several. */
static void test_reducer_average(void) {
    nb_module *model = nb_model_new(NB_F32, 7);
    nb_linear *fc = nb_linear_new(model, "fc", 4, 3, true);
    nb_tensor *params[2] = {fc->weight, fc->bias};
    nb_grad_reducer *r = nb_grad_reducer_new(2, params, 8);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(nb_grad_reducer_bucket_count(r),
                    2); /* bias (12 bytes >= 8) alone, then weight */
    CU_ASSERT_EQUAL(nb_grad_reducer_bytes(r), 15 * 4);
    CU_ASSERT_FALSE(nb_grad_reducer_finish(r));
    NBT_ASSERT_ERROR("before any");
    for (int micro = 0; micro < 2; micro++) {
        float base = (float)(rank_ + 1) * (micro ? 0.5f : 0.25f);
        set_grad(fc->weight, base);
        set_grad(fc->bias, base);
        CU_ASSERT_TRUE(nb_grad_reducer_add(r));
        CU_ASSERT_EQUAL(((float *)nb_data(nb_grad(fc->bias)))[2], 0.0f); /* zeroed for the next */
    }
    CU_ASSERT_TRUE_FATAL(nb_grad_reducer_finish(r));
    double ranks_sum = size_ * (size_ + 1) / 2.0;
    const float *gw = nb_data(nb_grad(fc->weight)), *gb = nb_data(nb_grad(fc->bias));
    for (int j = 0; j < 12; j++)
        CU_ASSERT_EQUAL(gw[j], (float)(0.375 * (j + 1) * ranks_sum / size_));
    for (int j = 0; j < 3; j++)
        CU_ASSERT_EQUAL(gb[j], (float)(0.375 * (j + 1) * ranks_sum / size_));
    /* The running sum was reset: one more micro-batch alone comes back as it went in. */
    set_grad(fc->bias, 2.0f);
    set_grad(fc->weight, 2.0f);
    CU_ASSERT_TRUE(nb_grad_reducer_add(r));
    CU_ASSERT_TRUE(nb_grad_reducer_finish(r));
    CU_ASSERT_EQUAL(gb[1], 4.0f);
    nb_grad_reducer_free(r);
    nb_module_free(model);
}

/* In float32 (spacing 8 at 1e8), (1e8 + 4) + 4 = 1e8 (ties to even) but 1e8 + (4 + 4) = 1e8 + 8.
 * Ranks add in rank order from zero, exactly as one process adding micro-batches does. */
static void test_reducer_order(void) {
    nb_module *model = nb_model_new(NB_F32, 7);
    nb_tensor *p = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(1)), true);
    nb_grad_reducer *r = nb_grad_reducer_new(1, &p, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    float *g = nb_data(nb_grad(p));
    float contributions[3] = {1e8f, 4.0f, 4.0f};
    /* one process: all three micro-batches; two ranks: rank 0 the first, rank 1 the other two
     * (so the cross-rank sum is 1e8 + (4 + 4)) */
    if (size_ == 1) {
        for (int i = 0; i < 3; i++) g[0] = contributions[i], nb_grad_reducer_add(r);
        CU_ASSERT_TRUE(nb_grad_reducer_finish(r));
        CU_ASSERT_EQUAL(g[0], 1e8f * (float)(1.0 / 3)); /* the sum is 1e8; times 1/3 in float */
    } else if (size_ == 2) {
        for (int i = rank_ == 0 ? 0 : 1; i < (rank_ == 0 ? 1 : 3); i++)
            g[0] = contributions[i], nb_grad_reducer_add(r);
        /* micro-batches differ per rank here on purpose: the scale counts ranks x rank 0's */
        nb_grad_reducer_finish(r);
        CU_ASSERT_EQUAL(g[0] * 2.0f * (rank_ == 0 ? 1.0f : 2.0f), 1e8f + 8.0f);
    }
    nb_grad_reducer_free(r);
    nb_module_free(model);
}

static void test_reducer_bad_input(void) {
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(2));
    CU_ASSERT_PTR_NULL(nb_grad_reducer_new(1, &x, 0));
    NBT_ASSERT_ERROR("parameter 0 (shape [2]) does not require grad");
    nb_tensor *a = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2)), true);
    nb_tensor *b = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(2)), true);
    CU_ASSERT_PTR_NULL(nb_grad_reducer_new(2, (nb_tensor *[]){a, b}, 0));
    NBT_ASSERT_ERROR("parameter 1 (shape [2]) is float64 but parameter 0 (shape [2]) is float32");
    CU_ASSERT_PTR_NULL(nb_grad_reducer_new(0, NULL, 0));
    CU_ASSERT_FALSE(nb_grad_reducer_add(NULL));
    /* What is wrong, not "needs at least one parameter, got 1". */
    CU_ASSERT_PTR_NULL(nb_grad_reducer_new(1, NULL, 0));
    NBT_ASSERT_ERROR("nb_grad_reducer_new: params is NULL (n = 1)");
    CU_ASSERT_PTR_NULL(nb_grad_reducer_new(0, &a, 0));
    NBT_ASSERT_ERROR("nb_grad_reducer_new: got an empty parameter list (n = 0)");
}

/* A parameter listed twice is refused, as the optimizers refuse it: its gradient would be
 * added into the first slot, zeroed, added (as zeros) into the second, and finish would write
 * the first slot's average and then the second's zeros over it. */
static void test_reducer_refuses_duplicates(void) {
    nb_tensor *a = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(2)), true);
    nb_tensor *b = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(3)), true);
    nb_grad_reducer *r = nb_grad_reducer_new(3, (nb_tensor *[]){a, b, a}, 0);
    CU_ASSERT_PTR_NULL(r);
    NBT_ASSERT_ERROR(
        "nb_grad_reducer_new: parameter 2 (shape [2]) is listed twice, as parameters 0 and 2");
    nb_grad_reducer_free(r);
}

/* Bad arguments to the small collectives say what is wrong: a NULL array, a negative count
 * (every rank passes the same, so every rank fails before any exchange). */
static void test_collective_bad_input(void) {
    CU_ASSERT_FALSE(nb_dist_sum_doubles(2, NULL));
    NBT_ASSERT_ERROR("nb_dist_sum_doubles: v is NULL (n = 2)");
    double v[1] = {1};
    CU_ASSERT_FALSE(nb_dist_sum_doubles(-1, v));
    NBT_ASSERT_ERROR("nb_dist_sum_doubles: n is -1, expected >= 0");
    CU_ASSERT_FALSE(nb_dist_broadcast(1, NULL));
    NBT_ASSERT_ERROR("nb_dist_broadcast: tensors is NULL (n = 1)");
    nb_tensor *t = nb_zeros(NB_F32, NB_SHAPE(2));
    CU_ASSERT_FALSE(nb_dist_broadcast(-1, &t));
    NBT_ASSERT_ERROR("nb_dist_broadcast: n is -1, expected >= 0");
    CU_ASSERT_FALSE(nb_dist_broadcast(2, (nb_tensor *[]){t, NULL}));
    NBT_ASSERT_ERROR("nb_dist_broadcast: tensor 1 is NULL");
}

/* Every rank draws its model from its own seed; after the broadcast all hold rank 0's. */
static void test_broadcast_module(void) {
    nb_module *model = nb_model_new(NB_F32, 100 + (uint64_t)rank_);
    nb_linear *fc = nb_linear_new(model, "fc", 5, 4, true);
    float scale[2] = {(float)rank_ + 1, 2};
    nb_module_add_buffer(model, "scale", nb_from_array(NB_F32, NB_SHAPE(2), scale));
    nb_module *ref = nb_model_new(NB_F32, 100); /* what rank 0 drew */
    nb_linear *fc0 = nb_linear_new(ref, "fc", 5, 4, true);
    CU_ASSERT_TRUE_FATAL(nb_dist_broadcast_module(model));
    NBT_ASSERT_CLOSE(fc->weight, fc0->weight, 0, 0);
    NBT_ASSERT_CLOSE(fc->bias, fc0->bias, 0, 0);
    NBT_ASSERT_VALUES(nb_module_buffer(model, "scale"), 0, 1, 2); /* rank 0's buffer */
    uint64_t hash = 0;
    CU_ASSERT_TRUE(nb_dist_state_agrees(model, &hash));
    CU_ASSERT_NOT_EQUAL(hash, 0);
    if (size_ > 1) { /* one rank's weight nudged: every rank hears of it */
        if (rank_ == 1) ((float *)nb_data(fc->weight))[3] += 1.0f;
        CU_ASSERT_FALSE(nb_dist_state_agrees(model, &hash));
        NBT_ASSERT_ERROR("parameters differ");
    }
    nb_module_free(ref);
    nb_module_free(model);
}

/* The last rank builds a wider layer: every rank fails, naming the parameter and both shapes. */
static void test_check_module_mismatch(void) {
    nb_module *model = nb_model_new(NB_F32, 1);
    nb_linear_new(model, "a", 2, 2, false);
    nb_linear_new(model, "b", 3, rank_ == size_ - 1 && size_ > 1 ? 5 : 4, false);
    bool ok = nb_dist_check_module(model);
    if (size_ == 1) {
        CU_ASSERT_TRUE(ok);
    } else {
        CU_ASSERT_FALSE(ok);
        NBT_ASSERT_ERROR("b.weight");
        NBT_ASSERT_ERROR("float32 [4, 3]");
        NBT_ASSERT_ERROR("[5, 3]");
    }
    nb_tensor *t = nb_zeros(NB_F32, NB_SHAPE(rank_ == size_ - 1 ? 3 : 2));
    ok = nb_dist_broadcast(1, &t);
    CU_ASSERT_EQUAL(ok, size_ == 1);
    nb_module_free(model);
}

/* After nb_dist_finalize the process is still its rank of the job mpirun started: rank and
 * size stay (a program that finalizes and then prints or saves "on rank 0 only" must not do it
 * on every rank), and a collective among several ranks fails, naming nb_dist_finalize, rather
 * than acting as a world of one. Outside CUnit: the runner has finished. */
static bool after_finalize(void) {
    bool ok = nb_dist_rank() == rank_ && nb_dist_world_size() == size_;
    if (!ok)
        fprintf(stderr, "rank %d of %d: after nb_dist_finalize, rank %d of %d\n", rank_, size_,
                nb_dist_rank(), nb_dist_world_size());
    double v = 1;
    nb_clear_error();
    bool summed = nb_dist_sum_doubles(1, &v);
    if (size_ == 1 ? !summed || v != 1
                   : summed || !strstr(nb_last_error(), "after nb_dist_finalize")) {
        fprintf(stderr, "rank %d of %d: a sum after nb_dist_finalize gave %s (%s)\n", rank_, size_,
                summed ? "true" : "false", nb_last_error());
        ok = false;
    }
    return ok;
}

int main(int argc, char **argv) {
    if (!nb_dist_init(&argc, &argv)) {
        fprintf(stderr, "test_dist: %s\n", nb_last_error());
        return 1;
    }
    rank_ = nb_dist_rank();
    size_ = nb_dist_world_size();
    nbtest_case cases[] = {
        {"world and small collectives", test_world},
        {"reducer averages micro-batches and ranks", test_reducer_average},
        {"reducer adds in rank order from zero", test_reducer_order},
        {"reducer bad input", test_reducer_bad_input},
        {"reducer refuses a parameter listed twice", test_reducer_refuses_duplicates},
        {"collectives' bad input", test_collective_bad_input},
        {"broadcast module from rank 0", test_broadcast_module},
        {"model mismatch names the parameter", test_check_module_mismatch},
    };
    int rc = nbtest_run("dist", cases, sizeof cases / sizeof cases[0]);
    nb_dist_finalize();
    return after_finalize() ? rc : 1;
}
