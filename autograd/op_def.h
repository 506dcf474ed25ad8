/* The op registry: each built-in differentiable op is one nba_op_def, defined in the autograd/
 * file that holds its forward and backward, and listed once in op_list.h. The definition
 * carries the op's test metadata, from which the tests derive what they check:
 *
 *   - entries: the gradcheck catalogue (tests/test_catalogue.c runs each in float64 against
 *     finite differences and in float32 against the float64 result), each tagged with the
 *     kind of input it exercises. Every op needs an entry of every kind, or a sentence in
 *     not_applicable saying why that kind does not apply;
 *   - goldens: the op's PyTorch golden spec: the PyTorch expression nabla's op must match,
 *     the cases (inputs and parameters) to generate, and how nabla runs a case.
 *     tests/gen_goldens.py reads them (through tests/op_registry_json) and writes
 *     tests/goldens/ops_<file>.json; tests/test_parity.c runs every case through its op and
 *     fails for a registered op without golden cases.
 *
 * An entry counts for the op that defines it and for no other, although its function may
 * call other ops as helpers.
 *
 * All of this is test data: each op file keeps its definition at its end, inside
 * #ifdef NABLA_TESTS, so it compiles into the test build only (tests/meson.build compiles the
 * op files a second time, with -DNABLA_TESTS, into the test library nabla_testing) and the
 * installed libnabla holds no catalogue, golden or registry symbols
 * (tests/shipped_symbols_check.sh). An op's entries may call the public ops it is built on
 * (nabla/ops.h, nabla/autograd.h) and nothing above autograd. */
#ifndef NABLA_OP_DEF_H
#define NABLA_OP_DEF_H

#include "nabla/autograd.h"
#include "nabla/ops.h"

/* ---- catalogue entries ---- */
typedef enum {
    NBA_CONTIGUOUS = 0,
    NBA_TRANSPOSED, /* made as the last two dims swapped, then transposed back: strided */
    NBA_SLICED      /* every other element of a twice-as-wide last dim: stride 2 */
} nba_layout;

typedef enum {
    NBA_NORMAL = 0,  /* randn */
    NBA_POSITIVE,    /* uniform in [0.5, 2] (log, sqrt, pow, div denominators) */
    NBA_AWAY_FROM_0, /* randn with |x| >= 0.2 (relu and other kinks at 0) */
    NBA_DISTINCT     /* a shuffled ramp with gaps of 0.1 (max: no ties) */
} nba_domain;

typedef struct {
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    nba_layout layout;
    nba_domain domain;
    bool constant; /* an input that does not require grad */
} nba_input_spec;

/* What an entry exercises. NBA_STRIDED entries must have a transposed or sliced input (the
 * catalogue test checks); NBA_BROADCAST entries broadcast an operand (a smaller shape, an
 * expanded view or a mask of a smaller shape). */
typedef enum { NBA_RANDOM = 0, NBA_BROADCAST, NBA_STRIDED, NBA_NUM_KINDS } nba_entry_kind;

#define NBA_MAX_INPUTS 4
#define NBA_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    const char *name; /* "add: broadcast [3,1] + [4]" */
    nba_entry_kind kind;
    nb_grad_fn fn; /* builds the output from the inputs (may create masks, indices...) */
    int ninputs;
    nba_input_spec inputs[NBA_MAX_INPUTS];
    const void *ctx;
} nba_entry;

/* Input specs for the tables: IN(2, 3) is a contiguous [2, 3] input; IN_T and IN_S make it
 * transposed or sliced; IN_C is a constant (no grad); IN_D/IN_TD/IN_SD take a value domain
 * first: IN_D(NBA_POSITIVE, 4); SCALAR is a 0-d input. */
/* clang-format off */
#define NBA_DIMS(...) .ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .shape = {__VA_ARGS__}
#define IN(...) {NBA_DIMS(__VA_ARGS__)}
#define IN_T(...) {NBA_DIMS(__VA_ARGS__), .layout = NBA_TRANSPOSED}
#define IN_S(...) {NBA_DIMS(__VA_ARGS__), .layout = NBA_SLICED}
#define IN_C(...) {NBA_DIMS(__VA_ARGS__), .constant = true}
#define IN_D(dom, ...) {NBA_DIMS(__VA_ARGS__), .domain = dom}
#define IN_TD(dom, ...) {NBA_DIMS(__VA_ARGS__), .layout = NBA_TRANSPOSED, .domain = dom}
#define IN_SD(dom, ...) {NBA_DIMS(__VA_ARGS__), .layout = NBA_SLICED, .domain = dom}
#define SCALAR {.ndim = 0}
/* clang-format on */

