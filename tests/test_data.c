/* Data (nabla/data.h) and nb_randperm: permutations, datasets, batches, the split, resuming a
 * loader exactly, and numeric CSV files.
 *
 * The pinned permutations come from tests/randperm_model.py, an independent Python model of
 * the generator and of the shuffle the header describes. Everything else is checked against
 * properties (each example once per epoch, disjoint parts) or values written by hand. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

#define CSV_DIR NBTEST_DATA_DIR

/* ---- nb_randperm -------------------------------------------------------------------------- */

static bool is_permutation(const nb_tensor *p, int64_t n) {
    if (!p || p->dtype != NB_I64 || p->ndim != 1 || p->shape[0] != n) return false;
    const int64_t *v = nb_data(p);
    bool *seen = calloc((size_t)n + 1, 1), ok = true;
    for (int64_t i = 0; i < n && ok; i++) {
        ok = v[i] >= 0 && v[i] < n && !seen[v[i]];
        if (ok) seen[v[i]] = true;
    }
    free(seen);
    return ok;
}

static void assert_i64(const nb_tensor *t, const int64_t *want, int64_t n) {
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(nb_numel(t), n);
    const int64_t *v = nb_data(t);
    for (int64_t i = 0; i < n; i++) CU_ASSERT_EQUAL(v[i], want[i]);
}

static void test_randperm_pinned(void) {
    nb_rng r;
    nb_rng_seed(&r, 42);
    assert_i64(nb_randperm(&r, 10), (const int64_t[]){7, 3, 8, 9, 5, 6, 4, 1, 0, 2}, 10);
    assert_i64(nb_randperm(&r, 10), (const int64_t[]){8, 7, 0, 6, 3, 4, 2, 9, 1, 5}, 10);
    /* n = 1 draws nothing: the next permutation is the one of a fresh generator. */
    nb_rng_seed(&r, 7);
    assert_i64(nb_randperm(&r, 1), (const int64_t[]){0}, 1);
    assert_i64(nb_randperm(&r, 5), (const int64_t[]){1, 3, 0, 2, 4}, 5);
}

static void test_randperm_properties(void) {
    nb_rng r, again;
    nb_rng_seed(&r, 3);
    for (int64_t n = 0; n <= 1000; n += n < 4 ? 1 : 333)
        CU_ASSERT_TRUE(is_permutation(nb_randperm(&r, n), n));
    /* The same state gives the same permutation; the next one differs. */
    nb_rng_seed(&r, 11);
    nb_rng_seed(&again, 11);
    nb_tensor *a = nb_randperm(&r, 50), *b = nb_randperm(&again, 50), *c = nb_randperm(&r, 50);
    CU_ASSERT_EQUAL(memcmp(nb_data(a), nb_data(b), 50 * sizeof(int64_t)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(nb_data(a), nb_data(c), 50 * sizeof(int64_t)), 0);
    EXPECT_NULL(nb_randperm(NULL, 3), "randperm", "NULL generator");
    EXPECT_NULL(nb_randperm(&r, -1), "randperm", "-1");
}

/* Each of the 6 permutations of 3 comes up about 1/6 of the time: 6000 draws, expected 1000
 * each, standard deviation 28.9; the bounds are 5 of those. */
static void test_randperm_uniform(void) {
    nb_rng r;
    nb_rng_seed(&r, 5);
    int count[3][3][3] = {{{0}}};
    for (int k = 0; k < 6000; k++) {
        nb_scope_begin();
        const int64_t *p = nb_data(nb_randperm(&r, 3));
        count[p[0]][p[1]][p[2]]++;
        nb_scope_end();
    }
    int perms = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++) {
                if (a == b || b == c || a == c) continue;
                perms++;
                CU_ASSERT(count[a][b][c] > 855 && count[a][b][c] < 1145);
            }
    CU_ASSERT_EQUAL(perms, 6);
}

/* ---- datasets ----------------------------------------------------------------------------- */

/* N examples: inputs [N, 2] float64 rows (i, 100 + i), targets [N] int64 10 * i. */
static nb_dataset *numbered(int64_t n) {
    nb_scope_begin();
    nb_tensor *x = nb_empty(NB_F64, NB_SHAPE(n, 2)), *y = nb_empty(NB_I64, NB_SHAPE(n));
    double *xv = nb_data(x);
    int64_t *yv = nb_data(y);
    for (int64_t i = 0; i < n; i++)
        xv[2 * i] = (double)i, xv[2 * i + 1] = 100.0 + i, yv[i] = 10 * i;
    nb_dataset *ds = nb_dataset_new(x, y);
    nb_scope_end(); /* the dataset keeps the storage */
    return ds;
}

