/* Catalogue entries for the fused multi-head attention (nb_f_attention): self and cross
 * attention, causal and masked, fully blocked rows, inputs read in place through strides
 * (a narrowed row stride, a broadcast batch), inputs that must be copied (transposed,
 * sliced), one tensor used as q, k and v, and a constant v. */
#include "catalogue.h"
#include "autograd/attention.h"

#include <stdint.h>

#define U8(...) ((const uint8_t[]){__VA_ARGS__})
#define MASK(...) nb_from_array(NB_BOOL, __VA_ARGS__)

/* q, k, v [2, 3, 4], 2 heads of 2, causal. */
static nb_tensor *f_causal(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_attention(in[0], in[1], in[2], 2, NULL, true, 0.5);
}
/* q [2, 3, 4], k and v [2, 5, 4], one head, causal over a non-square score matrix. */
static nb_tensor *f_cross_causal(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_attention(in[0], in[1], in[2], 1, NULL, true, 0.7);
}
/* Key padding [2, 1, 1, 5]: batch 1 pads its last two keys. */
static nb_tensor *f_padding(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *pad = MASK(NB_SHAPE(2, 1, 1, 5), U8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1));
    return nb_f_attention(in[0], in[1], in[2], 2, pad, false, 0.6);
}
/* An attention mask [3, 3] that blocks all of query row 1 (zeros, zero gradient) plus causal. */
static nb_tensor *f_blocked_row(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(3, 3), U8(0, 0, 1, 1, 1, 1, 0, 1, 0));
    return nb_f_attention(in[0], in[1], in[2], 2, mask, true, 1.0);
}
/* A per-head mask [1, 2, 1, 3]: head 0 blocks key 2, head 1 blocks key 0. */
static nb_tensor *f_head_mask(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *mask = MASK(NB_SHAPE(1, 2, 1, 3), U8(0, 0, 1, 1, 0, 0));
    return nb_f_attention(in[0], in[1], in[2], 2, mask, false, 0.8);
}
/* Self-attention of one tensor: q, k and v gradients all land on the same leaf. */
static nb_tensor *f_self(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    return nb_f_attention(in[0], in[0], in[0], 2, NULL, true, 0.5);
}
/* Rows read in place with a row stride of 8: q is every other row of a [2, 6, 4] leaf. */
static nb_tensor *f_strided_rows(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *q = nb_view(in[0], NB_SHAPE(2, 3, 8));
    q = nb_narrow(q, 2, 0, 4); /* [2, 3, 4], rows 8 apart, unit stride along D */
    return nb_f_attention(q, in[1], in[2], 2, NULL, true, 0.5);
}
/* k and v broadcast over the batch (batch stride 0): their gradients sum over it. */
static nb_tensor *f_broadcast_kv(nb_tensor *const *in, int n, void *ctx) {
    (void)n, (void)ctx;
    nb_tensor *k = nb_expand(in[1], NB_SHAPE(2, 4, 4));
    nb_tensor *v = nb_expand(in[2], NB_SHAPE(2, 4, 4));
    return nb_f_attention(in[0], k, v, 2, NULL, false, 0.5);
}

/* ---- nb_sdpa: heads [B, H, T, hd] ---- */

/* [B, T, H * hd] viewed as heads [B, H, T, hd] (strided: view + transpose). */
static nb_tensor *heads(nb_tensor *x, int64_t H) {
    int64_t B = x->shape[0], T = x->shape[1], hd = x->shape[2] / H;
    return nb_transpose(nb_view(x, NB_SHAPE(B, T, H, hd)), 1, 2);
}

/* What an sdpa entry does: query and key/value heads, mask kind, and whether the call is
 * forced through the memory-efficient path (keep limit 0). */
typedef struct {
    int64_t Hq, Hkv;
    bool causal, memory_efficient;
    int mask; /* 0 none, 1 key padding with a fully padded batch, 2 attn_mask, 3 per-head */
} sdpa_case;

/* Key padding pads batch 0's last key and all of batch 1 (fully blocked rows); the other
 * masks block a scattered pattern. */
static nb_tensor *case_mask(const sdpa_case *c, int64_t B, int64_t Tq, int64_t Tk) {
    int64_t n = c->mask == 1 ? B * Tk : c->mask == 2 ? Tq * Tk : B * c->Hq * Tq * Tk;
    uint8_t m[4096];
    for (int64_t i = 0; i < n; i++) m[i] = (uint8_t)(c->mask == 1 ? i >= Tk - 1 : i * 5 % 7 == 2);
    if (c->mask == 1) return MASK(NB_SHAPE(B, 1, 1, Tk), m);
    if (c->mask == 2) return MASK(NB_SHAPE(Tq, Tk), m);
    return MASK(NB_SHAPE(B, c->Hq, Tq, Tk), m);
}

