/* MultiHeadAttention through the fused attention against PyTorch: every case of
 * tests/goldens/modules_fused.json (tests/gen_fused_goldens.py) runs nb_mha_forward without
 * asking for the attention weights, so it must take a fused attention (checked: the graph
 * records the "attention" op, or "qkv_attention" for self-attention without a mask or
 * projection biases, and no masked softmax). The output and every parameter and input
 * gradient must match PyTorch within golden_compare's tolerances.
 *
 * Where a query's keys are all blocked, PyTorch's output is NaN and nabla's is out_proj.bias
 * (zero weights, zero context): the golden's NaN must sit in exactly those rows, which this
 * test finds from the masks itself, and nabla's rows there must be the bias bit for bit. A
 * fully padded sequence must also get exactly zero input gradients. The gradients in the
 * golden are PyTorch's of nabla's function (see the generator), NaN-free.
 *
 * Every case runs twice, keeping the probabilities for backward and on the memory-efficient
 * path (forced through nba_attention_keep_limit; the test checks the path taken). Cases whose
 * inputs are scaled by 1e3 run in float32 under every instruction set this CPU runs
 * (tensor/isa.h) and must meet the tolerance against the exact float64 answer, as PyTorch's
 * own float32 does there. The cases together must cover the features of `features`. */
#include "harness.h"
#include "golden.h"
#include "autograd/attention.h"
#include "autograd/node.h"
#include "tensor/isa.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_NAMED 16

/* What one case is. */
typedef struct {
    const json_t *c, *twin; /* twin: the f32 case holding parameters, inputs, grad_output */
    nb_dtype dt;
    int64_t d_in, d_out, heads, B, Tq, Tk;
    bool qkv_bias, causal, cross;
    double scale, pytorch_f32_worst;
    golden_named params[MAX_NAMED], inputs[MAX_NAMED];
    int nparams, ninputs;
    nb_tensor *x_q, *x_kv, *padding, *attn_mask; /* padding and attn_mask may be NULL */
} fused_case;

static int64_t config_int(const json_t *c, const char *key) {
    return json_integer_value(json_object_get(json_object_get(c, "config"), key));
}

/* The case's tensors in dtype dt (the f64 case widens its twin's). False after printing why. */
static bool load_case(const json_t *root, const json_t *c, fused_case *f) {
    memset(f, 0, sizeof *f);
    f->c = c;
    const char *dt = json_string_value(json_object_get(c, "dtype"));
    f->dt = dt && strcmp(dt, "f64") == 0 ? NB_F64 : NB_F32;
    const char *twin = json_string_value(json_object_get(c, "parameters_and_inputs_of"));
    f->twin = f->dt == NB_F64 ? golden_find_case(root, twin ? twin : "") : c;
    if (!f->twin) return printf("    no f32 twin \"%s\"\n", twin ? twin : "?"), false;
    f->d_in = config_int(c, "d_in"), f->d_out = config_int(c, "d_out");
    f->heads = config_int(c, "num_heads");
    f->qkv_bias = json_is_true(json_object_get(json_object_get(c, "config"), "qkv_bias"));
    f->causal = json_is_true(json_object_get(json_object_get(c, "forward"), "causal"));
    f->scale = json_number_value(json_object_get(c, "scale"));
    f->pytorch_f32_worst = json_number_value(json_object_get(c, "pytorch_f32_worst"));
    f->nparams = golden_named_tensors(f->twin, "parameters", f->params, MAX_NAMED);
    f->ninputs = golden_named_tensors(f->twin, "inputs", f->inputs, MAX_NAMED);
    if (f->nparams < 0 || f->ninputs < 0) return false;
    for (int k = 0; k < f->ninputs; k++) {
        nb_tensor *t = f->inputs[k].tensor;
        const char *n = f->inputs[k].name;
        if (nb_is_float(t)) t = nb_requires_grad_(nb_detach(nb_to_dtype(t, f->dt)), true);
        f->inputs[k].tensor = t;
        if (strcmp(n, "x") == 0 || strcmp(n, "x_q") == 0) f->x_q = t;
        if (strcmp(n, "x") == 0 || strcmp(n, "x_kv") == 0) f->x_kv = t;
        if (strcmp(n, "key_padding_mask") == 0) f->padding = t;
        if (strcmp(n, "attn_mask") == 0) f->attn_mask = t;
    }
    if (!f->x_q || !f->x_kv) return printf("    no x or x_q and x_kv\n"), false;
    f->cross = f->x_q != f->x_kv;
    f->B = f->x_q->shape[0], f->Tq = f->x_q->shape[1], f->Tk = f->x_kv->shape[1];
    return true;
}

