/* Llama-style transformer pieces, part of libnabla but built on its public API alone (their
 * sources, nn/blocks/, include nothing of nabla but <nabla/...>): RMSNorm, rotary position
 * embeddings, a SwiGLU feed-forward, grouped-query attention, the block that combines them and a
 * small language model; DeepSeek-V2's multi-head latent attention (MLA), whose cache keeps
 * a compressed latent per position; DeepSeek's mixture-of-experts feed-forward; and a
 * DeepSeek-style LM of the two (blk_deepseek_lm, under DeepSeek's own parameter names).
 *
 * Each piece is a function of tensors (differentiable, any float dtype) and a module that
 * holds its parameters in a nabla model tree, under Meta's Llama parameter names
 * (attention.wq.weight, feed_forward.w1.weight, attention_norm.weight, ...). Results are new
 * tensors in the current scope, or NULL with nb_last_error() set; a NULL input gives NULL.
 * Modules are owned by their model's root. The LM generates through nb_generate: its one
 * forward takes a KV cache as an option (blk_attn_opts.cache, blk_llama_lm_causal). */
#ifndef NABLA_BLOCKS_H
#define NABLA_BLOCKS_H

#include <nabla/nabla.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Functions ------------------------------------------------------------------------- */
/* RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * weight, weight [D] (or NULL). */
nb_tensor *blk_f_rms_norm(const nb_tensor *x, const nb_tensor *weight, double eps);

/* Rotary position embedding, rotate-half convention: x [..., hd] (hd even) holds positions
 * offset, offset + 1, ... along dim seq_dim (not the last). Pair i < hd/2, made of elements i
 * and i + hd/2, is rotated by angle position * base^(-2i/hd). */
nb_tensor *blk_rope(const nb_tensor *x, int seq_dim, int64_t offset, double base);

/* RoPE's cos and sin tables, made once and applied to several tensors at the same positions
 * (q and k of one attention): cos and sin of each position's angles, [T, hd / 2] each. */
typedef struct {
    nb_tensor *cos, *sin;
} blk_rope_tables;

/* Tables of dtype dt for positions offset .. offset + T - 1 and an even head dim hd, in the
 * current scope; false with an error when out of memory. */
bool blk_rope_tables_make(nb_dtype dt, int64_t T, int64_t hd, int64_t offset, double base,
                          blk_rope_tables *out);

/* blk_rope with tables made for x's dtype, head dim and length along seq_dim (checked as
 * blk_rope checks its arguments). A new tensor in the current scope, or NULL with an error. */
nb_tensor *blk_rope_apply(const nb_tensor *x, int seq_dim, const blk_rope_tables *tables);

/* SwiGLU feed-forward: (silu(x w1^T) * (x w3^T)) w2^T with w1, w3 [hidden, D], w2 [D, hidden],
 * no biases. */
nb_tensor *blk_f_swiglu(const nb_tensor *x, const nb_tensor *w1, const nb_tensor *w3,
                        const nb_tensor *w2);

/* Grouped-query scaled dot-product attention written op by op: q [B, H, T_q, hd] reads
 * k [B, KV, T_k, hd] and v [B, KV, T_k, vd] (vd may differ from hd, as in MLA), KV dividing
 * H, query head h using kv head h / (H / KV) (PyTorch's repeat_interleave of the kv heads).
 * Returns [B, H, T_q, vd]: softmax(scale * q k^T with
 * blocked keys excluded) v. mask: NB_BOOL broadcast to [B, H, T_q, T_k], true = blocked, or
 * NULL; causal also blocks key j > query i. A row with every key blocked gives zeros and zero
 * gradient. The kv heads are read in place, never copied per query head. It computes what
 * nabla's fused nb_sdpa computes, with the weights as a tensor: if weights is not NULL,
 * *weights receives them, [B, H, T_q, T_k] (differentiable, in the current scope). */
nb_tensor *blk_gqa_attention(const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                             const nb_tensor *mask, bool causal, double scale, nb_tensor **weights);

/* ---- Modules ---------------------------------------------------------------------------- */
/* RMSNorm over the last dim with parameter weight [dim] (ones at first). */
typedef struct {
    nb_module base;
    nb_tensor *weight;
    double eps;
} blk_rms_norm;
blk_rms_norm *blk_rms_norm_new(nb_module *parent, const char *name, int64_t dim, double eps);
nb_tensor *blk_rms_norm_forward(blk_rms_norm *m, const nb_tensor *x);
/* A residual add and the norm after it as one node: *sum = x + res (same shape and dtype)
 * and the result blk_rms_norm_forward(m, *sum), both new tensors in the current scope (the
 * sum is the residual stream, the result what the next sublayer reads). The same values as
 * nb_add then the norm; one pass each way instead of an add, the norm, and in backward the
 * sum of the stream's two gradients. NULL (and *sum NULL) with an error naming m. */
nb_tensor *blk_rms_norm_forward_add(blk_rms_norm *m, const nb_tensor *x, const nb_tensor *res,
                                    nb_tensor **sum);

/* SwiGLU feed-forward D -> hidden -> D: Linear children w1, w3 (gate, up) and w2 (down),
 * without biases, initialised as PyTorch's nn.Linear. */
typedef struct {
    nb_module base;
    nb_linear *w1, *w2, *w3;
} blk_swiglu;
blk_swiglu *blk_swiglu_new(nb_module *parent, const char *name, int64_t dim, int64_t hidden);
nb_tensor *blk_swiglu_forward(blk_swiglu *m, const nb_tensor *x);

/* ---- Mixture of experts (DeepSeek-style) ------------------------------------------------ */
/* A feed-forward of n_experts routed SwiGLU experts, of which each token uses top_k, plus
 * optional shared experts that every token uses (DeepSeek's MoE). For a token x (a row of
 * the input):
 *   p      = softmax(gate.weight x)                      router probabilities over E experts
 *   e_1..k = the top_k largest of p (nb_topk; ties as PyTorch's topk)
 *   w_j    = p[e_j] / (p[e_1] + ... + p[e_k])            the chosen weights, renormalised
 *   y      = shared_experts(x) + sum_j w_j experts.e_j(x)
 * and over the N tokens of a forward, the load-balancing loss (Switch Transformer, DeepSeek's
 * expert-level balance loss):
 *   aux = aux_alpha * E * sum_i f_i * P_i,  f_i = (token-slots routed to expert i) / (N k),
 *                                           P_i = (1 / N) sum_t p_t[i],
 * which is aux_alpha when the routing is perfectly even and grows as it concentrates. f is a
 * count (no gradient); the gradient reaches the router through P. The caller adds aux to its
 * loss.
 *
 * Tokens go to their experts and back through nabla's index ops: a stable counting sort
 * groups the N k (token, expert) slots by expert, nb_index_select gathers their rows, each
 * expert runs on its own rows only, and nb_index_add adds the weighted results back to their
 * tokens. Every tensor a forward makes has a shape that depends on N, not on the routing: each
 * expert's rows are cut into tiles of tile_rows, and the N k slots always fit in
 * T = floor((N k + E (tile_rows - 1)) / tile_rows) tiles, so T tiles are run every step, the
 * unused ones on zero rows (at most E (tile_rows - 1) rows a step, under a quarter of N k
 * with the default tile_rows). So a training loop at a fixed token count allocates nothing
 * after its first step although the experts' batch sizes change (docs/design.md, "Mixture of
 * experts"). Each op runs on nabla's threads and the results are the same bits for any
 * thread count. */
typedef struct {
    int64_t dim;       /* model width D */
    int64_t hidden;    /* hidden width of each routed expert (DeepSeek's moe_inter_dim) */
    int64_t n_experts; /* routed experts E >= 1 */
    int64_t top_k;     /* experts per token, 1..E */
    int64_t n_shared;  /* shared experts: one SwiGLU of hidden n_shared * hidden; 0 for none */
    double aux_alpha;  /* weight of the load-balancing loss, >= 0 */
    /* rows per expert tile; 0 chooses ceil(N k / (4 E)) for N tokens */
    int64_t tile_rows;
} blk_moe_config;

