/* A classifier of Fisher's iris flowers (python3-sklearn's iris.csv): a seeded
 * train/validation split, shuffled batches, evaluation with early stopping and the best
 * checkpoint; reports the best model's validation accuracy.
 * Twin: examples/pytorch/iris_classifier.py. Usage: iris_classifier [CSV [OUT_DIR [STEPS]]] */
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>

#define IRIS_CSV "/usr/lib/python3/dist-packages/sklearn/datasets/data/iris.csv"

typedef struct {
    nb_linear *fc1, *fc2;
    nb_loader *loader;
    nb_dataset *val;
} classifier;

static nb_tensor *logits(classifier *c, const nb_tensor *x) {
    return nb_linear_forward(c->fc2, nb_relu(nb_linear_forward(c->fc1, x)));
}

static nb_tensor *step(void *user, const nb_train_micro *m, double *metrics) {
    (void)m, (void)metrics;
    classifier *c = user;
    nb_batch b;
    int got = nb_loader_next(c->loader, &b);
    if (got == 0) got = nb_loader_next(c->loader, &b); /* the next epoch */
    return got > 0 ? nb_cross_entropy(logits(c, b.inputs), b.targets, -1, NB_REDUCE_MEAN) : NULL;
}

static bool accuracy(void *user, int64_t steps_done, double *acc) {
    (void)steps_done;
    classifier *c = user;
    *acc = nb_accuracy(logits(c, nb_dataset_inputs(c->val)), nb_dataset_targets(c->val), -100);
    return *acc >= 0;
}

int main(int argc, char **argv) {
    /* iris.csv: a first line of counts and class names, then 4 measurements and a class. */
    const nb_csv_opts csv = {
        .header = true, .target_cols = (int[]){-1}, .n_target_cols = 1, .target_dtype = NB_I64};
    nb_dataset *all = nb_dataset_from_csv(argc > 1 ? argv[1] : IRIS_CSV, &csv), *train = NULL;
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    classifier c = {0};
    bool ok = all && nb_dataset_split(all, &rng, nb_dataset_len(all) / 5, &train, &c.val);
    c.loader =
        nb_loader_new(train, &(nb_loader_opts){.batch_size = 16, .shuffle = true, .seed = 2});
    nb_module *model = nb_model_new(NB_F32, 3);
    c.fc1 = nb_linear_new(model, "fc1", 4, 32, true);
    c.fc2 = nb_linear_new(model, "fc2", 32, 3, true);
    nb_optimizer *opt = nb_adamw_new_decay_split(model, nb_adam_defaults(0.01)); /* no decay */

    nb_train_opts o = nb_train_defaults(argc > 3 ? atoll(argv[3]) : 1000);
    o.step = step, o.user = &c, o.out_dir = argc > 2 ? argv[2] : "out/iris_classifier";
    o.eval = accuracy, o.eval_every = 20, o.eval_name = "accuracy", o.maximize = true;
    o.patience = 10, o.quiet = true;
    nb_train_result r;
    ok = ok && c.loader && opt && nb_train(model, opt, &o, &r);
    if (ok)
        printf("best validation accuracy %.4f after %lld steps%s\n", r.best_metric,
               (long long)r.best_step, r.stopped_early ? " (stopped early)" : "");
    else
        fprintf(stderr, "iris_classifier: %s\n", nb_last_error());
    nb_optimizer_free(opt);
    nb_module_free(model);
    nb_loader_free(c.loader);
    nb_dataset_free(all), nb_dataset_free(train), nb_dataset_free(c.val);
    return ok ? 0 : 1;
}
