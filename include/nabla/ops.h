/* nabla differentiable ops. Each returns a new tensor in the current scope (views share
 * storage with their input), or NULL with nb_last_error() set; a NULL input gives NULL.
 * Float ops need matching dtypes (f32 with f32, f64 with f64): cast with nb_to_dtype.
 * Negative dims count from the end. Broadcasting follows NumPy/PyTorch rules. */
#ifndef NABLA_OPS_H
#define NABLA_OPS_H

#include "nabla/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Views and shape ops (share storage where PyTorch does) ---------------------------- */
/* View with a new shape (one entry may be -1). Fails on layouts that cannot be viewed. */
nb_tensor *nb_view(const nb_tensor *t, int ndim, const int64_t *shape);
/* A view when possible, else a contiguous copy. */
nb_tensor *nb_reshape(const nb_tensor *t, int ndim, const int64_t *shape);
nb_tensor *nb_transpose(const nb_tensor *t, int dim0, int dim1);
/* dims holds t->ndim entries: output dim i is input dim dims[i]. */
nb_tensor *nb_permute(const nb_tensor *t, const int *dims);
nb_tensor *nb_unsqueeze(const nb_tensor *t, int dim);
/* Drops dim if its size is 1 (otherwise returns a same-shape view). */
nb_tensor *nb_squeeze(const nb_tensor *t, int dim);
/* Drops every size-1 dim. */
nb_tensor *nb_squeeze_all(const nb_tensor *t);
/* Broadcast view to shape (-1 keeps a dim); size-1 dims get stride 0. */
nb_tensor *nb_expand(const nb_tensor *t, int ndim, const int64_t *shape);
/* Elements [start, start + length) of dim. */
nb_tensor *nb_narrow(const nb_tensor *t, int dim, int64_t start, int64_t length);
/* Index into dim, removing it. */
nb_tensor *nb_select(const nb_tensor *t, int dim, int64_t index);
/* t itself if already contiguous, else a row-major copy (differentiable either way). */
nb_tensor *nb_contiguous(const nb_tensor *t);
/* Joins n tensors along an existing dim. */
nb_tensor *nb_concat(int n, nb_tensor *const *ts, int dim);
/* Joins n same-shape tensors along a new dim. */
nb_tensor *nb_stack(int n, nb_tensor *const *ts, int dim);
/* Splits into chunks of split_size along dim (the last may be smaller), written to out
 * (capacity max_out). Returns the number of chunks, or -1 with an error. */
int nb_split(const nb_tensor *t, int64_t split_size, int dim, nb_tensor **out, int max_out);

