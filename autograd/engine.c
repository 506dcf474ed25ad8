/* The tape: recording nodes, ordering them, running backward, accumulating gradients. */
#include "node.h"
#include "../tensor/elementwise_kernels.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* All of the tape's state is per thread (grad mode, node free list, traversal buffers), so
 * threads training separate models never share it; a thread's buffers are freed when it
 * exits (free_thread_state). */
static _Thread_local bool grad_enabled = true;
static _Thread_local uint64_t visit_epoch;

bool nb_set_grad_enabled(bool enabled) {
    bool prev = grad_enabled;
    grad_enabled = enabled;
    return prev;
}

bool nb_is_grad_enabled(void) {
    return grad_enabled;
}

/* ---- per-thread buffers, freed at thread exit ---- */
static _Thread_local nb_node *node_free;
static _Thread_local nb_node **order;
static _Thread_local size_t order_cap;
typedef struct {
    nb_node *node;
    int next_input; /* the input topo_sort visits next */
} dfs_frame;
static _Thread_local dfs_frame *stack; /* topo_sort's */
static _Thread_local size_t stack_cap;
/* The gradient slots' holders during one backward (see "releasing gradients" below): an
 * open-addressed table of tensor -> number of slots holding it, and the tensors that left a
 * slot during the node's backward that is running, released once it returns. */
typedef struct {
    const nb_tensor *t;
    int64_t holders;
} holder_entry;
static _Thread_local holder_entry *holders;
/* holders_cap: the table's size for this backward, a power of two (0 before the first);
 * holders_room: what is allocated, so a small graph after a large one clears only its own. */
static _Thread_local size_t holders_cap, holders_room, holders_used;
static _Thread_local nb_tensor **dropped;
static _Thread_local size_t dropped_len, dropped_cap;
static _Thread_local bool releasing;           /* a backward is running that releases gradients */
static _Thread_local uint64_t made_mark;       /* nbt_storage_mark when that backward began */
static _Thread_local bool holders_full;        /* a slot's tensor found no room in the table */
static _Thread_local uint64_t backwards_begun; /* nb_backward_with calls, nested ones too */
static _Thread_local bool exit_hook;
/* Pointer arrays of nodes with more inputs than fit inline or with several outputs, kept by
 * power-of-two capacity (8 << class) when their node goes, so that a loop recording the same
 * graph every step allocates none after its first. A free array links to the next by its
 * first slot. */
#define ARRAY_CLASSES 28
static _Thread_local void *array_free[ARRAY_CLASSES];

static void free_thread_state(void *unused) {
    (void)unused;
    while (node_free) {
        nb_node *n = node_free;
        node_free = (nb_node *)n->owned.next;
        free(n);
    }
    for (int c = 0; c < ARRAY_CLASSES; c++)
        while (array_free[c]) {
            void **a = array_free[c];
            array_free[c] = *a;
            nbt_free(a);
        }
    free(order);
    free(stack);
    free(holders);
    free(dropped);
    order = NULL;
    stack = NULL;
    holders = NULL;
    dropped = NULL;
    order_cap = stack_cap = holders_cap = holders_room = dropped_cap = 0;
}

static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static void make_exit_key(void) {
    pthread_key_create(&exit_key, free_thread_state);
}

/* Called before this thread's buffers first hold memory. */
static void thread_state_in_use(void) {
    if (exit_hook) return;
    pthread_once(&exit_key_once, make_exit_key);
    pthread_setspecific(exit_key, &exit_hook); /* non-NULL: the destructor runs at exit */
    exit_hook = true;
}

/* ---- nodes ---- */
/* The class of an array of n pointers, or -1 when none holds so many. */
static int array_class(size_t n) {
    int c = 0;
    while (c < ARRAY_CLASSES && ((size_t)8 << c) < n) c++;
    return c < ARRAY_CLASSES ? c : -1;
}

