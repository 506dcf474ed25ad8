/* docs/guide.md's training step in a scope, compiled and run by the test suite: a linear model
 * learns y = 2x + 1, every intermediate of a step is released when its scope ends, and after
 * the first step a step allocates nothing (the free lists serve it). */
#include <nabla/nabla.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const nb_tensor *x, *y; /* [8, 1] each */
} regression_batch;

/* The mean squared error of the model on one batch. */
static nb_tensor *step(nb_linear *model, const regression_batch *batch) {
    return nb_mse_loss(nb_linear_forward(model, batch->x), batch->y, NB_REDUCE_MEAN);
}

int main(void) {
    nb_module *root = nb_model_new(NB_F32, /*seed*/ 5);
    nb_linear *model = nb_linear_new(root, "fit", 1, 1, true);
    int n = 0;
    nb_tensor **params = nb_module_param_tensors(root, &n);
    nb_optimizer *opt = nb_sgd_new(n, params, nb_sgd_defaults(0.1));
    float xs[8], ys[8];
    for (int i = 0; i < 8; i++) xs[i] = (float)i / 8, ys[i] = 2 * xs[i] + 1;
    nb_scope *data = nb_scope_new();
    nb_scope_push(data);
    const regression_batch batch = {nb_from_array(NB_F32, NB_SHAPE(8, 1), xs),
                                    nb_from_array(NB_F32, NB_SHAPE(8, 1), ys)};
    nb_scope_pop();
    double last_loss = INFINITY;
    uint64_t allocs_after_first = 0;
    for (int it = 0; it < 500; it++) {
        nb_optimizer_zero_grad(opt);
        nb_scope_begin(); /* one training step */
        nb_tensor *loss = step(model, &batch);
        nb_backward(loss, NULL);  /* grads land in the parameters' own scope */
        double l = nb_item(loss); /* read what you need before the scope ends */
        nb_scope_end();           /* every intermediate of the step is released */
        nb_optimizer_step(opt);
        if (it == 0) allocs_after_first = nb_alloc_count();
        last_loss = l;
    }
    const uint64_t allocs = nb_alloc_count() - allocs_after_first;
    const double w = nb_item(nb_module_param(root, "fit.weight"));
    const double b = nb_item(nb_module_param(root, "fit.bias"));
    printf("loss %.3g, w %.3f b %.3f, %llu allocations after the first step\n", last_loss, w, b,
           (unsigned long long)allocs);
    free(params);
    nb_optimizer_free(opt);
    nb_scope_free(data);
    nb_module_free(root);
    nb_shutdown();
    if (!(last_loss < 1e-3) || fabs(w - 2) > 0.05 || fabs(b - 1) > 0.05 || allocs != 0) {
        fprintf(stderr, "readme_scopes: failed\n");
        return 1;
    }
    printf("readme_scopes: ok\n");
    return 0;
}
