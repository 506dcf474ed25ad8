/* Runs nb_gradcheck on every catalogue entry and checks that every op in autograd/op_list.h
 * was recorded by at least one entry. */
#include "harness.h"
#include "catalogue.h"
#include "autograd/node.h"

#include <stdio.h>
#include <stdlib.h>

NBCAT_FAMILY(views)
NBCAT_FAMILY(elementwise)
NBCAT_FAMILY(reduce)
NBCAT_FAMILY(matmul)
NBCAT_FAMILY(softmax)
NBCAT_FAMILY(attention)
NBCAT_FAMILY(layers)

typedef struct {
    const nbcat_entry *entries;
    const int *count;
} family;

static const family families[] = {
    {nbcat_views, &nbcat_views_count},
    {nbcat_elementwise, &nbcat_elementwise_count},
    {nbcat_reduce, &nbcat_reduce_count},
    {nbcat_matmul, &nbcat_matmul_count},
    {nbcat_softmax, &nbcat_softmax_count},
    {nbcat_attention, &nbcat_attention_count},
    {nbcat_layers, &nbcat_layers_count},
};

static const char *const all_ops[] = {
#define NB_OP(name) #name,
#include "autograd/op_list.h"
#undef NB_OP
};
#define NUM_OPS (int)(sizeof all_ops / sizeof all_ops[0])
static bool seen[NUM_OPS];

static void note_op(const char *op) {
    for (int i = 0; i < NUM_OPS; i++)
        if (strcmp(all_ops[i], op) == 0) seen[i] = true;
}

static double sample(nb_rng *rng, nbcat_domain d) {
    switch (d) {
    case NBCAT_POSITIVE: return 0.5 + 1.5 * nb_rng_uniform(rng);
    case NBCAT_AWAY_FROM_0: {
        double v;
        do v = nb_rng_normal(rng);
        while (fabs(v) < 0.2);
        return v;
    }
    default: return nb_rng_normal(rng);
    }
}

/* Builds a leaf with the requested layout and values. */
static nb_tensor *make_input(nb_rng *rng, const nbcat_input *spec) {
    int nd = spec->ndim;
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, spec->shape, sizeof shape);
    nb_tensor *base;
    if (spec->layout == NBCAT_TRANSPOSED && nd >= 2) {
        int64_t tmp = shape[nd - 1];
        shape[nd - 1] = shape[nd - 2], shape[nd - 2] = tmp;
        base = nb_transpose(nb_empty(NB_F64, nd, shape), -1, -2);
    } else if (spec->layout == NBCAT_SLICED && nd >= 1) {
        shape[nd - 1] *= 2;
        nb_tensor *wide = nb_empty(NB_F64, nd, shape);
        int64_t half[NB_MAX_DIMS];
        memcpy(half, spec->shape, sizeof half);
        /* every other element: view [.., n, 2] and select index 1 */
        int64_t split[NB_MAX_DIMS + 1];
        memcpy(split, spec->shape, sizeof(int64_t) * (size_t)nd);
        split[nd] = 2;
        base = nb_select(nb_view(wide, nd + 1, split), -1, 1);
    } else {
        base = nb_empty(NB_F64, nd, shape);
    }
    nb_tensor *x = nb_detach(base);
    if (!x) return NULL;
    int64_t n = nb_numel(x);
    double *vals = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++) vals[k] = sample(rng, spec->domain);
    if (spec->domain == NBCAT_DISTINCT) {
        for (int64_t k = 0; k < n; k++) vals[k] = 0.1 * (double)k - 0.05 * (double)n;
        for (int64_t k = n - 1; k > 0; k--) { /* Fisher-Yates */
            int64_t j = (int64_t)(nb_rng_next(rng) % (uint64_t)(k + 1));
            double t = vals[k];
            vals[k] = vals[j], vals[j] = t;
        }
    }
    nb_tensor *src = nb_from_array(NB_F64, nd, spec->shape, vals);
    free(vals);
    nb_copy_(x, src);
    return nb_requires_grad_(x, !spec->constant);
}

static void test_every_entry(void) {
    nba_set_record_hook(note_op);
    nb_rng rng;
    nb_rng_seed(&rng, 2024);
    int failures = 0, total = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        for (int e = 0; e < *families[f].count; e++) {
            const nbcat_entry *entry = &families[f].entries[e];
            nb_scope_begin();
            nb_tensor *inputs[NBCAT_MAX_INPUTS];
            for (int i = 0; i < entry->ninputs; i++) inputs[i] = make_input(&rng, &entry->inputs[i]);
            nb_gradcheck_result res;
            bool ok = nb_gradcheck(entry->fn, entry->ninputs, inputs, (void *)entry->ctx, NULL, &res);
            printf("  %-4s %s: %s\n", ok ? "ok" : "FAIL", entry->name, res.message);
            failures += !ok;
            total++;
            nb_scope_end();
        }
    }
    nba_set_record_hook(NULL);
    printf("  %d of %d catalogue entries passed\n", total - failures, total);
    CU_ASSERT_EQUAL(failures, 0);
}

static void test_every_op_is_catalogued(void) {
    int missing = 0;
    for (int i = 0; i < NUM_OPS; i++)
        if (!seen[i]) {
            printf("  op '%s' is in autograd/op_list.h but no catalogue entry reaches it\n",
                   all_ops[i]);
            missing++;
        }
    CU_ASSERT_EQUAL(missing, 0);
}

int main(void) {
    const nbtest_case cases[] = {
        {"gradcheck every catalogue entry", test_every_entry},
        {"every differentiable op is catalogued", test_every_op_is_catalogued},
    };
    return nbtest_run("catalogue", cases, sizeof cases / sizeof cases[0]);
}
