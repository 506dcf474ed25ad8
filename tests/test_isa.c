/* Every instruction set this CPU runs (tensor/isa.h), in one process: the same float32 inputs
 * through each set's kernels must agree with the float64 result within float32 parity
 * tolerances, and bit for bit with each other where docs/design.md says they do:
 *   - all three sets: vector math (SLEEF), layer norm's rows, column sums, Adam's update
 *     (written once with vector types, no fused operations);
 *   - AVX-512 and AVX2: the GEMM's tile and rows kernels (each element one fused
 *     multiply-add chain in order of k) and everything built on them, such as attention
 *     heads through the rows kernel or the full GEMM, and the small attention heads (their
 *     products' sums are fused multiply-add chains too); the generic kernels round the
 *     multiply and the add apart, and the dots kernel sums in as many lanes as the set's
 *     vectors hold.
 * Also how NABLA_ISA is read (nbt_isa_parse on pretended CPUs) and that the set in use is
 * the one NABLA_ISA names (scripts/test runs every suite once per set). */
#include "harness.h"
#include "tensor/isa.h"

#include <nabla/blocks.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OUT 8
#define ALL_SETS 7u /* every bit of nbt_isa */
#define VECTOR_SETS ((1u << NBT_ISA_AVX2) | (1u << NBT_ISA_AVX512))

/* One family's results: outputs and input gradients, in the order the family makes them. */
typedef struct {
    nb_tensor *t[MAX_OUT];
    int n;
} results;

typedef void (*family_fn)(nb_dtype dt, results *r);

/* Fixed inputs, drawn in float64 and rounded once, so every set and dtype sees the same. */
static nb_tensor *input(uint64_t seed, nb_dtype dt, int ndim, const int64_t *shape, double scale) {
    nb_rng rng;
    nb_rng_seed(&rng, seed);
    nb_tensor *x64 = nb_mul_scalar(nb_randn(&rng, NB_F64, ndim, shape), scale);
    nb_tensor *x32 = nb_to_dtype(x64, NB_F32); /* float64 sees the float32 values too */
    return nb_requires_grad_(nb_to_dtype(x32, dt), true);
}
#define INPUT(seed, dt, scale, ...) input((seed), (dt), NB_SHAPE(__VA_ARGS__), (scale))

/* out, then backward of sum(out * r) for a fixed r, then each input's gradient. */
static void with_grads(results *r, nb_tensor *out, int n, nb_tensor *const *in) {
    r->t[r->n++] = out;
    nb_tensor *w = nb_detach(input(99, out->dtype, out->ndim, out->shape, 1.0));
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(out, w)), NULL));
    for (int i = 0; i < n; i++) r->t[r->n++] = nb_grad(in[i]);
}

static void vector_math(nb_dtype dt, results *r) {
    nb_tensor *x = INPUT(1, dt, 2.0, 1000);
    nb_tensor *pos = nb_add_scalar(nb_mul(x, x), 0.1);
    nb_tensor *y = nb_add(nb_add(nb_exp(x), nb_log(pos)), nb_add(nb_tanh(x), nb_gelu(x)));
    with_grads(r, y, 1, &x);
}

static void layer_norm_rows(nb_dtype dt, results *r) {
    nb_tensor *in[3] = {INPUT(2, dt, 1.0, 6, 37), INPUT(3, dt, 1.0, 37), INPUT(4, dt, 1.0, 37)};
    with_grads(r, nb_f_layer_norm(in[0], in[1], in[2], 1e-5), 3, in);
}

/* add_layer_norm: x + res added in the rows' first pass, the sum's gradient in dx's; both
 * outputs carry a gradient (the sum's through a second use, as in a residual stream). */
static void add_layer_norm_rows(nb_dtype dt, results *r) {
    nb_tensor *in[4] = {INPUT(20, dt, 1.0, 6, 37), INPUT(21, dt, 1.0, 6, 37),
                        INPUT(22, dt, 1.0, 37), INPUT(23, dt, 1.0, 37)};
    nb_tensor *sum;
    nb_tensor *y = nb_f_add_layer_norm(in[0], in[1], in[2], in[3], 1e-5, &sum);
    with_grads(r, nb_add(y, nb_mul(sum, sum)), 4, in);
    r->t[r->n++] = sum;
}

static void column_sums(nb_dtype dt, results *r) {
    nb_tensor *x = INPUT(5, dt, 1.0, 64, 37);
    r->t[r->n++] = nb_sum_dims(nb_detach(x), 1, (const int[]){0}, false);
}

