/* A TransformerLM's block weights copied in the order the fused one-token path
 * (nn/lm_decode.c) reads them, each half of each block one contiguous run. Internal to nn/.
 *
 * In the model's own layout a half's reads are several short streams, two of them strided
 * (its columns of out_proj, 64 of every 128 floats, and of fc2, 256 of every 512): measured
 * on Zen 4 a half's 0.77 MB read that way ran at 53-65 GB/s (mean of a loop), against 67-91
 * GB/s from one contiguous run of the same floats. The copy holds the same values, so the
 * products compute the same sums. It is only as current as its last pack: nb_generate packs
 * it once and uses it while nothing can change the model (nbn_lm_decode_trust_model). */
#ifndef NABLA_LM_DECODE_WEIGHTS_H
#define NABLA_LM_DECODE_WEIGHTS_H

#include "nabla/nn.h"

#include <stdbool.h>
#include <stdint.h>

/* Half `half` of [0, n) in steps of unit (the second may be empty): how the fused path splits
 * heads (unit 1) and fc1's rows (unit 16) between its two halves. */
static inline void nbn_half_of(int64_t n, int64_t unit, int half, int64_t *begin, int64_t *end) {
    int64_t mid = (n / 2 + unit - 1) / unit * unit;
    if (mid > n) mid = n;
    *begin = half ? mid : 0;
    *end = half ? n : mid;
}

/* One half of one block: its heads' query, key and value rows one after another ([3, rows,
 * D]); its columns of out_proj ([D, rows]); its rows of fc1 ([fc1 rows, D]); its columns of fc2
 * ([D, fc1 rows]). rows = its heads times head_dim. */
typedef struct {
    const float *qkv, *out, *fc1, *fc2;
} nbn_half_weights;

typedef struct nbn_decode_weights nbn_decode_weights;

/* Copies m's block weights (float32, contiguous, as nbn_lm_decode_covers requires) into *w,
 * made or grown here. False, leaving *w as it was, when the copy would take more than
 * NBN_DECODE_WEIGHTS_MAX_BYTES (it pays where the weights come from cache) or memory runs
 * out. *w is the caller's, to free with nbn_decode_weights_free. */
#define NBN_DECODE_WEIGHTS_MAX_BYTES ((size_t)32 << 20)
bool nbn_decode_weights_pack(nbn_decode_weights **w, const nb_transformer_lm *m);
/* Half `half` of block `layer` in w (owned by w). */
const nbn_half_weights *nbn_decode_weights_half(const nbn_decode_weights *w, int layer, int half);
/* Frees w; NULL is a no-op. */
void nbn_decode_weights_free(nbn_decode_weights *w);

#endif