/* An array with room for n pointers, from this thread's free arrays or the heap; NULL. */
static nb_tensor **array_take(size_t n) {
    int c = array_class(n);
    if (c < 0) return NULL;
    void **a = array_free[c];
    if (a) {
        array_free[c] = *a;
        return (nb_tensor **)a;
    }
    thread_state_in_use();
    return nbt_malloc(sizeof(nb_tensor *) * ((size_t)8 << c));
}

/* Gives back an array taken for n pointers. */
static void array_give(nb_tensor **a, size_t n) {
    int c = array_class(n);
    *(void **)a = array_free[c];
    array_free[c] = a;
}

static void release_node(nbt_owned *o) {
    nb_node *n = (nb_node *)o;
    /* A kept output outlives its node: remember that its history is gone. */
    for (int k = 0; k < n->noutputs; k++) {
        nb_tensor *t = n->outputs[k];
        if (t && t->node == n) {
            t->node = NULL;
            t->graph_released = true;
        }
    }
    if (n->hooks) n->hooks->release(n);
    n->hooks = NULL;
    if (n->inputs != n->inline_inputs) array_give(n->inputs, (size_t)n->ninputs);
    if (n->outputs != &n->out) array_give(n->outputs, 2 * (size_t)n->noutputs);
    thread_state_in_use();
    n->owned.next = (nbt_owned *)node_free;
    node_free = n;
}

#ifdef NABLA_TESTS /* a test hook: in the test build only (tests/meson.build) */
static void (*record_hook)(const char *op);

void nba_set_record_hook(void (*hook)(const char *op)) {
    record_hook = hook;
}
#endif

bool nba_any_requires_grad(int n, const nb_tensor *const *inputs) {
    if (!grad_enabled) return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) return true;
    return false;
}

/* A cleared node from the free list or the heap, with room for n inputs and nout outputs. */
static nb_node *new_node(const char *op, int n, int nout) {
    nb_node *node = node_free;
    if (node)
        node_free = (nb_node *)node->owned.next;
    else if (!(node = nbt_malloc(sizeof *node)))
        return nbt_error(op, "out of memory");
    memset(node, 0, sizeof *node);
    node->owned.release = release_node;
    node->inputs = node->inline_inputs;
    node->outputs = &node->out;
    node->grads = &node->grad;
    bool ok = n <= NBA_INLINE_INPUTS || (node->inputs = array_take((size_t)n)) != NULL;
    if (ok && nout > 1) {
        /* outputs then their gradients, one array */
        node->outputs = array_take(2 * (size_t)nout);
        if (node->outputs) {
            memset(node->outputs, 0, 2 * sizeof(nb_tensor *) * (size_t)nout);
            node->grads = node->outputs + nout;
        }
        ok = node->outputs != NULL;
    }
    if (!ok) {
        if (node->inputs != node->inline_inputs) array_give(node->inputs, (size_t)n);
        thread_state_in_use();
        node->owned.next = (nbt_owned *)node_free;
        node_free = node;
        return nbt_error(op, "out of memory");
    }
    return node;
}

nb_node *nba_record_outputs(const char *op, int nout, nb_tensor *const *outs, int n,
                            const nb_tensor *const *inputs, nba_backward_fn backward) {
    if (!nba_any_requires_grad(n, inputs)) return NULL;
    nb_node *node = new_node(op, n, nout);
    if (!node) return NULL;
    for (int i = 0; i < n; i++) node->inputs[i] = (nb_tensor *)inputs[i];
    node->ninputs = n;
    node->op = op;
    node->backward = backward;
    node->noutputs = nout;
    for (int k = 0; k < nout; k++) node->outputs[k] = outs[k];
    nbt_scope_own(&node->owned);
#ifdef NABLA_TESTS
    if (record_hook) record_hook(op);
#endif
    /* Only float outputs carry gradients; others (indices, masks) are not differentiable. */
    for (int k = 0; k < nout; k++)
        if (outs[k] && nb_is_float(outs[k])) {
            outs[k]->node = node;
            outs[k]->requires_grad = true;
        }
    return node;
}