/* The example ids of a batch of `numbered` rows, checking inputs and targets agree; -1 ids on
 * a mismatch. Returns the batch size. */
static int64_t batch_ids(const nb_batch *b, int64_t *ids) {
    int64_t n = b->inputs->shape[0];
    CU_ASSERT_EQUAL(b->targets->shape[0], n);
    for (int64_t i = 0; i < n; i++) {
        double id = nb_get(b->inputs, NB_IDX(i, 0));
        bool agree =
            nb_get(b->inputs, NB_IDX(i, 1)) == 100 + id && nb_get(b->targets, NB_IDX(i)) == 10 * id;
        CU_ASSERT(agree);
        ids[i] = agree ? (int64_t)id : -1;
    }
    return n;
}

static void test_dataset_new(void) {
    nb_dataset *ds = numbered(5);
    CU_ASSERT_EQUAL(nb_dataset_len(ds), 5);
    NBT_ASSERT_SHAPE(nb_dataset_inputs(ds), 5, 2);
    NBT_ASSERT_SHAPE(nb_dataset_targets(ds), 5);
    CU_ASSERT_EQUAL(nb_get(nb_dataset_inputs(ds), NB_IDX(3, 1)), 103);
    nb_dataset_free(ds);
    /* Inputs alone; shared storage: a write into the caller's tensor shows. */
    nb_tensor *x = nb_zeros(NB_F32, NB_SHAPE(3));
    ds = nb_dataset_new(x, NULL);
    CU_ASSERT_PTR_NULL(nb_dataset_targets(ds));
    nb_set(x, NB_IDX(1), 4.5);
    CU_ASSERT_EQUAL(nb_get(nb_dataset_inputs(ds), NB_IDX(1)), 4.5);
    nb_dataset_free(ds);
    nb_dataset_free(NULL);
    EXPECT_NULL(nb_dataset_new(NULL, NULL), "nb_dataset_new", "NULL inputs");
    EXPECT_NULL(nb_dataset_new(nb_scalar(NB_F32, 1), NULL), "nb_dataset_new", "[]");
    EXPECT_NULL(nb_dataset_new(nb_zeros(NB_F32, NB_SHAPE(0, 2)), NULL), "nb_dataset_new", "[0, 2]");
    EXPECT_NULL(nb_dataset_new(nb_zeros(NB_F32, NB_SHAPE(4, 2)), nb_zeros(NB_I64, NB_SHAPE(3))),
                "nb_dataset_new", "targets [3]", "4 examples", "inputs [4, 2]");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_dataset_len(NULL), -1);
    NBT_ASSERT_ERROR("NULL dataset");
}

/* ---- loaders ------------------------------------------------------------------------------ */

static void test_loader_in_order_keep(void) {
    nb_dataset *ds = numbered(10);
    nb_loader *l = nb_loader_new(ds, &(nb_loader_opts){.batch_size = 4});
    nb_dataset_free(ds); /* the loader shares the storage */
    CU_ASSERT_EQUAL(nb_loader_batch_count(l), 3);
    for (int epoch = 0; epoch < 2; epoch++) {
        nb_batch b;
        int64_t ids[4], next = 0;
        const int64_t sizes[] = {4, 4, 2};
        for (int k = 0; k < 3; k++) {
            CU_ASSERT_EQUAL_FATAL(nb_loader_next(l, &b), 1);
            CU_ASSERT_EQUAL(batch_ids(&b, ids), sizes[k]);
            for (int64_t i = 0; i < sizes[k]; i++) CU_ASSERT_EQUAL(ids[i], next++);
            CU_ASSERT_FALSE(b.inputs->requires_grad);
        }
        CU_ASSERT_EQUAL(nb_loader_next(l, &b), 0);
        CU_ASSERT_PTR_NULL(b.inputs);
        CU_ASSERT_PTR_NULL(b.targets);
        CU_ASSERT_EQUAL(nb_loader_get_state(l).epoch, epoch + 1);
    }
    nb_loader_free(l);
}