/* True if query t of sequence b sees no key. */
static bool dead_row(const fused_case *f, int64_t b, int64_t t) {
    for (int64_t s = 0; s < f->Tk; s++) {
        bool blocked = (f->causal && s > t) ||
                       (f->padding && nb_get(f->padding, NB_IDX(b, s)) != 0) ||
                       (f->attn_mask && nb_get(f->attn_mask, NB_IDX(t, s)) != 0);
        if (!blocked) return false;
    }
    return true;
}

static bool fully_padded(const fused_case *f, int64_t b) {
    for (int64_t s = 0; f->padding && s < f->Tk; s++)
        if (nb_get(f->padding, NB_IDX(b, s)) == 0) return false;
    return f->padding != NULL;
}

/* Records which ops the forward made. */
static bool saw_attention, saw_qkv_attention, saw_masked_softmax;
static void record(const char *op) {
    if (strcmp(op, "attention") == 0) saw_attention = true;
    if (strcmp(op, "qkv_attention") == 0) saw_qkv_attention = true;
    if (strcmp(op, "masked_softmax") == 0) saw_masked_softmax = true;
}

typedef struct {
    nb_module *model;
    nb_mha *mha;
    nb_tensor *out;
} run_result;

/* Builds the module, copies the parameters in and runs forward and backward, keeping the
 * probabilities or (memory_efficient) not. */
static bool run(const fused_case *f, bool memory_efficient, run_result *r) {
    r->model = nb_model_new(f->dt, 1);
    r->mha = nb_mha_new(r->model, "", f->d_in, f->d_out, f->heads, f->qkv_bias, 0.0);
    if (!r->mha) return printf("    cannot build: %s\n", nb_last_error()), false;
    for (int k = 0; k < f->nparams; k++) {
        nb_tensor *p = nb_module_param(&r->mha->base, f->params[k].name);
        if (!p || !nb_copy_(p, f->params[k].tensor))
            return printf("    parameter %s: %s\n", f->params[k].name, nb_last_error()), false;
    }
    nb_param all[MAX_NAMED];
    if (nb_module_named_params(&r->mha->base, all, MAX_NAMED) != f->nparams)
        return printf("    the module and the golden have different parameters\n"), false;
    for (int k = 0; k < f->ninputs; k++)
        if (f->inputs[k].tensor->requires_grad) nb_zero_grad(f->inputs[k].tensor);
    nb_mha_opts opts = {
        .causal = f->causal, .key_padding_mask = f->padding, .attn_mask = f->attn_mask};
    saw_attention = saw_qkv_attention = saw_masked_softmax = false;
    nba_set_record_hook(record);
    size_t limit = nba_attention_keep_limit(memory_efficient ? 0 : SIZE_MAX);
    r->out = f->cross ? nb_mha_forward_cross(r->mha, f->x_q, f->x_kv, &opts)
                      : nb_mha_forward(r->mha, f->x_q, &opts);
    bool took_memory_efficient = nba_attention_last_memory_efficient();
    nba_set_record_hook(NULL);
    nb_tensor *g = golden_tensor(json_object_get(f->twin, "grad_output"), GOLDEN_CONTIGUOUS);
    bool ok = r->out && g && nb_backward(r->out, nb_to_dtype(g, f->dt));
    nba_attention_keep_limit(limit);
    if (!ok) return printf("    forward or backward: %s\n", nb_last_error()), false;
    /* Self-attention without a mask or projection biases takes the projections into the
     * attention's node (nb_f_qkv_attention); everything else nb_f_attention. */
    const bool self_unmasked = !f->cross && !f->padding && !f->attn_mask && !f->qkv_bias;
    if (saw_attention == self_unmasked || saw_qkv_attention != self_unmasked ||
        saw_masked_softmax || took_memory_efficient != memory_efficient)
        return printf("    forward did not take %s's %s path\n",
                      self_unmasked ? "nb_f_qkv_attention" : "nb_f_attention",
                      memory_efficient ? "memory-efficient" : "kept"),
               false;
    return true;
}