static void attention(nb_dtype dt, results *r, int64_t B, int64_t Tq, int64_t Tk, int64_t D,
                      int64_t H, bool causal) {
    nb_tensor *in[3] = {INPUT(6, dt, 1.0, B, Tq, D), INPUT(7, dt, 1.0, B, Tk, D),
                        INPUT(8, dt, 1.0, B, Tk, D)};
    double scale = 1.0 / sqrt((double)(D / H));
    with_grads(r, nb_f_attention(in[0], in[1], in[2], H, NULL, causal, scale), 3, in);
}

static void small_heads(nb_dtype dt, results *r) {
    attention(dt, r, 2, 16, 16, 64, 4, true); /* the toy shape: 16 keys, head_dim 16 */
}

/* One query at a time against a key/value cache (the attention-row kernel in float32): a cache
 * of 150 positions keeps its keys in two blocks of 64 and a short one of 22 (kernels.h); a
 * prompt of 99, then queries at positions 99 (keys 0-99: a block not yet full), 127 and 128
 * (the first two blocks exactly, then one key into the third) and 149 (the short block full). */
static void cached_attention_rows(nb_dtype dt, results *r) {
    enum { L = 150, H = 4, KVH = 2, KD = 24, VD = 40 };
    nb_tensor *q = nb_detach(INPUT(18, dt, 1.0, 1, L, H * KD));
    nb_tensor *k = nb_detach(INPUT(19, dt, 1.0, 1, L, KVH * KD));
    nb_tensor *v = nb_detach(INPUT(20, dt, 1.0, 1, L, KVH * VD));
    nb_kv_cache *c = nb_kv_cache_empty(1, 1, L, dt);
    CU_ASSERT_TRUE_FATAL(c && nb_kv_cache_add_heads(c, 0, KVH, KD, VD));
    for (int64_t at = 0, n = 99; at < L; at += n, n = 1) {
        nb_tensor *ctx = nb_kv_cache_attend(c, 0, nb_narrow(q, 1, at, n), nb_narrow(k, 1, at, n),
                                            nb_narrow(v, 1, at, n), H);
        CU_ASSERT_TRUE(nb_kv_cache_commit(c, n));
        if (at == 99 || at == 127 || at == 128 || at == L - 1) r->t[r->n++] = ctx;
    }
    nb_kv_cache_free(c);
}

/* nn/blocks' loops, built once per set (simd_sets.h) and picked by nb_simd_set: RMSNorm's rows
 * and weight gradient over 37 columns (vectors and a tail), and SwiGLU's gate over 185
 * elements, its products by identity weights (w3 twice the identity) so that every set's GEMM
 * gives the exact x and 2x and sends the gate's gradients back to x exactly. */
static void llama_block_loops(nb_dtype dt, results *r) {
    nb_tensor *norm_in[2] = {INPUT(21, dt, 1.0, 6, 37), INPUT(22, dt, 1.0, 37)};
    with_grads(r, blk_f_rms_norm(norm_in[0], norm_in[1], 1e-5), 2, norm_in);
    nb_tensor *x = INPUT(23, dt, 1.0, 5, 37), *eye = nb_eye(dt, 37);
    with_grads(r, blk_f_swiglu(x, eye, nb_mul_scalar(eye, 2.0), eye), 1, &x);
}

/* A Llama LM's training step (RMSNorm with the residual adds, RoPE on q and k, the gate):
 * the logits and the gradients of the embeddings, the first norm and the first gate weight. */
