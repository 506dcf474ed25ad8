/* Every built-in differentiable op, one line each: NB_OP(name) refers to the nba_op_def
 * nba_op_<name> that the op's own file defines (see op_def.h); op_registry.c makes the
 * registry from this list. The elementwise ops are listed once, in tensor/elementwise_ops.h,
 * and come in from there. Nothing else lists ops by hand. X-macro: define NB_OP(name)
 * before including. */
/* views.c */
NB_OP(view)
NB_OP(reshape)
NB_OP(transpose)
NB_OP(permute)
NB_OP(unsqueeze)
NB_OP(squeeze)
NB_OP(expand)
NB_OP(narrow)
NB_OP(select)
NB_OP(contiguous)
NB_OP(concat)
NB_OP(stack)
/* elementwise.c: the binary and unary ops, one line each in tensor/elementwise_ops.h, which
 * also makes their kernel tables */
#include "../tensor/elementwise_ops.h"
#define NBA_ELEMENTWISE_OP(ENUM, name, ...) NB_OP(name)
NBT_BINARY_OPS(NBA_ELEMENTWISE_OP)
NBT_UNARY_OPS(NBA_ELEMENTWISE_OP)
#undef NBA_ELEMENTWISE_OP
/* reduce.c (sum_dims records "sum", mean_dims records "mean") */
NB_OP(sum)
NB_OP(mean)
NB_OP(max_dim)
/* matmul.c */
NB_OP(matmul)
/* linear.c */
NB_OP(linear)
/* softmax.c */
NB_OP(softmax)
NB_OP(log_softmax)
NB_OP(masked_fill)
NB_OP(masked_softmax)
/* attention.c, qkv_attention.c */
NB_OP(attention)
NB_OP(qkv_attention)
/* loss.c */
NB_OP(cross_entropy)
NB_OP(mse_loss)
/* layer_norm.c (add_layer_norm too), embedding.c, dropout.c */
NB_OP(layer_norm)
NB_OP(add_layer_norm)
NB_OP(embedding)
NB_OP(dropout)
/* index.c */
NB_OP(where)
NB_OP(gather)
NB_OP(index_select)
NB_OP(index_add)
/* topk.c */
NB_OP(topk)
