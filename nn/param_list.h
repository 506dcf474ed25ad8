/* Internal to nn/: the check every consumer of a parameter list (the optimizers, the gradient
 * reducer) makes, so that they refuse the same lists with the same messages. */
#ifndef NABLA_NN_PARAM_LIST_H
#define NABLA_NN_PARAM_LIST_H

#include "tensor/nbt.h"

/* True if params[0..n) is a non-empty list of distinct float leaves of one dtype that require
 * grad; otherwise false with an error naming op and the first offending entry. Distinct:
 * a parameter listed twice would have its gradient consumed twice (added then zeroed, or
 * stepped twice). */
bool nbn_check_param_list(const char *op, nb_tensor *const *params, int n);

#endif
