/* User-defined differentiable functions (nabla/function.h) on the engine's own nodes: the
 * forward runs with grad mode off, then one node records every output, and its backward
 * calls the user's backward with all output gradients at once. */
#include "nabla/function.h"

#include "node.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

struct nba_function_state {
    const nb_function *fn;
    void *user;
    const nb_tensor *saved[NB_FUNCTION_MAX_SAVED];
    double scalars[NB_FUNCTION_MAX_SAVED];
    int nsaved, nscalars;
    bool needs_grad[NB_FUNCTION_MAX_IO];
    bool released; /* backward ran without retain_graph: saved tensors dropped */
    struct nba_function_state *next_free;
};

/* Released states are recycled: a training loop records the same functions every step, so
 * after its first step no state is malloc'd, as with tensors and nodes (nb_alloc_count). One
 * list for every thread (a node may end on another thread than the one that recorded it). */
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nba_function_state *state_free;

static struct nba_function_state *state_new(void) {
    pthread_mutex_lock(&state_lock);
    struct nba_function_state *st = state_free;
    if (st) state_free = st->next_free;
    pthread_mutex_unlock(&state_lock);
    return st ? st : nbt_malloc(sizeof *st);
}

static const char *name_of(const nb_node *ctx) {
    return ctx && ctx->function ? ctx->function->fn->name : "function";
}

/* The state behind a context, or NULL with an error (a node that is not a user function's). */
static struct nba_function_state *state_of(const nb_node *ctx, const char *what) {
    if (ctx && ctx->function) return ctx->function;
    nbt_error(what, "not a user function's context");
    return NULL;
}

bool nb_ctx_save(nb_node *ctx, const nb_tensor *t) {
    struct nba_function_state *st = state_of(ctx, "ctx_save");
    if (!st) return false;
    if (!t) return nbt_error(name_of(ctx), "ctx_save: NULL tensor"), false;
    if (st->nsaved == NB_FUNCTION_MAX_SAVED)
        return nbt_error(name_of(ctx), "ctx_save: more than %d saved tensors",
                         NB_FUNCTION_MAX_SAVED),
               false;
    st->saved[st->nsaved++] = t;
    return true;
}

const nb_tensor *nb_ctx_saved(const nb_node *ctx, int i) {
    struct nba_function_state *st = state_of(ctx, "ctx_saved");
    if (!st) return NULL;
    if (st->released)
        return nbt_error(name_of(ctx), "ctx_saved: the saved tensors were released after "
                                       "backward ran (retain_graph keeps them)");
    if (i < 0 || i >= st->nsaved)
        return nbt_error(name_of(ctx), "ctx_saved: no saved tensor %d (%d saved)", i, st->nsaved);
    return st->saved[i];
}

int nb_ctx_saved_count(const nb_node *ctx) {
    return ctx && ctx->function ? ctx->function->nsaved : 0;
}

bool nb_ctx_save_scalar(nb_node *ctx, double value) {
    struct nba_function_state *st = state_of(ctx, "ctx_save_scalar");
    if (!st) return false;
    if (st->nscalars == NB_FUNCTION_MAX_SAVED)
        return nbt_error(name_of(ctx), "ctx_save_scalar: more than %d saved numbers",
                         NB_FUNCTION_MAX_SAVED),
               false;
    st->scalars[st->nscalars++] = value;
    return true;
}

double nb_ctx_scalar(const nb_node *ctx, int i) {
    struct nba_function_state *st = state_of(ctx, "ctx_scalar");
    if (!st) return NAN;
    if (i < 0 || i >= st->nscalars)
        return nbt_error(name_of(ctx), "ctx_scalar: no saved number %d (%d saved)", i,
                         st->nscalars),
               NAN;
    return st->scalars[i];
}

bool nb_ctx_needs_input_grad(const nb_node *ctx, int i) {
    return ctx && ctx->function && i >= 0 && i < ctx->ninputs && ctx->function->needs_grad[i];
}

void *nb_ctx_user(const nb_node *ctx) {
    return ctx && ctx->function ? ctx->function->user : NULL;
}