/* ---- PyTorch golden cases ---- */
/* One golden case as the op's runner sees it; implemented by tests/test_parity.c. Missing
 * inputs or parameters mark the case as not matching the op (the test fails it). */
typedef struct nba_golden_call nba_golden_call;
struct nba_golden_call {
    nb_tensor *(*input)(nba_golden_call *c, const char *name, bool required);
    double (*number)(nba_golden_call *c, const char *key);
    int64_t (*integer)(nba_golden_call *c, const char *key);
    bool (*flag)(nba_golden_call *c, const char *key);
    /* An integer list into out (at most max); returns its length. */
    int (*integers)(nba_golden_call *c, const char *key, int64_t *out, int max);
    const char *(*string)(nba_golden_call *c, const char *key);
    int ninputs;
    nb_tensor **inputs; /* every input in file order (concat, stack) */
};

/* One golden case, as tests/gen_goldens.py reads it.
 * inputs: "name: [words] shape" per input, separated by ';'. A float input is drawn at
 *   random: "a: [3,4]" normal, "positive" uniform in [0.5, 2], "away" |x| >= 0.2, "distinct"
 *   a shuffled ramp (no ties), "ties" from {-1, -0.5, 0, 0.5, 1} (many equal values);
 *   "const" needs no gradient; "scale 4" multiplies it. "i64" and
 *   "bool" inputs give their values instead of a shape: "target: i64 [1,0,4]",
 *   "mask: bool [[0,1],[1,0]]".
 * params: Python keyword arguments, "dim=-1, keepdim=True" ("" for none); they become the
 *   case's parameters, and names in the torch expression. A name starting with '_' is an
 *   option of the generator instead ("_f32_via_f64=True": the f32 case from PyTorch's
 *   float64 on the same float32 inputs, where float32 PyTorch leaves rounding residue). */
typedef struct {
    const char *inputs;
    const char *params;
} nba_golden_case;

typedef struct {
    const char *op; /* the case's "op" in the golden files: "sum_dims", "f_linear" */
    /* Calls the op; writes the outputs, returns how many (0 on failure). */
    int (*run)(nba_golden_call *c, nb_tensor **out);
    /* The PyTorch reference: a Python expression over the inputs and parameters by name
     * ("inputs" is the list of all inputs; a missing optional input is None), with torch,
     * F = torch.nn.functional and the helpers of tests/gen_goldens.py for nabla's
     * conventions in scope. Its value is the output or a tuple of outputs. */
    const char *torch;
    const nba_golden_case *cases;
    int ncases;
    bool contiguous_only; /* like PyTorch's view, fails on layouts that cannot be viewed */
} nba_golden;

/* NBA_GOLDEN("sum_dims", run, "a.sum(dim=dims, keepdim=keepdim)", cases[, .contiguous_only = true])
 */
#define NBA_GOLDEN(golden_op, runner, torch_expr, case_table, ...)                                 \
    {                                                                                              \
        .op = golden_op, .run = runner, .torch = torch_expr, .cases = case_table,                  \
        .ncases = NBA_COUNT(case_table), __VA_ARGS__                                               \
    }

#define NBA_MAX_GOLDEN_OUTPUTS 8

/* ---- the definition ---- */
typedef struct {
    const char *name; /* what nba_record records for this op */
    const char *file; /* the defining source file (__FILE__): golden files are per file */
    const nba_entry *entries;
    int nentries;
    /* Indexed by nba_entry_kind: why this op has no entry of that kind, or NULL. */
    const char *not_applicable[NBA_NUM_KINDS];
    /* float32 against float64: |f32 - f64| <= f32_rtol * max|f64| per output and gradient
     * (0: NBA_F32_RTOL). Larger for ops whose results cancel (see docs/design.md). */
    double f32_rtol;
    const nba_golden *goldens;
    int ngoldens;
} nba_op_def;

#define NBA_F32_RTOL 1e-5

/* NBA_OP_DEF(def, "name", entries, goldens, .not_applicable = {...}, ...) */
#define NBA_OP_DEF(def, op_name, entry_table, golden_table, ...)                                   \
    const nba_op_def def = {.name = op_name,                                                       \
                            .file = __FILE__,                                                      \
                            .entries = entry_table,                                                \
                            .nentries = NBA_COUNT(entry_table),                                    \
                            .goldens = golden_table,                                               \
                            .ngoldens = NBA_COUNT(golden_table),                                   \
                            __VA_ARGS__}

/* Every registered op, in op_list.h's order. */
extern const nba_op_def *const nba_op_registry[];
extern const int nba_op_registry_count;

#endif
