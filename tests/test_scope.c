/* Scopes: nesting, nb_keep, long-lived scopes, where gradients live, the released-history
 * error, misuse errors, and a steady loop that stops calling malloc. Each test starts in a
 * scope of its own opened by the harness. */
#include "harness.h"

#include <stdio.h>

static void test_nested_scopes_release(void) {
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 0);
    nb_tensor *a = nb_zeros(NB_F32, NB_SHAPE(4));
    nb_zeros(NB_F32, NB_SHAPE(4));
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 2);
    nb_scope_begin();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 0);
    nb_tensor *v = nb_transpose(nb_view(a, NB_SHAPE(2, 2)), 0, 1); /* two views */
    nb_ones(NB_F64, NB_SHAPE(3));
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 3);
    nb_scope_begin();
    nb_ones(NB_F64, NB_SHAPE(3));
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 1);
    nb_scope_end();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 3);
    CU_ASSERT_PTR_EQUAL(v->storage, a->storage);
    nb_scope_end();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 2);
    /* The outer tensor outlived the views onto it. */
    nb_fill_(a, 2);
    NBT_ASSERT_VALUES(a, 0, 2, 2, 2, 2);
}

/* A view kept out of a scope keeps its storage alive after the base tensor died. */
static void test_keep_moves_to_parent(void) {
    nb_tensor *outer = nb_zeros(NB_F32, NB_SHAPE(1));
    int64_t before = nb_scope_tensor_count();
    nb_scope_begin();
    nb_tensor *base = nb_arange(NB_F64, 0, 6, 1);
    nb_tensor *view = nb_narrow(nb_view(base, NB_SHAPE(2, 3)), 1, 1, 2);
    nb_tensor *dead = nb_full(NB_F64, NB_SHAPE(3), 1);
    (void)dead;
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 4);
    CU_ASSERT_PTR_EQUAL(nb_keep(view), view);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 3);
    CU_ASSERT_PTR_EQUAL(view->scope, outer->scope);
    nb_scope_end();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), before + 1);
    /* New tensors of the same sizes reuse whatever was freed; the kept view is intact. */
    for (int k = 0; k < 4; k++) nb_fill_(nb_empty(NB_F64, NB_SHAPE(6)), -1);
    NBT_ASSERT_VALUES(view, 0, 1, 2, 4, 5);
    /* Keeping a tensor that already lives outside the current scope changes nothing. */
    nb_scope_begin();
    CU_ASSERT_PTR_EQUAL(nb_keep(outer), outer);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 0);
    nb_scope_end();
    CU_ASSERT_PTR_NULL(nb_keep(NULL));
}

/* Keeping through two levels: each nb_keep moves one level out. */
static void test_keep_twice(void) {
    nb_tensor *marker = nb_zeros(NB_F32, NB_SHAPE(1));
    nb_tensor *t;
    nb_scope_begin();
    nb_scope_begin();
    t = nb_keep(nb_full(NB_F32, NB_SHAPE(2), 3));
    nb_scope_end();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 1);
    nb_keep(t);
    nb_scope_end();
    CU_ASSERT_PTR_EQUAL(t->scope, marker->scope);
    NBT_ASSERT_VALUES(t, 0, 3, 3);
}

static void test_backward_through_released_history(void) {
    nb_tensor *x = nb_requires_grad_(nb_arange(NB_F64, 0, 4, 1), true);
    nb_tensor *y;
    nb_scope_begin();
    y = nb_keep(nb_transpose(nb_view(x, NB_SHAPE(2, 2)), 0, 1));
    CU_ASSERT_PTR_NOT_NULL(y->node);
    nb_scope_end();
    /* The kept tensor still holds its values and still requires grad... */
    NBT_ASSERT_VALUES(y, 0, 0, 2, 1, 3);
    CU_ASSERT_TRUE(y->requires_grad);
    CU_ASSERT_PTR_NULL(y->node);
    CU_ASSERT_TRUE(y->graph_released);
    /* ...but backward through it is an error, directly... */
    nb_tensor *g = nb_ones(NB_F64, NB_SHAPE(2, 2));
    nb_clear_error();
    CU_ASSERT_FALSE(nb_backward(y, g));
    NBT_ASSERT_ERROR("backward: ");
    NBT_ASSERT_ERROR("released");
    NBT_ASSERT_ERROR("[2, 2]");
    /* ...and through a later op that used it. */
    nb_tensor *z = nb_select(y, 0, 1);
    nb_clear_error();
    CU_ASSERT_FALSE(nb_backward(z, nb_ones(NB_F64, NB_SHAPE(2))));
    NBT_ASSERT_ERROR("backward: ");
    NBT_ASSERT_ERROR("scope");
    CU_ASSERT_PTR_NULL(nb_grad(x)); /* nothing was accumulated */
    /* Backward before the scope ends works. */
    nb_scope_begin();
    nb_tensor *w = nb_select(nb_transpose(nb_view(x, NB_SHAPE(2, 2)), 0, 1), 0, 1);
    CU_ASSERT_TRUE(nb_backward(w, nb_from_array(NB_F64, NB_SHAPE(2), (double[]){5, 7})));
    nb_scope_end();
    NBT_ASSERT_VALUES(nb_grad(x), 0, 0, 5, 0, 7);
}