/* In order, batches are views of the dataset's storage. */
static void test_loader_in_order_views(void) {
    nb_tensor *x = nb_arange(NB_F32, 0, 6, 1);
    nb_dataset *ds = nb_dataset_new(x, NULL);
    nb_loader *l = nb_loader_new(ds, &(nb_loader_opts){.batch_size = 4});
    nb_batch b;
    CU_ASSERT_EQUAL_FATAL(nb_loader_next(l, &b), 1);
    CU_ASSERT_EQUAL_FATAL(nb_loader_next(l, &b), 1);
    CU_ASSERT_PTR_NULL(b.targets);
    CU_ASSERT_PTR_EQUAL(b.inputs->storage, x->storage);
    NBT_ASSERT_VALUES(b.inputs, 0, 4, 5);
    nb_loader_free(l);
    nb_dataset_free(ds);
}

static void test_loader_drop_last(void) {
    nb_dataset *ds = numbered(10);
    nb_loader *l =
        nb_loader_new(ds, &(nb_loader_opts){.batch_size = 4, .last_batch = NB_LAST_BATCH_DROP});
    CU_ASSERT_EQUAL(nb_loader_batch_count(l), 2);
    nb_batch b;
    int64_t ids[4];
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL_FATAL(nb_loader_next(l, &b), 1);
        CU_ASSERT_EQUAL(batch_ids(&b, ids), 4);
        CU_ASSERT_EQUAL(ids[0], 4 * k);
    }
    CU_ASSERT_EQUAL(nb_loader_next(l, &b), 0);
    nb_loader_free(l);
    /* Shuffled: 8 distinct examples an epoch, and which 2 wait changes between epochs. */
    l = nb_loader_new(
        ds, &(nb_loader_opts){
                .batch_size = 4, .shuffle = true, .seed = 9, .last_batch = NB_LAST_BATCH_DROP});
    bool left_out_differs = false;
    bool first_left[10] = {false};
    for (int epoch = 0; epoch < 5; epoch++) {
        bool seen[10] = {false};
        int64_t count = 0;
        while (nb_loader_next(l, &b) > 0) {
            int64_t n = batch_ids(&b, ids);
            CU_ASSERT_EQUAL(n, 4);
            for (int64_t i = 0; i < n; i++) {
                CU_ASSERT_FALSE(seen[ids[i]]);
                seen[ids[i]] = true;
                count++;
            }
        }
        CU_ASSERT_EQUAL(count, 8);
        for (int i = 0; i < 10; i++) {
            if (epoch == 0)
                first_left[i] = !seen[i];
            else if (first_left[i] != !seen[i])
                left_out_differs = true;
        }
    }
    CU_ASSERT_TRUE(left_out_differs);
    nb_loader_free(l);
    nb_dataset_free(ds);
}

/* Shuffled: every example once an epoch, in the order nb_randperm draws from a generator
 * seeded with the loader's seed, one draw per epoch; a new order each epoch. */
static void test_loader_shuffle_epochs(void) {
    nb_dataset *ds = numbered(10);
    nb_loader *l =
        nb_loader_new(ds, &(nb_loader_opts){.batch_size = 3, .shuffle = true, .seed = 1234});
    nb_rng g;
    nb_rng_seed(&g, 1234);
    int64_t previous[10] = {0};
    for (int epoch = 0; epoch < 3; epoch++) {
        const int64_t *want = nb_data(nb_randperm(&g, 10));
        int64_t order[10], at = 0, sizes[4], k = 0;
        nb_batch b;
        while (nb_loader_next(l, &b) > 0) {
            CU_ASSERT_FATAL(k < 4);
            sizes[k++] = batch_ids(&b, order + at);
            at += sizes[k - 1];
        }
        CU_ASSERT_EQUAL(k, 4);
        CU_ASSERT_EQUAL(sizes[3], 1);
        CU_ASSERT_EQUAL_FATAL(at, 10);
        for (int i = 0; i < 10; i++) CU_ASSERT_EQUAL(order[i], want[i]);
        if (epoch) CU_ASSERT_NOT_EQUAL(memcmp(order, previous, sizeof order), 0);
        memcpy(previous, order, sizeof order);
    }
    nb_loader_free(l);
    nb_dataset_free(ds);
}

/* The ids of the next `batches` batches of l (across epoch ends, which are recorded as -2). */
static int64_t run(nb_loader *l, int batches, int64_t *ids) {
    int64_t at = 0;
    for (int k = 0; k < batches; k++) {
        nb_scope_begin();
        nb_batch b;
        int got = nb_loader_next(l, &b);
        CU_ASSERT(got >= 0);
        if (got > 0)
            at += batch_ids(&b, ids + at);
        else
            ids[at++] = -2;
        nb_scope_end();
    }
    return at;
}