nb_node *nba_record(const char *op, nb_tensor *out, int n, const nb_tensor *const *inputs,
                    nba_backward_fn backward) {
    if (!out) return NULL;
    return nba_record_outputs(op, 1, &out, n, inputs, backward);
}

bool nba_input_needs_grad(const nb_node *n, int i) {
    return i < n->ninputs && n->inputs[i] && n->inputs[i]->requires_grad;
}

/* ---- leaves ---- */
nb_tensor *nb_requires_grad_(nb_tensor *t, bool requires_grad) {
    if (!t || !nbt_check_live("requires_grad_", t)) return NULL;
    if (t->node)
        return nbt_error("requires_grad_",
                         "tensor of shape %s is not a leaf (it was produced "
                         "by %s); use nb_detach() to make a leaf",
                         nbt_shape(t), t->node->op);
    if (requires_grad && !nb_is_float(t))
        return nbt_error("requires_grad_",
                         "only float tensors can require grad, got %s of "
                         "shape %s",
                         nb_dtype_name(t->dtype), nbt_shape(t));
    t->requires_grad = requires_grad;
    return t;
}

nb_tensor *nb_grad(const nb_tensor *t) {
    return t && nbt_check_live("grad", t) ? t->grad : NULL;
}

void nb_zero_grad(nb_tensor *t) {
    if (t && t->grad) nb_fill_(t->grad, 0.0);
}

/* ---- releasing gradients ----
 * A non-leaf's gradient is needed only until its node's backward has run, so backward
 * releases it then, as PyTorch frees it, instead of keeping every gradient of the step until
 * the scope ends: lmbig's step held about as much memory in spent gradients as in its
 * activations. A gradient may sit in several slots at once (add's backward hands the same
 * gout to both inputs, a view's backward a view of it), so each tensor in a slot has a count
 * of the slots holding it, and it goes when the last lets go. Only tensors whose storage this
 * backward made are released: a caller's grad_output, a saved forward tensor or a view of one
 * that a backward hands on as a gradient stay (the storage's birth mark, memory.c). A tensor
 * that leaves a slot while a backward runs (a second contribution summed over it) waits until
 * that backward returns, since the backward may still read what it made. */

static holder_entry *holder_of(const nb_tensor *t) {
    size_t mask = holders_cap - 1, i = ((uintptr_t)t >> 6) * 0x9E3779B97F4A7C15ull >> 20 & mask;
    while (holders[i].t && holders[i].t != t) i = (i + 1) & mask;
    return &holders[i];
}

/* Room for n tensors in the table, emptied; false when out of memory (nothing is released
 * then). */
static bool holders_reset(size_t n) {
    size_t want = 64;
    while (want < 2 * n) want *= 2;
    if (want > holders_room) {
        thread_state_in_use();
        holder_entry *h = realloc(holders, want * sizeof *h);
        if (!h) return false;
        holders = h;
        holders_room = want;
    }
    holders_cap = want;
    memset(holders, 0, holders_cap * sizeof *holders);
    holders_used = 0;
    holders_full = false;
    return true;
}

/* t now sits in one more slot. A tensor the table has no room for is never released (the
 * table is sized for every tensor that can enter a slot, so this is only a guard). */
static void hold(const nb_tensor *t) {
    if (!releasing || !nbt_worth_releasing(t)) return;
    holder_entry *e = holder_of(t);
    if (!e->t) {
        if (4 * (holders_used + 1) > 3 * holders_cap) {
            holders_full = true;
            return;
        }
        holders_used++;
        e->t = t;
    }
    e->holders++;
}

/* t leaves a slot: released if no slot holds it any more and this backward made it, at once
 * or (later) after the running node's backward. */
