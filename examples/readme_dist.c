/* docs/guide.md's data-parallel training loop, compiled and run by the test suite (a world of
 * one; under mpirun, each rank trains on micro-batches of its own): a linear model learns
 * y = 2x + 1 with its gradients averaged over micro-batches and ranks, and every rank ends
 * with the same parameters. Build: cc readme_dist.c $(pkg-config --cflags --libs nabla-dist) */
#include <nabla/nabla.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The mean squared error of the model on 8 points x in [0, 1) drawn from rng. */
static nb_tensor *loss_of_my_micro_batch(nb_linear *model, nb_rng *rng) {
    nb_tensor *x = nb_rand(rng, NB_F32, NB_SHAPE(8, 1));
    nb_tensor *y = nb_add_scalar(nb_mul_scalar(x, 2), 1);
    return nb_mse_loss(nb_linear_forward(model, x), y, NB_REDUCE_MEAN);
}

int main(int argc, char **argv) {
    nb_module *model = nb_model_new(NB_F32, /*seed*/ 5);
    nb_linear *fit = nb_linear_new(model, "fit", 1, 1, true);
    int n = 0;
    nb_tensor **params = nb_module_param_tensors(model, &n);
    nb_optimizer *opt = nb_sgd_new(n, params, nb_sgd_defaults(0.2));
    nb_rng rng;

    nb_dist_init(&argc, &argv);                             /* a world of one without mpirun */
    nb_dist_broadcast_module(model);                        /* same model and start on every rank */
    nb_grad_reducer *r = nb_grad_reducer_new(n, params, 0); /* 4 MiB buckets */
    nb_rng_seed(&rng, 1 + (uint64_t)nb_dist_rank());        /* each rank its own data */
    for (int step = 0; step < 300; step++) {
        nb_optimizer_zero_grad(opt);
        for (int micro = 0; micro < 2; micro++) {
            nb_scope_begin();
            nb_backward(loss_of_my_micro_batch(fit, &rng), NULL);
            nb_scope_end();
            nb_grad_reducer_add(r); /* once per micro-batch */
        }
        nb_grad_reducer_finish(r); /* average over micro-batches and ranks */
        nb_optimizer_step(opt);
    }
    uint64_t hash = 0;
    const bool same = nb_dist_state_agrees(model, &hash);
    const int rank = nb_dist_rank();
    nb_dist_finalize();

    const double w = nb_item(nb_module_param(model, "fit.weight"));
    const double b = nb_item(nb_module_param(model, "fit.bias"));
    const bool ok = same && fabs(w - 2) < 0.05 && fabs(b - 1) < 0.05;
    if (rank == 0)
        printf("w %.3f b %.3f, parameters' hash %016llx\n", w, b, (unsigned long long)hash);
    if (!ok)
        fprintf(stderr, "readme_dist: failed: %s\n", nb_last_error());
    else if (rank == 0)
        printf("readme_dist: ok\n");
    nb_grad_reducer_free(r);
    free(params);
    nb_optimizer_free(opt);
    nb_module_free(model);
    nb_shutdown();
    return ok ? 0 : 1;
}
