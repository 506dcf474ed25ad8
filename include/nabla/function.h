/* nabla functions: differentiable operations defined outside the library, the C counterpart
 * of torch.autograd.Function. The user writes a forward and a backward; nb_function_apply
 * runs the forward and, when an input requires grad, records one autograd node (the same
 * kind of node nabla's own ops record) whose backward nb_backward calls.
 *
 *     static bool sq_forward(nb_node *ctx, int nin, const nb_tensor *const *in, int nout,
 *                            nb_tensor **out) {
 *         out[0] = nb_mul(in[0], in[0]);         // grad mode is off: records nothing
 *         return nb_ctx_save(ctx, in[0]) && out[0];
 *     }
 *     static bool sq_backward(nb_node *ctx, int nout, const nb_tensor *const *gout, int nin,
 *                             nb_tensor **gin) {
 *         gin[0] = nb_mul_scalar(nb_mul(gout[0], nb_ctx_saved(ctx, 0)), 2.0);
 *         return gin[0] != NULL;
 *     }
 *     static const nb_function square = {"square", sq_forward, sq_backward};
 *     nb_tensor *y = nb_function_apply1(&square, 1, (const nb_tensor *[]){x}, NULL);
 *
 * Rules:
 * - Forward runs with grad mode off. Its outputs must be new tensors (not inputs, not views of
 *   inputs: nb_function_apply refuses one sharing an input's memory; nb_clone it), made in the
 *   current scope; float outputs become differentiable, others (indices, masks) are not.
 * - Inputs and saved tensors are referenced, not copied: do not modify them in place later,
 *   and do not save a tensor from a scope that ends before backward runs (make intermediates
 *   in the scope current at apply, as the forward's own results are).
 * - Backward runs once per nb_backward, after every output's gradient is in, with grad mode off.
 *   grad_outputs[k] has output k's shape and dtype; an output that got no gradient gets zeros
 *   (PyTorch's default), a non-float output NULL. Set grad_inputs[i] for each input that needs
 *   a gradient (nb_ctx_needs_input_grad) to a tensor of the input's dtype whose shape is the
 *   input's or broadcasts to it (it is summed down, as in PyTorch); leave NULL for none.
 *   Gradients set for inputs that do not need one are ignored. The gradients returned (and the
 *   grad_outputs) belong to nabla: backward may release them once spent, so keep none.
 * - Return false on failure, after nb_error names the problem; nb_backward then returns false
 *   with that message (a backward returning false without a message gets a generic one).
 * - An error recorded inside forward or backward (an op that failed) fails the call with its
 *   message even if the function returns true, unless the function cleared it
 *   (nb_clear_error) to say it recovered: tried an op, saw it fail, fell back.
 * - Inputs may be NULL only if the function accepts that; NULL inputs never need grad. */
#ifndef NABLA_FUNCTION_H
#define NABLA_FUNCTION_H

#include "nabla/autograd.h"
#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits per call: inputs, outputs, and saved tensors or scalars. */
#define NB_FUNCTION_MAX_IO 16
#define NB_FUNCTION_MAX_SAVED 16

typedef struct {
    const char *name; /* names the op in errors and in backward's messages; must outlive it */
    /* Fills outputs[0..noutputs) from inputs; true on success. */
    bool (*forward)(nb_node *ctx, int ninputs, const nb_tensor *const *inputs, int noutputs,
                    nb_tensor **outputs);
    /* Fills grad_inputs[0..ninputs) (all NULL on entry) from grad_outputs; true on success. */
    bool (*backward)(nb_node *ctx, int noutputs, const nb_tensor *const *grad_outputs, int ninputs,
                     nb_tensor **grad_inputs);
} nb_function;

/* Runs fn on ninputs inputs into noutputs outputs (each at most NB_FUNCTION_MAX_IO), passing
 * user (read back with nb_ctx_user; it must outlive backward). The outputs are new tensors in
 * the current scope. Returns false with an error naming fn (outputs all NULL then). */
bool nb_function_apply(const nb_function *fn, int ninputs, const nb_tensor *const *inputs,
                       int noutputs, nb_tensor **outputs, void *user);
/* The one-output form: the output, or NULL with an error. Owned by the current scope. */
nb_tensor *nb_function_apply1(const nb_function *fn, int ninputs, const nb_tensor *const *inputs,
                              void *user);

/* ---- The context: what forward passes to backward --------------------------------------- */
/* Saves t (may be an input, an output or an intermediate; referenced, not copied) for
 * backward, as number nb_ctx_saved_count() before the call. False with an error past
 * NB_FUNCTION_MAX_SAVED. */
bool nb_ctx_save(nb_node *ctx, const nb_tensor *t);
/* Saved tensor i, or NULL with an error if there is none (or it was released after backward
 * ran). Owned by its scope. */
const nb_tensor *nb_ctx_saved(const nb_node *ctx, int i);
int nb_ctx_saved_count(const nb_node *ctx);
/* Saves a number (sizes, flags, a scale) for backward; read it back by its number. */
bool nb_ctx_save_scalar(nb_node *ctx, double value);
/* Saved number i; NaN with an error if there is none. */
double nb_ctx_scalar(const nb_node *ctx, int i);
/* True if input i requires grad and grad mode was on at apply: the gradient backward must
 * compute. Valid in forward too (to skip saving what no backward will need). */
bool nb_ctx_needs_input_grad(const nb_node *ctx, int i);
/* The user pointer given to nb_function_apply. */
void *nb_ctx_user(const nb_node *ctx);

/* ---- Helpers for backward --------------------------------------------------------------- */
/* Sums g down to shape (ndim dims): extra leading dims and dims where shape has size 1 are
 * summed away, undoing a broadcast in forward. A new tensor in the current scope (a copy even
 * when no dim is summed); NULL with an error if g's shape does not broadcast from shape. */
nb_tensor *nb_sum_to_shape(const nb_tensor *g, int ndim, const int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif
