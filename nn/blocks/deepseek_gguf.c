/* The DeepSeek-style LM as a GGUF file for llama.cpp ("deepseek2" architecture, its MLA
 * layout with the absorbed key and value up-projections attn_k_b and attn_v_b, as llama.cpp's
 * convert_hf_to_gguf.py writes DeepSeek-V2). */
#include <nabla/blocks.h>

#include "errors.h"
#include "gguf_parts.h"

#include <stdio.h>
#include <stdlib.h>

enum { LLAMA_MAX_EXPERTS = 1024 }; /* llama.cpp's src/llama-hparams.h */

/* Whether llama.cpp's deepseek2 can compute what m computes; an error naming the part if not. */
static bool fits(const blk_deepseek_lm *m, const char *op, const char *path) {
    const blk_deepseek_config *c = &m->cfg;
    if (c->attn.norm_eps != c->norm_eps)
        return nb_error(op,
                        "%s: llama.cpp's deepseek2 has one RMSNorm epsilon, this model two "
                        "(attn.norm_eps %g of q_norm and kv_norm, norm_eps %g)",
                        path, c->attn.norm_eps, c->norm_eps),
               false;
    if (c->n_dense_layers < m->n_layers && c->moe.n_experts > LLAMA_MAX_EXPERTS)
        return nb_error(op, "%s: llama.cpp takes at most %d experts, this model has %lld", path,
                        LLAMA_MAX_EXPERTS, (long long)c->moe.n_experts),
               false;
    return true;
}

/* The per-expert weights of one kind (w1, w2 or w3) stacked: [E, rows, cols]. */
static nb_tensor *stack_experts(const blk_moe *moe, int which) {
    const int64_t E = moe->cfg.n_experts;
    nb_tensor **ws = malloc(sizeof *ws * (size_t)E);
    if (!ws) return nb_error("deepseek2 export", "out of memory");
    for (int64_t e = 0; e < E; e++) {
        const blk_swiglu *x = moe->experts[e];
        ws[e] = (which == 1 ? x->w1 : which == 2 ? x->w2 : x->w3)->weight;
    }
    nb_tensor *t = nb_stack((int)E, ws, 0);
    free(ws);
    return t;
}

/* Routed experts (ffn_*_exps), router (ffn_gate_inp, float32 as llama.cpp's converter keeps
 * it) and shared experts (ffn_*_shexp). llama.cpp's deepseek2 always runs a shared expert:
 * without one, one of zeros (silu(0) * 0 = 0) stands for it. */
static bool add_moe(nb_gguf *g, const blk_moe *moe, int i, nb_gguf_type type) {
    char name[64];
    const blk_swiglu *s = moe->shared_experts;
    const int64_t D = moe->cfg.dim, H = moe->cfg.hidden;
    nb_tensor *up = s ? s->w3->weight : nb_zeros(NB_F32, NB_SHAPE(H, D));
    nb_tensor *gate = s ? s->w1->weight : up;
    nb_tensor *down = s ? s->w2->weight : nb_zeros(NB_F32, NB_SHAPE(D, H));
    return nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_gate_inp"), moe->gate->weight,
                              NB_GGUF_F32) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_gate_exps"), stack_experts(moe, 1),
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_up_exps"), stack_experts(moe, 3),
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_down_exps"), stack_experts(moe, 2),
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_gate_shexp"), gate, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_up_shexp"), up, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_down_shexp"), down, type);
}

static bool add_dense(nb_gguf *g, const blk_swiglu *f, int i, nb_gguf_type type) {
    char name[64];
    return nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_gate"), f->w1->weight, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_up"), f->w3->weight, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_down"), f->w2->weight, type);
}

/* MLA. Queries: each head's last rope_dim rows of wq (or wq_b) and the last rope_dim rows of
 * wkv_a (the shared rotary key) are reordered for llama.cpp's adjacent-pair RoPE. wkv_b
 * [H (nope + v), kv_rank] splits into llama.cpp's absorbed parts: attn_k_b [H, kv_rank, nope]
 * (each head's key part, transposed) and attn_v_b [H, v, kv_rank]. */