/* A leaf made inside a scope and kept: its gradient must come along. */
static void test_keep_leaf_with_grad(void) {
    nb_tensor *w;
    nb_scope_begin();
    w = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(3)), true);
    CU_ASSERT_TRUE(nb_backward(nb_select(w, 0, 1), NULL));
    NBT_ASSERT_VALUES(nb_grad(w), 0, 0, 1, 0);
    int64_t before_keep = nb_scope_tensor_count();
    nb_keep(w);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), before_keep - 2); /* w and its grad */
    nb_scope_end();
    CU_ASSERT_PTR_EQUAL(nb_grad(w)->scope, w->scope);
    for (int k = 0; k < 4; k++) nb_fill_(nb_empty(NB_F64, NB_SHAPE(3)), -1);
    NBT_ASSERT_VALUES(nb_grad(w), 0, 0, 1, 0);
    /* A kept leaf is still a leaf: backward works in a new scope. */
    nb_scope_begin();
    CU_ASSERT_TRUE(nb_backward(nb_select(w, 0, 2), NULL));
    nb_scope_end();
    NBT_ASSERT_VALUES(nb_grad(w), 0, 0, 1, 1);
}

/* Parameters in a long-lived scope; grads allocated in it; steps in short scopes. */
static void test_long_lived_scope(void) {
    int64_t outer_count = nb_scope_tensor_count();
    nb_scope *params = nb_scope_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(params);
    nb_scope_push(params);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 0);
    nb_tensor *w = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(2, 3)), true);
    nb_tensor *b = nb_requires_grad_(nb_zeros(NB_F64, NB_SHAPE(3)), true);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 2);
    nb_scope_pop();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), outer_count);
    for (int step = 0; step < 3; step++) {
        nb_scope_begin();
        /* out = w.T[2] (= column 2 of w) and b[step] */
        nb_tensor *col = nb_select(nb_transpose(w, 0, 1), 0, 2);
        CU_ASSERT_TRUE(nb_backward(col, nb_full(NB_F64, NB_SHAPE(2), 1)));
        CU_ASSERT_TRUE(nb_backward(nb_select(b, 0, step), NULL));
        CU_ASSERT_PTR_EQUAL(nb_grad(w)->scope, w->scope);
        CU_ASSERT_PTR_EQUAL(nb_grad(b)->scope, b->scope);
        nb_scope_end();
    }
    /* The grads survived every step scope and accumulated. */
    NBT_ASSERT_VALUES(nb_grad(w), 0, 0, 0, 3, 0, 0, 3);
    NBT_ASSERT_VALUES(nb_grad(b), 0, 1, 1, 1);
    nb_zero_grad(w);
    NBT_ASSERT_VALUES(nb_grad(w), 0, 0, 0, 0, 0, 0, 0);
    nb_scope_push(params);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 4); /* w, b and their grads */
    nb_scope_pop();
    nb_scope_free(params);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), outer_count);
    /* A destroyed scope is recycled by the next create and starts empty. */
    nb_scope *again = nb_scope_new();
    nb_scope_push(again);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 0);
    nb_scope_pop();
    nb_scope_free(again);
}

