/* nabla optimizers (SGD, Adam, AdamW as in torch.optim), gradient clipping by global norm,
 * and a warmup + cosine learning-rate schedule.
 *
 * Ownership: an optimizer holds pointers to its parameters (which stay owned by their own
 * scope and must outlive the optimizer) and owns a private scope with its state tensors;
 * nb_optimizer_free releases that scope. Updates run in place on the parameters' data
 * without autograd and without allocating. */
#ifndef NABLA_OPTIM_H
#define NABLA_OPTIM_H

#include "nabla/checkpoint.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nb_optimizer nb_optimizer;

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

/* Create an optimizer over n parameters: distinct float leaves that require grad, all of one
 * dtype (f32 or f64), not expanded views. The pointer array is copied. Returns a new optimizer
 * the caller frees with nb_optimizer_free, or NULL with an error naming the bad parameter or
 * hyperparameter. */
nb_optimizer *nb_sgd_new(nb_tensor *const *params, int n, nb_sgd_opts opts);
nb_optimizer *nb_adam_new(nb_tensor *const *params, int n, nb_adam_opts opts);
nb_optimizer *nb_adamw_new(nb_tensor *const *params, int n, nb_adam_opts opts);

/* Releases the optimizer and its state tensors (not the parameters). NULL is fine. */
void nb_optimizer_free(nb_optimizer *opt);

/* One update of every parameter that has a gradient; parameters without one are skipped
 * (their step counts do not advance), as in torch. Never allocates; the contiguous parameters
 * are updated together as one job on nabla's threads, with the same bits for any thread count.
 * Returns false with an error, changing nothing, if a gradient's dtype or shape does not
 * match its parameter. */
bool nb_optimizer_step(nb_optimizer *opt);
/* Sets every parameter's gradient to zero in place (keeps the buffers, as torch's
 * zero_grad(set_to_none=False)). */
void nb_optimizer_zero_grad(nb_optimizer *opt);
/* The current learning rate; NaN with an error for NULL. */
double nb_optimizer_lr(const nb_optimizer *opt);
/* Sets the learning rate (for schedules). False with an error if lr is negative or NaN. */
bool nb_optimizer_set_lr(nb_optimizer *opt, double lr);

/* The optimizer's state tensors, for checkpoints: writes to *out an array of entries named
 * "<prefix><kind>.<i>" with i the parameter's index and kind one of
 *   SGD with momentum:  momentum_buffer, step
 *   Adam, AdamW:        exp_avg, exp_avg_sq, step
 * (step is a 0-d I64 count of the parameter's updates; the others have its shape and dtype;
 * SGD without momentum has no state). Loading a checkpoint into these tensors restores the
 * state. prefix may be NULL for "". Returns the number of entries, or -1 with an error. The
 * array and names are owned by opt and valid until the next call or nb_optimizer_free; the
 * tensors are owned by opt's scope. */
int nb_optimizer_state(nb_optimizer *opt, const char *prefix, const nb_named_tensor **out);

/* torch.nn.utils.clip_grad_norm_ with norm type 2: total = sqrt(sum of every grad element
 * squared) over the params that have a gradient; if max_norm / (total + 1e-6) < 1 every such
 * gradient is multiplied by it in place. Returns total (0 when no param has a gradient), or
 * NaN with an error for NULL params, a NULL entry, n < 0 or a negative or NaN max_norm. */
double nb_clip_grad_norm(nb_tensor *const *params, int n, double max_norm);

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
