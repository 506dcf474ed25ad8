/* Parameter groups (torch's param_groups): adding one, each group's learning rate and weight
 * decay, the rates set together (as a schedule does), and the usual weight-decay split. */
#include "nabla/module.h"
#include "optim_impl.h"

#include <math.h>
#include <stdlib.h>

int nb_optimizer_add_group(nb_optimizer *o, int n, nb_tensor *const *params, double lr,
                           double weight_decay) {
    const char *op = "nb_optimizer_add_group";
    if (!o) return nbt_error(op, "optimizer is NULL"), -1;
    if (n < 0) return nbt_error(op, "n is %d, expected a count >= 0", n), -1;
    return nbo_add_group(o, op, params, n, lr, weight_decay);
}

int nb_optimizer_group_count(const nb_optimizer *o) {
    if (!o) return nbt_error("nb_optimizer_group_count", "optimizer is NULL"), -1;
    return o->ngroups;
}

/* Group g of o, or NULL with an error naming op. */
static nbo_group *group(const nb_optimizer *o, const char *op, int g) {
    if (!o) return nbt_error(op, "optimizer is NULL");
    if (g < 0 || g >= o->ngroups)
        return nbt_error(op, "group %d is out of range: the optimizer has %d group%s", g,
                         o->ngroups, o->ngroups == 1 ? "" : "s");
    return &o->groups[g];
}

double nb_optimizer_group_lr(const nb_optimizer *o, int g) {
    const nbo_group *gr = group(o, "nb_optimizer_group_lr", g);
    return gr ? gr->lr : NAN;
}

double nb_optimizer_group_weight_decay(const nb_optimizer *o, int g) {
    const nbo_group *gr = group(o, "nb_optimizer_group_weight_decay", g);
    return gr ? gr->weight_decay : NAN;
}

bool nb_optimizer_set_group_lr(nb_optimizer *o, int g, double lr) {
    const char *op = "nb_optimizer_set_group_lr";
    nbo_group *gr = group(o, op, g);
    if (!gr || !nbo_check_nonneg(op, "lr", lr)) return false;
    gr->lr = lr;
    return true;
}

double nb_optimizer_lr(const nb_optimizer *o) {
    return nb_optimizer_group_lr(o, 0);
}

bool nb_optimizer_set_lr(nb_optimizer *o, double lr) {
    const char *op = "nb_optimizer_set_lr";
    if (!o) return nbt_error(op, "optimizer is NULL"), false;
    if (!nbo_check_nonneg(op, "lr", lr)) return false;
    for (int g = 1; g < o->ngroups; g++)
        if (o->groups[g].initial_lr != o->groups[0].initial_lr)
            return nbt_error(op,
                             "groups 0 and %d were made with different learning rates (%g and "
                             "%g); one rate for all would lose that: scale them with "
                             "nb_optimizer_set_lr_factor or set each with "
                             "nb_optimizer_set_group_lr",
                             g, o->groups[0].initial_lr, o->groups[g].initial_lr),
                   false;
    for (int g = 0; g < o->ngroups; g++) o->groups[g].lr = lr;
    return true;
}

bool nb_optimizer_set_lr_factor(nb_optimizer *o, double factor) {
    const char *op = "nb_optimizer_set_lr_factor";
    if (!o) return nbt_error(op, "optimizer is NULL"), false;
    if (!nbo_check_nonneg(op, "factor", factor)) return false;
    for (int g = 0; g < o->ngroups; g++) o->groups[g].lr = o->groups[g].initial_lr * factor;
    return true;
}

nb_optimizer *nb_adamw_new_decay_split(const nb_module *m, nb_adam_opts opts) {
    const char *op = "nb_adamw_new_decay_split";
    if (!m) return nbt_error(op, "module is NULL");
    int n;
    nb_tensor **all = nb_module_param_tensors(m, &n);
    if (!all) return NULL;
    if (n == 0) {
        free(all);
        return nbt_error(op, "'%s' has no parameters", m->path[0] ? m->path : m->type);
    }
    /* Stable partition: rank >= 2 first, then the rest, each in nb_module_named_params order. */
    nb_tensor **sorted = malloc(sizeof *sorted * (size_t)n);
    if (!sorted) {
        free(all);
        return nbt_error(op, "out of memory");
    }
    int n_decay = 0, at = 0;
    for (int i = 0; i < n; i++)
        if (all[i]->ndim >= 2) sorted[n_decay++] = all[i];
    at = n_decay;
    for (int i = 0; i < n; i++)
        if (all[i]->ndim < 2) sorted[at++] = all[i];
    nb_optimizer *o = nbo_adam_create(op, sorted, n_decay, opts, true);
    if (o && nbo_add_group(o, op, sorted + n_decay, n - n_decay, opts.lr, 0) < 0) {
        nb_optimizer_free(o);
        o = NULL;
    }
    free(all);
    free(sorted);
    return o;
}
