/* nabla's side of bench/compare: the workloads of bench/torch_bench.py, same shapes and model
 * definitions, timed the way torch_bench.py's timeit does: 5 warm-up steps, then steps in a loop
 * until min_time has passed, reporting the loop's mean time per step (outliers included, as on
 * PyTorch's side).
 *
 *   nabla_bench [--threads N] [--min-time SECONDS] [--steps N] [--no-op-shares]
 *               [--busy-neighbour | --alternate]
 *               [workload...]
 *
 * --steps N times exactly N steps instead of running for min_time: under
 * `perf stat -e cycles:u`, two runs' difference over the difference in N is the cycles one step
 * takes, counted for this process alone (steadier than time on a shared machine).
 *
 * --no-op-shares skips timing the softmax and GELU alone after the steps (the shares below), so
 * that a profile of the run (bench/profile) holds the steps only.
 *
 * --busy-neighbour starts a process that keeps one core busy at normal priority (a spinning
 * child, killed at the end) and times each workload at 1 and at 2 threads in turn within one
 * process, switching every ~50 ms, so that the rest of a shared machine's load falls on both
 * alike; it prints both means and their ratio (the aim: 2 threads no more than 10% slower).
 *
 * --alternate times the named workloads (two or more) in one process, in turns of ~50 ms until
 * each has had min_time, and prints each mean with its ratio to the first's: on a shared
 * machine both see the same load, so `--alternate lm llama` compares them where separate runs
 * cannot (peak RSS and op shares are not printed then).
 *
 * Each workload runs in a child process so its peak RSS is its own. Printed per line:
 * name, threads, us/step, GFLOP/s (model FLOPs: 2*m*n*k per matmul the step needs, forward +
 * backward, counted by hand below),
 * peak RSS, mallocs per step after the first, and the share of the step that the causal
 * softmax and the GELU take (forward + backward, timed alone at the step's shapes). The gen
 * and llamagen workloads are timed per generated token ("step" = one token there).
 *
 * lmbig is lm's step at 26 times its size and twice its tokens (torch_bench.py's
 * lmbig_train_step): almost all GEMM, so its share of the FMA peak approaches the GEMM's own.
 *
 * llama is lm's training step with the Llama-style LM of nn/blocks at lm's size and
 * parameter count (see llama_setup), and llamagen its greedy generation as gen's (torch_bench.py
 * has both, as llama_train_step and llamagen_kvcache_per_token). deepseek is lm's step with the
 * DeepSeek-style LM (MLA, mixture of experts; the loss plus its load-balancing loss) at lm's
 * parameter count (see deepseek_setup; it prints its active parameters per token); it has no
 * PyTorch counterpart: `--alternate lm deepseek` times it against lm. */
#define _POSIX_C_SOURCE 200809L
#include <nabla/blocks.h>

#include <nabla/nabla.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct workload workload;
struct workload {
    const char *name, *shape;
    int64_t B, T, D, H, V, L;
    void (*setup)(workload *w);
    void (*step)(workload *w);
    double flops; /* per step */
    /* Per-token workloads: the bytes of the weights a token reads once (its matrices). */
    double weight_bytes;
    nb_module *model;
    nb_mha *mha;
    nb_transformer_lm *lm;
    blk_llama_lm *llama;
    int64_t KV, hidden; /* llama: kv heads and SwiGLU hidden size; deepseek: an expert's */
    blk_deepseek_lm *deepseek;
    nb_optimizer *opt;
    nb_tensor *x, *idx, *tgt;
    nb_tensor *params[256];
    int nparams;
    int64_t per_step; /* results are reported per this many units (tokens for gen); 0 = 1 */
    nb_kv_cache *cache;
    int64_t prompt[16], out[240];
};