static void test_loader_same_seed_same_batches(void) {
    nb_dataset *ds = numbered(7);
    nb_loader_opts o = {.batch_size = 2, .shuffle = true, .seed = 77};
    nb_loader *a = nb_loader_new(ds, &o), *b = nb_loader_new(ds, &o);
    o.seed = 78;
    nb_loader *c = nb_loader_new(ds, &o);
    int64_t ia[64], ib[64], ic[64];
    int64_t na = run(a, 20, ia), nb = run(b, 20, ib), nc = run(c, 20, ic);
    CU_ASSERT_EQUAL_FATAL(na, nb);
    CU_ASSERT_EQUAL(memcmp(ia, ib, sizeof(int64_t) * (size_t)na), 0);
    CU_ASSERT_EQUAL_FATAL(na, nc);
    CU_ASSERT_NOT_EQUAL(memcmp(ia, ic, sizeof(int64_t) * (size_t)na), 0);
    nb_loader_free(a);
    nb_loader_free(b);
    nb_loader_free(c);
    nb_dataset_free(ds);
}

/* A loader restored to a saved position gives the batches the original gives from there:
 * at every position over three epochs (epoch starts and ends included), for both policies,
 * shuffled and not; once through a checkpoint file. */
static void test_loader_resume_exact(void) {
    nb_dataset *ds = numbered(10);
    for (int policy = 0; policy < 2; policy++)
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            nb_loader_opts o = {.batch_size = 4,
                                .shuffle = shuffle,
                                .seed = 5,
                                .last_batch = (nb_last_batch)policy};
            nb_loader *probe = nb_loader_new(ds, &o);
            int per_epoch = (int)nb_loader_batch_count(probe) + 1; /* the batches and the end */
            nb_loader_free(probe);
            for (int cut = 0; cut <= 3 * per_epoch; cut++) {
                nb_loader *a = nb_loader_new(ds, &o);
                int64_t before[64], want[64], got[64];
                run(a, cut, before);
                nb_loader_state st = nb_loader_get_state(a);
                int64_t nwant = run(a, 2 * per_epoch, want);
                /* Another seed: the state alone decides what comes next. */
                nb_loader *b = nb_loader_new(ds, &(nb_loader_opts){.batch_size = 4,
                                                                   .shuffle = shuffle,
                                                                   .seed = 6,
                                                                   .last_batch = o.last_batch});
                CU_ASSERT_TRUE_FATAL(nb_loader_set_state(b, &st));
                CU_ASSERT_EQUAL(nb_loader_get_state(b).epoch, st.epoch);
                CU_ASSERT_EQUAL(nb_loader_get_state(b).index, st.index);
                CU_ASSERT_EQUAL_FATAL(run(b, 2 * per_epoch, got), nwant);
                CU_ASSERT_EQUAL(memcmp(got, want, sizeof(int64_t) * (size_t)nwant), 0);
                nb_loader_free(a);
                nb_loader_free(b);
            }
        }
    /* Through a safetensors file, mid-epoch. */
    nb_loader_opts o = {.batch_size = 3, .shuffle = true, .seed = 8};
    nb_loader *a = nb_loader_new(ds, &o), *b = nb_loader_new(ds, &o);
    int64_t skip[64], want[64], got[64];
    run(a, 6, skip); /* epoch 0 and the first batch of epoch 1 */
    const char *path = nbtest_tmp_path("loader.safetensors");
    nb_tensor *saved = nb_loader_state_tensor(a);
    NBT_ASSERT_SHAPE(saved, 6);
    CU_ASSERT_EQUAL(nb_get(saved, NB_IDX(0)), 1);
    CU_ASSERT_EQUAL(nb_get(saved, NB_IDX(1)), 3); /* 4 batches and the end, then one of 3 */
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 1, &(nb_named_tensor){"data", saved}));
    nb_tensor *loaded = nb_zeros(NB_I64, NB_SHAPE(6));
    CU_ASSERT_TRUE_FATAL(nb_safetensors_load(path, 1, &(nb_named_tensor){"data", loaded}));
    CU_ASSERT_TRUE_FATAL(nb_loader_set_state_tensor(b, loaded));
    int64_t n = run(a, 9, want);
    CU_ASSERT_EQUAL_FATAL(run(b, 9, got), n);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof(int64_t) * (size_t)n), 0);
    nb_loader_free(a);
    nb_loader_free(b);
    nb_dataset_free(ds);
}

