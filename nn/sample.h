/* Sampling's option checks, shared by nb_sample_logits and nb_generate (which checks them
 * before running the model). Internal to nn/. */
#ifndef NABLA_NN_SAMPLE_H
#define NABLA_NN_SAMPLE_H

#include "nabla/generate.h"

/* False with an error naming who for a negative top_k or a NaN temperature or top_p. */
bool nbn_check_sampling(const nb_generate_opts *o, const char *who);

#endif
