/* The mixture of experts' pieces (internal to nn/blocks): the router and the dispatch plan.
 * blk_moe_forward (moe.c) puts them together. */
#ifndef NABLA_BLOCKS_MOE_H
#define NABLA_BLOCKS_MOE_H

#include <nabla/nabla.h>

/* ---- The router (moe_router.c) ---------------------------------------------------------- */
typedef struct {
    nb_tensor *probs;   /* [N, E]: softmax of the router's logits */
    nb_tensor *weights; /* [N, k]: the top k probabilities, renormalised over the k */
    nb_tensor *experts; /* int64 [N, k]: their experts, most probable first */
} moe_routes;

/* Routes the tokens x [N, D] through the router weight gate [E, D] to k experts each. False
 * with an error from the op that failed. */
bool moe_route(const nb_tensor *x, const nb_tensor *gate, int64_t k, moe_routes *out);

/* alpha * E * sum_i f_i * P_i with f_i = load[i] / (N k) and P_i the mean of probs[:, i]
 * (blocks.h states it): a 0-d tensor in the current scope, or NULL with an error. */
nb_tensor *moe_aux_loss(const nb_tensor *probs, const nb_tensor *load, int64_t k, double alpha);

/* ---- The dispatch plan (moe_plan.c) ----------------------------------------------------- */
/* Where every token-slot's row goes. Slot s = t k + j is token t's j-th expert. The slots of
 * each expert are laid out in slot order in that expert's tiles of `tile_rows` rows; the
 * tiles follow each other by expert, and rows no slot fills (the end of an expert's last
 * tile, the tiles no expert needs) read the zero row N. Shapes depend on N, k, E and
 * tile_rows only. All tensors are new in the current scope. */
typedef struct {
    int64_t tile_rows, tiles; /* R and T: T R rows in all */
    nb_tensor *token_of_row;  /* int64 [T R]: the row of [x; 0] (N + 1 rows) each row reads */
    nb_tensor *row_of_slot;   /* int64 [N k]: the row holding slot s */
    nb_tensor *token_of_slot; /* int64 [N k]: s / k, the token slot s adds to */
    nb_tensor *tile_expert;   /* int64 [T]: each tile's expert (0 for a tile no expert needs) */
    nb_tensor *load;          /* int64 [E]: slots of each expert */
} moe_plan;

/* Rows per tile for N k slots over E experts: tile_rows if positive, else ceil(N k / (4 E))
 * (at least 1), which keeps the unused rows under a quarter of the slots. */
int64_t moe_tile_rows(int64_t slots, int64_t n_experts, int64_t tile_rows);
/* The tiles that always hold `slots` slots over E experts: floor((slots + E (R - 1)) / R). */
int64_t moe_tile_count(int64_t slots, int64_t n_experts, int64_t rows_per_tile);

/* The plan for experts (int64 [N, k], values in [0, E), as moe_route gives them). False with
 * an error when out of memory. */
bool moe_plan_make(const nb_tensor *experts, int64_t n_experts, int64_t tile_rows, moe_plan *out);

#endif