/* ---- MHA forward + backward (torch_bench.py mha_step) ---- */
static void mha_setup(workload *w) {
    w->model = nb_model_new(NB_F32, 0);
    w->mha = nb_mha_new(w->model, "mha", w->D, w->D, w->H, false, 0.0);
    nb_rng rng;
    nb_rng_seed(&rng, 0);
    nb_scope_push(w->model->scope);
    w->x = nb_randn(&rng, NB_F32, NB_SHAPE(w->B, w->T, w->D));
    nb_scope_pop();
    /* x does not require grad, so the q/k/v projections have no dX. Per step, with the scores
     * counted in full (T x T per head, as both sides compute them; H heads of D/H columns):
     *   forward:  q, k, v, out projections 4 * 2BTD^2;  QK^T and PV 2 * 2BT^2D
     *   backward: out projection dX + dW 2 * 2BTD^2;  dP, dV, dQ, dK 4 * 2BT^2D;
     *             q, k, v projections dW only 3 * 2BTD^2
     *   total:    18 BTD^2 + 12 BT^2D   (3 x forward, the old count, is 24 BTD^2 + 12 BT^2D:
     *             25% high for seed and mid, 29% for toy, 5% for long). */
    double B = (double)w->B, T = (double)w->T, D = (double)w->D;
    w->flops = 18 * B * T * D * D + 12 * B * T * T * D;
}

static void mha_step(workload *w) {
    nb_scope_begin();
    nb_module_zero_grad(w->model);
    nb_tensor *y = nb_mha_forward(w->mha, w->x, &(nb_mha_opts){.causal = true});
    nb_backward(nb_sum(y), NULL);
    nb_scope_end();
}

/* What lm and llama share once the model is built: AdamW over its parameters, and one batch
 * of tokens and targets from a generator seeded with 0. */
static void training_setup(workload *w) {
    nb_param p[256];
    w->nparams = nb_module_named_params(w->model, p, 256);
    for (int i = 0; i < w->nparams; i++) w->params[i] = p[i].tensor;
    w->opt = nb_adamw_new(w->nparams, w->params, nb_adamw_defaults(1e-3));
    nb_rng rng;
    nb_rng_seed(&rng, 0);
    nb_scope_push(w->model->scope);
    w->idx = nb_randint(&rng, 0, w->V, NB_SHAPE(w->B, w->T));
    w->tgt = nb_randint(&rng, 0, w->V, NB_SHAPE(w->B * w->T));
    nb_scope_pop();
}

/* ---- LM training step (torch_bench.py lm_step) ---- */
static void lm_setup(workload *w) {
    w->model = nb_model_new(NB_F32, 0);
    w->lm = nb_transformer_lm_new(w->model, "", w->V, w->T, w->D, w->H, (int)w->L, 0.0);
    training_setup(w);
    /* Every matmul input requires grad here (the first block's input is the embeddings), so
     * backward is dX + dW for each: 2 x forward, 3 x forward in all. Forward per layer: the
     * four attention projections 4 * 2tD^2 and the MLP 2 * 2t(4D)D (t = B*T tokens), QK^T and
     * PV 2 * 2tTD; then the head 2tDV. */
    double tokens = (double)(w->B * w->T), D = (double)w->D, T = (double)w->T;
    double per_layer = 2 * tokens * (4 * D * D + 8 * D * D) + 2 * 2 * tokens * T * D;
    double fwd = (double)w->L * per_layer + 2 * tokens * D * (double)w->V;
    w->flops = 3 * fwd;
}

static void lm_step(workload *w) {
    nb_scope_begin();
    nb_optimizer_zero_grad(w->opt);
    nb_tensor *logits = nb_transformer_lm_forward(w->lm, w->idx, true, NULL, NULL);
    nb_tensor *loss =
        nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, w->V)), w->tgt, -100, NB_REDUCE_MEAN);
    nb_backward(loss, NULL);
    nb_optimizer_step(w->opt);
    nb_scope_end();
}

/* The generation workloads' prompt: 16 tokens drawn from seed 0; results per generated token
 * (240 a step). */
static void random_prompt(workload *w) {
    nb_rng rng;
    nb_rng_seed(&rng, 0);
    for (int i = 0; i < 16; i++) w->prompt[i] = (int64_t)(nb_rng_next(&rng) % (uint64_t)w->V);
    w->per_step = 240;
}

/* ---- Greedy generation with a KV cache (torch_bench.py gen_cached): a 16-token prompt,
 * then 240 new tokens, batch 1; reported per generated token. The prompt goes in as one
 * chunk (PyTorch feeds it token by token), and the 240th token is chosen without being fed. */
