/* Several one-row products of one input as one job: the query, key and value projections of
 * one decoded token, say. Internal to the library. */
#ifndef NABLA_ROW_PRODUCTS_H
#define NABLA_ROW_PRODUCTS_H

#include <stdbool.h>
#include <stdint.h>

/* An activation applied to a product's outputs inside the task that computed them. */
typedef enum { NBT_ACT_NONE, NBT_ACT_GELU, NBT_ACT_GELU_TANH, NBT_ACT_SILU } nbt_activation;

/* One product: out [n] = act(x W^T (+ bias)), W [n, K] with rows ldw elements apart, bias [n]
 * contiguous or NULL, out contiguous. */
typedef struct {
    const void *w;
    int64_t ldw, n;
    const void *bias;
    void *out;
    nbt_activation act;
} nbt_row_product;

/* Every product of x [K] (elements incx apart; float64 if f64, else float32) as one job split
 * across threads by the outputs of all of them, where each product alone would have been
 * too small to split. Every output is the dot product the GEMM's one-row path computes for
 * that product alone (nbt_*gemm_bias with a bias, nbt_*gemm with beta 0 without), and each
 * activation the vecmath.h function applied to the whole output, so the results equal `count`
 * separate products and activations, bit for bit, for any thread count. Cannot fail. */
void nbt_row_products(bool f64, int64_t K, const void *x, int64_t incx, int count,
                      const nbt_row_product *products);

/* A gated pair, as one job: pair[0].out [n] = act0(x W0^T (+ b0)) * act1(x W1^T (+ b1)) with
 * n = pair[0].n = pair[1].n, pair[1].out receiving the second factor. Split by output as
 * nbt_row_products splits, each task computing both factors of its outputs and their product
 * (the multiplication as the elementwise product rounds it), so the bits equal the two
 * products, their activations and the elementwise product, for any thread count. Cannot fail. */
void nbt_row_products_gated(bool f64, int64_t K, const void *x, int64_t incx,
                            const nbt_row_product pair[2]);

#endif
