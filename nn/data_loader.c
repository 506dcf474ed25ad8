/* Batches of a dataset, epoch after epoch, in a seeded order whose position can be saved and
 * restored exactly. */
#include "nabla/data.h"
#include "nabla/ops.h"
#include "tensor/nbt.h"

#include <stdlib.h>
#include <string.h>

struct nb_loader {
    nb_scope *scope;             /* holds the tensors below */
    nb_tensor *inputs, *targets; /* aliases of the dataset's (targets may be NULL) */
    nb_tensor *order;            /* NB_I64 [N], this epoch's order (shuffle only) */
    int64_t n, batch_size, end;  /* end: where an epoch stops (N, or the last full batch) */
    bool shuffle;
    nb_last_batch last_batch;
    int64_t epoch, index; /* the position, as nb_loader_state */
    nb_rng rng;           /* draws the orders */
    nb_rng epoch_rng;     /* rng before this epoch's order was drawn */
};

/* Starts epoch e from the generator's current state. */
static void start_epoch(nb_loader *l, int64_t e) {
    l->epoch = e;
    l->index = 0;
    l->epoch_rng = l->rng;
    if (l->shuffle) nbt_randperm_into(&l->rng, l->n, (int64_t *)nbt_ptr(l->order));
}

nb_loader *nb_loader_new(const nb_dataset *ds, const nb_loader_opts *opts) {
    const char *op = "nb_loader_new";
    if (!ds || !opts) return nbt_error(op, "NULL %s", ds ? "options" : "dataset");
    int64_t n = nb_dataset_len(ds), bs = opts->batch_size;
    if (bs < 1) return nbt_error(op, "batch_size must be >= 1, got %lld", (long long)bs);
    if (opts->last_batch != NB_LAST_BATCH_KEEP && opts->last_batch != NB_LAST_BATCH_DROP)
        return nbt_error(op, "unknown last_batch policy %d", (int)opts->last_batch);
    if (opts->last_batch == NB_LAST_BATCH_DROP && n < bs)
        return nbt_error(op,
                         "dropping the last partial batch leaves no batch: %lld examples in "
                         "batches of %lld",
                         (long long)n, (long long)bs);
    nb_loader *l = calloc(1, sizeof *l);
    if (!l || !(l->scope = nb_scope_new())) {
        free(l);
        return nbt_error(op, "out of memory");
    }
    l->n = n;
    l->batch_size = bs;
    l->end = opts->last_batch == NB_LAST_BATCH_DROP ? n - n % bs : n;
    l->shuffle = opts->shuffle;
    l->last_batch = opts->last_batch;
    nb_rng_seed(&l->rng, opts->seed);
    const nb_tensor *targets = nb_dataset_targets(ds);
    nb_scope_push(l->scope);
    l->inputs = nb_detach(nb_dataset_inputs(ds));
    l->targets = targets ? nb_detach(targets) : NULL;
    l->order = l->shuffle ? nb_empty(NB_I64, 1, &n) : NULL;
    nb_scope_pop();
    if (!l->inputs || (targets && !l->targets) || (l->shuffle && !l->order)) {
        nb_loader_free(l);
        return NULL;
    }
    start_epoch(l, 0);
    return l;
}

void nb_loader_free(nb_loader *l) {
    if (!l) return;
    nb_scope_free(l->scope);
    free(l);
}

int64_t nb_loader_batch_count(const nb_loader *l) {
    if (!l) return nbt_error("nb_loader_batch_count", "NULL loader"), -1;
    return (l->end + l->batch_size - 1) / l->batch_size;
}

/* Rows [start, start + len) of this epoch's order of t: a gather when shuffled, else a view. */
static nb_tensor *rows(const nb_loader *l, const nb_tensor *t, int64_t start, int64_t len) {
    if (!l->shuffle) return nb_narrow(t, 0, start, len);
    nb_tensor *idx = nbt_narrow(l->order, 0, start, len);
    return idx ? nb_index_select(t, 0, idx) : NULL;
}

int nb_loader_next(nb_loader *l, nb_batch *b) {
    if (!l || !b) return nbt_error("nb_loader_next", "NULL %s", l ? "batch" : "loader"), -1;
    b->inputs = b->targets = NULL;
    if (l->index >= l->end) {
        start_epoch(l, l->epoch + 1);
        return 0;
    }
    int64_t len = l->end - l->index < l->batch_size ? l->end - l->index : l->batch_size;
    b->inputs = rows(l, l->inputs, l->index, len);
    b->targets = l->targets ? rows(l, l->targets, l->index, len) : NULL;
    if (!b->inputs || (l->targets && !b->targets)) {
        b->inputs = b->targets = NULL;
        return -1;
    }
    l->index += len;
    return 1;
}

nb_loader_state nb_loader_get_state(const nb_loader *l) {
    if (!l) return nbt_error("nb_loader_get_state", "NULL loader"), (nb_loader_state){0};
    return (nb_loader_state){.epoch = l->epoch, .index = l->index, .rng = l->epoch_rng};
}

bool nb_loader_set_state(nb_loader *l, const nb_loader_state *st) {
    const char *op = "nb_loader_set_state";
    if (!l || !st) return nbt_error(op, "NULL %s", l ? "state" : "loader"), false;
    if (st->epoch < 0) return nbt_error(op, "epoch %lld < 0", (long long)st->epoch), false;
    bool boundary = st->index >= 0 && st->index <= l->end &&
                    (st->index % l->batch_size == 0 || st->index == l->end);
    if (!boundary)
        return nbt_error(op,
                         "index %lld is not where a batch starts in an epoch of %lld examples "
                         "in batches of %lld (%s the last partial batch)",
                         (long long)st->index, (long long)l->n, (long long)l->batch_size,
                         l->last_batch == NB_LAST_BATCH_DROP ? "dropping" : "keeping"),
               false;
    if (l->shuffle && !(st->rng.s[0] | st->rng.s[1] | st->rng.s[2] | st->rng.s[3]))
        return nbt_error(op, "the generator state is all zeros, which no seed gives"), false;
    l->rng = st->rng;
    start_epoch(l, st->epoch);
    l->index = st->index;
    return true;
}

nb_tensor *nb_loader_state_tensor(const nb_loader *l) {
    if (!l) return nbt_error("nb_loader_state_tensor", "NULL loader");
    nb_loader_state st = nb_loader_get_state(l);
    int64_t v[6] = {st.epoch, st.index};
    memcpy(v + 2, st.rng.s, sizeof st.rng.s); /* the words' bits, as int64 */
    return nb_from_array(NB_I64, 1, (const int64_t[]){6}, v);
}

bool nb_loader_set_state_tensor(nb_loader *l, const nb_tensor *state) {
    const char *op = "nb_loader_set_state_tensor";
    if (!l || !state) return nbt_error(op, "NULL %s", l ? "state" : "loader"), false;
    if (!nbt_check_live(op, state)) return false;
    if (state->dtype != NB_I64 || state->ndim != 1 || state->shape[0] != 6)
        return nbt_error(op, "expected an int64 [6] state, got %s %s", nb_dtype_name(state->dtype),
                         nbt_shape(state)),
               false;
    int64_t v[6];
    for (int64_t k = 0; k < 6; k++) v[k] = ((const int64_t *)nbt_ptr(state))[k * state->strides[0]];
    nb_loader_state st = {.epoch = v[0], .index = v[1]};
    memcpy(st.rng.s, v + 2, sizeof st.rng.s);
    return nb_loader_set_state(l, &st);
}
