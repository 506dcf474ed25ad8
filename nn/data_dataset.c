/* A dataset of tensors (rows are examples) and its seeded train/validation split. */
#include "nabla/data.h"
#include "nabla/ops.h"
#include "tensor/nbt.h"

#include <stdlib.h>

struct nb_dataset {
    nb_scope *scope; /* holds the two aliases below */
    nb_tensor *inputs,
        *targets; /* detached aliases of the caller's tensors (targets may be NULL) */
};

nb_dataset *nb_dataset_new(const nb_tensor *inputs, const nb_tensor *targets) {
    const char *op = "nb_dataset_new";
    if (!inputs) return nbt_error(op, "NULL inputs");
    if (!nbt_check_live(op, inputs) || (targets && !nbt_check_live(op, targets))) return NULL;
    if (inputs->ndim < 1 || inputs->shape[0] < 1)
        return nbt_error(op, "inputs %s must have a first dim of examples, at least one",
                         nbt_shape(inputs));
    if (targets && (targets->ndim < 1 || targets->shape[0] != inputs->shape[0]))
        return nbt_error(op, "targets %s must have the inputs' %lld examples (inputs %s)",
                         nbt_shape(targets), (long long)inputs->shape[0], nbt_shape(inputs));
    nb_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->scope = nb_scope_new())) {
        free(ds);
        return nbt_error(op, "out of memory");
    }
    /* Aliases in the dataset's own scope keep the storage alive whatever the caller's scopes. */
    nb_scope_push(ds->scope);
    ds->inputs = nb_detach(inputs);
    ds->targets = targets ? nb_detach(targets) : NULL;
    nb_scope_pop();
    if (!ds->inputs || (targets && !ds->targets)) {
        nb_dataset_free(ds);
        return NULL;
    }
    return ds;
}

void nb_dataset_free(nb_dataset *ds) {
    if (!ds) return;
    nb_scope_free(ds->scope);
    free(ds);
}

int64_t nb_dataset_len(const nb_dataset *ds) {
    if (!ds) return nbt_error("nb_dataset_len", "NULL dataset"), -1;
    return ds->inputs->shape[0];
}

nb_tensor *nb_dataset_inputs(const nb_dataset *ds) {
    return ds ? ds->inputs : nbt_error("nb_dataset_inputs", "NULL dataset");
}

nb_tensor *nb_dataset_targets(const nb_dataset *ds) {
    return ds ? ds->targets : nbt_error("nb_dataset_targets", "NULL dataset");
}

/* A dataset of ds's rows at idx (NB_I64 [K]), copied; or NULL with an error. */
static nb_dataset *rows_of(const nb_dataset *ds, const nb_tensor *idx) {
    nb_tensor *in = nb_index_select(ds->inputs, 0, idx);
    nb_tensor *tg = ds->targets ? nb_index_select(ds->targets, 0, idx) : NULL;
    return in && (tg || !ds->targets) ? nb_dataset_new(in, tg) : NULL;
}

bool nb_dataset_split(const nb_dataset *ds, nb_rng *rng, int64_t n_val, nb_dataset **train,
                      nb_dataset **val) {
    const char *op = "nb_dataset_split";
    if (!train || !val) return nbt_error(op, "NULL output"), false;
    *train = *val = NULL;
    if (!ds || !rng) return nbt_error(op, "NULL %s", ds ? "generator" : "dataset"), false;
    int64_t n = ds->inputs->shape[0];
    if (n_val < 1 || n_val > n - 1)
        return nbt_error(op, "n_val must be in [1, %lld] for a dataset of %lld examples, got %lld",
                         (long long)(n - 1), (long long)n, (long long)n_val),
               false;
    /* The rows are copied in a scope of our own; the datasets keep them by reference count. */
    nb_scope_begin();
    nb_tensor *perm = nb_randperm(rng, n);
    if (perm) {
        *train = rows_of(ds, nb_narrow(perm, 0, 0, n - n_val));
        *val = *train ? rows_of(ds, nb_narrow(perm, 0, n - n_val, n_val)) : NULL;
    }
    nb_scope_end();
    if (*val) return true;
    nb_dataset_free(*train);
    *train = NULL;
    return false;
}