static void let_go(nb_tensor *t, bool later) {
    if (!releasing || !nbt_worth_releasing(t)) return;
    holder_entry *e = holder_of(t);
    if (e->t != t || --e->holders > 0) return;
    if (!nbt_storage_made_since(t->storage, made_mark)) return;
    if (!later) {
        nbt_release(t);
        return;
    }
    if (dropped_len == dropped_cap) {
        size_t more = dropped_cap ? 2 * dropped_cap : 64;
        thread_state_in_use();
        nb_tensor **d = realloc(dropped, more * sizeof *d);
        if (!d) return; /* it stays until the scope ends */
        dropped = d;
        dropped_cap = more;
    }
    dropped[dropped_len++] = t;
}

static void release_dropped(void) {
    for (size_t k = 0; k < dropped_len; k++) nbt_release(dropped[k]);
    dropped_len = 0;
}

/* What a built-in op's backward made and did not put in a slot (transposes, contiguous
 * copies, products summed to a broadcast input's shape, a norm's intermediate rows) is spent
 * when the backward returns. What stays: tensors that ever sat in a slot (the table decides
 * those), an input's leaf gradient made in this scope, and tensors too small to track. */
static bool kept_after_backward(const nb_tensor *t, void *node) {
    const nb_node *n = node;
    if (holder_of(t)->t == t) return true; /* only tensors worth_releasing get here */
    for (int i = 0; i < n->ninputs; i++)
        if (n->inputs[i] && n->inputs[i]->grad == t) return true;
    return false;
}

/* True if n's backward may make temporaries worth releasing: its output or first input is.
 * A step of small nodes (the seed workload's) then pays a load and a compare a node. */
static bool may_make_temporaries(const nb_node *n) {
    return releasing &&
           (nbt_worth_releasing(n->out) || (n->ninputs && nbt_worth_releasing(n->inputs[0])));
}

/* Runs after n's backward, begun at mark: releases what it made and dropped. Not after a
 * user function's backward (its user state may keep what it made), a nested backward (whose
 * leaf gradients are other nodes'), or when the table missed a slot's tensor. */
static void release_temporaries(const nb_node *n, nbt_tensor_mark mark, uint64_t begun) {
    if (holders_full || n->function || backwards_begun != begun) return;
    nbt_release_newest(mark, kept_after_backward, (void *)n);
}

/* ---- accumulation ---- */
void nba_accumulate(nb_node *n, int i, const nb_tensor *g) {
    nb_tensor *x = n->inputs[i];
    if (!x || !x->requires_grad || !g) return;
    if (x->node) {
        nb_node *p = x->node;
        int k = 0; /* which of p's outputs x is */
        while (k < p->noutputs - 1 && p->outputs[k] != x) k++;
        nb_tensor **pg = &p->grads[k];
        nb_tensor *was = *pg;
        if (!was) {
            /* Borrow g; a second contribution makes a fresh sum, never writes into g. */
            *pg = nb_same_shape(g, x) ? (nb_tensor *)g : nba_sum_to_shape(g, x->ndim, x->shape);
        } else if (nb_same_shape(g, x)) { /* one pass: a fresh sum, *pg may be borrowed */
            *pg = nbt_add(was, g);
        } else {
            nb_tensor *sum = nbt_contiguous_as(was, was->dtype);
            if (sum) nba_add_into(sum, g);
            *pg = sum;
        }
        if (*pg == was) return;
        hold(*pg);
        let_go(was, true);
        return;
    }
    if (!x->grad) {
        x->grad = nbt_new_in(x->scope, "backward", x->dtype, x->ndim, x->shape);
        if (!x->grad) return;
        if (nb_same_shape(g, x)) { /* the first contribution is copied, not added to zeros */
            nbt_copy(x->grad, g);
            return;
        }
        nb_fill_(x->grad, 0.0);
    }
    nba_add_into(x->grad, g);
}

nb_tensor *nba_leaf_grad(const nb_node *n, int i) {
    nb_tensor *x = i < n->ninputs ? n->inputs[i] : NULL;
    if (!x || !x->requires_grad || x->node || !x->grad) return NULL;
    nb_tensor *g = x->grad;
    return g->dtype == x->dtype && nb_same_shape(g, x) && nb_is_contiguous(g) ? g : NULL;
}

