/* Learning-rate schedules: a factor of each group's initial rate per step (formulas in
 * nabla/optim.h), and the older warmup + cosine rate. */
#include "nabla/optim.h"
#include "tensor/nbt.h"

#include <math.h>

nb_lr_schedule nb_lr_constant(int64_t warmup_steps) {
    return (nb_lr_schedule){.decay = NB_LR_CONSTANT, .warmup_steps = warmup_steps};
}

nb_lr_schedule nb_lr_linear(int64_t warmup_steps, int64_t total_steps, double min_factor) {
    return (nb_lr_schedule){.decay = NB_LR_LINEAR,
                            .warmup_steps = warmup_steps,
                            .total_steps = total_steps,
                            .min_factor = min_factor};
}

nb_lr_schedule nb_lr_cosine(int64_t warmup_steps, int64_t total_steps, double min_factor) {
    nb_lr_schedule s = nb_lr_linear(warmup_steps, total_steps, min_factor);
    s.decay = NB_LR_COSINE;
    return s;
}

nb_lr_schedule nb_lr_step_decay(int64_t warmup_steps, int64_t step_size, double gamma) {
    return (nb_lr_schedule){
        .decay = NB_LR_STEP, .warmup_steps = warmup_steps, .step_size = step_size, .gamma = gamma};
}

/* How far step is through the decay from warmup to total, in [0, 1]. */
static double progress(int64_t step, int64_t warmup, int64_t total) {
    return step >= total ? 1 : (double)(step - warmup) / (double)(total - warmup);
}

/* (1 + cos(pi * progress)) / 2: 1 at the start of the decay, 0 at its end. */
static double cosine_fall(int64_t step, int64_t warmup, int64_t total) {
    return (1 + cos(M_PI * progress(step, warmup, total))) / 2;
}

static bool valid(const char *op, nb_lr_schedule s) {
    static const char *const names[] = {[NB_LR_CONSTANT] = "constant",
                                        [NB_LR_LINEAR] = "linear",
                                        [NB_LR_COSINE] = "cosine",
                                        [NB_LR_STEP] = "step"};
    _Static_assert(sizeof names / sizeof names[0] == NB_LR_STEP + 1, "a name per nb_lr_decay");
    if ((int)s.decay < 0 || s.decay > NB_LR_STEP)
        return nbt_error(op, "decay is %d, not one of the nb_lr_decay values", (int)s.decay), false;
    if (s.warmup_steps < 0)
        return nbt_error(op, "%s schedule: warmup_steps is %lld, expected >= 0", names[s.decay],
                         (long long)s.warmup_steps),
               false;
    if ((s.decay == NB_LR_LINEAR || s.decay == NB_LR_COSINE) &&
        (s.total_steps < s.warmup_steps || !(s.min_factor >= 0 && s.min_factor <= 1)))
        return nbt_error(op,
                         "%s schedule: need warmup_steps <= total_steps and min_factor in [0, "
                         "1], got warmup_steps %lld, total_steps %lld, min_factor %g",
                         names[s.decay], (long long)s.warmup_steps, (long long)s.total_steps,
                         s.min_factor),
               false;
    if (s.decay == NB_LR_STEP && (s.step_size < 1 || !(s.gamma >= 0 && s.gamma <= 1)))
        return nbt_error(op,
                         "step schedule: need step_size >= 1 and gamma in [0, 1], got step_size "
                         "%lld, gamma %g",
                         (long long)s.step_size, s.gamma),
               false;
    return true;
}

double nb_lr_schedule_factor(nb_lr_schedule s, int64_t step) {
    const char *op = "nb_lr_schedule_factor";
    if (!valid(op, s)) return NAN;
    if (step < 0) return nbt_error(op, "step is %lld, expected >= 0", (long long)step), NAN;
    if (step < s.warmup_steps) return (double)step / (double)s.warmup_steps;
    switch (s.decay) {
    case NB_LR_LINEAR:
        return s.min_factor +
               (1 - s.min_factor) * (1 - progress(step, s.warmup_steps, s.total_steps));
    case NB_LR_COSINE:
        return s.min_factor + (1 - s.min_factor) * cosine_fall(step, s.warmup_steps, s.total_steps);
    case NB_LR_STEP:
        return pow(s.gamma, (double)((step - s.warmup_steps) / s.step_size));
    default:
        return 1;
    }
}

bool nb_lr_schedule_apply(nb_lr_schedule s, nb_optimizer *opt, int64_t step) {
    double factor = nb_lr_schedule_factor(s, step);
    return !isnan(factor) && nb_optimizer_set_lr_factor(opt, factor);
}

double nb_lr_warmup_cosine(int64_t step, int64_t warmup_steps, int64_t total_steps, double base_lr,
                           double min_lr) {
    if (step < 0 || warmup_steps < 0 || total_steps < warmup_steps)
        return nbt_error("nb_lr_warmup_cosine",
                         "need 0 <= step and 0 <= warmup_steps <= total_steps, got step %lld, "
                         "warmup_steps %lld, total_steps %lld",
                         (long long)step, (long long)warmup_steps, (long long)total_steps),
               NAN;
    if (!(isfinite(base_lr) && isfinite(min_lr) && 0 <= min_lr && min_lr <= base_lr))
        return nbt_error("nb_lr_warmup_cosine",
                         "need finite 0 <= min_lr <= base_lr, got base_lr %g, min_lr %g", base_lr,
                         min_lr),
               NAN;
    if (step < warmup_steps) return base_lr * (double)step / (double)warmup_steps;
    if (step >= total_steps) return min_lr;
    return min_lr + (base_lr - min_lr) * cosine_fall(step, warmup_steps, total_steps);
}