/* Children under DeepSeek's names: gate (Linear [E, D], no bias: gate.weight), experts.0 ..
 * experts.{E-1} (SwiGLU D -> hidden -> D: experts.N.w1.weight, ...), shared_experts (SwiGLU
 * D -> n_shared * hidden -> D) unless n_shared is 0. Owned by the model's root. */
typedef struct {
    nb_module base;
    nb_linear *gate;
    nb_module *experts_container;
    blk_swiglu *shared_experts; /* NULL without shared experts */
    blk_moe_config cfg;
    blk_swiglu **experts; /* n_experts of them (stored after the struct) */
} blk_moe;
/* NULL with an error naming "MoE" and the bad setting. */
blk_moe *blk_moe_new(nb_module *parent, const char *name, const blk_moe_config *cfg);

/* What a forward routed, for the loss and for monitoring; every field new in the current
 * scope. */
typedef struct {
    nb_tensor *aux_loss; /* 0-d, the load-balancing loss above (differentiable) */
    nb_tensor *experts;  /* int64 [..., top_k]: each token's experts, most probable first */
    nb_tensor *weights;  /* [..., top_k]: their renormalised weights (differentiable) */
    nb_tensor *load;     /* int64 [E]: token-slots routed to each expert */
} blk_moe_routing;

/* x [..., dim] of the model's dtype -> [..., dim], a new tensor in the current scope. routing,
 * if not NULL, receives the routing of this forward. NULL with an error naming the module's
 * path and the shapes. */
nb_tensor *blk_moe_forward(blk_moe *m, const nb_tensor *x, blk_moe_routing *routing);

/* Options of an attention forward. Masks are NB_BOOL with true = blocked, as nb_mha takes.
 *
 * The same forward serves training and cached inference (nabla/generate.h): with cache set,
 * x holds the new tokens at positions [len, len + T) of the cache, len = nb_kv_cache_len
 * (RoPE's offset, the same in every layer of one forward since only nb_kv_cache_commit
 * advances it). Their rotated keys and values are written in layer cache_layer and the
 * queries attend causally to every cached position and the new ones through
 * nb_kv_cache_attend, whatever causal says, with autograd off (results have no history). A
 * cache takes no masks, weights or offset, and must hold in that layer n_kv_heads heads of
 * head_dim in the model's dtype (blk_llama_lm_cache_new makes one); anything else is an
 * error naming the module and the cache. Nothing is committed. */
typedef struct {
    bool causal;                       /* block key j > query i */
    const nb_tensor *key_padding_mask; /* [B, T], true = padding, or NULL */
    const nb_tensor *attn_mask;        /* [T, T], or NULL */
    int64_t offset;                    /* position of the first token (RoPE), without a cache */
    nb_tensor **attn_weights;          /* if not NULL, receives [B, H, T, T] */
    nb_kv_cache *cache;                /* cached inference, or NULL */
    int cache_layer; /* the attention's layer in cache (blk_llama_lm_forward sets block i's) */
    /* blk_attention's RoPE tables for the tokens' positions (offset, or the cache's length,
     * onward: [T, head_dim / 2] in x's dtype), made once for the layers of one forward
     * (blk_llama_lm_forward does); NULL: each attention makes its own. blk_mla, whose rotated
     * size differs, makes its own always. Tables that do not fit are an error. */
    const blk_rope_tables *rope;
} blk_attn_opts;

/* Self-attention with RoPE on q and k and n_kv_heads key/value heads shared by groups of the
 * n_heads query heads (n_kv_heads = n_heads: multi-head; 1: multi-query). Linear children
 * wq [n_heads * hd, dim], wk and wv [n_kv_heads * hd, dim], wo [dim, n_heads * hd], no biases,
 * with hd = dim / n_heads (even). The heads go through nabla's fused nb_sdpa, reading the
 * rotated q and k and the kv heads in place; asking for attn_weights takes blk_gqa_attention
 * instead (the same function, op by op). */
