/* The optimizer update the example trainers make from a loss, guarded so that training
 * stops on a non-finite loss or gradient instead of going on with garbage. */
#ifndef NABLA_EXAMPLES_UPDATE_H
#define NABLA_EXAMPLES_UPDATE_H

#include <nabla/nabla.h>

#define PARAM_LIST_MAX 256

/* A model's parameters with their names, and the bare tensors for optimizers and clipping. */
typedef struct {
    nb_param params[PARAM_LIST_MAX];
    nb_tensor *tensors[PARAM_LIST_MAX];
    int n;
} param_list;

/* Fills pl with model's parameters (owned by the model). False with nabla's error. */
bool param_list_of(param_list *pl, const nb_module *model);

/* True if loss and every parameter's gradient (those that have one) are finite. Otherwise
 * prints to stderr "prog: step N: ..." with the loss and the name of the first parameter, in
 * pl's order, whose gradient holds a NaN or infinity, and returns false. step is 1-based. */
bool training_healthy(const char *prog, int64_t step, const nb_tensor *loss, const param_list *pl);

/* Step step (0-based) of total: zeroes the gradients, backpropagates loss, checks the
 * training's health, clips the gradient norm to 1, sets the learning rate of the
 * warmup-cosine schedule (warmup total / 20 steps, from lr down to min_lr) and steps opt.
 * False with a message (prefixed prog) when any of that fails; opt is then not stepped. */
bool train_update(const char *prog, nb_optimizer *opt, const param_list *pl, nb_tensor *loss,
                  int64_t step, int64_t total, double lr, double min_lr);

/* The update's second half, on gradients already in place: clips the gradient norm to 1, sets
 * the warmup-cosine rate and steps opt. False with a message (prefixed prog). */
bool train_apply(const char *prog, nb_optimizer *opt, const param_list *pl, int64_t step,
                 int64_t total, double lr, double min_lr);

#endif
