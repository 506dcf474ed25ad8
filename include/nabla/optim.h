/* nabla optimizers (SGD, Adam, AdamW as in torch.optim) with parameter groups, gradient
 * clipping by global norm, and learning-rate schedules.
 *
 * As in torch: an optimizer may be given parameters that do not require grad (frozen ones,
 * e.g. all of model.parameters() in a fine-tune); a step updates only those that require grad
 * and have a gradient, so a frozen parameter is left alone, and trained again once unfrozen
 * (nb_requires_grad_(p, true)), by the same optimizer. A parameter's state (moments, step
 * count) is made on its first step with a gradient, and kept while it is frozen.
 *
 * Messages name a parameter by its module path when it belongs to a model
 * ("nb_optimizer_step: parameter 'blocks.0.attn.W_query.weight' (shape [12, 32]) ..."),
 * otherwise by its index in the optimizer.
 *
 * Ownership: an optimizer holds pointers to its parameters (which stay owned by their own
 * scope and must outlive the optimizer) and owns a private scope with its state tensors;
 * nb_optimizer_free releases that scope. Updates run in place on the parameters' data
 * without autograd, and without allocating once each parameter stepped has its state. */
#ifndef NABLA_OPTIM_H
#define NABLA_OPTIM_H

#include "nabla/checkpoint.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_optimizer nb_optimizer;
typedef struct nb_module nb_module;

/* torch.optim.SGD: with d = grad + weight_decay * p,
 *   momentum == 0:  p -= lr * d
 *   otherwise:      buf = d on a parameter's first step, else buf = momentum * buf +
 *                   (1 - dampening) * d; p -= lr * (nesterov ? d + momentum * buf : buf). */
typedef struct {
    double lr;           /* >= 0 */
    double momentum;     /* >= 0 */
    double dampening;    /* in [0, 1]; must be 0 with nesterov */
    double weight_decay; /* >= 0, L2 added to the gradient */
    bool nesterov;       /* needs momentum > 0 */
} nb_sgd_opts;

/* torch.optim.Adam (weight_decay adds weight_decay * p to the gradient, L2) and
 * torch.optim.AdamW (decoupled: p *= 1 - lr * weight_decay before the Adam update).
 * With t a parameter's own step count (1 on its first step with a gradient):
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps). */
typedef struct {
    double lr;           /* >= 0 */
    double beta1, beta2; /* in [0, 1) */
    double eps;          /* >= 0 */
    double weight_decay; /* >= 0 */
} nb_adam_opts;

/* PyTorch's defaults: SGD with no momentum or decay; Adam betas (0.9, 0.999), eps 1e-8,
 * weight_decay 0; AdamW the same with weight_decay 0.01. */
nb_sgd_opts nb_sgd_defaults(double lr);
nb_adam_opts nb_adam_defaults(double lr);
nb_adam_opts nb_adamw_defaults(double lr);

/* Create an optimizer over n >= 1 parameters: distinct float leaves of one dtype (f32 or
 * f64), not expanded views; they need not require grad (see the top of this file). They are
 * group 0, with opts.lr and opts.weight_decay. The pointer array is copied. Returns a new
 * optimizer the caller frees with nb_optimizer_free, or NULL with an error naming the bad
 * parameter or hyperparameter. */
nb_optimizer *nb_sgd_new(int n, nb_tensor *const *params, nb_sgd_opts opts);
nb_optimizer *nb_adam_new(int n, nb_tensor *const *params, nb_adam_opts opts);
nb_optimizer *nb_adamw_new(int n, nb_tensor *const *params, nb_adam_opts opts);

/* Releases the optimizer and its state tensors (not the parameters). NULL is fine. */
void nb_optimizer_free(nb_optimizer *opt);

/* AdamW over every parameter of m with PyTorch's usual weight-decay recipe: group 0 holds
 * those of rank >= 2 (matmul weights, embeddings) with opts.weight_decay, group 1 those of
 * rank < 2 (biases, norm weights) with weight decay 0; both start at opts.lr. Either group
 * may be empty. Parameters are numbered group 0's first, each group in nb_module_named_params
 * order. Caller frees with nb_optimizer_free; NULL with an error. */
