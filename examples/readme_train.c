/* The README's training program: a small MLP learns which points lie inside a circle, through
 * nb_train with evaluation, early stopping, the best checkpoint and resumable checkpoints.
 * Usage: readme_train [DIR [--resume]] */
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    nb_linear *fc1, *fc2;
    nb_rng data; /* where the data stream is: saved in checkpoints */
} classifier;

/* n points in [-1, 1)^2 and whether each lies inside the circle of radius 0.7. */
static nb_tensor *points(nb_rng *rng, int64_t n, nb_tensor **inside) {
    nb_tensor *x = nb_add_scalar(nb_mul_scalar(nb_rand(rng, NB_F32, NB_SHAPE(n, 2)), 2), -1);
    nb_tensor *r2 = nb_sum_dims(nb_mul(x, x), 1, (int[]){1}, false);
    *inside = nb_to_dtype(nb_lt(r2, nb_scalar(NB_F32, 0.49)), NB_I64);
    return x;
}

static nb_tensor *logits(classifier *c, nb_tensor *x) {
    return nb_linear_forward(c->fc2, nb_relu(nb_linear_forward(c->fc1, x)));
}

static nb_tensor *step(void *user, const nb_train_micro *m, double *metrics) {
    classifier *c = user;
    (void)m, (void)metrics; /* one micro-batch a step; no extra metrics */
    nb_tensor *y, *x = points(&c->data, 64, &y);
    return nb_cross_entropy(logits(c, x), y, -1, NB_REDUCE_MEAN);
}

static bool accuracy(void *user, int64_t steps_done, double *acc) {
    (void)steps_done;
    nb_rng rng; /* the same 1000 validation points every time */
    nb_rng_seed(&rng, 12345);
    nb_tensor *y, *x = points(&rng, 1000, &y);
    *acc = nb_count_nonzero(nb_eq(nb_argmax(logits(user, x), 1, false), y)) / 1000.0;
    return true;
}

int main(int argc, char **argv) {
    nb_module *model = nb_model_new(NB_F32, 1);
    classifier c = {.fc1 = nb_linear_new(model, "fc1", 2, 32, true),
                    .fc2 = nb_linear_new(model, "fc2", 32, 2, true)};
    nb_rng_seed(&c.data, 7);
    int n;
    nb_tensor **params = nb_module_param_tensors(model, &n);
    nb_optimizer *opt = nb_adamw_new(n, params, nb_adamw_defaults(0.01));

    nb_train_opts o = nb_train_defaults(1000);
    o.step = step, o.user = &c;
    nb_lr_schedule cosine = nb_lr_cosine(50, 1000, 0.1); /* warm-up, then down to lr / 10 */
    o.schedule = &cosine;
    o.eval = accuracy, o.eval_every = 50, o.eval_name = "accuracy", o.maximize = true;
    o.patience = 5; /* stop after 5 evaluations without a better accuracy */
    o.out_dir = argc > 1 ? argv[1] : "out/readme_train";
    o.checkpoint_every = 100, o.resume = argc > 2; /* readme_train DIR --resume */
    o.data_state = &c.data, o.data_state_bytes = sizeof c.data;
    nb_train_result r;
    bool ok = nb_train(model, opt, &o, &r);
    if (ok)
        printf("best accuracy %.3f after %lld steps: %s/best.safetensors\n", r.best_metric,
               (long long)r.best_step, o.out_dir);
    else
        fprintf(stderr, "%s\n", nb_last_error());
    nb_optimizer_free(opt);
    free(params);
    nb_module_free(model);
    return ok ? 0 : 1;
}