static bool add_mla(nb_gguf *g, const blk_mla *a, int i, nb_gguf_type type) {
    const blk_mla_config *c = &a->cfg;
    const int64_t H = c->n_heads;
    char name[64];
    nb_tensor *kv_b = nb_view(a->wkv_b->weight, NB_SHAPE(H, c->nope_dim + c->v_dim, c->kv_rank));
    nb_tensor *k_b = nb_transpose(nb_narrow(kv_b, 1, 0, c->nope_dim), 1, 2);
    nb_tensor *v_b = nb_narrow(kv_b, 1, c->nope_dim, c->v_dim);
    bool ok =
        a->wq
            ? nb_gguf_add_weight(
                  g, blk_gguf_name(name, i, "attn_q"),
                  blk_gguf_pair_rope_rows(a->wq->weight, H, c->nope_dim, c->rope_dim), type)
            : nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_q_a"), a->wq_a->weight, type) &&
                  nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_q_a_norm"), a->q_norm->weight,
                                     type) &&
                  nb_gguf_add_weight(
                      g, blk_gguf_name(name, i, "attn_q_b"),
                      blk_gguf_pair_rope_rows(a->wq_b->weight, H, c->nope_dim, c->rope_dim), type);
    return ok &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_kv_a_mqa"),
                              blk_gguf_pair_rope_rows(a->wkv_a->weight, 1, c->kv_rank, c->rope_dim),
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_kv_a_norm"), a->kv_norm->weight,
                              type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_k_b"), k_b, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_v_b"), v_b, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_output"), a->wo->weight, type);
}

static bool add_layer(nb_gguf *g, const void *model, int i, nb_gguf_type type) {
    const blk_deepseek_block *b = ((const blk_deepseek_lm *)model)->layers[i];
    char name[64];
    return nb_gguf_add_weight(g, blk_gguf_name(name, i, "attn_norm"), b->attn_norm->weight, type) &&
           add_mla(g, b->attn, i, type) &&
           nb_gguf_add_weight(g, blk_gguf_name(name, i, "ffn_norm"), b->ffn_norm->weight, type) &&
           (b->moe ? add_moe(g, b->moe, i, type) : add_dense(g, b->dense, i, type));
}

/* The deepseek2.* keys llama.cpp reads (src/models/deepseek2.cpp and the common hparams):
 * MLA as the converter writes it, one kv head of kv_rank + rope_dim (the absorbed cache);
 * experts routed by softmax, the top_k weights renormalised and not scaled. */
static bool set_keys(nb_gguf *g, const blk_deepseek_lm *m) {
    const blk_deepseek_config *c = &m->cfg;
    const blk_mla_config *a = &c->attn;
    const bool has_moe = c->n_dense_layers < m->n_layers;
    const int64_t expert_hidden = has_moe ? c->moe.hidden : c->dense_hidden;
#define U32(key, v) nb_gguf_set_u32(g, "deepseek2." key, (uint32_t)(v))
    bool ok =
        U32("embedding_length", a->dim) && U32("block_count", m->n_layers) &&
        U32("feed_forward_length", c->n_dense_layers > 0 ? c->dense_hidden : expert_hidden) &&
        U32("leading_dense_block_count", c->n_dense_layers) &&
        U32("attention.head_count", a->n_heads) && U32("attention.head_count_kv", 1) &&
        U32("attention.q_lora_rank", a->q_rank) && U32("attention.kv_lora_rank", a->kv_rank) &&
        U32("attention.key_length", a->kv_rank + a->rope_dim) &&
        U32("attention.value_length", a->kv_rank) &&
        U32("attention.key_length_mla", a->nope_dim + a->rope_dim) &&
        U32("attention.value_length_mla", a->v_dim) &&
        nb_gguf_set_f32(g, "deepseek2.attention.layer_norm_rms_epsilon", (float)c->norm_eps) &&
        U32("rope.dimension_count", a->rope_dim) &&
        nb_gguf_set_f32(g, "deepseek2.rope.freq_base", (float)a->rope_base) &&
        U32("expert_feed_forward_length", expert_hidden) &&
        U32("expert_shared_count", has_moe ? (c->moe.n_shared > 0 ? c->moe.n_shared : 1) : 0);
    if (ok && has_moe)
        ok = U32("expert_count", c->moe.n_experts) && U32("expert_used_count", c->moe.top_k) &&
             nb_gguf_set_bool(g, "deepseek2.expert_weights_norm", true) &&
             nb_gguf_set_f32(g, "deepseek2.expert_weights_scale", 1.0f) &&
             U32("expert_gating_func", 1); /* LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX */
#undef U32
    return ok;
}

static bool fill(nb_gguf *g, const void *model, nb_gguf_type type) {
    const blk_deepseek_lm *m = model;
    return set_keys(g, m) && blk_gguf_add_lm(g, type, m->embed->weight, m->norm->weight,
                                             m->head->weight, m->n_layers, add_layer, m);
}

bool blk_deepseek_lm_save_gguf(const blk_deepseek_lm *m, const char *path, int64_t max_len,
                               const nb_gguf_vocab *vocab, nb_gguf_type type) {
    const char *op = "blk_deepseek_lm_save_gguf";
    if (!m || !path || !vocab) return blk_null_argument(op) != NULL;
    return fits(m, op, path) && blk_gguf_save_lm(op, "deepseek2", &m->base, m->vocab, path, max_len,
                                                 vocab, type, fill, m);
}