/* ---- Elementwise ------------------------------------------------------------------------ */
nb_tensor *nb_add(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_sub(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_mul(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_div(const nb_tensor *a, const nb_tensor *b);
nb_tensor *nb_neg(const nb_tensor *a);
nb_tensor *nb_add_scalar(const nb_tensor *a, double s);
nb_tensor *nb_mul_scalar(const nb_tensor *a, double s);
nb_tensor *nb_pow_scalar(const nb_tensor *a, double p);
nb_tensor *nb_exp(const nb_tensor *a);
nb_tensor *nb_log(const nb_tensor *a);
nb_tensor *nb_sqrt(const nb_tensor *a);
nb_tensor *nb_tanh(const nb_tensor *a);
nb_tensor *nb_sigmoid(const nb_tensor *a);
nb_tensor *nb_relu(const nb_tensor *a);
/* x * Phi(x), the exact erf form (PyTorch's approximate='none'). float32 within 6 ulps of the
 * exact value wherever Phi(x) is a normal float (x > -13), its gradient within 2e-7. */
nb_tensor *nb_gelu(const nb_tensor *a);
/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's approximate='tanh'). */
nb_tensor *nb_gelu_tanh(const nb_tensor *a);
/* x * sigmoid(x) (PyTorch's F.silu, the swish of SwiGLU). */
nb_tensor *nb_silu(const nb_tensor *a);

/* ---- Reductions ------------------------------------------------------------------------- */
/* Sum / mean of all elements: a 0-d tensor. */
nb_tensor *nb_sum(const nb_tensor *a);
nb_tensor *nb_mean(const nb_tensor *a);
/* Over the ndims dims listed in dims; keepdim keeps them as size 1. */
nb_tensor *nb_sum_dims(const nb_tensor *a, int ndims, const int *dims, bool keepdim);
nb_tensor *nb_mean_dims(const nb_tensor *a, int ndims, const int *dims, bool keepdim);
/* Max over dim: returns the values; if indices is not NULL, *indices receives the NB_I64
 * argmax (first occurrence), in the current scope. */
nb_tensor *nb_max_dim(const nb_tensor *a, int dim, bool keepdim, nb_tensor **indices);

/* ---- Selection by condition and by index ------------------------------------------------ */
/* torch.where: cond (NB_BOOL) ? a : b elementwise, all three broadcast together; a and b of
 * one float dtype. New tensor in the current scope; differentiable w.r.t. a and b. */
nb_tensor *nb_where(const nb_tensor *cond, const nb_tensor *a, const nb_tensor *b);
/* torch.gather: out[p] = x[p with p[dim] replaced by index[p]], shaped like index (NB_I64, as
 * many dims as x, no larger than x outside dim, values in [0, x->shape[dim])). New tensor in
 * the current scope; differentiable w.r.t. x (repeated indices accumulate). x needs a dim. */
nb_tensor *nb_gather(const nb_tensor *x, int dim, const nb_tensor *index);
/* torch.index_select: the entries of x at index (NB_I64, 1-D or 0-d, values in
 * [0, x->shape[dim])) along dim, which gets the index's length. x of any dtype (copied bit
 * for bit), with a dim. New tensor in the current scope; differentiable w.r.t. a float x
 * (repeated indices accumulate). */
nb_tensor *nb_index_select(const nb_tensor *x, int dim, const nb_tensor *index);
/* torch.index_add: a copy of x with alpha * source[.., k, ..] added at x[.., index[k], ..]
 * along dim; index NB_I64 1-D (or 0-d) in [0, x->shape[dim]), source x's shape with the
 * index's length at dim (use alpha 1 for PyTorch's default). Repeated indices accumulate in
 * index order, bitwise the same for any thread count. New tensor in the current scope;
 * differentiable w.r.t. x and source. */
nb_tensor *nb_index_add(const nb_tensor *x, int dim, const nb_tensor *index,
                        const nb_tensor *source, double alpha);

/* The k largest (largest true) or smallest entries of a along dim, sorted (descending or
 * ascending; torch.topk with sorted=True): returns the values, dim resized to k; if indices
 * is not NULL, *indices receives their NB_I64 positions along dim. k in [0, size of dim]; a
 * 0-d a takes k 1. NaN counts as the largest value. Equal values are picked and ordered as
 * PyTorch's CPU topk does (not lowest index first: see autograd/topk.c). Both new, in the
 * current scope; the values are differentiable (the gradient goes back to the positions). */
nb_tensor *nb_topk(const nb_tensor *a, int64_t k, int dim, bool largest, nb_tensor **indices);

/* ---- Linear algebra --------------------------------------------------------------------- */
/* torch.matmul: 1-D x 1-D dot, 2-D matrix product, batched with broadcast leading dims. */
nb_tensor *nb_matmul(const nb_tensor *a, const nb_tensor *b);

/* PyTorch's F.linear: x [..., in] W^T + b with weight [out, in] and bias [out] (may be
 * NULL), as one op: the GEMM reads W through a transpose flag and adds the bias in place. */
nb_tensor *nb_f_linear(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias);

/* ---- Softmax and masks ------------------------------------------------------------------ */
nb_tensor *nb_softmax(const nb_tensor *a, int dim);
nb_tensor *nb_log_softmax(const nb_tensor *a, int dim);
/* Where mask (NB_BOOL, broadcast to a's shape) is true, the result is value (e.g. -INFINITY). */
nb_tensor *nb_masked_fill(const nb_tensor *a, const nb_tensor *mask, double value);
/* softmax(scale * a) over the last dim with blocked entries excluded. mask: NB_BOOL
 * broadcast to a's shape, true = blocked (may be NULL). causal: also block key j > query i,
 * with i the second-to-last dim and j the last. A row with every entry blocked gives zeros
 * and zero gradient (PyTorch gives NaN there). */
nb_tensor *nb_masked_softmax(const nb_tensor *a, const nb_tensor *mask, bool causal, double scale);

/* Multi-head scaled dot-product attention as one op: q [B, T_q, D], k and v [B, T_k, D],
 * D = num_heads * head_dim, head h reading columns [h * head_dim, (h + 1) * head_dim).
 * Returns [B, T_q, D] (new, in the current scope): for every head
 * nb_masked_softmax(q_h k_h^T, mask, causal, scale) v_h, heads side by side. That is what
 * split heads -> matmul -> masked softmax -> matmul -> merge heads computes, in one node
 * and without transposed copies. mask: NB_BOOL broadcast to [B, num_heads, T_q, T_k],
 * true = blocked, or NULL. Fully blocked rows give zeros and zero gradient. The same op as
 * nb_sdpa, with heads packed side by side. */
nb_tensor *nb_f_attention(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                          int64_t num_heads, const nb_tensor *mask, bool causal, double scale);

/* Self-attention with its projections in one node: nb_f_attention(nb_f_linear(x, wq, NULL),
 * nb_f_linear(x, wk, NULL), nb_f_linear(x, wv, NULL), num_heads, NULL, causal, scale) for x
 * [B, T, D_in] and bias-free weights wq, wk, wv [D, D_in]; returns [B, T, D] (new, in the
 * current scope). One node and one [3, B, T, D] buffer for q, k and v instead of four nodes
 * and three tensors (MultiHeadAttention's self-attention takes it when it has no mask and
 * no projection biases). Causal or unmasked only: for a mask, use nb_f_attention. */
nb_tensor *nb_f_qkv_attention(const nb_tensor *x, const nb_tensor *wq, const nb_tensor *wk,
                              const nb_tensor *wv, int64_t num_heads, bool causal, double scale);

/* Scaled dot-product attention over heads, the fused counterpart of PyTorch's
 * F.scaled_dot_product_attention: q [B, H_q, T_q, hd], k and v [B, H_kv, T_k, hd] as any
 * strided views (heads made by view + transpose of a projection, or rotated by RoPE, are read
 * in place when hd has unit stride, else copied), H_kv dividing H_q: query head h reads
 * key/value head h / (H_q / H_kv) (grouped-query and multi-query attention). mask: NB_BOOL
 * broadcast to [B, H_q, T_q, T_k] with true = blocked (nn.MultiheadAttention's convention, the
 * opposite of SDPA's attn_mask), or NULL; causal blocks key s > query t; the scores are
 * multiplied by scale (usually 1 / sqrt(hd)). Fully blocked rows give zeros and zero
 * gradient; empty dims give empty results. Returns [B, H_q, T_q, hd] (new, in the current
 * scope) stored as [B, T_q, H_q, hd]: nb_transpose(out, 1, 2) is contiguous, so viewing it
 * as [B, T_q, H_q * hd] merges the heads without a copy. Long sequences do not keep the
 * [B, H_q, T_q, T_k] probabilities for backward (memory-efficient attention). */
nb_tensor *nb_sdpa(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                   const nb_tensor *mask, bool causal, double scale);

/* ---- Losses ----------------------------------------------------------------------------- */
typedef enum { NB_REDUCE_MEAN = 0, NB_REDUCE_SUM = 1, NB_REDUCE_NONE = 2 } nb_reduction;
/* logits [..., C]; target NB_I64 [...] of class indices in [0, C). Entries equal to
 * ignore_index contribute nothing (mean divides by the others' count). A target outside
 * [0, C) other than ignore_index is an error. NB_REDUCE_NONE returns per-element losses. */
nb_tensor *nb_cross_entropy(const nb_tensor *logits, const nb_tensor *target, int64_t ignore_index,
                            nb_reduction reduction);
/* Mean (or sum, or none) of (a - b)^2, with b broadcast to a. */
nb_tensor *nb_mse_loss(const nb_tensor *a, const nb_tensor *b, nb_reduction reduction);

/* ---- Layers as functions ---------------------------------------------------------------- */
/* Normalises over the last weight->ndim dims (1 if weight is NULL) with biased variance:
 * (x - mean) / sqrt(var + eps) * weight + bias. weight and bias may be NULL. */
nb_tensor *nb_f_layer_norm(const nb_tensor *x, const nb_tensor *weight, const nb_tensor *bias,
                           double eps);
/* A pre-norm block's residual add and the norm after it as one op: returns
 * nb_f_layer_norm(x + res, weight, bias, eps) and sets *sum to x + res (x and res: the same
 * shape and float dtype, no broadcasting). Both are new tensors in the current scope and both
 * carry gradients; the same bits as nb_add then nb_f_layer_norm, in one pass each way. */
nb_tensor *nb_f_add_layer_norm(const nb_tensor *x, const nb_tensor *res, const nb_tensor *weight,
                               const nb_tensor *bias, double eps, nb_tensor **sum);
/* weight [V, D], indices NB_I64 [...] in [0, V): returns [..., D]. */
nb_tensor *nb_f_embedding(const nb_tensor *weight, const nb_tensor *indices);
/* In training, zeroes each element with probability p (drawn from rng) and scales the rest
 * by 1/(1-p); in eval (train false) returns x unchanged (as a differentiable view). */
nb_tensor *nb_f_dropout(nb_rng *rng, const nb_tensor *x, double p, bool train);

#ifdef __cplusplus
}
#endif
#endif