/* Scopes can be pushed inside begun scopes and the other way round. */
static void test_push_inside_begin(void) {
    nb_scope *s = nb_scope_new();
    nb_scope_begin();
    nb_zeros(NB_F32, NB_SHAPE(2));
    nb_scope_push(s);
    nb_tensor *kept = nb_ones(NB_F32, NB_SHAPE(2));
    nb_scope_begin(); /* a step scope on top of a pushed scope */
    nb_tensor *x = nb_full(NB_F32, NB_SHAPE(2), 4);
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 1);
    nb_keep(x); /* into s */
    nb_scope_end();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 2);
    CU_ASSERT_PTR_EQUAL(x->scope, kept->scope);
    nb_scope_pop();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 1); /* back in the begun scope: its zeros */
    nb_scope_end();
    NBT_ASSERT_VALUES(x, 0, 4, 4);
    NBT_ASSERT_VALUES(kept, 0, 1, 1);
    nb_scope_free(s);
}

static void test_scope_misuse_errors(void) {
    nb_scope *s = nb_scope_new();
    nb_scope_push(s);
    /* nb_scope_end must not end a pushed scope */
    nb_clear_error();
    nb_scope_end();
    NBT_ASSERT_ERROR("nb_scope_end: ");
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 0);
    nb_zeros(NB_F32, NB_SHAPE(1));
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 1); /* still in s */
    /* a pushed scope cannot be pushed again or destroyed */
    nb_clear_error();
    nb_scope_push(s);
    NBT_ASSERT_ERROR("nb_scope_push: ");
    nb_clear_error();
    nb_scope_free(s);
    NBT_ASSERT_ERROR("nb_scope_free: ");
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 1);
    nb_scope_pop();
    nb_scope_free(s);
    /* nb_scope_pop must not pop a scope opened by nb_scope_begin (that one is ended) */
    int64_t count = nb_scope_tensor_count();
    nb_scope_begin();
    nb_zeros(NB_F32, NB_SHAPE(1));
    nb_clear_error();
    nb_scope_pop();
    NBT_ASSERT_ERROR("nb_scope_pop: ");
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), 1);
    nb_scope_end();
    CU_ASSERT_EQUAL(nb_scope_tensor_count(), count);
    nb_clear_error();
    nb_scope_push(NULL);
    NBT_ASSERT_ERROR("nb_scope_push: ");
    nb_scope_free(NULL); /* harmless */
}

/* One training-like step: parameters in a long-lived scope, a chain of views, backward. */
static void step(nb_tensor *w) {
    nb_scope_begin();
    nb_tensor *v = nb_view(w, NB_SHAPE(4, 6));
    nb_tensor *t = nb_contiguous(nb_transpose(v, 0, 1));                          /* [6, 4] */
    nb_tensor *j = nb_concat(3, (nb_tensor *[]){t, t, nb_narrow(t, 1, 0, 2)}, 1); /* [6, 10] */
    nb_tensor *s = nb_stack(2, (nb_tensor *[]){j, j}, 0);                         /* [2, 6, 10] */
    nb_tensor *e = nb_expand(nb_unsqueeze(s, 1), NB_SHAPE(2, 3, 6, 10));
    nb_tensor *r = nb_reshape(e, NB_SHAPE(-1)); /* copies */
    nb_tensor *g = nb_ones(NB_F32, NB_SHAPE(360));
    nb_backward(r, g);
    nb_scope_end();
}

static void test_steady_loop_stops_allocating(void) {
    nb_scope *params = nb_scope_new();
    nb_scope_push(params);
    nb_tensor *w = nb_requires_grad_(nb_zeros(NB_F32, NB_SHAPE(24)), true);
    nb_scope_pop();
    step(w);
    uint64_t after_first = nb_alloc_count();
    for (int k = 0; k < 5; k++) step(w);
    CU_ASSERT_EQUAL(nb_alloc_count(), after_first);
    if (nb_alloc_count() != after_first)
        fprintf(stderr, "steady loop: %llu allocations after the first step\n",
                (unsigned long long)(nb_alloc_count() - after_first));
    /* Element k of w is v[a][b] (a = k / 6) and t[b][a]. It appears in j twice, three times
     * when a < 2 (the narrowed copy), then twice more for the stack and three times for the
     * expand; six steps accumulate. */
    nb_tensor *grad = nb_grad(w);
    CU_ASSERT_PTR_NOT_NULL_FATAL(grad);
    for (int64_t k = 0; k < 24; k++) {
        int64_t a = k / 6;
        double per_step = (a < 2 ? 3 : 2) * 2 * 3;
        CU_ASSERT_DOUBLE_EQUAL(nb_get(grad, &k), 6 * per_step, 0);
    }
    nb_scope_free(params);
}