typedef struct {
    bool ok;
    double worst; /* largest error / tolerance */
} tally;

static void note(tally *t, golden_cmp r, const char *what) {
    if (r.worst_ratio > t->worst) t->worst = r.worst_ratio;
    if (!r.ok) printf("    %s: %s\n", what, r.message), t->ok = false;
}

/* The output: PyTorch's NaN exactly in the dead rows, where nabla gives out_proj.bias bit
 * for bit; elsewhere golden_compare's tolerance (the NaN rows excluded from its scale). */
static void compare_output(tally *t, const fused_case *f, const run_result *r) {
    const json_t *spec = json_object_get(f->c, "output");
    nb_tensor *want = golden_tensor(spec, GOLDEN_CONTIGUOUS);
    if (!want || !nb_same_shape(want, r->out)) {
        printf("    output: shapes differ\n"), t->ok = false;
        return;
    }
    const int64_t D = f->d_out, n = nb_numel(want);
    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    double bias[256];
    nb_to_doubles(r->out, x), nb_to_doubles(want, y), nb_to_doubles(r->mha->out_proj->bias, bias);
    bool f32 = f->dt == NB_F32;
    double rtol = f32 ? 1e-5 : 1e-10, atol = f32 ? 1e-6 : 1e-12, scale = 1;
    for (int64_t k = 0; k < n; k++)
        if (isfinite(y[k]) && fabs(y[k]) > scale) scale = fabs(y[k]);
    for (int64_t b = 0; b < f->B; b++)
        for (int64_t q = 0; q < f->Tq; q++) {
            bool dead = dead_row(f, b, q);
            for (int64_t j = 0; j < D; j++) {
                int64_t k = (b * f->Tq + q) * D + j;
                bool ok =
                    dead ? isnan(y[k]) && x[k] == bias[j]
                         : isfinite(y[k]) && fabs(x[k] - y[k]) <= rtol * fabs(y[k]) + atol * scale;
                if (!dead && isfinite(y[k])) {
                    double ratio = fabs(x[k] - y[k]) / (rtol * fabs(y[k]) + atol * scale);
                    if (ratio > t->worst) t->worst = ratio;
                }
                if (!ok && t->ok)
                    printf("    output [%lld, %lld, %lld]%s: nabla %.17g, PyTorch %.17g\n",
                           (long long)b, (long long)q, (long long)j,
                           dead ? " (a query that sees no key: PyTorch NaN, nabla the bias)" : "",
                           x[k], y[k]);
                t->ok = t->ok && ok;
            }
        }
    free(x), free(y);
}

