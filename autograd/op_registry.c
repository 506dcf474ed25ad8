/* The registry of built-in differentiable ops, derived from op_list.h: each line there names
 * the nba_op_def its op's own file defines. */
#include "op_def.h"

#define NB_OP(name) extern const nba_op_def nba_op_##name;
#include "op_list.h"
#undef NB_OP

const nba_op_def *const nba_op_registry[] = {
#define NB_OP(name) &nba_op_##name,
#include "op_list.h"
#undef NB_OP
};
const int nba_op_registry_count = NBA_COUNT(nba_op_registry);