static void gen_setup(workload *w) {
    w->model = nb_model_new(NB_F32, 0);
    w->lm = nb_transformer_lm_new(w->model, "", w->V, w->T, w->D, w->H, (int)w->L, 0.0);
    w->cache = nb_kv_cache_for_lm(w->lm, 1);
    random_prompt(w);
    double D = (double)w->D, ctx = 16 + 240 / 2.0; /* mean keys attended per token */
    double per_layer = 2 * 12 * D * D + 2 * 2 * ctx * D;
    w->flops = (double)w->L * per_layer + 2 * D * (double)w->V; /* per token */
    w->weight_bytes = 4 * ((double)w->L * 12 * D * D + D * (double)w->V);
}

static void gen_step(workload *w) {
    nb_generate_opts o = nb_generate_defaults(240);
    const nb_causal_lm lm = nb_transformer_lm_causal(w->lm);
    if (nb_generate(&lm, w->prompt, 16, &o, w->out, w->cache) != 240)
        fprintf(stderr, "gen: %s\n", nb_last_error());
}

/* ---- The same step with the Llama-style LM of nn/blocks ---- */
/* The llama and llamagen workloads' model: w's sizes, RMSNorm eps 1e-5, RoPE base 10000. */
static void llama_model(workload *w) {
    w->model = nb_model_new(NB_F32, 0);
    blk_llama_config cfg = {.dim = w->D,
                            .n_heads = w->H,
                            .n_kv_heads = w->KV,
                            .hidden = w->hidden,
                            .norm_eps = 1e-5,
                            .rope_base = 10000};
    w->llama = blk_llama_lm_new(w->model, "", w->V, (int)w->L, &cfg);
}

static void llama_setup(workload *w) {
    llama_model(w);
    training_setup(w);
    double tokens = (double)(w->B * w->T), D = (double)w->D, T = (double)w->T;
    double kv_dim = D * (double)w->KV / (double)w->H, hidden = (double)w->hidden;
    double per_layer =
        2 * tokens * (2 * D * D + 2 * D * kv_dim + 3 * D * hidden) + 2 * 2 * tokens * T * D;
    double fwd = (double)w->L * per_layer + 2 * tokens * D * (double)w->V;
    w->flops = 3 * fwd;
}

static void llama_step(workload *w) {
    nb_scope_begin();
    nb_optimizer_zero_grad(w->opt);
    nb_tensor *logits = blk_llama_lm_forward(w->llama, w->idx, &(blk_attn_opts){.causal = true});
    nb_tensor *loss =
        nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, w->V)), w->tgt, -100, NB_REDUCE_MEAN);
    nb_backward(loss, NULL);
    nb_optimizer_step(w->opt);
    nb_scope_end();
}

/* ---- The same step with the DeepSeek-style LM of nn/blocks ---- */
/* MLA with heads of 16 + 16 query/key numbers (no rotation, rotated) and 32 value ones, a
 * latent of D / 2; per block four routed experts of hidden w->hidden, two per token, and one
 * shared. */
static blk_deepseek_config deepseek_config(const workload *w) {
    return (blk_deepseek_config){.attn = {.dim = w->D,
                                          .n_heads = w->H,
                                          .kv_rank = w->D / 2,
                                          .nope_dim = 16,
                                          .rope_dim = 16,
                                          .v_dim = 32,
                                          .norm_eps = 1e-5,
                                          .rope_base = 10000},
                                 .moe = {.dim = w->D,
                                         .hidden = w->hidden,
                                         .n_experts = 4,
                                         .top_k = 2,
                                         .n_shared = 1,
                                         .aux_alpha = 0.01},
                                 .norm_eps = 1e-5};
}

