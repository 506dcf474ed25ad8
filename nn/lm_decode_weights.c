/* The fused decoding path's copy of the block weights (lm_decode_weights.h). */
#include "lm_decode_weights.h"

#include "tensor/nbt.h"

#include <stdlib.h>
#include <string.h>

struct nbn_decode_weights {
    size_t capacity; /* floats in data */
    float *data;
    int layers;
    nbn_half_weights *halves; /* [layers][2] */
};

/* Rows [r0, r1) of a row-major [*, K] matrix, whole. */
static float *copy_rows(float *dst, const float *W, int64_t K, int64_t r0, int64_t r1) {
    memcpy(dst, W + r0 * K, sizeof(float) * (size_t)((r1 - r0) * K));
    return dst + (r1 - r0) * K;
}

/* Columns [c0, c1) of every one of the N rows of a row-major [N, K] matrix: [N, c1 - c0]. */
static float *copy_columns(float *dst, const float *W, int64_t N, int64_t K, int64_t c0,
                           int64_t c1) {
    for (int64_t n = 0; n < N; n++, dst += c1 - c0)
        memcpy(dst, W + n * K + c0, sizeof(float) * (size_t)(c1 - c0));
    return dst;
}

static const float *floats(const nb_tensor *t) {
    return (const float *)nbt_ptr(t);
}

/* Half h of block l: its heads' query/key/value rows [q0, q1) and its rows of fc1 [r0, r1). */
static void half_ranges(const nb_transformer_block *b, int h, int64_t *q0, int64_t *q1, int64_t *r0,
                        int64_t *r1) {
    int64_t h0, h1;
    nbn_half_of(b->attn->num_heads, 1, h, &h0, &h1);
    *q0 = h0 * b->attn->head_dim, *q1 = h1 * b->attn->head_dim;
    nbn_half_of(b->ff->fc1->out_features, 16, h, r0, r1);
}

/* Where each half of each block lies in w->data: the blocks one after another, each block's
 * two halves one after the other, each half qkv, out, fc1, fc2. */
static void lay_out(nbn_decode_weights *w, const nb_transformer_lm *m) {
    const int64_t D = m->dim;
    float *p = w->data;
    for (int l = 0; l < m->num_layers; l++) {
        for (int h = 0; h < 2; h++) {
            int64_t q0, q1, r0, r1;
            half_ranges(m->blocks[l], h, &q0, &q1, &r0, &r1);
            const int64_t rows = q1 - q0;
            nbn_half_weights *hw = &w->halves[2 * l + h];
            hw->qkv = p;
            hw->out = hw->qkv + 3 * rows * D;
            hw->fc1 = hw->out + D * rows;
            hw->fc2 = hw->fc1 + (r1 - r0) * D;
            p = (float *)hw->fc2 + D * (r1 - r0);
        }
    }
}

typedef struct {
    nbn_decode_weights *w;
    const nb_transformer_lm *m;
} pack_job;

/* Halves [begin, end) of every block copied from the model: with two threads each half is
 * written by the thread that will read it when decoding (nbt_parallel_phases keeps half h on
 * the same thread), so it starts in that core's cache, and the copy takes half the time. */
static void pack_halves(int phase, int begin, int end, void *vjob) {
    (void)phase;
    const pack_job *j = vjob;
    const nb_transformer_lm *m = j->m;
    const int64_t D = m->dim;
    for (int l = 0; l < m->num_layers; l++) {
        const nb_transformer_block *b = m->blocks[l];
        const nb_mha *a = b->attn;
        const int64_t F = b->ff->fc1->out_features;
        for (int h = begin; h < end; h++) {
            const nbn_half_weights *hw = &j->w->halves[2 * l + h];
            int64_t q0, q1, r0, r1;
            half_ranges(b, h, &q0, &q1, &r0, &r1);
            float *p = (float *)hw->qkv;
            p = copy_rows(p, floats(a->W_query->weight), D, q0, q1);
            p = copy_rows(p, floats(a->W_key->weight), D, q0, q1);
            copy_rows(p, floats(a->W_value->weight), D, q0, q1);
            copy_columns((float *)hw->out, floats(a->out_proj->weight), D, D, q0, q1);
            copy_rows((float *)hw->fc1, floats(b->ff->fc1->weight), D, r0, r1);
            copy_columns((float *)hw->fc2, floats(b->ff->fc2->weight), D, F, r0, r1);
        }
    }
}

bool nbn_decode_weights_pack(nbn_decode_weights **wp, const nb_transformer_lm *m) {
    const int64_t D = m->dim;
    size_t need = 0;
    for (int l = 0; l < m->num_layers; l++)
        need += (size_t)(4 * D * D + 2 * D * m->blocks[l]->ff->fc1->out_features);
    if (need * sizeof(float) > NBN_DECODE_WEIGHTS_MAX_BYTES) return false;
    nbn_decode_weights *w = *wp;
    if (!w || w->capacity < need || w->layers < m->num_layers) {
        nbn_decode_weights *grown = calloc(1, sizeof *grown);
        float *data = grown ? aligned_alloc(64, (need + 15) / 16 * 16 * sizeof(float)) : NULL;
        nbn_half_weights *halves = data ? calloc((size_t)m->num_layers * 2, sizeof *halves) : NULL;
        if (!halves) {
            free(data), free(grown);
            return false;
        }
        *grown = (nbn_decode_weights){need, data, m->num_layers, halves};
        nbn_decode_weights_free(w);
        *wp = w = grown;
    }
    lay_out(w, m);
    nbt_parallel_phases(1, pack_halves, &(pack_job){w, m});
    return true;
}

const nbn_half_weights *nbn_decode_weights_half(const nbn_decode_weights *w, int layer, int half) {
    return &w->halves[2 * layer + half];
}

void nbn_decode_weights_free(nbn_decode_weights *w) {
    if (!w) return;
    free(w->data);
    free(w->halves);
    free(w);
}