typedef struct {
    nb_module base;
    nb_linear *wq, *wk, *wv, *wo;
    int64_t dim, n_heads, n_kv_heads, head_dim;
    double rope_base;
} blk_attention;
blk_attention *blk_attention_new(nb_module *parent, const char *name, int64_t dim, int64_t n_heads,
                                 int64_t n_kv_heads, double rope_base);
/* x [B, T, dim] -> [B, T, dim]. opts may be NULL (bidirectional, no masks, offset 0). */
nb_tensor *blk_attention_forward(blk_attention *m, const nb_tensor *x, const blk_attn_opts *opts);

/* ---- Multi-head latent attention (DeepSeek-V2) ----------------------------------------- */
/* The shape of an MLA layer. Each head's query and key are nope_dim numbers without rotation
 * followed by rope_dim rotated ones (head size nope_dim + rope_dim); values are v_dim, which
 * may differ from it. */
typedef struct {
    int64_t dim, n_heads;
    int64_t q_rank;   /* 0: queries through one projection wq; else the rank of wq_a, wq_b */
    int64_t kv_rank;  /* width of the latent c_kv the cache keeps */
    int64_t nope_dim; /* per head: keys' and queries' part without rotation */
    int64_t rope_dim; /* per head: queries' rotated part, and the one rotated key all heads
                         share (even) */
    int64_t v_dim;    /* per head: values */
    double norm_eps, rope_base; /* of q_norm and kv_norm; of RoPE */
} blk_mla_config;

/* DeepSeek-V2's multi-head latent attention, with the parameter names of DeepSeek's reference
 * model.py (Linear children without biases, RMSNorms with weight):
 *   queries  q = wq(x), or wq_b(q_norm(wq_a(x))) when q_rank > 0: [n_heads, nope_dim + rope_dim]
 *            per token, RoPE on each head's last rope_dim;
 *   latent   [c_kv, k_pe] = wkv_a(x): c_kv of kv_rank and one rotary key part k_pe of
 *            rope_dim per token, rotated once and shared by every head;
 *   keys and values  [k_nope, v] = wkv_b(kv_norm(c_kv)) per head, key = [k_nope, k_pe];
 *   out = wo(heads of softmax(q k^T / sqrt(nope_dim + rope_dim)) v side by side).
 * RoPE is blk_rope's rotate-half convention (DeepSeek's code rotates interleaved pairs: the
 * same model up to a fixed permutation of the rotary columns of the query weight and wkv_a).
 * Training runs the per-head keys through nb_sdpa when v_dim = nope_dim + rope_dim and no
 * weights are asked for, else through blk_gqa_attention.
 *
 * With opts->cache (blk_attn_opts; the same restrictions as blk_attention_forward's), the
 * layer keeps only [kv_norm(c_kv), rotated k_pe] per position, kv_rank + rope_dim numbers, in
 * its layer's rows "latent_rope" (blk_mla_cache_new), and attends "absorbed": the key part of
 * wkv_b is multiplied into each head's query (q_nope W_uk, kv_rank numbers) and its value part
 * into the output, so every head reads the cached rows themselves as keys and values (one kv
 * head for all query heads, through nb_sdpa) and no per-head key or value is rebuilt. It
 * equals the full causal forward within float rounding. */
typedef struct {
    nb_module base;
    nb_linear *wq;          /* q_rank 0, else NULL */
    nb_linear *wq_a, *wq_b; /* q_rank > 0, else NULL */
    blk_rms_norm *q_norm;   /* q_rank > 0, else NULL */
    nb_linear *wkv_a, *wkv_b, *wo;
    blk_rms_norm *kv_norm;
    blk_mla_config cfg;
} blk_mla;
/* A new MLA module "MLA" under parent, owned by its root. NULL with an error naming the
 * config for non-positive sizes, an odd rope_dim, q_rank < 0, eps < 0 or rope_base <= 0. */