/* The case: a training step's loss read after its scope ended. The struct behind the
 * handle is recycled, and with a plain free list the next step's loss got it, so reading the
 * old handle returned 42 instead of 6. Every build now poisons a released struct and holds it
 * back from reuse for a while (tensor/memory.c's quarantine), so the read is an error naming
 * the call. */
static nb_tensor *loss_of_step(nb_tensor *w, double c) {
    nb_tensor *x = nb_full(NB_F64, NB_SHAPE(3), c);
    nb_tensor *loss = nb_sum(nb_mul(w, x)); /* c * (1 + 2 + 3) */
    CU_ASSERT_TRUE(nb_backward(loss, NULL));
    return loss;
}

static void test_use_after_scope_end_is_an_error(void) {
    nb_tensor *w = nb_from_array(NB_F64, NB_SHAPE(3), (double[]){1, 2, 3});
    nb_requires_grad_(w, true);
    nb_scope_begin();
    nb_tensor *loss = loss_of_step(w, 1);
    CU_ASSERT_DOUBLE_EQUAL(nb_item(loss), 6, 0);
    nb_scope_end();
    NBT_ASSERT_VALUES(nb_grad(w), 0, 1, 1, 1); /* d loss / d w = x */
    /* The next step, the same ops. */
    nb_scope_begin();
    nb_tensor *next = loss_of_step(w, 7);
    CU_ASSERT_PTR_NOT_EQUAL(next, loss);
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_item(loss)));
    NBT_ASSERT_ERROR("item: the tensor (shape [], float64) was released when its scope ended");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_add(loss, next));
    NBT_ASSERT_ERROR("add: the tensor");
    NBT_ASSERT_ERROR("was released");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_backward(loss, NULL));
    NBT_ASSERT_ERROR("backward: the tensor");
    NBT_ASSERT_ERROR("was released");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_data(loss));
    NBT_ASSERT_ERROR("data: the tensor");
    nb_clear_error();
    CU_ASSERT_FALSE(nb_all_finite(loss));
    NBT_ASSERT_ERROR("all_finite: the tensor");
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_count_nonzero(loss), -1);
    NBT_ASSERT_ERROR("count_nonzero: the tensor");
    nb_clear_error();
    CU_ASSERT_PTR_NULL(nb_eq(next, loss));
    NBT_ASSERT_ERROR("eq: the tensor");
    /* The live tensors are untouched by all of this: 7 * 6, and 1 + 7 accumulated in w.grad. */
    CU_ASSERT_DOUBLE_EQUAL(nb_item(next), 42, 0);
    nb_scope_end();
    NBT_ASSERT_VALUES(nb_grad(w), 0, 8, 8, 8);
    /* Still caught after a few more steps' worth of tensors (30 made and released here; the
     * quarantine holds the last 1024 released back). */
    for (int step = 0; step < 3; step++) {
        nb_scope_begin();
        for (int k = 0; k < 10; k++) nb_full(NB_F64, NB_SHAPE(1), 42);
        nb_scope_end();
    }
    nb_clear_error();
    CU_ASSERT_TRUE(isnan(nb_item(loss)));
    NBT_ASSERT_ERROR("item: the tensor (shape [], float64) was released");
    nb_clear_error();
}

int main(void) {
    const nbtest_case cases[] = {
        {"nested scopes release their tensors", test_nested_scopes_release},
        {"keep moves a tensor to the parent", test_keep_moves_to_parent},
        {"keep twice", test_keep_twice},
        {"backward through released history", test_backward_through_released_history},
        {"keep a leaf with its grad", test_keep_leaf_with_grad},
        {"long-lived scope", test_long_lived_scope},
        {"push inside begin", test_push_inside_begin},
        {"scope misuse errors", test_scope_misuse_errors},
        {"steady loop stops allocating", test_steady_loop_stops_allocating},
        {"use after scope end is an error", test_use_after_scope_end_is_an_error},
    };
    return nbtest_run("scope", cases, sizeof cases / sizeof cases[0]);
}