static void test_loader_errors(void) {
    nb_dataset *ds = numbered(10);
    EXPECT_NULL(nb_loader_new(NULL, &(nb_loader_opts){.batch_size = 1}), "nb_loader_new",
                "NULL dataset");
    EXPECT_NULL(nb_loader_new(ds, NULL), "nb_loader_new", "NULL options");
    EXPECT_NULL(nb_loader_new(ds, &(nb_loader_opts){0}), "nb_loader_new", "batch_size", "0");
    EXPECT_NULL(nb_loader_new(ds, &(nb_loader_opts){.batch_size = 2, .last_batch = 7}),
                "nb_loader_new", "last_batch", "7");
    EXPECT_NULL(
        nb_loader_new(ds, &(nb_loader_opts){.batch_size = 11, .last_batch = NB_LAST_BATCH_DROP}),
        "nb_loader_new", "no batch", "10 examples", "batches of 11");
    nb_loader *l = nb_loader_new(ds, &(nb_loader_opts){.batch_size = 4, .shuffle = true});
    nb_loader_state st = nb_loader_get_state(l);
    const struct {
        int64_t epoch, index;
        const char *says;
    } bad[] = {{-1, 0, "epoch -1"}, {0, 3, "index 3"}, {0, -4, "index -4"}, {0, 12, "index 12"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        nb_loader_state s = st;
        s.epoch = bad[k].epoch;
        s.index = bad[k].index;
        nb_clear_error();
        CU_ASSERT_FALSE(nb_loader_set_state(l, &s));
        NBT_ASSERT_ERROR(bad[k].says);
        NBT_ASSERT_ERROR("nb_loader_set_state");
    }
    nb_loader_state zero = {0};
    nb_clear_error();
    CU_ASSERT_FALSE(nb_loader_set_state(l, &zero));
    NBT_ASSERT_ERROR("all zeros");
    /* l was left as it was by each refusal. */
    nb_loader_state now = nb_loader_get_state(l);
    CU_ASSERT_EQUAL(memcmp(&now, &st, sizeof st), 0);
    /* The last partial batch's end (N) is a boundary when it is kept. */
    st.index = 10;
    CU_ASSERT_TRUE(nb_loader_set_state(l, &st));
    nb_batch b;
    CU_ASSERT_EQUAL(nb_loader_next(l, &b), 0);
    nb_clear_error();
    CU_ASSERT_FALSE(nb_loader_set_state_tensor(l, nb_zeros(NB_I64, NB_SHAPE(5))));
    NBT_ASSERT_ERROR("int64 [6]");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_loader_set_state_tensor(l, nb_zeros(NB_F64, NB_SHAPE(6))));
    NBT_ASSERT_ERROR("float64 [6]");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_loader_next(l, NULL), -1);
    NBT_ASSERT_ERROR("NULL batch");
    CU_ASSERT_EQUAL(nb_loader_batch_count(NULL), -1);
    nb_loader_free(l);
    nb_loader_free(NULL);
    nb_dataset_free(ds);
}

/* With a scope per batch, batches allocate nothing once the first epoch has warmed nabla's
 * caches up: shuffled (gathers) and in order (views). */
static void test_loader_no_allocations_after_warm_up(void) {
    nb_dataset *ds = numbered(50);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        nb_loader *l = nb_loader_new(ds, &(nb_loader_opts){.batch_size = 8, .shuffle = shuffle});
        int64_t ids[160]; /* three epochs of 50 and 3 ends */
        run(l, 8, ids);   /* one epoch: 7 batches and the end */
        uint64_t before = nb_alloc_count();
        int64_t n = run(l, 24, ids);
        CU_ASSERT_EQUAL(nb_alloc_count(), before);
        CU_ASSERT_EQUAL(n, 150 + 3);
        nb_loader_free(l);
    }
    nb_dataset_free(ds);
}

/* ---- the split ---------------------------------------------------------------------------- */