/* ---- traversal ---- */
/* array (of *cap elements of size bytes) doubled, from 256; NULL when out of memory, array
 * and *cap then unchanged. */
static void *grown(void *array, size_t *cap, size_t size) {
    thread_state_in_use();
    size_t more = *cap ? 2 * *cap : 256;
    void *g = realloc(array, more * size);
    if (g) *cap = more;
    return g;
}

static bool push(size_t *len, nb_node *n) {
    if (*len == order_cap) {
        nb_node **g = grown(order, &order_cap, sizeof *order);
        if (!g) return false;
        order = g;
    }
    order[(*len)++] = n;
    return true;
}

/* A node whose backward already ran without retain_graph has dropped what it saved. */
static bool usable(const nb_node *n) {
    if (!n->consumed) return true;
    nbt_error("backward",
              "trying to backward through the graph a second time: %s's backward "
              "already ran and released what it saved; pass retain_graph = true "
              "(nb_backward_with) to the first backward to go through it again",
              n->op);
    return false;
}

/* Pushes n onto the traversal stack, marked visited in epoch; false when out of memory. */
static bool stack_push(nb_node *n, size_t *sp, uint64_t epoch) {
    if (*sp == stack_cap) {
        dfs_frame *g = grown(stack, &stack_cap, sizeof *stack);
        if (!g) return false;
        stack = g;
    }
    n->visit = epoch;
    stack[(*sp)++] = (dfs_frame){n, 0};
    return true;
}

/* Post-order DFS without recursion: order[] ends with out's node; visiting it backwards
 * runs each node after every node that consumes its output. */
static bool topo_sort(nb_node *root, size_t *len) {
    uint64_t epoch = ++visit_epoch;
    size_t sp = 0;
    *len = 0;
    if (!usable(root) || !stack_push(root, &sp, epoch)) return false;
    while (sp > 0) {
        nb_node *n = stack[sp - 1].node;
        int k = stack[sp - 1].next_input++;
        if (k < n->ninputs) {
            nb_tensor *x = n->inputs[k];
            if (x && x->requires_grad && x->graph_released) {
                nbt_error("backward",
                          "input %d of %s (shape %s) was kept out of a scope that "
                          "has ended, so its history is gone; backward must run before "
                          "nb_scope_end",
                          k, n->op, nbt_shape(x));
                return false;
            }
            if (x && x->node && x->node->visit != epoch) {
                if (!usable(x->node) || !stack_push(x->node, &sp, epoch)) return false;
            }
        } else {
            sp--;
            if (!push(len, n)) return false;
        }
    }
    return true;
}

/* Runs n's backward; false (with the error it recorded) if it failed. An error it cleared
 * (a user backward that recovered, function.c) is not a failure. */
static bool run_backward(nb_node *n) {
    uint64_t errors = nbt_error_count();
    n->backward(n, n->grad);
    if (!nbt_error_left_since(errors)) return true;
    /* The message names the failing op already; say that it happened in backward. */
    char cause[768];
    snprintf(cause, sizeof cause, "%s", nb_last_error());
    nbt_error("backward", "in the backward of %s: %s", n->op, cause);
    return false;
}

static bool has_grad(const nb_node *n) {
    for (int k = 0; k < n->noutputs; k++)
        if (n->grads[k]) return true;
    return false;
}

/* What backward saved is dropped once it ran (PyTorch frees its saved tensors the same way);
 * the node stays so that a second pass through it can name it in the error. A node that saved
 * no tensors (a view, a sum, a scaling) loses nothing, so it stays usable: a later backward
 * through it is as right as a retained one (PyTorch runs such nodes again too). */
static void consume(nb_node *n) {
    bool saved = n->hooks && n->hooks->drop_saved(n);
    for (size_t k = 0; k < sizeof n->saved / sizeof n->saved[0]; k++) saved |= n->saved[k] != NULL;
    memset(n->saved, 0, sizeof n->saved);
    if (saved) n->consumed = true;
}

bool nb_backward(nb_tensor *out, const nb_tensor *grad_output) {
    return nb_backward_with(out, grad_output, NULL);
}

