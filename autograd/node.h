/* Internal API for writing differentiable ops. Pattern for an op foo (see views.c):
 *
 *   static void foo_backward(nb_node *n, const nb_tensor *gout) {
 *       nba_accumulate(n, 0, <gradient for input 0>);   // may have a broadcast shape
 *   }
 *   nb_tensor *nb_foo(const nb_tensor *x) {
 *       ... compute out with raw kernels ...
 *       nb_node *n = nba_record("foo", out, 1, (const nb_tensor *[]){x}, foo_backward);
 *       if (n) n->saved[0] = <whatever backward needs>;
 *       return out;
 *   }
 *
 * Backward functions run with grad mode off and allocate their temporaries in the current
 * scope; once a backward returns, the engine releases what it made there (16 KB or more) and
 * did not pass to nba_accumulate, so a backward keeps no tensor it made. Every op name passed
 * to nba_record must appear in op_list.h. */
#ifndef NABLA_NODE_H
#define NABLA_NODE_H

#include "nabla/autograd.h"
#include "nabla/ops.h"
#include "../tensor/scope.h"

typedef void (*nba_backward_fn)(nb_node *n, const nb_tensor *grad_out);

/* What a node with state beyond its own fields (a user function's, function.c) does at the
 * two points of its life the engine drives; built-in ops have none (hooks == NULL). */
typedef struct {
    /* Backward ran without retain_graph: drops the saved tensors; true if there were any. */
    bool (*drop_saved)(nb_node *n);
    /* The node goes with its scope: releases the state. */
    void (*release)(nb_node *n);
} nba_node_hooks;

#define NBA_INLINE_INPUTS 4

struct nb_node {
    nbt_owned owned; /* first: the scope releases the node */
    const char *op;
    nba_backward_fn backward;
    int ninputs;
    nb_tensor **inputs; /* inline_inputs, or a heap array for many inputs */
    nb_tensor *inline_inputs[NBA_INLINE_INPUTS];
    nb_tensor *out;
    /* What backward needs: tensors (held by this scope), numbers, integers. The engine drops
     * the tensors once backward has run (unless the graph is retained). */
    nb_tensor *saved[4];
    double f[4];
    int64_t i[NB_MAX_DIMS + 4];
    nb_tensor *grad; /* gradient of out, accumulated while backward runs */
    uint64_t visit;  /* traversal epoch */
    /* Outputs: built-in ops have one (outputs == &out, grads == &grad); a user function
     * (function.c) may have several, each with its gradient, and backward runs once for all. */
    int noutputs;
    nb_tensor **outputs, **grads;
    bool consumed; /* backward ran and released saved tensors: a second pass is an error */
    struct nba_function_state *function; /* user functions only (function.c), else NULL */
    const nba_node_hooks *hooks;         /* NULL, or what the state above needs */
};

/* True when grad mode is on and any of the n inputs requires grad. */
bool nba_any_requires_grad(int n, const nb_tensor *const *inputs);
/* If nba_any_requires_grad, records a node producing out and marks out as requiring grad;
 * returns the node so the caller can save what backward needs, else NULL. Inputs are
 * referenced, not copied: ops must not modify them afterwards. */
nb_node *nba_record(const char *op, nb_tensor *out, int n, const nb_tensor *const *inputs,
                    nba_backward_fn backward);
/* nba_record for an op with several outputs (a user function's): one node, whose backward
 * runs once after every output's gradient is in (n->grads[k]; NULL for an output that got
 * none). Only float outputs are marked as requiring grad. */
nb_node *nba_record_outputs(const char *op, int nout, nb_tensor *const *outs, int n,
                            const nb_tensor *const *inputs, nba_backward_fn backward);
/* True if input i of n needs a gradient (skip computing it otherwise). */
bool nba_input_needs_grad(const nb_node *n, int i);
/* Adds g into input i's gradient. g may be broadcast-shaped: extra leading dims and dims
 * where the input has size 1 are summed away. g's dtype must match the input's. */
void nba_accumulate(nb_node *n, int i, const nb_tensor *g);
/* Input i's own gradient tensor when input i is a leaf that already has one (contiguous, its
 * shape and dtype), for a backward to add its contribution straight into, as nba_accumulate
 * would; NULL otherwise (then call nba_accumulate). Borrowed. */
nb_tensor *nba_leaf_grad(const nb_node *n, int i);

#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
/* Called with the op name of every node recorded (NULL to remove). */
void nba_set_record_hook(void (*hook)(const char *op));
#endif

/* ---- raw helpers shared by backward functions ---- */
/* Sums t down to the given shape (t's shape must broadcast-reduce to it). New tensor. */
nb_tensor *nba_sum_to_shape(const nb_tensor *t, int ndim, const int64_t *shape);
/* out (contiguous) += alpha * src scattered along dim at the contiguous idx (K entries,
 * checked); src has out's shape but K at dim, any layout. Each element adds its entries in
 * index order, so the split does not change the result (index.c). False if out of memory. */
bool nba_index_add(nb_tensor *out, int dim, const nb_tensor *idx, const nb_tensor *src,
                   double alpha);
/* dst += src in place (src broadcast to dst; same float dtype). */
void nba_add_into(nb_tensor *dst, const nb_tensor *src);
/* Checks that every input is non-NULL; records "op: NULL input" otherwise. */
bool nba_check_inputs(const char *op, int n, const nb_tensor *const *inputs);
/* Checks a is a float tensor; error names op. */
bool nba_check_float(const char *op, const nb_tensor *a);
/* Checks a and b are float tensors of the same dtype; error names op and both shapes. */
bool nba_check_same_float(const char *op, const nb_tensor *a, const nb_tensor *b);

#endif