blk_mla *blk_mla_new(nb_module *parent, const char *name, const blk_mla_config *cfg);
/* x [B, T, dim] -> [B, T, dim], a new tensor in the current scope. opts as for
 * blk_attention_forward (may be NULL): causal, key_padding_mask [B, T], attn_mask [T, T],
 * RoPE offset, attn_weights ([B, n_heads, T, T]), or a cache and its layer. */
nb_tensor *blk_mla_forward(blk_mla *m, const nb_tensor *x, const blk_attn_opts *opts);
/* A cache for a stack of n_layers MLA layers (layers[i] attends through cache layer i): per
 * layer the rows "latent_rope" of kv_rank + rope_dim numbers a position, for batch sequences
 * of up to max_len positions, in layers[0]'s dtype. Caller owns (nb_kv_cache_free). NULL with
 * an error. */
nb_kv_cache *blk_mla_cache_new(int n_layers, blk_mla *const *layers, int64_t batch,
                               int64_t max_len);
/* Bytes m's cache keeps per position and sequence ((kv_rank + rope_dim) numbers of the
 * model's dtype; nb_kv_cache_bytes of blk_mla_cache_new's cache is this times layers, batch
 * and max_len), and in *mha_bytes (if not NULL) what a multi-head cache of the same heads
 * keeps (n_heads keys of nope_dim + rope_dim and values of v_dim). -1 with an error for NULL. */
int64_t blk_mla_cache_bytes_per_token(const blk_mla *m, int64_t *mha_bytes);

/* The shape of a Llama-style block. */
typedef struct {
    int64_t dim, n_heads, n_kv_heads, hidden;
    double norm_eps, rope_base;
} blk_llama_config;

/* Pre-RMSNorm block: h = x + attention(attention_norm(x)), out = h +
 * feed_forward(ffn_norm(h)). */
typedef struct {
    nb_module base;
    blk_rms_norm *attention_norm, *ffn_norm;
    blk_attention *attention;
    blk_swiglu *feed_forward;
} blk_llama_block;
blk_llama_block *blk_llama_block_new(nb_module *parent, const char *name,
                                     const blk_llama_config *cfg);
nb_tensor *blk_llama_block_forward(blk_llama_block *m, const nb_tensor *x,
                                   const blk_attn_opts *opts);

/* A Llama-style language model: tok_embeddings (N(0, 1)), no position embedding (RoPE in
 * every block gives positions), layers.0 .. layers.{n_layers-1}, norm (RMSNorm) and output
 * (vocabulary logits, no bias). */
#define BLK_MAX_LAYERS 16
typedef struct {
    nb_module base;
    nb_embedding *tok_embeddings;
    nb_module *layers_container;
    blk_llama_block *layers[BLK_MAX_LAYERS];
    blk_rms_norm *norm;
    nb_linear *output;
    int64_t vocab;
    int n_layers;
    blk_llama_config cfg;
} blk_llama_lm;
/* n_layers in 1..BLK_MAX_LAYERS. */
blk_llama_lm *blk_llama_lm_new(nb_module *parent, const char *name, int64_t vocab, int n_layers,
                               const blk_llama_config *cfg);
/* tokens NB_I64 [B, T] -> logits [B, T, vocab]. opts may be NULL; its attn_weights, if not
 * NULL, has room for n_layers tensors and receives each layer's [B, H, T, T] weights. With
 * opts->cache (one layer per block, for batch B, in the model's dtype), block i attends
 * through layer i of the cache and tokens sit at positions [len, len + T) (len =
 * nb_kv_cache_len): the logits equal the full causal forward's at those positions, within
 * float rounding. The caller commits (nb_kv_cache_commit(cache, T)). */
nb_tensor *blk_llama_lm_forward(blk_llama_lm *m, const nb_tensor *tokens,
                                const blk_attn_opts *opts);

/* ---- Generation (nabla/generate.h) ----------------------------------------------------- */
/* A cache for m: per block, n_kv_heads keys and values of head_dim (grouped-query: fewer
 * than the query heads), for batch sequences of up to max_len positions, in the model's
 * dtype. Caller owns (nb_kv_cache_free). NULL with an error. */
