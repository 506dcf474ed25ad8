#include "update.h"

#include <stdio.h>

bool param_list_of(param_list *pl, const nb_module *model) {
    pl->n = nb_module_params(model, pl->params, PARAM_LIST_MAX);
    for (int i = 0; i < pl->n; i++) pl->tensors[i] = pl->params[i].tensor;
    return pl->n >= 0;
}

bool training_healthy(const char *prog, int64_t step, const nb_tensor *loss, const param_list *pl) {
    bool loss_finite = nb_all_finite(loss);
    for (int i = 0; i < pl->n; i++) {
        const nb_tensor *grad = nb_grad(pl->tensors[i]);
        if (!grad || nb_all_finite(grad)) continue;
        fprintf(stderr,
                "%s: step %lld: the gradient of %s is not finite (loss %g); stopping before "
                "the update\n",
                prog, (long long)step, pl->params[i].name, nb_item(loss));
        return false;
    }
    if (loss_finite) return true;
    fprintf(stderr, "%s: step %lld: the loss is not finite (%g); stopping before the update\n",
            prog, (long long)step, nb_item(loss));
    return false;
}

bool train_update(const char *prog, nb_optimizer *opt, const param_list *pl, nb_tensor *loss,
                  int64_t step, int64_t total, double lr, double min_lr) {
    nb_optimizer_zero_grad(opt);
    if (!loss || !nb_backward(loss, NULL)) {
        fprintf(stderr, "%s: step %lld: %s\n", prog, (long long)step + 1, nb_last_error());
        return false;
    }
    if (!training_healthy(prog, step + 1, loss, pl)) return false;
    return train_apply(prog, opt, pl, step, total, lr, min_lr);
}

bool train_apply(const char *prog, nb_optimizer *opt, const param_list *pl, int64_t step,
                 int64_t total, double lr, double min_lr) {
    nb_clip_grad_norm(pl->tensors, pl->n, 1.0);
    if (!nb_optimizer_set_lr(opt, nb_lr_warmup_cosine(step, total / 20, total, lr, min_lr)) ||
        !nb_optimizer_step(opt)) {
        fprintf(stderr, "%s: step %lld: %s\n", prog, (long long)step + 1, nb_last_error());
        return false;
    }
    return true;
}