static void compare_gradients(tally *t, const fused_case *f, const run_result *r) {
    nb_param params[MAX_NAMED];
    int n = nb_module_named_params(&r->mha->base, params, MAX_NAMED);
    for (int k = 0; k < n; k++)
        note(t,
             golden_compare(nb_grad(params[k].tensor),
                            golden_named_spec(f->c, "parameter_grads", params[k].name)),
             params[k].name);
    for (int k = 0; k < f->ninputs; k++) {
        nb_tensor *x = f->inputs[k].tensor;
        if (!x->requires_grad) continue;
        note(t,
             golden_compare(nb_grad(x), golden_named_spec(f->c, "input_grads", f->inputs[k].name)),
             f->inputs[k].name);
        /* A fully padded sequence: exactly zero, not merely small. */
        for (int64_t b = 0; b < f->B; b++) {
            if (!fully_padded(f, b)) continue;
            nb_tensor *row = nb_select(nb_grad(x), 0, b);
            bool zero = nb_item(nb_sum(nb_mul(row, row))) == 0;
            if (!zero)
                printf("    %s: sequence %lld is padding, its gradient is not 0\n",
                       f->inputs[k].name, (long long)b);
            t->ok = t->ok && zero;
        }
    }
}

/* Features the cases must cover, per dtype, and which kernel switch each side is. */
enum {
    F_CAUSAL = 1 << 0,
    F_PADDING = 1 << 1,
    F_FULLY_PADDED = 1 << 2,
    F_ATTN_MASK = 1 << 3,
    F_CROSS = 1 << 4, /* T_q != T_k */
    F_HEAD_DIM_1 = 1 << 5,
    F_HEAD_DIM_64 = 1 << 6,
    F_SMALL_HEADS = 1 << 7,     /* float32, no mask, T_k <= 16, T_q <= 64, head_dim <= 64 */
    F_PAST_16_KEYS = 1 << 8,    /* no mask, T_k = 17: off the small heads */
    F_PAST_64_QUERIES = 1 << 9, /* no mask, T_q = 65, T_k <= 16 */
    F_ROWS = 1 << 10,           /* T_q T_k head_dim <= 64^3 off the small heads */
    F_GEMM = 1 << 11,           /* T_q T_k head_dim > 64^3 */
    F_ROWS_EDGE = 1 << 12,      /* exactly 64^3 */
    F_CAUSAL_BLOCKS = 1 << 13,  /* causal, T_q = T_k > 32 */
    F_ONE_BLOCK = 1 << 14,      /* causal, T_q = T_k = 32 */
    F_SHORT_ROWS = 1 << 15,     /* T_k <= 32 */
    F_LONG_ROWS = 1 << 16,      /* T_k > 32 */
    F_SCALED = 1 << 17,         /* inputs x 1e3 */
    F_ALL = (1 << 18) - 1
};

static unsigned features(const fused_case *f) {
    int64_t hd = f->d_out / f->heads, work = f->Tq * f->Tk * hd;
    bool masked = f->padding || f->attn_mask;
    bool small = f->dt == NB_F32 && !masked && f->Tk <= 16 && f->Tq <= 64 && hd <= 64;
    bool any_padded = false;
    for (int64_t b = 0; b < f->B; b++) any_padded = any_padded || fully_padded(f, b);
    return (f->causal ? F_CAUSAL : 0u) | (f->padding ? F_PADDING : 0u) |
           (any_padded ? F_FULLY_PADDED : 0u) | (f->attn_mask ? F_ATTN_MASK : 0u) |
           (f->Tq != f->Tk ? F_CROSS : 0u) | (hd == 1 ? F_HEAD_DIM_1 : 0u) |
           (hd == 64 ? F_HEAD_DIM_64 : 0u) | (small ? F_SMALL_HEADS : 0u) |
           (!masked && f->Tk == 17 ? F_PAST_16_KEYS : 0u) |
           (!masked && f->Tq == 65 && f->Tk <= 16 ? F_PAST_64_QUERIES : 0u) |
           (!small && work <= 64 * 64 * 64 ? F_ROWS : 0u) | (work > 64 * 64 * 64 ? F_GEMM : 0u) |
           (work == 64 * 64 * 64 ? F_ROWS_EDGE : 0u) |
           (f->causal && f->Tq == f->Tk && f->Tq > 32 ? F_CAUSAL_BLOCKS : 0u) |
           (f->causal && f->Tq == f->Tk && f->Tq == 32 ? F_ONE_BLOCK : 0u) |
           (f->Tk <= 32 ? F_SHORT_ROWS : F_LONG_ROWS) | (f->scale != 1 ? F_SCALED : 0u);
}