nb_kv_cache *blk_llama_lm_cache_new(const blk_llama_lm *m, int64_t batch, int64_t max_len);
/* m as an nb_causal_lm for nb_generate: its forward is blk_llama_lm_forward with
 * {.causal = true, .cache = cache}, its cache blk_llama_lm_cache_new, its vocab m->vocab.
 * RoPE gives the model no fixed context, so max_len (>= 1) is the one to generate with:
 * past it generation slides (nb_generate). Borrows m. */
nb_causal_lm blk_llama_lm_causal(blk_llama_lm *m, int64_t max_len);

/* ---- A DeepSeek-style LM ------------------------------------------------------------- */
/* The shape of a DeepSeek-style LM: every block's attention is MLA (attn), its feed-forward
 * the mixture of experts moe, except the first n_dense_layers blocks, whose feed-forward is
 * one dense SwiGLU of dense_hidden (DeepSeek-V2 keeps its first layer dense). moe.dim must be
 * attn.dim. */
typedef struct {
    blk_mla_config attn;
    blk_moe_config moe;
    int n_dense_layers;   /* 0 .. n_layers */
    int64_t dense_hidden; /* > 0 when n_dense_layers > 0 */
    double norm_eps;      /* of attn_norm, ffn_norm and the final norm */
} blk_deepseek_config;

/* Pre-RMSNorm block, DeepSeek's model.py Block: h = x + attn(attn_norm(x)),
 * out = h + ffn(ffn_norm(h)), ffn a blk_moe or (a dense block) a blk_swiglu. */
typedef struct {
    nb_module base;
    blk_rms_norm *attn_norm, *ffn_norm;
    blk_mla *attn;
    blk_moe *moe;      /* "ffn" of an MoE block, else NULL */
    blk_swiglu *dense; /* "ffn" of a dense block, else NULL */
} blk_deepseek_block;
/* A block under parent (owned by its root); dense chooses the SwiGLU feed-forward. NULL with
 * an error naming the bad setting. */
blk_deepseek_block *blk_deepseek_block_new(nb_module *parent, const char *name,
                                           const blk_deepseek_config *cfg, bool dense);
/* x [B, T, dim] -> [B, T, dim] (opts as blk_mla_forward's, may be NULL). aux_loss, if not
 * NULL, receives the MoE's load-balancing loss (0-d, differentiable; a zero for a dense
 * block), new in the current scope. */
nb_tensor *blk_deepseek_block_forward(blk_deepseek_block *m, const nb_tensor *x,
                                      const blk_attn_opts *opts, nb_tensor **aux_loss);

/* A DeepSeek-style language model under the names of DeepSeek-V2/V3's reference model.py:
 * embed (token embedding, N(0, 1)), layers.0 .. layers.{n_layers-1} (blocks above: attn_norm,
 * attn, ffn_norm, ffn), norm (RMSNorm) and head (vocabulary logits, no bias). No position
 * embedding: MLA's decoupled RoPE gives positions. */
typedef struct {
    nb_module base;
    nb_embedding *embed;
    nb_module *layers_container;
    blk_deepseek_block *layers[BLK_MAX_LAYERS];
    blk_rms_norm *norm;
    nb_linear *head;
    int64_t vocab;
    int n_layers;
    blk_deepseek_config cfg;
} blk_deepseek_lm;
/* n_layers in 1..BLK_MAX_LAYERS, vocab > 0. A new module "DeepSeekLM" owned by parent's root;
 * NULL with an error naming the bad setting. */
blk_deepseek_lm *blk_deepseek_lm_new(nb_module *parent, const char *name, int64_t vocab,
                                     int n_layers, const blk_deepseek_config *cfg);
