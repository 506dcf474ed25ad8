/* Internal to nn/attention.c: MultiHeadAttention's masks (key padding, attention mask in its
 * accepted shapes and dtypes) brought into the one form the attention ops take. */
#ifndef NABLA_NN_ATTENTION_MASK_H
#define NABLA_NN_ATTENTION_MASK_H

#include "nabla/nn.h"

typedef struct {
    /* NB_BOOL broadcastable to [B, H, T_q, T_k], true = blocked; NULL when nothing is. */
    nb_tensor *blocked;
    /* A float attn_mask's finite part, broadcastable to the scores and 0 where blocked; NULL
     * when every finite value is 0 (then the masks are boolean in effect). */
    nb_tensor *additive;
} mha_mask;

/* Checks opts' key_padding_mask and attn_mask against B, T_q, T_k and m's heads and dtype
 * (dt) and combines them into *out. False with an error naming m's path and the shapes. */
bool mha_mask_build(const nb_mha *m, const nb_mha_opts *opts, nb_dtype dt, int64_t B, int64_t Tq,
                    int64_t Tk, mha_mask *out);

#endif
