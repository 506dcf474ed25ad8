/* Raw reductions (no autograd) over float32 and float64 tensors of any layout.
 *
 * Summation order is fixed, so a result depends only on the values and the shape, never on
 * memory layout, the code path taken or (later) the number of threads. Each output element
 * sums its inputs x_0 .. x_{R-1}, taken in row-major order of the reduced dims, in eight
 * lanes: lane l adds x_l, x_{l+8}, x_{l+16}, ... from 0 in that order, and the lanes are
 * combined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Lanes are float64 for both
 * dtypes, so a float32 sum is exact to well below float32 rounding for any practical size
 * (error bound about R/8 * 1.1e-16 relative to sum |x|) and is rounded once at the end. */
#ifndef NABLA_REDUCE_KERNELS_H
#define NABLA_REDUCE_KERNELS_H

#include "nbt.h"

/* Turns the ndims dims listed in dims (negative counts from the end) into reduce[a->ndim]
 * flags. An out-of-range, repeated or missing (NULL, ndims <= 0) dim is an error naming op
 * and a's shape. A 0-d tensor accepts dims 0 and -1, as PyTorch does, reducing nothing. */
bool nbt_reduce_dims(const char *op, const nb_tensor *a, int ndims, const int *dims, bool *reduce);

/* scale * (sum of a over the dims flagged in reduce), in a's dtype, in the order described
 * above. keepdim keeps reduced dims as size 1. The sum over no elements is 0 (so a mean,
 * with scale 1/0, is NaN). New tensor in the current scope. */
nb_tensor *nbt_sum_dims(const nb_tensor *a, const bool *reduce, bool keepdim, double scale);
/* into += the sum of a over all but its last dim, as nbt_sum_dims then an add would give it:
 * for a bias gradient added straight into the bias's gradient, without a tensor for the sum.
 * into: contiguous [a's last dim], a's dtype. False, with into untouched, when a's last dim
 * is not one unit-stride run per row, there are no rows, or the shapes or dtypes differ; the
 * caller then sums the usual way. */
bool nbt_add_row_sums(nb_tensor *into, const nb_tensor *a);

/* Maximum over dim (already normalised, 0 <= dim < a->ndim, size > 0): *values in a's dtype
 * and *indices (NB_I64) of the first maximum. A NaN counts as larger than everything, so
 * the first NaN wins, as in PyTorch. New tensors in the current scope; false on error. */
bool nbt_max_dim(const nb_tensor *a, int dim, bool keepdim, nb_tensor **values,
                 nb_tensor **indices);

/* dst[..., index[i], ...] += src[i] along dim (torch.Tensor.scatter_add_): index (NB_I64) and
 * src share a shape that is no larger than dst's in any dim but dim. Every index must be in
 * [0, dst->shape[dim]); otherwise nothing is written and false is returned with an error. */
bool nbt_scatter_add_dim(nb_tensor *dst, int dim, const nb_tensor *index, const nb_tensor *src);

#endif
