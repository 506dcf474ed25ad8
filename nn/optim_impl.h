/* Internal: the optimizer object shared by the SGD and Adam/AdamW update rules. */
#ifndef NABLA_OPTIM_IMPL_H
#define NABLA_OPTIM_IMPL_H

#include "nabla/optim.h"
#include "nabla/autograd.h"
#include "tensor/nbt.h"

#define NBO_MAX_STATE 3
/* Step counts stay below this: Adam raises betas to the count as a double, exact to 2^53. */
#define NBO_MAX_STEP ((int64_t)1 << 53)

typedef struct {
    const char *name; /* "momentum_buffer", "exp_avg", "exp_avg_sq" or "step" */
    bool is_step;     /* a 0-d I64 count; otherwise a tensor like the parameter */
} nbo_state_kind;

/* Applies one update to parameter i, whose gradient has been checked (through nbo_run). */
typedef void (*nbo_update_fn)(nb_optimizer *opt, int i);

/* Room for an update kernel's constants (adam_consts, sgd_consts), copied into its segment. */
#define NBO_CTX_DOUBLES 8

/* One parameter's update as nbo_run queues it for the step's single pool job: its operands'
 * base pointers (param, grad, then the states, all contiguous), its element count, where it
 * starts in the run of all queued elements, and the kernel with a copy of its constants. */
typedef struct {
    char *base[NBT_ITER_MAX];
    int nops;
    int64_t n, first;
    nbt_inner_fn fn;
    double ctx[NBO_CTX_DOUBLES];
} nbo_segment;

/* A parameter group (torch's param_groups entry): the rates its parameters are updated with. */
typedef struct {
    double lr;           /* the current learning rate */
    double initial_lr;   /* the rate it was made with: nb_optimizer_set_lr_factor scales it */
    double weight_decay; /* >= 0 */
} nbo_group;

struct nb_optimizer {
    const char *op; /* the constructor's name, for messages */
    nbo_update_fn update;
    nb_sgd_opts sgd;    /* SGD only (its lr and weight_decay are group 0's) */
    nb_adam_opts adam;  /* Adam and AdamW only (likewise) */
    bool decoupled;     /* AdamW */
    int n;              /* parameters, over all groups, numbered in the order they were added */
    nb_tensor **params; /* borrowed */
    int *group_of;      /* each parameter's group */
    nbo_group *groups;
    int ngroups;
    int nstate;
    nbo_state_kind kinds[NBO_MAX_STATE];
    /* state[i * nstate + k]: kind k of parameter i, in scope; NULL until parameter i's first
     * step with a gradient (or a checkpoint holding its state) makes it, as torch makes its
     * state lazily. has_state[i] says whether parameter i has state now: a load that fails
     * takes back state it gave, keeping the tensors for the next time. */
    nb_tensor **state;
    bool *has_state;
    bool *had_state; /* nbo_load_begin's record of has_state, for nbo_load_end */
    nb_scope *scope;
    nb_named_tensor *named; /* the last nb_optimizer_state answer, names after the entries */
    /* A step's queued updates (nbo_run): room for one a parameter, made with the optimizer,
     * so a step allocates nothing (once every parameter it updates has state). */
    nbo_segment *segments;
    int nsegments;
    /* Two parameters share a storage: their updates then run one after the other, in order,
     * as each nbo_run is called, never together in one job. */
    bool shared_storage;
};

/* Validates the parameters (and lr and weight_decay) and creates an optimizer with them as
 * group 0 (which may be empty: the public constructors refuse that themselves) and no state
 * yet, of the given kinds. NULL with an error naming op on bad input. */
nb_optimizer *nbo_create(const char *op, nb_tensor *const *params, int n, double lr,
                         double weight_decay, int nstate, const nbo_state_kind *kinds,
                         nbo_update_fn update);
/* Appends params as a new group (n may be 0); its index, or -1 with an error naming op. */
int nbo_add_group(nb_optimizer *o, const char *op, nb_tensor *const *params, int n, double lr,
                  double weight_decay);

/* Adam (decoupled: AdamW) over params as group 0, which may be empty. NULL with an error. */
nb_optimizer *nbo_adam_create(const char *op, nb_tensor *const *params, int n, nb_adam_opts opts,
                              bool decoupled);

/* Parameter i's group. */
static inline const nbo_group *nbo_group_of(const nb_optimizer *o, int i) {
    return &o->groups[o->group_of[i]];
}

/* Gives parameter i state (zeroed: step 0), making its tensors if it never had them. False
 * with an error naming op when out of memory. */
bool nbo_make_state(nb_optimizer *o, const char *op, int i);

/* A checkpoint load into o, in two calls around it: nbo_load_begin gives state to exactly the
 * parameters whose state the file holds (the n names of its tensors, state named
 * "<prefix><kind>.<i>"), so that nb_optimizer_state then lists what the file must hold, as
 * torch's load_state_dict replaces the whole state; nbo_load_end(o, loaded) keeps that if the
 * load succeeded, else puts back the set of parameters with state as it was. False with an
 * error (out of memory) from begin, which then changes nothing. */
bool nbo_load_begin(nb_optimizer *o, const char *prefix, int n, const char *const *names);
void nbo_load_end(nb_optimizer *o, bool loaded);

/* True if x is finite and >= 0; otherwise records "op: <what> is <x>, expected ...". */
bool nbo_check_nonneg(const char *op, const char *what, double x);
/* True if x is in [0, 1); otherwise an error. */
bool nbo_check_beta(const char *op, const char *what, double x);

/* An nbst_check_fn (ctx: the optimizer) for values loaded into its state tensors: step
 * counts in [0, 2^53), moments finite, second moments (exp_avg_sq) >= 0. Other destinations
 * (parameters) pass. */
const char *nbo_check_loaded_state(const nb_tensor *dest, const void *bytes, void *ctx);

/* State kind k of parameter i (NULL if it has never had state). */
static inline nb_tensor *nbo_state(const nb_optimizer *o, int i, int k) {
    return o->state[i * o->nstate + k];
}

/* Runs fn over (param, grad, state tensors...): one call per contiguous run, byte strides in
 * the order param, grad, then the nstate given states; ctx (ctx_size bytes, at most
 * NBO_CTX_DOUBLES doubles) is fn's constants. When all operands are contiguous the update is
 * queued, with ctx copied, and runs in nb_optimizer_step's one pool job over every queued
 * parameter's elements, cut into slices that any thread may take: so fn must be elementwise
 * and must not write to ctx. Otherwise it runs now, through nbt_iterate. */
void nbo_run(nb_optimizer *o, nb_tensor *param, const nb_tensor *grad, int nstate,
             nb_tensor *const *states, nbt_inner_fn fn, const void *ctx, size_t ctx_size);

#endif