static void test_split(void) {
    nb_dataset *ds = numbered(10), *train, *val;
    nb_rng r;
    nb_rng_seed(&r, 21);
    CU_ASSERT_TRUE_FATAL(nb_dataset_split(ds, &r, 3, &train, &val));
    nb_dataset_free(ds); /* the parts have their own rows */
    CU_ASSERT_EQUAL(nb_dataset_len(train), 7);
    CU_ASSERT_EQUAL(nb_dataset_len(val), 3);
    /* Disjoint and together every example, each with its own target; train is the first 7 of
     * nb_randperm's permutation for the same generator state, val the last 3. */
    nb_rng g;
    nb_rng_seed(&g, 21);
    const int64_t *p = nb_data(nb_randperm(&g, 10));
    CU_ASSERT_EQUAL(memcmp(&r, &g, sizeof r), 0); /* the split advanced r as that draw did */
    bool seen[10] = {false};
    nb_dataset *parts[2] = {train, val};
    int64_t at = 0;
    for (int k = 0; k < 2; k++) {
        nb_loader *l = nb_loader_new(parts[k], &(nb_loader_opts){.batch_size = 10});
        nb_batch b;
        CU_ASSERT_EQUAL_FATAL(nb_loader_next(l, &b), 1);
        int64_t ids[10], n = batch_ids(&b, ids);
        for (int64_t i = 0; i < n; i++, at++) {
            CU_ASSERT_FALSE(seen[ids[i]]);
            seen[ids[i]] = true;
            CU_ASSERT_EQUAL(ids[i], p[at]);
        }
        nb_loader_free(l);
    }
    CU_ASSERT_EQUAL(at, 10);
    nb_dataset_free(train);
    nb_dataset_free(val);
    /* The same seed, the same split; inputs alone split too. */
    nb_dataset *x = nb_dataset_new(nb_arange(NB_F32, 0, 5, 1), NULL), *t1, *v1, *t2, *v2;
    nb_rng_seed(&r, 4);
    CU_ASSERT_TRUE_FATAL(nb_dataset_split(x, &r, 1, &t1, &v1));
    nb_rng_seed(&r, 4);
    CU_ASSERT_TRUE_FATAL(nb_dataset_split(x, &r, 1, &t2, &v2));
    CU_ASSERT_PTR_NULL(nb_dataset_targets(v1));
    CU_ASSERT_TRUE(nbtest_close(nb_dataset_inputs(t1), nb_dataset_inputs(t2), 0, 0));
    CU_ASSERT_EQUAL(nb_item(nb_dataset_inputs(v1)), nb_item(nb_dataset_inputs(v2)));
    nb_dataset_free(t1);
    nb_dataset_free(v1);
    nb_dataset_free(t2);
    nb_dataset_free(v2);
    /* Errors: both outputs NULL afterwards. */
    train = val = (nb_dataset *)1;
    nb_clear_error();
    CU_ASSERT_FALSE(nb_dataset_split(x, &r, 0, &train, &val));
    NBT_ASSERT_ERROR("n_val must be in [1, 4] for a dataset of 5 examples, got 0");
    CU_ASSERT_PTR_NULL(train);
    CU_ASSERT_PTR_NULL(val);
    nb_clear_error();
    CU_ASSERT_FALSE(nb_dataset_split(x, &r, 5, &train, &val));
    NBT_ASSERT_ERROR("got 5");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_dataset_split(x, NULL, 2, &train, &val));
    NBT_ASSERT_ERROR("NULL generator");
    nb_dataset_free(x);
}

/* ---- CSV ---------------------------------------------------------------------------------- */

/* tests/data/small.csv: a byte order mark, a header with a quoted comma, blank and blank-only
 * lines, a CRLF line, quoted numbers, blanks around fields, no final newline. */
static void test_csv_fixture(void) {
    const char *path = CSV_DIR "/small.csv";
    nb_tensor *x, *y;
    CU_ASSERT_TRUE_FATAL(nb_csv_read(
        path,
        &(nb_csv_opts){
            .header = true, .target_cols = (int[]){-1}, .n_target_cols = 1, .target_dtype = NB_I64},
        &x, &y));
    NBT_ASSERT_SHAPE(x, 4, 2);
    CU_ASSERT_EQUAL(x->dtype, NB_F32);
    NBT_ASSERT_VALUES(x, 0, 1.5, 2, 3, -4.25, 0.5, 1000, 0, 7);
    CU_ASSERT_TRUE(signbit(nb_get(x, NB_IDX(3, 0)))); /* "-0" */
    NBT_ASSERT_SHAPE(y, 4);
    CU_ASSERT_EQUAL(y->dtype, NB_I64);
    assert_i64(y, (const int64_t[]){0, 1, 2, 1}, 4);
    /* Chosen columns (negative from the end), float64, two targets: [rows, 2]. */
    CU_ASSERT_TRUE_FATAL(nb_csv_read(path,
                                     &(nb_csv_opts){.header = true,
                                                    .target_cols = (int[]){2, 0},
                                                    .n_target_cols = 2,
                                                    .input_cols = (int[]){-2, -2},
                                                    .n_input_cols = 2,
                                                    .input_dtype = NB_F64,
                                                    .target_dtype = NB_F64},
                                     &x, &y));
    NBT_ASSERT_SHAPE(x, 4, 2);
    CU_ASSERT_EQUAL(x->dtype, NB_F64);
    NBT_ASSERT_VALUES(x, 0, 2, 2, -4.25, -4.25, 1000, 1000, 7, 7);
    NBT_ASSERT_SHAPE(y, 4, 2);
    NBT_ASSERT_VALUES(y, 0, 0, 1.5, 1, 3, 2, 0.5, 1, 0);
    /* No targets: all three columns are inputs; targets may then be NULL. */
    CU_ASSERT_TRUE_FATAL(nb_csv_read(path, &(nb_csv_opts){.header = true}, &x, NULL));
    NBT_ASSERT_SHAPE(x, 4, 3);
    /* Without the header option the header is data, and not a number. */
    nb_clear_error();
    CU_ASSERT_FALSE(nb_csv_read(path, NULL, &x, &y));
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_PTR_NULL(y);
    NBT_ASSERT_ERROR("small.csv:1: column 1: \"width\" is not a number");
}