/* The node's hooks (node.h): the state goes back to the free list with the node, and a pass
 * without retain_graph drops the tensors nb_ctx_save kept. */
static void function_release(nb_node *n) {
    struct nba_function_state *st = n->function;
    n->function = NULL;
    if (!st) return;
    pthread_mutex_lock(&state_lock);
    st->next_free = state_free;
    state_free = st;
    pthread_mutex_unlock(&state_lock);
}

static bool function_drop_saved(nb_node *n) {
    struct nba_function_state *st = n->function;
    if (!st || st->nsaved == 0) return false;
    memset(st->saved, 0, sizeof st->saved);
    st->released = true;
    return true;
}

static const nba_node_hooks function_hooks = {.drop_saved = function_drop_saved,
                                              .release = function_release};

nb_tensor *nb_sum_to_shape(const nb_tensor *g, int ndim, const int64_t *shape) {
    if (!nba_check_float("sum_to_shape", g)) return NULL;
    if (ndim < 0 || ndim > NB_MAX_DIMS || (ndim && !shape))
        return nbt_error("sum_to_shape", "bad target shape (%d dims)", ndim);
    int64_t b[NB_MAX_DIMS];
    int bnd;
    if (!nbt_broadcast_shape("sum_to_shape", ndim, shape, g->ndim, g->shape, &bnd, b) ||
        bnd != g->ndim || memcmp(b, g->shape, sizeof(int64_t) * (size_t)bnd) != 0)
        return nbt_error("sum_to_shape", "a gradient of shape %s does not broadcast from %s",
                         nbt_shape(g), nbt_dims(ndim, shape));
    return nba_sum_to_shape(g, ndim, shape);
}

/* Checks a user backward's gradient for input i against the input: same dtype, and a shape
 * the input broadcasts to. */
static bool valid_grad(const nb_node *n, int i, const nb_tensor *g) {
    const nb_tensor *x = n->inputs[i];
    int64_t b[NB_MAX_DIMS];
    int bnd;
    bool ok = g->dtype == x->dtype &&
              nbt_broadcast_shape(name_of(n), x->ndim, x->shape, g->ndim, g->shape, &bnd, b) &&
              bnd == g->ndim && memcmp(b, g->shape, sizeof(int64_t) * (size_t)bnd) == 0;
    if (!ok)
        nbt_error(name_of(n),
                  "backward returned a gradient for input %d of %s %s; expected %s "
                  "and the input's shape %s (or one that broadcasts from it)",
                  i, nb_dtype_name(g->dtype), nbt_shape(g), nb_dtype_name(x->dtype), nbt_shape(x));
    return ok;
}

static void function_backward(nb_node *n, const nb_tensor *unused) {
    (void)unused;
    struct nba_function_state *st = n->function;
    const nb_function *fn = st->fn;
    const nb_tensor *gout[NB_FUNCTION_MAX_IO];
    nb_tensor *gin[NB_FUNCTION_MAX_IO] = {0};
    for (int k = 0; k < n->noutputs; k++) {
        const nb_tensor *out = n->outputs[k];
        gout[k] = n->grads[k];
        if (!gout[k] && nb_is_float(out)) gout[k] = nb_zeros(out->dtype, out->ndim, out->shape);
        if (!gout[k] && nb_is_float(out)) return; /* out of memory, recorded */
    }
    uint64_t errors = nbt_error_count();
    bool ok = fn->backward(n, n->noutputs, gout, n->ninputs, gin);
    if (!ok) {
        /* One that cleared its own error still gets a message, never "". */
        if (!nbt_error_left_since(errors)) nbt_error(fn->name, "backward returned false");
        return;
    }
    for (int i = 0; i < n->ninputs; i++) {
        if (!gin[i] || !st->needs_grad[i]) continue;
        if (!valid_grad(n, i, gin[i])) return;
        nba_accumulate(n, i, gin[i]);
    }
}

/* Outputs must be new, distinct tensors without history, and not views of the inputs: one
 * sharing an input's memory would change when the input is written. */
