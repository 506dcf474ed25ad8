/* nabla data: a dataset of tensors, batches in a seeded shuffled order that a trainer can
 * resume exactly, a seeded train/validation split, and numeric CSV files read into tensors.
 *
 *     nb_dataset *all = nb_dataset_from_csv("iris.csv", &(nb_csv_opts){
 *         .header = true, .target_cols = (int[]){-1}, .n_target_cols = 1,
 *         .target_dtype = NB_I64});
 *     nb_rng rng;
 *     nb_rng_seed(&rng, 1);
 *     nb_dataset *train, *val;
 *     nb_dataset_split(all, &rng, nb_dataset_len(all) / 5, &train, &val);
 *     nb_loader *loader = nb_loader_new(train, &(nb_loader_opts){.batch_size = 16,
 *                                                                .shuffle = true, .seed = 2});
 *     for (int epoch = 0; epoch < 10; epoch++) {
 *         nb_batch b; // b.inputs [16, 4] float32, b.targets [16] int64
 *         while (nb_scope_begin(), nb_loader_next(loader, &b) > 0) {
 *             ... the step on b.inputs and b.targets ...
 *             nb_scope_end(); // releases the batch with the step's tensors
 *         }
 *         nb_scope_end(); // the scope opened for the call that ended the epoch
 *     }
 *     nb_loader_free(loader), nb_dataset_free(train), nb_dataset_free(val), nb_dataset_free(all);
 *
 * A batch belongs to the scope current when nb_loader_next made it, as every tensor does,
 * hence the scope opened before the call. Errors: NULL, false or -1 with nb_last_error() naming
 * the function, as everywhere in nabla. */
#ifndef NABLA_DATA_H
#define NABLA_DATA_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Datasets ----------------------------------------------------------------------------- */
/* Examples are the rows of two tensors (torch.utils.data.TensorDataset): example i is
 * inputs[i] and targets[i]. */
typedef struct nb_dataset nb_dataset;

/* A dataset of inputs [N, ...] and targets [N, ...] (the same N >= 1, any dtypes and layouts;
 * targets may be NULL for inputs alone). The dataset shares their storage (no copy: writes
 * into them show in later batches) and keeps it alive, so the caller's tensors may be released
 * before the dataset. Caller owns the dataset: nb_dataset_free. */
nb_dataset *nb_dataset_new(const nb_tensor *inputs, const nb_tensor *targets);
/* Frees ds (NULL does nothing). Batches made from it stay valid: they share storage by count. */
void nb_dataset_free(nb_dataset *ds);
/* N, the number of examples; -1 with an error for NULL. */
int64_t nb_dataset_len(const nb_dataset *ds);
/* The dataset's inputs and targets (NULL when it has none), owned by ds: valid until
 * nb_dataset_free. They share the storage the dataset was made from. */
nb_tensor *nb_dataset_inputs(const nb_dataset *ds);
nb_tensor *nb_dataset_targets(const nb_dataset *ds);

/* Splits ds at random into *train (N - n_val examples) and *val (n_val), 1 <= n_val <= N - 1.
 * Draws p = nb_randperm(rng, N) (so rng advances as that call does): *train holds examples
 * p[0], ..., p[N - n_val - 1] in that order and *val the rest, as
 * torch.utils.data.random_split(ds, [N - n_val, n_val]) lays them out (with another
 * permutation: the generators differ). The same rng state gives the same split. Each part gets
 * its own copy of its rows, so ds may be freed after. Caller owns both (nb_dataset_free);
 * on failure both are set to NULL. */
bool nb_dataset_split(const nb_dataset *ds, nb_rng *rng, int64_t n_val, nb_dataset **train,
                      nb_dataset **val);

/* ---- Batches ------------------------------------------------------------------------------ */
typedef enum {
    NB_LAST_BATCH_KEEP = 0, /* an epoch ends with the smaller batch of the N % batch_size left */
    NB_LAST_BATCH_DROP = 1  /* they wait for the next epoch (torch's drop_last=True) */
} nb_last_batch;

typedef struct {
    int64_t batch_size;       /* examples per batch, >= 1 */
    bool shuffle;             /* a new random order every epoch (else 0..N-1 every epoch) */
    nb_last_batch last_batch; /* what to do with the last N % batch_size examples */
    uint64_t seed;            /* seeds the loader's own generator, which draws the orders */
} nb_loader_opts;

/* Hands out a dataset's examples in batches, epoch after epoch. */
typedef struct nb_loader nb_loader;

/* A batch: rows of the dataset's inputs and targets (targets NULL if the dataset has none). */
typedef struct {
    nb_tensor *inputs, *targets;
} nb_batch;

