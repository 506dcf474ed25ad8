/* Internal to nn/: the check every consumer of a parameter list (the optimizers, the gradient
 * reducer) makes, so that they refuse the same lists with the same messages, and the way they
 * name a parameter in those messages. */
#ifndef NABLA_NN_PARAM_LIST_H
#define NABLA_NN_PARAM_LIST_H

#include "tensor/nbt.h"

/* Copies into buf (size bytes) the dotted module path of t if t is a parameter of a live model
 * ("blocks.0.attn.W_query.weight"); false if it is not. */
bool nbn_param_name(const nb_tensor *t, char *buf, size_t size);

/* How messages name entry `index` of a parameter list: "'<module path>' (shape [2, 3])" for a
 * model's parameter, else "<index> (shape [2, 3])", to follow the word "parameter". The text
 * lives in a small rotating thread-local buffer: valid for the next few calls only. */
const char *nbn_param_label(const nb_tensor *t, int index);

/* True if params[0..n) is a list of distinct float leaves of one dtype (that require grad,
 * if need_grad), n >= min_n; otherwise false with an error naming op and the first offending
 * entry. Distinct: a parameter listed twice would have its gradient consumed twice (added
 * then zeroed, or stepped twice). first_index is the first entry's number in messages (a
 * group added to an optimizer continues its numbering). */
bool nbn_check_param_list(const char *op, nb_tensor *const *params, int n, int min_n,
                          bool need_grad, int first_index);

#endif