static void deepseek_setup(workload *w) {
    w->model = nb_model_new(NB_F32, 0);
    const blk_deepseek_config cfg = deepseek_config(w);
    w->deepseek = blk_deepseek_lm_new(w->model, "", w->V, (int)w->L, &cfg);
    training_setup(w);
    int64_t total = 0, active = blk_deepseek_lm_active_params(w->deepseek, &total);
    fprintf(stderr, "deepseek: %lld parameters, %lld active per token\n", (long long)total,
            (long long)active);
    /* per token and layer: wq, wkv_a, wkv_b, wo; the router; three experts (two routed, the
     * shared one) of 3 D hidden; scores and weighted sums over T keys */
    const blk_mla_config *a = &cfg.attn;
    double tokens = (double)(w->B * w->T), D = (double)w->D, T = (double)w->T;
    double H = (double)a->n_heads, qk = (double)(a->nope_dim + a->rope_dim), R = (double)a->kv_rank;
    double mla = D * H * qk + D * (R + (double)a->rope_dim) +
                 R * H * (double)(a->nope_dim + a->v_dim) + H * (double)a->v_dim * D;
    double moe = D * (double)cfg.moe.n_experts + 3 * 3 * D * (double)w->hidden;
    double per_layer = 2 * tokens * (mla + moe) + 2 * tokens * T * H * (qk + (double)a->v_dim);
    w->flops = 3 * ((double)w->L * per_layer + 2 * tokens * D * (double)w->V);
}

static void deepseek_step(workload *w) {
    nb_scope_begin();
    nb_optimizer_zero_grad(w->opt);
    nb_tensor *aux;
    nb_tensor *logits =
        blk_deepseek_lm_forward(w->deepseek, w->idx, &(blk_attn_opts){.causal = true}, &aux);
    nb_tensor *loss =
        nb_cross_entropy(nb_view(logits, NB_SHAPE(-1, w->V)), w->tgt, -100, NB_REDUCE_MEAN);
    nb_backward(nb_add(loss, aux), NULL);
    nb_optimizer_step(w->opt);
    nb_scope_end();
}

/* ---- gen's greedy generation with the Llama-style LM (torch_bench.py llama_gen_cached): the
 * same 16-token prompt rule, 240 new tokens, a KV cache of 2 kv heads per layer, through
 * nb_generate and blk_llama_lm_causal with a context of T; reported per generated token. */
static void llamagen_setup(workload *w) {
    llama_model(w);
    w->cache = blk_llama_lm_cache_new(w->llama, 1, w->T);
    random_prompt(w);
    double D = (double)w->D, ctx = 16 + 240 / 2.0; /* mean keys attended per token */
    double kv_dim = D * (double)w->KV / (double)w->H, hidden = (double)w->hidden;
    double per_layer = 2 * (2 * D * D + 2 * D * kv_dim + 3 * D * hidden) + 2 * 2 * ctx * D;
    w->flops = (double)w->L * per_layer + 2 * D * (double)w->V; /* per token */
    w->weight_bytes =
        4 * ((double)w->L * (2 * D * D + 2 * D * kv_dim + 3 * D * hidden) + D * (double)w->V);
}

static void llamagen_step(workload *w) {
    nb_generate_opts o = nb_generate_defaults(240);
    const nb_causal_lm lm = blk_llama_lm_causal(w->llama, w->T);
    if (nb_generate(&lm, w->prompt, 16, &o, w->out, w->cache) != 240)
        fprintf(stderr, "llamagen: %s\n", nb_last_error());
}

/* llama matches lm's 420,929 parameters within 0.08%: lm has per layer 4 D^2 + D (attention,
 * out_proj bias) + 8 D^2 + 5 D (GELU feed-forward with biases) + 4 D (two LayerNorms), plus
 * token and position embeddings and a head with bias. llama has no position embedding or
 * biases, 2 kv heads of 4 (wk, wv are D x D/2), RMSNorm weights only, so its SwiGLU hidden
 * size takes the rest: 65 D + 2 (2 D^2 + 2 D^2/2 + 3 D h + 2 D) + D + 65 D = 420,929 gives
 * h = 397.6, rounded to 398 (421,248 parameters). deepseek: per layer MLA (wq D x 128,
 * wkv_a D x 80, wkv_b 64 x 192, wo 128 x D, kv_norm 64), the router 4 D, five SwiGLUs of
 * 3 D h and two RMSNorms, plus embed, head and norm: h = 76 gives 420,864 parameters (it
 * prints them), 304,128 of them active per token. */