/* in[0] the query projection [B, T_q, H_q * hd], in[1] and in[2] the key and value ones. */
static nb_tensor *f_sdpa(nb_tensor *const *in, int n, void *ctx) {
    (void)n;
    const sdpa_case *c = ctx;
    nb_tensor *q = heads(in[0], c->Hq), *k = heads(in[1], c->Hkv), *v = heads(in[2], c->Hkv);
    nb_tensor *mask = c->mask ? case_mask(c, q->shape[0], q->shape[2], k->shape[2]) : NULL;
    size_t old = nba_attention_keep_limit(c->memory_efficient ? 0 : SIZE_MAX);
    nb_tensor *out = nb_sdpa(q, k, v, mask, c->causal, 0.6);
    nba_attention_keep_limit(old);
    return out;
}

static const sdpa_case mha_causal = {2, 2, true, false, 0}, gqa = {4, 2, true, false, 1},
                       mqa = {3, 1, false, false, 2}, me_none = {2, 2, false, true, 0},
                       me_causal = {4, 2, true, true, 0}, me_pad = {2, 1, true, true, 1},
                       me_attn_mask = {2, 2, false, true, 2}, me_head_mask = {2, 2, true, true, 3};

/* clang-format off */
const nbcat_entry nbcat_attention[] = {
    {"attention causal, q k v [2,3,4], 2 heads", f_causal, 3, {IN(2, 3, 4), IN(2, 3, 4), IN(2, 3, 4)}, NULL},
    {"attention causal over 40 queries (blocks of 32 rows)", f_causal, 3,
     {IN(1, 40, 4), IN_T(1, 40, 4), IN(1, 40, 4)}, NULL},
    {"attention causal cross q [2,3,4] kv [2,5,4], 1 head", f_cross_causal, 3,
     {IN(2, 3, 4), IN(2, 5, 4), IN(2, 5, 4)}, NULL},
    {"attention key padding [2,1,1,5]", f_padding, 3, {IN(2, 3, 4), IN(2, 5, 4), IN(2, 5, 4)}, NULL},
    {"attention mask [3,3] with a fully blocked row", f_blocked_row, 3,
     {IN(2, 3, 4), IN(2, 3, 4), IN(2, 3, 4)}, NULL},
    {"attention per-head mask [1,2,1,3]", f_head_mask, 3, {IN(1, 3, 4), IN(1, 3, 4), IN(1, 3, 4)}, NULL},
    {"attention transposed q, sliced k and v (copied)", f_causal, 3,
     {IN_T(2, 3, 4), IN_S(2, 3, 4), IN_S(2, 3, 4)}, NULL},
    {"attention of one tensor as q, k and v", f_self, 1, {IN(2, 3, 4)}, NULL},
    {"attention q rows read in place with row stride 8", f_strided_rows, 3,
     {IN(2, 6, 4), IN(2, 3, 4), IN(2, 3, 4)}, NULL},
    {"attention k v [1,4,4] broadcast over batch 2", f_broadcast_kv, 3,
     {IN(2, 3, 4), IN(1, 4, 4), IN(1, 4, 4)}, NULL},
    {"attention with a constant v", f_causal, 3, {IN(2, 3, 4), IN(2, 3, 4), IN_C(2, 3, 4)}, NULL},
    {"sdpa causal, heads by view + transpose", f_sdpa, 3, {IN(2, 5, 8), IN(2, 5, 8), IN(2, 5, 8)}, &mha_causal},
    {"sdpa grouped-query 4/2 causal + key padding", f_sdpa, 3, {IN(2, 4, 8), IN(2, 4, 4), IN(2, 4, 4)}, &gqa},
    {"sdpa multi-query 3/1 cross, attn_mask, transposed k", f_sdpa, 3, {IN(1, 3, 6), IN_T(1, 5, 2), IN(1, 5, 2)}, &mqa},
    {"sdpa memory-efficient, no mask, 2 row blocks", f_sdpa, 3, {IN(1, 35, 4), IN(1, 6, 4), IN(1, 6, 4)}, &me_none},
    {"sdpa memory-efficient causal 4/2 over 40 rows", f_sdpa, 3, {IN(1, 40, 8), IN(1, 40, 4), IN(1, 40, 4)}, &me_causal},
    {"sdpa memory-efficient causal + key padding, fully padded batch", f_sdpa, 3, {IN(2, 3, 4), IN(2, 3, 2), IN(2, 3, 2)}, &me_pad},
    {"sdpa memory-efficient attn_mask", f_sdpa, 3, {IN(1, 4, 4), IN(1, 5, 4), IN(1, 5, 4)}, &me_attn_mask},
    {"sdpa memory-efficient per-head mask, causal", f_sdpa, 3, {IN(1, 4, 4), IN(1, 4, 4), IN(1, 4, 4)}, &me_head_mask},
};
/* clang-format on */
const int nbcat_attention_count = sizeof nbcat_attention / sizeof nbcat_attention[0];