/* Writes text to a file of the test's own and returns its path. */
static const char *csv_file(const char *name, const char *text) {
    const char *path = nbtest_tmp_path(name);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* The error of reading text with opts contains every substring. */
static void expect_csv_error(const char *text, const nb_csv_opts *opts, const char *a,
                             const char *b) {
    const char *path = csv_file("bad.csv", text);
    nb_tensor *x = (nb_tensor *)1, *y = (nb_tensor *)1;
    nb_clear_error();
    CU_ASSERT_FALSE(nb_csv_read(path, opts, &x, &y));
    CU_ASSERT_PTR_NULL(x);
    CU_ASSERT_PTR_NULL(y);
    const char *subs[] = {"nb_csv_read: ", "bad.csv", a, b};
    for (int k = 0; k < 4; k++) {
        bool found = b || k < 3 ? strstr(nb_last_error(), subs[k]) != NULL : true;
        if (!found) fprintf(stderr, "error \"%s\" lacks \"%s\"\n", nb_last_error(), subs[k]);
        CU_ASSERT(found);
    }
}

static void test_csv_errors(void) {
    const nb_csv_opts hdr = {.header = true};
    const nb_csv_opts label = {
        .header = true, .target_cols = (int[]){-1}, .n_target_cols = 1, .target_dtype = NB_I64};
    expect_csv_error("a,b\n1,2\n\n3,x1\n", &hdr,
                     "bad.csv:4: column 2 (\"b\"): \"x1\" is not a number", NULL);
    expect_csv_error("1,2\n3,4 5\n", NULL, ":2: column 2: \"4 5\" is not a number", NULL);
    expect_csv_error("1,2\n3,\n", NULL, ":2: column 2: empty field", NULL);
    expect_csv_error("1,2\n3,\"  \"\n", NULL, ":2: column 2: empty field", NULL);
    expect_csv_error("1,2,3\n4,5\n", NULL, ":2: 2 fields, but the first record (line 1) has 3",
                     NULL);
    expect_csv_error("1,2\n4,5,6\n", NULL, ":2: 3 fields", NULL);
    expect_csv_error("1,2\n3,\"4\"x\n", NULL, ":2: malformed quotes", NULL);
    expect_csv_error("1,2\n3,\"4\n5,6\n", NULL, "ends inside a quoted field",
                     "starts after line 1");
    expect_csv_error("1,2\n3,1e999\n", NULL, ":2: column 2: 1e999 is beyond float64's range", NULL);
    expect_csv_error("1,2\n3,1e39\n", NULL, ":2: column 2: 1e+39 is beyond float32's range", NULL);
    expect_csv_error("x,y\n1,2\n3,2.5\n", &label, ":3: column 2 (\"y\"): 2.5 is not a whole number",
                     "int64");
    expect_csv_error("x,y\n1,nan\n", &label, ":2: column 2 (\"y\"): nan is not a whole number",
                     NULL);
    expect_csv_error("x,y\n", &hdr, "no data rows", NULL);
    expect_csv_error("", NULL, "no data rows", NULL);
    expect_csv_error("1,2\n", &(nb_csv_opts){.target_cols = (int[]){2}, .n_target_cols = 1},
                     "target column 2 is out of range: the file has 2 columns", NULL);
    expect_csv_error("1,2\n", &(nb_csv_opts){.input_cols = (int[]){-3}, .n_input_cols = 1},
                     "input column -3 is out of range", NULL);
    expect_csv_error("1\n", &(nb_csv_opts){.target_cols = (int[]){0}, .n_target_cols = 1},
                     "every column is a target", NULL);
    expect_csv_error("1\n", &(nb_csv_opts){.input_dtype = NB_I64}, "inputs must be float32", NULL);
    expect_csv_error("1\n", &(nb_csv_opts){.target_dtype = NB_BOOL}, "targets must be", NULL);
    expect_csv_error("1\n", &(nb_csv_opts){.delimiter = '"'}, "delimiter", NULL);
    nb_clear_error();
    nb_tensor *x;
    CU_ASSERT_FALSE(nb_csv_read(nbtest_tmp_path("missing.csv"), NULL, &x, NULL));
    NBT_ASSERT_ERROR("missing.csv: cannot open: No such file");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_csv_read(csv_file("t.csv", "1,2\n"), &label, &x, NULL));
    NBT_ASSERT_ERROR("NULL targets");
}