/* tokens NB_I64 [B, T] -> logits [B, T, vocab], a new tensor in the current scope. aux_loss,
 * if not NULL, receives the sum of the MoE blocks' load-balancing losses (0-d,
 * differentiable, in the current scope) for the caller to add to its loss; NULL skips
 * computing them. opts as blk_llama_lm_forward's: attn_weights (room for n_layers tensors),
 * or a cache from blk_deepseek_lm_cache_new, through which block i attends absorbed (layer i,
 * tokens at positions [len, len + T)); the caller commits. NULL with an error naming the
 * module path. */
nb_tensor *blk_deepseek_lm_forward(blk_deepseek_lm *m, const nb_tensor *tokens,
                                   const blk_attn_opts *opts, nb_tensor **aux_loss);
/* The latent cache for m (blk_mla_cache_new of its blocks' attentions): kv_rank + rope_dim
 * numbers per layer and position, for batch sequences of up to max_len positions. Caller
 * owns (nb_kv_cache_free). NULL with an error. */
nb_kv_cache *blk_deepseek_lm_cache_new(const blk_deepseek_lm *m, int64_t batch, int64_t max_len);
/* m as an nb_causal_lm for nb_generate: its forward is blk_deepseek_lm_forward with
 * {.causal = true, .cache = cache} and no aux loss, its cache blk_deepseek_lm_cache_new, its
 * vocab m->vocab, max_len (>= 1) the context to generate with. Borrows m. */
nb_causal_lm blk_deepseek_lm_causal(blk_deepseek_lm *m, int64_t max_len);
/* Parameters a token uses: all of m's less, in each MoE block, the n_experts - top_k routed
 * experts it is not sent to. In *total (if not NULL) all parameters. -1 with an error for
 * NULL. */
int64_t blk_deepseek_lm_active_params(const blk_deepseek_lm *m, int64_t *total);

/* ---- Export (nabla/gguf.h) ------------------------------------------------------------- */
/* Writes m as a GGUF file that llama.cpp runs as its "llama" architecture: llama.* metadata
 * (context_length = max_len), the tensors under llama.cpp's names (token_embd, blk.N.attn_q,
 * ..., output) in type (norms always float32), and the vocabulary (its n_tokens must be
 * m->vocab). RoPE: nabla rotates halves (element i with i + hd/2); llama.cpp's "llama"
 * rotates adjacent pairs, so each head's rows of wq and wk are reordered (row 2i + j takes row
 * i + j * hd/2), as llama.cpp's own converter does for Hugging Face checkpoints: the exported
 * model computes the same logits. Replaces path atomically; false with an error naming the
 * file, the tensor or the vocabulary. */
bool blk_llama_lm_save_gguf(const blk_llama_lm *m, const char *path, int64_t max_len,
                            const nb_gguf_vocab *vocab, nb_gguf_type type);
/* Writes m as a GGUF file that llama.cpp runs as its "deepseek2" architecture (DeepSeek-V2),
 * with the metadata, names and MLA layout of llama.cpp's own converter: deepseek2.* keys
 * (one kv head of kv_rank + rope_dim, key_length_mla, value_length_mla, q_lora_rank 0 for a
 * model without wq_a, leading_dense_block_count = n_dense_layers, experts routed by softmax
 * with their top_k weights renormalised and unscaled, as blk_moe does), wkv_b split into
 * attn_k_b and attn_v_b, the experts stacked into ffn_{gate,up,down}_exps, the router
 * ffn_gate_inp always float32, other weights in type (norms float32). llama.cpp always runs a
 * shared expert: a model without one gets one of zeros, which adds exactly 0. RoPE's rotary
 * rows of wq (or wq_b) and wkv_a are reordered for llama.cpp's adjacent pairs, as for the
 * Llama LM. Refused, with an error naming the part, when llama.cpp cannot compute the same
 * model: attn.norm_eps (q_norm, kv_norm) differing from norm_eps (llama.cpp has one RMSNorm
 * epsilon), or more than 1024 routed experts. Otherwise as blk_llama_lm_save_gguf. */
bool blk_deepseek_lm_save_gguf(const blk_deepseek_lm *m, const char *path, int64_t max_len,
                               const nb_gguf_vocab *vocab, nb_gguf_type type);

#ifdef __cplusplus
}
#endif
#endif
