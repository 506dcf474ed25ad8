/* What TransformerLM needs of a block beyond its public forward: the block after its first
 * norm, so that a stack of blocks runs each residual add and the norm after it as one node
 * (nb_f_add_layer_norm), across block boundaries too. */
#ifndef NABLA_NN_TRANSFORMER_BLOCK_H
#define NABLA_NN_TRANSFORMER_BLOCK_H

#include "nabla/nn.h"

/* Block m on x, given normed = m->norm1(x). Returns the block's output; with next (the norm
 * that follows the block) also next(output) in *next_normed, made with the block's last
 * residual add as one node. Results are new tensors in the current scope. */
nb_tensor *nbn_transformer_block_body(nb_transformer_block *m, const nb_tensor *x,
                                      const nb_tensor *normed, const nb_mha_opts *opts,
                                      nb_layer_norm *next, nb_tensor **next_normed);

#endif
