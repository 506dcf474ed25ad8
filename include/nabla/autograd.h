/* nabla autograd: define-by-run reverse mode, grad mode, and gradient checking.
 *
 * An op whose inputs require grad records a node in the current scope. nb_backward(loss)
 * runs each reachable node's backward once, in reverse topological order, and accumulates
 * into the .grad of leaf tensors (tensors with requires_grad and no producing node).
 * Gradients accumulate across backward calls, as in PyTorch, until nb_zero_grad. */
#ifndef NABLA_AUTOGRAD_H
#define NABLA_AUTOGRAD_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a float leaf as a parameter to differentiate. Returns t, or NULL with an error. */
nb_tensor *nb_requires_grad_(nb_tensor *t, bool requires_grad);
/* The accumulated gradient of leaf t (NULL before any backward). Owned by t's scope. */
nb_tensor *nb_grad(const nb_tensor *t);
/* Sets t's accumulated gradient to zero in place (keeps the buffer). */
void nb_zero_grad(nb_tensor *t);

/* Backpropagates from out. grad_output may be NULL only when out has one element (it is then
 * 1); otherwise it must have out's shape. Each node's backward runs once and then releases
 * what it saved, so a second backward through the same nodes is an error naming the op
 * (use nb_backward_with and retain_graph to go through a graph twice). Returns false with an
 * error on failure, including a backward function that failed (e.g. out of memory, or a user
 * function's backward returning false); gradients accumulated before the failure stay. */
bool nb_backward(nb_tensor *out, const nb_tensor *grad_output);

typedef struct {
    bool retain_graph; /* keep what the nodes saved, so another backward may go through them */
} nb_backward_opts;
/* nb_backward with options; opts may be NULL (the defaults: retain_graph false). */
bool nb_backward_with(nb_tensor *out, const nb_tensor *grad_output, const nb_backward_opts *opts);

/* Grad mode: while disabled, ops record nothing. Returns the previous setting. */
bool nb_set_grad_enabled(bool enabled);
bool nb_is_grad_enabled(void);

/* ---- Gradient checking ---------------------------------------------------------------- */
/* A function of tensors to check: returns its output (any shape) or NULL on error. */
typedef nb_tensor *(*nb_grad_fn)(nb_tensor *const *inputs, int ninputs, void *ctx);

typedef struct {
    double eps;     /* finite-difference step (default 1e-6) */
    double atol;    /* default 1e-5 */
    double rtol;    /* default 1e-3 */
    uint64_t seed;  /* seed of the random output projection (default 1) */
} nb_gradcheck_opts;

typedef struct {
    bool ok;
    int worst_input;     /* index of the input holding the worst element, -1 if none */
    int64_t worst_index; /* its row-major element index */
    double analytic, numeric, error; /* at the worst element: error = |analytic - numeric| */
    int64_t checked;     /* elements compared */
    char message[512];   /* a one-line human-readable verdict */
} nb_gradcheck_result;

/* Compares fn's analytic input gradients with central finite differences, in float64.
 * Every input that requires grad is checked; inputs must be float64 and must not overlap in
 * memory (no expanded leaves). A non-scalar output is projected on a fixed random vector
 * r, i.e. the check is on d(sum(r * fn(x)))/dx. opts may be NULL for PyTorch's defaults.
 * Returns true when every element is within atol + rtol * |numeric|; res may be NULL. */
bool nb_gradcheck(nb_grad_fn fn, int ninputs, nb_tensor *const *inputs, void *ctx,
                  const nb_gradcheck_opts *opts, nb_gradcheck_result *res);

#ifdef __cplusplus
}
#endif
#endif
