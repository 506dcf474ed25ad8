/* The mixture of experts' dispatch plan: a stable counting sort of the token-slots by expert
 * into tiles of a fixed number of rows, so that every tensor of a forward has a shape that
 * depends on the token count only (blocks.h, docs/design.md "Mixture of experts"). */
#include <nabla/nabla.h>
#include "moe.h"

int64_t moe_tile_rows(int64_t slots, int64_t n_experts, int64_t tile_rows) {
    if (tile_rows > 0) return tile_rows;
    int64_t per = 4 * n_experts, rows = (slots + per - 1) / per;
    return rows > 0 ? rows : 1;
}

/* Expert e needs ceil(n_e / R) <= (n_e + R - 1) / R tiles; summed over the experts, at most
 * (slots + E (R - 1)) / R, whatever the routing. */
int64_t moe_tile_count(int64_t slots, int64_t n_experts, int64_t rows_per_tile) {
    return (slots + n_experts * (rows_per_tile - 1)) / rows_per_tile;
}

static nb_tensor *index_tensor(int64_t n) {
    return nb_empty(NB_I64, NB_SHAPE(n));
}

bool moe_plan_make(const nb_tensor *experts, int64_t n_experts, int64_t tile_rows, moe_plan *out) {
    const int64_t N = experts->shape[0], k = experts->shape[1], S = N * k, E = n_experts;
    const int64_t R = moe_tile_rows(S, E, tile_rows), T = moe_tile_count(S, E, R);
    const nb_tensor *chosen = nb_contiguous(experts);
    *out = (moe_plan){.tile_rows = R,
                      .tiles = T,
                      .token_of_row = index_tensor(T * R),
                      .row_of_slot = index_tensor(S),
                      .token_of_slot = index_tensor(S),
                      .tile_expert = index_tensor(T),
                      .load = nb_zeros(NB_I64, NB_SHAPE(E))};
    nb_tensor *next_row = index_tensor(E); /* each expert's next free row */
    if (!chosen || !out->token_of_row || !out->row_of_slot || !out->token_of_slot ||
        !out->tile_expert || !out->load || !next_row)
        return false;
    const int64_t *e_of = nb_data(chosen);
    int64_t *token_of_row = nb_data(out->token_of_row), *row_of_slot = nb_data(out->row_of_slot),
            *token_of_slot = nb_data(out->token_of_slot), *tile_expert = nb_data(out->tile_expert),
            *load = nb_data(out->load), *next = nb_data(next_row);
    for (int64_t s = 0; s < S; s++) load[e_of[s]]++;
    int64_t tile = 0;
    for (int64_t e = 0; e < E; e++) {
        next[e] = tile * R;
        for (int64_t end = tile + (load[e] + R - 1) / R; tile < end; tile++) tile_expert[tile] = e;
    }
    for (; tile < T; tile++) tile_expert[tile] = 0; /* zero rows: any expert gives zeros */
    for (int64_t r = 0; r < T * R; r++) token_of_row[r] = N;
    for (int64_t s = 0; s < S; s++) {
        int64_t row = next[e_of[s]]++;
        row_of_slot[s] = row;
        token_of_row[row] = s / k;
        token_of_slot[s] = s / k;
    }
    return true;
}
