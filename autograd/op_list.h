/* Every differentiable op, by the name it records in its node. The gradcheck catalogue in
 * tests/ must exercise each one; the suite fails for any op that no catalogue entry reaches.
 * X-macro: define NB_OP(name) before including. */
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
/* matmul.c */
NB_OP(matmul)