/* A loader over ds. It shares ds's storage, so ds may be freed before the loader. With
 * shuffle, epoch e reads the examples in the order nb_randperm(&g, N) gives, drawn at the
 * start of the epoch from the loader's generator g (seeded with opts->seed, and advanced by
 * each epoch's draw). A drop policy that leaves no batch at all (N < batch_size) is an error.
 * Caller owns the loader: nb_loader_free. */
nb_loader *nb_loader_new(const nb_dataset *ds, const nb_loader_opts *opts);
void nb_loader_free(nb_loader *l);
/* Batches per epoch: ceil(N / batch_size) with KEEP, floor with DROP; -1 with an error for
 * NULL. */
int64_t nb_loader_batch_count(const nb_loader *l);

/* Returns 1 and sets *b to the next batch of the epoch; at the end of the epoch returns 0 with
 * b's tensors NULL, and the next call starts the next epoch (so `while (nb_loader_next(l, &b)
 * > 0)` reads one epoch); -1 with an error on failure (the position does not move). The
 * batch's tensors are new in the current scope. Shuffled: copies of the rows (gathered with
 * nb_index_select). In order: views of the dataset's tensors (nb_narrow), sharing its storage.
 * Neither requires grad. In a loop whose scope ends after each batch, batches allocate
 * nothing after the first epoch (nabla's scopes recycle tensors; nb_alloc_count). */
int nb_loader_next(nb_loader *l, nb_batch *b);

/* Where a loader is: restoring it continues with exactly the batches the loader would have
 * given next (the same examples in the same order), for a trainer's exact resume. */
typedef struct {
    int64_t epoch; /* the epoch being read, from 0 */
    int64_t index; /* examples of this epoch handed out so far */
    nb_rng rng;    /* the loader's generator as it was before this epoch's order was drawn */
} nb_loader_state;

/* The position of l (zeros for NULL, with an error). */
nb_loader_state nb_loader_get_state(const nb_loader *l);
/* Moves l to st, a state of a loader over a dataset of the same N with the same batch size
 * and policy: epoch >= 0, index a batch boundary of the epoch (a multiple of batch_size up to
 * the epoch's end, or N with KEEP), and with shuffle a generator that is not all zeros (no
 * seed gives that). False with an error, l unchanged, otherwise. */
bool nb_loader_set_state(nb_loader *l, const nb_loader_state *st);
/* The state as NB_I64 [6]: epoch, index, then the generator's four words (their bits), to
 * save with a checkpoint (nabla/checkpoint.h). New in the current scope. */
nb_tensor *nb_loader_state_tensor(const nb_loader *l);
/* nb_loader_set_state from such a tensor (NB_I64 [6], checked as above). */
bool nb_loader_set_state_tensor(nb_loader *l, const nb_tensor *state);

/* ---- Numeric CSV -------------------------------------------------------------------------- */
/* Reading CSV text (RFC 4180 quoting, parsed by libcsv) of numbers. Columns count from 0;
 * negative ones from the end (-1 is the last). A zeroed struct reads every column as float32
 * inputs, with no header and no targets. */
typedef struct {
    bool header;            /* the first record names the columns; it is not data */
    char delimiter;         /* 0 for ',' */
    const int *target_cols; /* the target columns, n_target_cols of them (0: no targets) */
    int n_target_cols;
    const int *input_cols; /* the input columns; NULL: every column not a target, in order */
    int n_input_cols;
    nb_dtype input_dtype;  /* NB_F32 (0, the default) or NB_F64 */
    nb_dtype target_dtype; /* NB_F32, NB_F64 or NB_I64 (class labels: whole numbers) */
} nb_csv_opts;

/* Reads the numeric CSV file at path (opts NULL: the defaults above) into *inputs
 * [rows, n_input_cols] and *targets: [rows] for one target column, [rows, n_target_cols] for
 * more, NULL for none (then targets may be NULL). Both new in the current scope. Every record
 * must have as many fields as the first; empty and blank lines are skipped; a UTF-8 byte order
 * mark is ignored. Fields are numbers in C's strtod syntax whatever the program's locale (so
 * also inf and nan), optionally quoted, with blanks around them ignored. Failure (NULL outputs,
 * false) names the file and the line and column (counting from 1, as editors do), with the
 * header's name of the column if there is one: an unreadable file, malformed quoting, a record
 * of another length, an empty field, a field that is not a number, a number beyond the dtype's
 * range (or, for NB_I64, not a whole number up to 2^53 in size), a column out of range, no data
 * rows. */
bool nb_csv_read(const char *path, const nb_csv_opts *opts, nb_tensor **inputs,
                 nb_tensor **targets);
/* nb_dataset_new of what nb_csv_read reads; caller owns the dataset (nb_dataset_free). */
nb_dataset *nb_dataset_from_csv(const char *path, const nb_csv_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