/* clang-format off */
static workload workloads[] = {
    {.name = "seed", .shape = "B1 T3 D6 H2", .B = 1, .T = 3, .D = 6, .H = 2, .V = 0, .L = 0, .setup = mha_setup, .step = mha_step},
    {.name = "toy", .shape = "B32 T16 D64 H4", .B = 32, .T = 16, .D = 64, .H = 4, .V = 0, .L = 0, .setup = mha_setup, .step = mha_step},
    {.name = "mid", .shape = "B8 T128 D256 H8", .B = 8, .T = 128, .D = 256, .H = 8, .V = 0, .L = 0, .setup = mha_setup, .step = mha_step},
    {.name = "lm", .shape = "V65 B16 T64 D128 H4 L2", .B = 16, .T = 64, .D = 128, .H = 4, .V = 65, .L = 2, .setup = lm_setup, .step = lm_step},
    {.name = "lmbig", .shape = "V256 B8 T256 D384 H6 L6", .B = 8, .T = 256, .D = 384, .H = 6, .V = 256, .L = 6, .setup = lm_setup, .step = lm_step},
    {.name = "long", .shape = "B1 T2048 D256 H8", .B = 1, .T = 2048, .D = 256, .H = 8, .V = 0, .L = 0, .setup = mha_setup, .step = mha_step},
    {.name = "gen", .shape = "V65 T256 D128 H4 L2 (token)", .B = 1, .T = 256, .D = 128, .H = 4, .V = 65, .L = 2, .setup = gen_setup, .step = gen_step},
    {.name = "llama", .shape = "V65 B16 T64 D128 H4/2 L2", .B = 16, .T = 64, .D = 128, .H = 4, .V = 65, .L = 2, .KV = 2, .hidden = 398, .setup = llama_setup, .step = llama_step},
    {.name = "deepseek", .shape = "V65 B16 T64 D128 H4 L2 E4/2+1", .B = 16, .T = 64, .D = 128, .H = 4, .V = 65, .L = 2, .hidden = 76, .setup = deepseek_setup, .step = deepseek_step},
    {.name = "llamagen", .shape = "V65 T256 D128 H4/2 L2 (token)", .B = 1, .T = 256, .D = 128, .H = 4, .V = 65, .L = 2, .KV = 2, .hidden = 398, .setup = llamagen_setup, .step = llamagen_step},
};
/* clang-format on */
#define NUM_WORKLOADS (int)(sizeof workloads / sizeof workloads[0])

/* Softmax and GELU alone, at the shapes and counts one step of w uses (forward + backward),
 * timed separately: their share of the step shows what fusing them buys. */
