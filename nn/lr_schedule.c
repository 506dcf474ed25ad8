/* Learning-rate schedule: linear warmup, then cosine decay (formula in nabla/optim.h). */
#include "nabla/optim.h"
#include "tensor/nbt.h"

#include <math.h>

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
    double progress = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);
    return min_lr + (base_lr - min_lr) * (1 + cos(M_PI * progress)) / 2;
}