static void llama_step(nb_dtype dt, results *r) {
    nb_module *model = nb_model_new(dt, 5);
    blk_llama_config cfg = {.dim = 32,
                            .n_heads = 4,
                            .n_kv_heads = 2,
                            .hidden = 40,
                            .norm_eps = 1e-5,
                            .rope_base = 10000};
    blk_llama_lm *lm = blk_llama_lm_new(model, "", 11, 2, &cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    nb_rng rng;
    nb_rng_seed(&rng, 24);
    nb_tensor *tokens = nb_randint(&rng, 0, 11, NB_SHAPE(2, 9));
    nb_tensor *logits = blk_llama_lm_forward(lm, tokens, &(blk_attn_opts){.causal = true});
    CU_ASSERT_PTR_NOT_NULL_FATAL(logits);
    r->t[r->n++] = nb_detach(logits);
    CU_ASSERT_TRUE(nb_backward(nb_sum(nb_mul(logits, logits)), NULL));
    r->t[r->n++] = nb_clone(nb_grad(lm->tok_embeddings->weight));
    r->t[r->n++] = nb_clone(nb_grad(lm->layers[0]->attention_norm->weight));
    r->t[r->n++] = nb_clone(nb_grad(lm->layers[0]->feed_forward->w1->weight));
    nb_module_free(model);
}

static void gemm_tiles_and_rows(nb_dtype dt, results *r) {
    nb_tensor *big[2] = {INPUT(9, dt, 1.0, 70, 90), INPUT(10, dt, 1.0, 90, 50)};
    with_grads(r, nb_matmul(big[0], big[1]), 2, big);
    nb_tensor *thin[2] = {INPUT(11, dt, 1.0, 3, 40), INPUT(12, dt, 1.0, 40, 20)};
    with_grads(r, nb_matmul(thin[0], thin[1]), 2, thin);
}

static void attention_rows_and_gemm(nb_dtype dt, results *r) {
    attention(dt, r, 2, 40, 40, 64, 2, false); /* 40 keys: the rows kernel */
    attention(dt, r, 1, 80, 80, 64, 1, true);  /* 80 x 80 x 64: the GEMM, causal blocks */
}

static void gemm_dots(nb_dtype dt, results *r) {
    nb_tensor *in[2] = {INPUT(13, dt, 1.0, 1, 3000), INPUT(14, dt, 1.0, 7, 3000)};
    with_grads(r, nb_matmul(in[0], nb_transpose(in[1], 0, 1)), 2, in);
}

/* Two AdamW steps on 53 elements (three 16-wide vectors and a tail): the parameter and its
 * second moment. */
static void adam_update(nb_dtype dt, results *r) {
    nb_tensor *p = INPUT(16, dt, 1.0, 53), *g = nb_detach(INPUT(17, dt, 1.0, 53));
    nb_optimizer *opt = nb_adamw_new(1, &p, nb_adamw_defaults(0.01));
    CU_ASSERT_PTR_NOT_NULL_FATAL(opt);
    for (int step = 0; step < 2; step++) {
        nb_optimizer_zero_grad(opt);
        CU_ASSERT_TRUE(nb_backward(p, nb_mul_scalar(g, 1.0 + step)));
        CU_ASSERT_TRUE(nb_optimizer_step(opt));
    }
    const nb_named_tensor *state;
    int n = nb_optimizer_state(opt, "", &state);
    r->t[r->n++] = nb_clone(p);
    for (int i = 0; i < n; i++)
        if (strcmp(state[i].name, "exp_avg_sq.0") == 0) r->t[r->n++] = nb_clone(state[i].tensor);
    nb_optimizer_free(opt);
}

/* |x - y| <= tol * (|y| + max |y|) everywhere, all finite; prints the worst element. */
static bool close_to(const nb_tensor *got, const nb_tensor *want, double tol, const char *what) {
    int64_t n = nb_numel(want);
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *y = malloc(sizeof(double) * (size_t)(n ? n : 1));
    bool ok = got && x && y && nb_same_shape(got, want) && nb_to_doubles(got, x) &&
              nb_to_doubles(want, y);
    double scale = 1, worst = 0;
    for (int64_t k = 0; ok && k < n; k++) scale = fabs(y[k]) > scale ? fabs(y[k]) : scale;
    for (int64_t k = 0; ok && k < n; k++) {
        double ratio = fabs(x[k] - y[k]) / (tol * (fabs(y[k]) + scale));
        if (!(ratio <= 1)) {
            printf("\n    %s: element %lld is %.9g, float64 gives %.17g\n", what, (long long)k,
                   x[k], y[k]);
            ok = false;
        }
        worst = ratio > worst ? ratio : worst;
    }
    free(x), free(y);
    return ok;
}

/* Same dtype, shape and bits (NaN nowhere). */
static bool same_bits(const nb_tensor *a, const nb_tensor *b) {
    int64_t n = nb_numel(a);
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *y = malloc(sizeof(double) * (size_t)(n ? n : 1));
    bool ok = a && b && a->dtype == b->dtype && nb_same_shape(a, b) && x && y &&
              nb_to_doubles(a, x) && nb_to_doubles(b, y) &&
              memcmp(x, y, sizeof(double) * (size_t)n) == 0;
    free(x), free(y);
    return ok;
}

/* Runs a family under every set this CPU runs, in float32 and float64, and checks it as the
 * header says: within tolerance of float64 always, bit for bit between the sets in
 * bitwise[dtype] (masks of nbt_isa bits; [0] float32, [1] float64). */
static void check_family(const char *name, family_fn fn, unsigned bitwise_f32,
                         unsigned bitwise_f64) {
    const unsigned bitwise[2] = {bitwise_f32, bitwise_f64};
    const nbt_isa in_use = nbt_isa_current();
    results ref = {0}, got[NBT_ISA_COUNT][2];
    fn(NB_F64, &ref);
    int ran = 0;
    for (int isa = 0; isa < NBT_ISA_COUNT; isa++) {
        if (!nbt_isa_force((nbt_isa)isa)) continue;
        ran++;
        for (int d = 0; d < 2; d++) {
            got[isa][d] = (results){0};
            fn(d ? NB_F64 : NB_F32, &got[isa][d]);
            CU_ASSERT_EQUAL_FATAL(got[isa][d].n, ref.n);
        }
        for (int k = 0; k < ref.n; k++) {
            char what[96];
            snprintf(what, sizeof what, "%s, result %d, %s in float32", name, k,
                     nbt_isa_name((nbt_isa)isa));
            CU_ASSERT_TRUE(close_to(got[isa][0].t[k], ref.t[k], 1e-5, what));
            snprintf(what, sizeof what, "%s, result %d, %s in float64", name, k,
                     nbt_isa_name((nbt_isa)isa));
            CU_ASSERT_TRUE(close_to(got[isa][1].t[k], ref.t[k], 1e-12, what));
        }
        /* Bit for bit with the narrowest earlier set of the same class. */
        for (int d = 0; d < 2; d++)
            for (int other = 0; other < isa; other++) {
                if (!(bitwise[d] & (1u << isa)) || !(bitwise[d] & (1u << other)) ||
                    !nbt_isa_supported((nbt_isa)other))
                    continue;
                for (int k = 0; k < ref.n; k++) {
                    bool same = same_bits(got[isa][d].t[k], got[other][d].t[k]);
                    if (!same)
                        printf("\n    %s, result %d in %s: %s and %s differ\n", name, k,
                               d ? "float64" : "float32", nbt_isa_name((nbt_isa)isa),
                               nbt_isa_name((nbt_isa)other));
                    CU_ASSERT_TRUE(same);
                }
                break;
            }
    }
    CU_ASSERT_TRUE(ran >= 1);
    nbt_isa_force(in_use);
}

static void test_bitwise_everywhere(void) {
    check_family("vector math", vector_math, ALL_SETS, ALL_SETS);
    check_family("layer norm rows", layer_norm_rows, ALL_SETS, ALL_SETS);
    check_family("add and layer norm rows", add_layer_norm_rows, ALL_SETS, ALL_SETS);
    check_family("column sums", column_sums, ALL_SETS, ALL_SETS);
    /* float64 heads go through the rows kernel (the small kernels are float32 only); float32
     * heads sum their products with FMA on the vector sets, as the GEMM does */
    check_family("small attention heads", small_heads, VECTOR_SETS, VECTOR_SETS);
    check_family("Adam's update", adam_update, ALL_SETS, ALL_SETS);
    check_family("cached attention rows", cached_attention_rows, ALL_SETS, VECTOR_SETS);
    check_family("Llama blocks' loops", llama_block_loops, ALL_SETS, ALL_SETS);
}

static void test_bitwise_between_vector_sets(void) {
    check_family("GEMM tiles and rows", gemm_tiles_and_rows, VECTOR_SETS, VECTOR_SETS);
    check_family("attention through the rows kernel and the GEMM", attention_rows_and_gemm,
                 VECTOR_SETS, VECTOR_SETS);
    check_family("Llama LM step", llama_step, VECTOR_SETS, VECTOR_SETS);
}

static void test_within_tolerance(void) {
    check_family("GEMM dots", gemm_dots, 0, 0);
}

/* One row against four rows of 10^5 positive terms (the dots kernel): float32 sums keep a
 * relative error near 1e-6 in every set because each keeps partial sums in lanes. A single
 * running sum, as the generic kernel had, drifts to 7e-6 here (and 1.7e-4 at 10^6 terms). */
static void test_long_dot_products(void) {
    const int64_t K = 100000;
    nb_rng rng;
    nb_rng_seed(&rng, 15);
    nb_tensor *a = nb_to_dtype(nb_rand(&rng, NB_F32, NB_SHAPE(1, K)), NB_F64);
    nb_tensor *b = nb_to_dtype(nb_rand(&rng, NB_F32, NB_SHAPE(4, K)), NB_F64);
    nb_tensor *ref = nb_matmul(a, nb_transpose(b, 0, 1));
    for (nbtest_isa_loop s = nbtest_isa_begin(); nbtest_isa_next(&s);) {
        nb_tensor *got =
            nb_matmul(nb_to_dtype(a, NB_F32), nb_transpose(nb_to_dtype(b, NB_F32), 0, 1));
        double worst = 0;
        for (int64_t j = 0; j < 4; j++) {
            double x = nb_get(got, NB_IDX(0, j)), y = nb_get(ref, NB_IDX(0, j));
            worst = fmax(worst, fabs(x - y) / fabs(y));
        }
        printf("  %s: relative error %.2g\n", nbt_isa_name(s.isa), worst);
        CU_ASSERT_TRUE(worst <= 2e-6);
    }
}

/* The set in use is NABLA_ISA's when it is set (so each pass of scripts/test tests what it
 * says), else the widest this CPU runs. */
static void test_set_in_use(void) {
    const char *env = getenv("NABLA_ISA");
    nbt_isa want = NBT_ISA_GENERIC;
    for (int isa = 0; isa < NBT_ISA_COUNT; isa++)
        if (nbt_isa_supported((nbt_isa)isa)) want = (nbt_isa)isa;
    if (env && *env) {
        char why[256];
        CU_ASSERT_TRUE_FATAL(nbt_isa_parse(env, ALL_SETS, &want, why, sizeof why));
    }
    printf("  kernels: %s\n", nbt_isa_name(nbt_isa_current()));
    CU_ASSERT_EQUAL(nbt_isa_current(), want);
    CU_ASSERT_PTR_NULL(nbt_isa_error());
    CU_ASSERT_TRUE(nbt_isa_supported(NBT_ISA_GENERIC));
    /* the public name of the set in use (nabla/parallel.h), also after forcing another */
    static const char *const spelled[NBT_ISA_COUNT] = {"generic", "avx2", "avx512"};
    CU_ASSERT_STRING_EQUAL(nb_simd_set(), spelled[want]);
    for (int isa = 0; isa < NBT_ISA_COUNT; isa++)
        if (nbt_isa_force((nbt_isa)isa)) CU_ASSERT_STRING_EQUAL(nb_simd_set(), spelled[isa]);
    nbt_isa_force(want);
}

static void test_parse(void) {
    char why[256];
    nbt_isa isa = NBT_ISA_COUNT;
    const char *const names[] = {"generic", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_TRUE(nbt_isa_parse(names[i], ALL_SETS, &isa, why, sizeof why));
        CU_ASSERT_EQUAL(isa, (nbt_isa)i);
        CU_ASSERT_STRING_EQUAL(nbt_isa_name(isa), names[i]);
    }
    /* A CPU with AVX2 but not AVX-512 (or valgrind, which hides it). */
    const unsigned no_avx512 = (1u << NBT_ISA_GENERIC) | (1u << NBT_ISA_AVX2);
    isa = NBT_ISA_COUNT;
    CU_ASSERT_FALSE(nbt_isa_parse("avx512", no_avx512, &isa, why, sizeof why));
    CU_ASSERT_EQUAL(isa, NBT_ISA_COUNT); /* untouched */
    CU_ASSERT_STRING_EQUAL(why, "NABLA_ISA=avx512: this CPU cannot run the avx512 kernels (it "
                                "runs: avx2, generic)");
    CU_ASSERT_FALSE(nbt_isa_parse("avx2", 1u << NBT_ISA_GENERIC, &isa, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "(it runs: generic)"));
    CU_ASSERT_TRUE(nbt_isa_parse("generic", 1u << NBT_ISA_GENERIC, &isa, why, sizeof why));
    /* Names are exact: no case folding, no feature-flag spellings. */
    const char *const unknown[] = {"AVX2", "avx512f", "sse2", "", "avx2 "};
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_FALSE(nbt_isa_parse(unknown[i], ALL_SETS, &isa, why, sizeof why));
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "is not an instruction set nabla has kernels for"));
    }
}

int main(void) {
    const nbtest_case cases[] = {
        {"the set in use is the one NABLA_ISA names", test_set_in_use},
        {"NABLA_ISA values and the CPUs that refuse them", test_parse},
        {"every set: the same bits where written once", test_bitwise_everywhere},
        {"AVX-512 and AVX2: the same bits through the GEMM", test_bitwise_between_vector_sets},
        {"every set: within float32 tolerance of float64", test_within_tolerance},
        {"every set: long dot products keep float32 accuracy", test_long_dot_products},
    };
    return nbtest_run("instruction sets", cases, sizeof cases / sizeof cases[0]);
}