static bool valid_outputs(const nb_function *fn, int nin, const nb_tensor *const *in, int nout,
                          nb_tensor *const *out) {
    for (int k = 0; k < nout; k++) {
        char why[96] = "";
        if (!out[k])
            snprintf(why, sizeof why, "is NULL");
        else if (out[k]->node || out[k]->requires_grad)
            snprintf(why, sizeof why, "requires grad already (an input?)");
        for (int i = 0; !why[0] && i < nin; i++)
            if (out[k] == in[i])
                snprintf(why, sizeof why, "is input %d", i);
            else if (in[i] && out[k]->storage == in[i]->storage)
                snprintf(why, sizeof why, "shares memory with input %d (a view of it?)", i);
        for (int j = 0; !why[0] && j < k; j++)
            if (out[k] == out[j]) snprintf(why, sizeof why, "repeats output %d", j);
        if (why[0])
            return nbt_error(fn->name,
                             "forward succeeded but output %d (shape %s) %s; outputs must be "
                             "new tensors (nb_clone a view of an input)",
                             k, nbt_shape(out[k]), why),
                   false;
    }
    return true;
}

bool nb_function_apply(const nb_function *fn, int ninputs, const nb_tensor *const *inputs,
                       int noutputs, nb_tensor **outputs, void *user) {
    if (!fn || !fn->forward || !fn->backward || !fn->name)
        return nbt_error("function_apply", "the function needs a name, a forward and a backward"),
               false;
    if (!outputs || (ninputs && !inputs) || ninputs < 0 || ninputs > NB_FUNCTION_MAX_IO ||
        noutputs < 1 || noutputs > NB_FUNCTION_MAX_IO)
        return nbt_error(fn->name, "needs 0 to %d inputs and 1 to %d outputs, got %d and %d",
                         NB_FUNCTION_MAX_IO, NB_FUNCTION_MAX_IO, ninputs, noutputs),
               false;
    for (int k = 0; k < noutputs; k++) outputs[k] = NULL;
    /* The forward's context: a node on the stack, replaced by a recorded one if needed. */
    struct nba_function_state st = {.fn = fn, .user = user};
    bool record = false;
    for (int i = 0; i < ninputs; i++)
        record |= st.needs_grad[i] = nba_any_requires_grad(1, &inputs[i]);
    nb_node ctx = {.op = fn->name, .ninputs = ninputs, .function = &st};
    uint64_t errors = nbt_error_count();
    bool prev = nb_set_grad_enabled(false);
    bool ok = fn->forward(&ctx, ninputs, inputs, noutputs, outputs);
    nb_set_grad_enabled(prev);
    /* An error the forward cleared (nb_clear_error) was recovered from: it may try an op, see
     * it fail, clear and fall back. One left standing fails the call, with its message. */
    if (ok && nbt_error_left_since(errors)) ok = false;
    ok = ok && valid_outputs(fn, ninputs, inputs, noutputs, outputs);
    if (ok && record) {
        nb_node *n =
            nba_record_outputs(fn->name, noutputs, outputs, ninputs, inputs, function_backward);
        struct nba_function_state *kept = n ? state_new() : NULL;
        if (kept) {
            *kept = st;
            n->function = kept;
            n->hooks = &function_hooks;
        } else {
            /* The node (if any) dies with the scope; without its state it must not run. */
            if (n) n->backward = NULL, n->consumed = true;
            ok = false;
            nbt_error(fn->name, "out of memory recording the function");
        }
    }
    if (ok) return true;
    if (!nbt_error_left_since(errors)) nbt_error(fn->name, "forward returned false");
    for (int k = 0; k < noutputs; k++) outputs[k] = NULL;
    return false;
}

nb_tensor *nb_function_apply1(const nb_function *fn, int ninputs, const nb_tensor *const *inputs,
                              void *user) {
    nb_tensor *out = NULL;
    return nb_function_apply(fn, ninputs, inputs, 1, &out, user) ? out : NULL;
}
