/* Data-parallel cost on this machine: the lm workload of bench/nabla_bench (V65 B16 T64 D128
 * H4 L2, AdamW) with its global batch of 16 split over the ranks, and the time to average the
 * lm's gradients across ranks.
 *
 *   dist_bench [--threads N] [--steps N]              one process (N threads)
 *   mpirun -np 2 dist_bench --threads 1 [--steps N]   two ranks, one thread each
 *
 * Rank 0 prints the median step time (forward, backward, gradient averaging, AdamW) with the
 * averaging's part of it (which includes waiting for the slower rank), then the median time
 * of the averaging alone with the ranks in lockstep, and that time per MB of gradients. */
#define _POSIX_C_SOURCE 200809L
#include <nabla/nabla.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { V = 65, B = 16, T = 64, D = 128, H = 4, L = 2, MAX_STEPS = 1000 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static void die(const char *what) {
    char msg[1024];
    snprintf(msg, sizeof msg, "dist_bench: %s: %s", what, nb_last_error());
    nb_dist_abort(1, msg);
}

int main(int argc, char **argv) {
    if (!nb_dist_init(&argc, &argv)) die("starting MPI");
    int threads = 0, steps = 60;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[i + 1]);
    }
    if (steps < 10 || steps > MAX_STEPS) steps = 60;
    if (threads > 0) nb_set_num_threads(threads);
    int rank = nb_dist_rank(), ranks = nb_dist_world_size();
    if (B % ranks) die("the batch of 16 must split evenly over the ranks");
    int64_t b = B / ranks;

    nb_module *model = nb_model_new(NB_F32, 0);
    nb_transformer_lm *lm = nb_transformer_lm_new(model, "", V, T, D, H, L, 0.0);
    nb_param p[64];
    int n = nb_module_named_params(model, p, 64);
    nb_tensor *params[64];
    for (int i = 0; i < n; i++) params[i] = p[i].tensor;
    nb_optimizer *opt = nb_adamw_new(n, params, nb_adamw_defaults(1e-3));
    nb_grad_reducer *reducer = nb_grad_reducer_new(n, params, 0);
    if (!lm || !opt || !reducer || !nb_dist_broadcast_module(model)) die("setting up");
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    nb_scope_push(model->scope);
    nb_tensor *idx = nb_randint(&rng, 0, V, NB_SHAPE(B, T)),
              *tgt = nb_randint(&rng, 0, V, NB_SHAPE(B * T));
    nb_tensor *my_idx = nb_narrow(idx, 0, rank * b, b),
              *my_tgt = nb_narrow(tgt, 0, rank * b * T, b * T);
    nb_scope_pop();

    static double step_times[MAX_STEPS], sync_times[MAX_STEPS];
    for (int s = -5; s < steps; s++) { /* five warm-up steps */
        double t0 = now();
        nb_scope_begin();
        nb_tensor *logits = nb_transformer_lm_forward(lm, my_idx, true, NULL, NULL);
        nb_tensor *loss =
            nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, V)), my_tgt, -100, NB_REDUCE_MEAN);
        if (!loss || !nb_backward(loss, NULL) || !nb_grad_reducer_add(reducer)) die("step");
        double t1 = now();
        if (!nb_grad_reducer_finish(reducer)) die("averaging gradients");
        double t2 = now();
        nb_optimizer_step(opt);
        nb_scope_end();
        if (s >= 0) step_times[s] = now() - t0, sync_times[s] = t2 - t1;
    }
    double step = median(step_times, steps), sync = median(sync_times, steps);
    /* The exchange alone, ranks in lockstep: what averaging costs when no rank is late. */
    for (int s = 0; s < steps; s++) {
        if (!nb_grad_reducer_add(reducer) || !nb_dist_all_ok(true)) die("averaging gradients");
        double t0 = now();
        if (!nb_grad_reducer_finish(reducer)) die("averaging gradients");
        sync_times[s] = now() - t0;
    }
    double alone = median(sync_times, steps);
    double mb = (double)nb_grad_reducer_bytes(reducer) / (1024.0 * 1024.0);
    if (rank == 0)
        printf("lm %d rank(s) x %d thread(s): %8.1f us/step, of which averaging %.1f us; "
               "averaging alone %.2f MB in %d bucket(s): %.1f us (%.1f us/MB)\n",
               ranks, nb_get_num_threads(), step * 1e6, sync * 1e6, mb,
               nb_grad_reducer_bucket_count(reducer), alone * 1e6, alone * 1e6 / mb);
    nb_grad_reducer_free(reducer);
    nb_optimizer_free(opt);
    nb_module_free(model);
    nb_dist_finalize();
    return 0;
}