nb_optimizer *nb_adamw_new_decay_split(const nb_module *m, nb_adam_opts opts);

/* torch's add_param_group: appends n >= 0 parameters (as for the constructors, none already
 * in opt and of opt's dtype) as a new group with its own lr and weight_decay; the other
 * hyperparameters are opt's. Its parameters are numbered after opt's. Returns the group's
 * index, or -1 with an error (opt unchanged). */
int nb_optimizer_add_group(nb_optimizer *opt, int n, nb_tensor *const *params, double lr,
                           double weight_decay);
/* The number of groups (-1 with an error for NULL). */
int nb_optimizer_group_count(const nb_optimizer *opt);

/* One update of every parameter that requires grad and has a gradient; others are skipped
 * (their step counts do not advance). A parameter that requires grad but has no gradient
 * (no backward has reached it) is skipped as torch skips a None grad; one that does not
 * require grad is skipped even if it still holds a gradient from before it was frozen (torch
 * would update it: freezing here means frozen). nb_optimizer_zero_grad keeps gradient buffers
 * (torch's zero_grad(set_to_none=False)), so a parameter that a later backward does not reach
 * is stepped with a zero gradient (decay and momentum still move it); freeze it to skip it.
 * Allocates only the state of parameters stepped for the first time; the contiguous
 * parameters are updated together as one job on nabla's threads, with the same bits for any
 * thread count. Returns false with an error, changing nothing, if a gradient's dtype or shape
 * does not match its parameter. */
bool nb_optimizer_step(nb_optimizer *opt);
/* Sets every parameter's gradient to zero in place (keeps the buffers, as torch's
 * zero_grad(set_to_none=False)). */
void nb_optimizer_zero_grad(nb_optimizer *opt);
/* Group 0's current learning rate; NaN with an error for NULL. */
double nb_optimizer_lr(const nb_optimizer *opt);
/* Sets every group's learning rate to lr. False with an error if lr is negative or NaN, or if
 * the groups were made with different rates (that ratio would be lost: use
 * nb_optimizer_set_lr_factor or nb_optimizer_set_group_lr). */
bool nb_optimizer_set_lr(nb_optimizer *opt, double lr);
/* Group g's current learning rate and weight decay; NaN with an error if g is out of range. */
double nb_optimizer_group_lr(const nb_optimizer *opt, int group);
double nb_optimizer_group_weight_decay(const nb_optimizer *opt, int group);
/* Sets group g's learning rate. False with an error for a bad g or lr. */
bool nb_optimizer_set_group_lr(nb_optimizer *opt, int group, double lr);
/* Sets every group's learning rate to factor times the rate the group was made with, as
 * torch's LambdaLR does with its lambda's value (nb_lr_schedule_apply calls it). False with
 * an error unless factor is finite and >= 0. */
bool nb_optimizer_set_lr_factor(nb_optimizer *opt, double factor);

/* The optimizer's state tensors, for checkpoints: writes to *out an array of entries named
 * "<prefix><kind>.<i>" with i the parameter's index (over all groups, as torch numbers them)
 * and kind one of
 *   SGD with momentum:  momentum_buffer, step
 *   Adam, AdamW:        exp_avg, exp_avg_sq, step
 * (step is a 0-d I64 count of the parameter's updates; the others have its shape and dtype;
 * SGD without momentum has no state). Only parameters that have state are listed: those
 * stepped at least once (or given state by a checkpoint), as in torch's state_dict. Loading a
 * checkpoint into these tensors restores the state; nb_module_load_with also gives state to
 * the parameters the file has it for and takes it from the others, as torch's
 * load_state_dict. prefix may be NULL for "". Returns the number of entries, or -1 with an
 * error. The array and names are owned by opt and valid until the next call or
 * nb_optimizer_free; the tensors are owned by opt's scope. Group learning rates are not state:
 * a resumed run sets them again (from its schedule). */