static double time_op(nb_tensor *(*op)(const nb_tensor *), const nb_tensor *x, int times) {
    double best = 1e30;
    for (int rep = 0; rep < 20; rep++) {
        double t0 = now();
        for (int i = 0; i < times; i++) {
            nb_scope_begin();
            nb_tensor *y = op(x);
            nb_backward(y, y);
            nb_scope_end();
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    return best;
}

static nb_tensor *causal_softmax(const nb_tensor *x) {
    return nb_masked_softmax(x, NULL, true, 0.125);
}

static void op_shares(const workload *w, double step, double *softmax, double *gelu) {
    nb_rng rng;
    nb_rng_seed(&rng, 1);
    int layers = w->L ? (int)w->L : 1;
    nb_scope_begin();
    nb_tensor *scores =
        nb_requires_grad_(nb_randn(&rng, NB_F32, NB_SHAPE(w->B, w->H, w->T, w->T)), true);
    *softmax = time_op(causal_softmax, scores, layers) / step;
    *gelu = 0;
    if (w->L && !w->llama && !w->deepseek) { /* the llama and deepseek blocks have no GELU */
        nb_tensor *h =
            nb_requires_grad_(nb_randn(&rng, NB_F32, NB_SHAPE(w->B, w->T, 4 * w->D)), true);
        *gelu = time_op(nb_gelu, h, layers) / step;
    }
    nb_scope_end();
}

/* One thread's read rate, in bytes per second, over a buffer of `bytes` read again and again
 * (so it sits where a token's weights sit, L2 or L3 for gen): the best of 20 passes after a
 * warm-up, adding 16-byte integer vectors into 4 independent sums (the baseline build's
 * widest loads; integer sums need no -ffast-math). A token's weights cannot be read much
 * faster than this on one core. */
typedef uint64_t rr_vec __attribute__((vector_size(16)));
static double read_rate(double bytes) {
    size_t n = (size_t)(bytes / sizeof(rr_vec)) / 4 * 4;
    rr_vec *buf = n ? aligned_alloc(64, (n * sizeof *buf + 63) / 64 * 64) : NULL;
    if (!buf) return 0;
    memset(buf, 1, n * sizeof *buf);
    double best = 1e30;
    volatile uint64_t sink = 0;
    for (int pass = 0; pass < 21; pass++) {
        double start = now();
        rr_vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (size_t i = 0; i < n; i += 4) {
            a0 += buf[i];
            a1 += buf[i + 1];
            a2 += buf[i + 2];
            a3 += buf[i + 3];
        }
        double t = now() - start;
        rr_vec a = a0 + a1 + a2 + a3;
        sink += a[0] + a[1];
        if (pass > 0 && t < best) best = t;
    }
    free(buf);
    return (double)(n * sizeof *buf) / best;
}

/* Runs in the child: as torch_bench.py's timeit, 5 warm-up steps (the allocations of the last
 * one counted), then steps until min_time has passed; the mean over that loop. */
static int64_t fixed_steps; /* --steps: this many timed steps, not min_time's worth */
static bool no_op_shares;   /* --no-op-shares */

static void run(workload *w, double min_time) {
    w->setup(w);
    for (int i = 0; i < 4; i++) w->step(w);
    uint64_t allocs_before = nb_alloc_count();
    w->step(w);
    uint64_t allocs_per_step = nb_alloc_count() - allocs_before;
    int64_t n = 0;
    double start = now(), elapsed;
    do {
        w->step(w);
        n++;
        elapsed = now() - start;
    } while (fixed_steps ? n < fixed_steps : elapsed < min_time);
    double mean = elapsed / (double)n / (double)(w->per_step ? w->per_step : 1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru); /* before the share measurements allocate anything */
    double softmax = 0, gelu = 0;
    if (!w->per_step && !no_op_shares) /* training-step shapes only */
        op_shares(w, mean, &softmax, &gelu);
    printf("%-5s %-24s threads %d  %10.1f us/step  %7.2f GFLOP/s  peak RSS %6.1f MB  "
           "mallocs/step %llu  softmax %4.1f%%  gelu %4.1f%%\n",
           w->name, w->shape, nb_get_num_threads(), mean * 1e6, w->flops / mean * 1e-9,
           (double)ru.ru_maxrss / 1024.0, (unsigned long long)allocs_per_step, 100 * softmax,
           100 * gelu);
    if (w->weight_bytes > 0) {
        const double rate = read_rate(w->weight_bytes);
        printf("%-5s weights %.2f MB a token; one core reads them at %.1f GB/s, once in %.1f us "
               "(%.0f%% of the token)\n",
               w->name, w->weight_bytes * 1e-6, rate * 1e-9, w->weight_bytes / rate * 1e6,
               100 * w->weight_bytes / rate / mean);
    }
    fflush(stdout);
}

/* Steps w for at least 50 ms; returns the time taken and adds the steps to *steps. */
static double timed_block(workload *w, int64_t *steps) {
    double start = now(), elapsed;
    do {
        w->step(w);
        ++*steps;
    } while ((elapsed = now() - start) < 0.05);
    return elapsed;
}

/* Busy-neighbour mode, in the child: 5 warm-up steps at each thread count, then blocks of
 * steps of at least 50 ms, alternately at 1 and 2 threads, until each count has had
 * min_time; each count's mean over its blocks. */
static void run_one_vs_two(workload *w, double min_time) {
    w->setup(w);
    for (int t = 1; t <= 2; t++) {
        nb_set_num_threads(t);
        for (int i = 0; i < 5; i++) w->step(w);
    }
    double spent[3] = {0, 0, 0};
    int64_t steps[3] = {0, 0, 0};
    while (spent[1] < min_time || spent[2] < min_time) {
        for (int t = 1; t <= 2; t++) {
            nb_set_num_threads(t);
            spent[t] += timed_block(w, &steps[t]);
        }
    }
    double per = (double)(w->per_step ? w->per_step : 1);
    double one = spent[1] / (double)steps[1] / per, two = spent[2] / (double)steps[2] / per;
    printf("%-5s %-24s busy neighbour  1 thread %10.1f us/step  2 threads %10.1f us/step  "
           "2t/1t %5.2f\n",
           w->name, w->shape, one * 1e6, two * 1e6, two / one);
    fflush(stdout);
}

/* Alternate mode, in the child: the n workloads set up side by side, 5 warm-up steps each,
 * then blocks of steps of at least 50 ms taken in turn until each has had min_time, so that
 * a shared machine's load falls on all of them alike; each one's mean and its ratio to the
 * first's. */
static void run_alternating(workload **ws, int n, double min_time) {
    double spent[NUM_WORKLOADS] = {0};
    int64_t steps[NUM_WORKLOADS] = {0};
    for (int i = 0; i < n; i++) {
        ws[i]->setup(ws[i]);
        for (int k = 0; k < 5; k++) ws[i]->step(ws[i]);
    }
    for (bool more = true; more;) {
        more = false;
        for (int i = 0; i < n; i++) spent[i] += timed_block(ws[i], &steps[i]);
        for (int i = 0; i < n; i++) more |= spent[i] < min_time;
    }
    double first = 0;
    for (int i = 0; i < n; i++) {
        double per = (double)(ws[i]->per_step ? ws[i]->per_step : 1);
        double mean = spent[i] / (double)steps[i] / per;
        if (i == 0) first = mean;
        printf("%-5s %-24s alternating  threads %d  %10.1f us/step  %5.3fx %s\n", ws[i]->name,
               ws[i]->shape, nb_get_num_threads(), mean * 1e6, mean / first, ws[0]->name);
    }
    fflush(stdout);
}

/* A process that keeps one core busy at normal priority until killed (or its parent dies). */
static pid_t start_neighbour(void) {
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (volatile unsigned long spin = 0;; spin++) continue;
    }
    return pid;
}

int main(int argc, char **argv) {
    int threads = 0;
    bool busy = false, alternate = false;
    double min_time = 1.0;
    const char *only[NUM_WORKLOADS];
    int nonly = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--min-time") == 0 && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            fixed_steps = atoll(argv[++i]);
        else if (strcmp(argv[i], "--no-op-shares") == 0)
            no_op_shares = true;
        else if (strcmp(argv[i], "--busy-neighbour") == 0)
            busy = true;
        else if (strcmp(argv[i], "--alternate") == 0)
            alternate = true;
        else if (nonly < NUM_WORKLOADS)
            only[nonly++] = argv[i];
    }
    if (threads > 0) nb_set_num_threads(threads);
    if (alternate) { /* one child runs them all, in turn */
        workload *ws[NUM_WORKLOADS];
        int n = 0;
        for (int j = 0; j < nonly; j++)
            for (int k = 0; k < NUM_WORKLOADS; k++)
                if (strcmp(only[j], workloads[k].name) == 0) ws[n++] = &workloads[k];
        if (n < 2) {
            fprintf(stderr, "nabla_bench: --alternate needs two or more workloads\n");
            return 1;
        }
        pid_t pid = fork();
        if (pid == 0) {
            run_alternating(ws, n, min_time);
            _exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
    }
    pid_t neighbour = busy ? start_neighbour() : -1;
    for (int k = 0; k < NUM_WORKLOADS; k++) {
        bool wanted = nonly == 0;
        for (int j = 0; j < nonly; j++) wanted |= strcmp(only[j], workloads[k].name) == 0;
        if (!wanted) continue;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            if (busy)
                run_one_vs_two(&workloads[k], min_time);
            else
                run(&workloads[k], min_time);
            _exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fprintf(stderr, "nabla_bench: workload %s failed\n", workloads[k].name);
    }
    if (neighbour > 0) {
        kill(neighbour, SIGKILL);
        waitpid(neighbour, NULL, 0);
    }
    return 0;
}