/* Other delimiters, quoted newlines, inf and nan, and a line number past a quoted newline. */
static void test_csv_syntax(void) {
    nb_tensor *x, *y;
    const char *path = csv_file("semi.csv", "\"a\nb\";c\n1;-inf\n\"2\";nan\n");
    CU_ASSERT_TRUE_FATAL(
        nb_csv_read(path, &(nb_csv_opts){.header = true, .delimiter = ';'}, &x, &y));
    NBT_ASSERT_SHAPE(x, 2, 2);
    CU_ASSERT_PTR_NULL(y);
    NBT_ASSERT_VALUES(x, 0, 1, -INFINITY, 2, NBT_NAN);
    expect_csv_error("\"a\nb\",c\n1,2\n3,z\n", &(nb_csv_opts){.header = true},
                     ":4: column 2 (\"c\"): \"z\"", NULL);
}

/* The header's example: a dataset from CSV, split, and two epochs in shuffled batches with a
 * scope per batch. */
static void test_header_example(void) {
    nb_dataset *all =
        nb_dataset_from_csv(CSV_DIR "/small.csv", &(nb_csv_opts){.header = true,
                                                                 .target_cols = (int[]){-1},
                                                                 .n_target_cols = 1,
                                                                 .target_dtype = NB_I64});
    CU_ASSERT_PTR_NOT_NULL_FATAL(all);
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    nb_dataset *train, *val;
    CU_ASSERT_TRUE_FATAL(nb_dataset_split(all, &rng, nb_dataset_len(all) / 4, &train, &val));
    nb_loader *loader =
        nb_loader_new(train, &(nb_loader_opts){.batch_size = 2, .shuffle = true, .seed = 2});
    int64_t live = nb_scope_tensor_count(), examples = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        nb_batch b;
        while (nb_scope_begin(), nb_loader_next(loader, &b) > 0) {
            CU_ASSERT_EQUAL(b.inputs->shape[1], 2);
            CU_ASSERT_EQUAL(b.targets->dtype, NB_I64);
            examples += b.inputs->shape[0];
            nb_scope_end();
        }
        nb_scope_end();
    }
    CU_ASSERT_EQUAL(examples, 6);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), live);
    nb_loader_free(loader);
    nb_dataset_free(train);
    nb_dataset_free(val);
    nb_dataset_free(all);
    EXPECT_NULL(nb_dataset_from_csv(nbtest_tmp_path("none.csv"), NULL), "cannot open");
}

int main(void) {
    const nbtest_case cases[] = {
        {"randperm: pinned permutations (an independent model)", test_randperm_pinned},
        {"randperm: permutations, determinism, errors", test_randperm_properties},
        {"randperm: every permutation equally likely", test_randperm_uniform},
        {"dataset: shapes, shared storage, errors", test_dataset_new},
        {"loader: in order, last batch kept, epoch after epoch", test_loader_in_order_keep},
        {"loader: in order, batches are views", test_loader_in_order_views},
        {"loader: last batch dropped", test_loader_drop_last},
        {"loader: shuffled, each example once an epoch", test_loader_shuffle_epochs},
        {"loader: the same seed gives the same batches", test_loader_same_seed_same_batches},
        {"loader: resume at every position gives the same batches", test_loader_resume_exact},
        {"loader: bad options and states", test_loader_errors},
        {"loader: no allocations after warm-up", test_loader_no_allocations_after_warm_up},
        {"split: sizes, disjoint, seeded", test_split},
        {"csv: the fixture, columns, dtypes", test_csv_fixture},
        {"csv: errors name the file, line and column", test_csv_errors},
        {"csv: delimiters, quoted newlines, inf and nan", test_csv_syntax},
        {"the header's example runs", test_header_example},
    };
    return nbtest_run("data", cases, sizeof cases / sizeof cases[0]);
}