int nb_optimizer_state(nb_optimizer *opt, const char *prefix, const nb_named_tensor **out);

/* torch.nn.utils.clip_grad_norm_ with norm type 2: total = sqrt(sum of every grad element
 * squared) over the params that have a gradient; if max_norm / (total + 1e-6) < 1 every such
 * gradient is multiplied by it in place. Returns total (0 when no param has a gradient), or
 * NaN with an error for NULL params, a NULL entry, n < 0 or a negative or NaN max_norm. */
double nb_clip_grad_norm(int n, nb_tensor *const *params, double max_norm);

/* ---- Learning-rate schedules ------------------------------------------------------------
 * A schedule gives a factor for each 0-based step; nb_lr_schedule_apply sets every group's
 * rate to the rate it was made with times that factor (torch's LambdaLR). Every schedule
 * starts with a linear warm-up: factor step / warmup_steps while step < warmup_steps (0 at
 * step 0, none if warmup_steps is 0). Then, with s = step - warmup_steps,
 * W = total_steps - warmup_steps and p = min(s / W, 1):
 *   NB_LR_CONSTANT:  1
 *   NB_LR_LINEAR:    min_factor + (1 - min_factor) * (1 - p)
 *   NB_LR_COSINE:    min_factor + (1 - min_factor) * (1 + cos(pi * p)) / 2
 *   NB_LR_STEP:      gamma ^ floor(s / step_size)           (torch's StepLR)
 * so linear and cosine fall from 1 at warmup_steps to min_factor at total_steps and stay
 * there. Without warm-up they are torch's LinearLR(1, min_factor, total_steps) and, up to
 * total_steps, CosineAnnealingLR(total_steps, eta_min = min_factor * lr) (which rises again
 * after it). A plain struct: make one with the functions below, keep it anywhere (it holds no
 * state), evaluate it at any step, e.g. nb_lr_schedule_apply(s, opt, step) before each step. */
typedef enum { NB_LR_CONSTANT, NB_LR_LINEAR, NB_LR_COSINE, NB_LR_STEP } nb_lr_decay;
typedef struct {
    nb_lr_decay decay;
    int64_t warmup_steps; /* >= 0 */
    int64_t total_steps;  /* linear, cosine: >= warmup_steps */
    double min_factor;    /* linear, cosine: in [0, 1] */
    int64_t step_size;    /* step: >= 1 */
    double gamma;         /* step: in [0, 1] */
} nb_lr_schedule;

nb_lr_schedule nb_lr_constant(int64_t warmup_steps);
nb_lr_schedule nb_lr_linear(int64_t warmup_steps, int64_t total_steps, double min_factor);
nb_lr_schedule nb_lr_cosine(int64_t warmup_steps, int64_t total_steps, double min_factor);
nb_lr_schedule nb_lr_step_decay(int64_t warmup_steps, int64_t step_size, double gamma);
/* The factor at step (formulas above); NaN with an error for a step < 0 or a bad schedule. */
double nb_lr_schedule_factor(nb_lr_schedule s, int64_t step);
/* nb_optimizer_set_lr_factor(opt, nb_lr_schedule_factor(s, step)); false with an error. */
bool nb_lr_schedule_apply(nb_lr_schedule s, nb_optimizer *opt, int64_t step);

/* Learning rate at 0-based step for linear warmup then cosine decay:
 *   step < warmup:          base_lr * step / warmup
 *   warmup <= step < total: min_lr + (base_lr - min_lr) * (1 + cos(pi * (step - warmup) /
 *                                                                  (total - warmup))) / 2
 *   step >= total:          min_lr
 * so it rises from 0 to base_lr at step == warmup, then falls to min_lr at step == total.
 * NaN with an error unless 0 <= step, 0 <= warmup <= total, 0 <= min_lr <= base_lr (finite). */
double nb_lr_warmup_cosine(int64_t step, int64_t warmup_steps, int64_t total_steps, double base_lr,
                           double min_lr);

#ifdef __cplusplus
}
#endif
#endif