static bool check(const fused_case *f, bool memory_efficient, double *worst) {
    tally t = {.ok = true};
    run_result r = {0};
    nb_scope_begin();
    t.ok = run(f, memory_efficient, &r);
    if (t.ok) compare_output(&t, f, &r);
    if (t.ok) compare_gradients(&t, f, &r);
    nb_scope_end();
    nb_module_free(r.model);
    *worst = t.worst;
    return t.ok;
}

static void test_every_case(void) {
    json_t *root = golden_load("modules_fused.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const json_t *cases = json_object_get(root, "cases");
    CU_ASSERT_TRUE(json_array_size(cases) >= 2);
    unsigned covered[2] = {0, 0};
    int failures = 0;
    printf("\n");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *c = json_array_get(cases, k);
        const char *name = json_string_value(json_object_get(c, "name"));
        nb_scope_begin();
        fused_case f;
        double kept = 0, memory_efficient = 0;
        bool ok =
            load_case(root, c, &f) && check(&f, false, &kept) && check(&f, true, &memory_efficient);
        if (ok) covered[f.dt == NB_F64] |= features(&f);
        nb_scope_end();
        failures += !ok;
        printf("  %-4s %-66s %.2g, %.2g of tolerance\n", ok ? "ok" : "FAIL", name ? name : "?",
               kept, memory_efficient);
    }
    json_decref(root);
    CU_ASSERT_EQUAL(failures, 0);
    for (int d = 0; d < 2; d++) {
        unsigned want = F_ALL & ~(d ? (unsigned)F_SMALL_HEADS : 0u); /* f64 has no small heads */
        if ((covered[d] & want) != want)
            printf("  %s: features 0x%x are not covered by a passing case\n", d ? "f64" : "f32",
                   want & ~covered[d]);
        CU_ASSERT_EQUAL(covered[d] & want, want);
    }
}

/* The scaled cases in float32 under every set: within tolerance of the exact answer, as
 * PyTorch's float32 is. */
static void test_scaled_inputs_every_isa(void) {
    json_t *root = golden_load("modules_fused.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    const json_t *cases = json_object_get(root, "cases");
    int scaled = 0;
    printf("\n");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *c = json_array_get(cases, k);
        const char *dt = json_string_value(json_object_get(c, "dtype"));
        if (json_number_value(json_object_get(c, "scale")) == 1 || !dt || strcmp(dt, "f32"))
            continue;
        scaled++;
        nb_scope_begin();
        fused_case f;
        CU_ASSERT_TRUE_FATAL(load_case(root, c, &f));
        printf("  %s: PyTorch float32 %.2g of tolerance;",
               json_string_value(json_object_get(c, "name")), f.pytorch_f32_worst);
        CU_ASSERT_TRUE(f.pytorch_f32_worst > 0 && f.pytorch_f32_worst <= 1);
        for (nbtest_isa_loop s = nbtest_isa_begin(); nbtest_isa_next(&s);) {
            double kept = 0, memory_efficient = 0;
            bool ok = check(&f, false, &kept) && check(&f, true, &memory_efficient);
            printf(" %s %.2g, %.2g", nbt_isa_name(s.isa), kept, memory_efficient);
            CU_ASSERT_TRUE(ok);
        }
        printf("\n");
        nb_scope_end();
    }
    CU_ASSERT_TRUE(scaled >= 3);
    json_decref(root);
}

int main(void) {
    const nbtest_case cases[] = {
        {"every fused MultiHeadAttention golden matches PyTorch", test_every_case},
        {"inputs scaled by 1e3 meet the float32 tolerance in every instruction set",
         test_scaled_inputs_every_isa},
    };
    return nbtest_run("fused MHA goldens", cases, sizeof cases / sizeof cases[0]);
}