bool nb_backward_with(nb_tensor *out, const nb_tensor *grad_output, const nb_backward_opts *opts) {
    if (!out) return nbt_error("backward", "NULL tensor"), false;
    if (!nbt_check_live("backward", out) || !nbt_check_live("backward", grad_output)) return false;
    if (out->graph_released)
        return nbt_error("backward",
                         "the graph of this tensor (shape %s) was released when "
                         "its scope ended",
                         nbt_shape(out)),
               false;
    if (!out->requires_grad)
        return nbt_error("backward",
                         "tensor of shape %s does not require grad and has no "
                         "grad_fn",
                         nbt_shape(out)),
               false;
    if (grad_output) {
        if (!nb_same_shape(grad_output, out) || grad_output->dtype != out->dtype)
            return nbt_error("backward", "grad_output has shape %s (%s), expected %s (%s)",
                             nbt_shape(grad_output), nb_dtype_name(grad_output->dtype),
                             nbt_shape(out), nb_dtype_name(out->dtype)),
                   false;
    } else if (nbt_numel(out) != 1) {
        return nbt_error("backward",
                         "grad can be implicitly created only for outputs with one "
                         "element, got shape %s; pass grad_output",
                         nbt_shape(out)),
               false;
    }
    const bool retain = opts && opts->retain_graph;
    backwards_begun++;
    bool prev = nb_set_grad_enabled(false);
    uint64_t errors = nbt_error_count();
    /* A nested backward (inside a user function's backward) releases nothing: the table of
     * slot holders is the outer one's. */
    const bool outer_releasing = releasing;
    releasing = false;
    if (!outer_releasing) made_mark = nbt_storage_mark();
    nb_tensor *seed =
        grad_output ? (nb_tensor *)grad_output : nb_ones(out->dtype, out->ndim, out->shape);
    if (!out->node) { /* a leaf: its gradient is the seed itself */
        nb_node fake = {.ninputs = 1, .inputs = fake.inline_inputs, .inline_inputs = {out}};
        if (seed) nba_accumulate(&fake, 0, seed);
        nb_set_grad_enabled(prev);
        return nbt_error_count() == errors;
    }
    size_t len = 0;
    bool ok = seed != NULL;
    if (ok && !topo_sort(out->node, &len)) {
        if (nbt_error_count() == errors) nbt_error("backward", "out of memory ordering the graph");
        ok = false;
        len = 0;
    }
    /* Every tensor that enters a slot: the seed and at most one a node's input. */
    size_t entering = 1;
    for (size_t k = 0; k < len; k++) entering += (size_t)order[k]->ninputs;
    if (!outer_releasing && ok && holders_reset(entering)) releasing = true;
    if (ok) {
        nb_node *root = out->node;
        int k = 0;
        while (k < root->noutputs - 1 && root->outputs[k] != out) k++;
        root->grads[k] = seed;
        hold(seed);
    }
    /* Stop at the first backward that fails: later ones would work on a wrong gradient. */
    for (size_t k = len; ok && k-- > 0;) {
        nb_node *n = order[k];
        if (!has_grad(n)) continue;
        const bool temporaries = may_make_temporaries(n);
        nbt_tensor_mark mark = temporaries ? nbt_tensor_mark_now() : (nbt_tensor_mark){0};
        uint64_t begun = backwards_begun;
        ok = run_backward(n);
        if (ok && temporaries) release_temporaries(n, mark, begun);
        if (!retain) consume(n);
        release_dropped();
        for (int j = 0; j < n->noutputs; j++) {
            nb_tensor *g = n->grads[j];
            n->grads[j] = NULL;
            let_go(g, false);
        }
    }
    for (size_t k = 0; k < len; k++)
        for (int j = 0; j < order[k]->noutputs; j++) order[k]->grads[j] = NULL;
    if (releasing) release_dropped();
    releasing = outer_releasing;
    nb_set_grad_enabled(prev);
    return ok;
}
