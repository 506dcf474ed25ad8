/* PyTorch golden files (written by tests/gen_goldens.py and tests/gen_module_goldens.py):
 * loading cases as nabla tensors and comparing results with the tolerances of the parity
 * suite. The JSON format is described in the generators' docstrings. */
#ifndef NABLA_TEST_GOLDEN_H
#define NABLA_TEST_GOLDEN_H

#include <jansson.h>
#include <nabla/nabla.h>

/* The directory holding the committed golden files (compiled in by tests/meson.build). */
const char *golden_dir(void);

/* Parses golden file `name` inside golden_dir(). Returns the root object (caller releases it
 * with json_decref), or NULL after printing why to stderr. */
json_t *golden_load(const char *name);

/* How golden_tensor lays out the elements it loads. */
typedef enum {
    GOLDEN_CONTIGUOUS = 0,
    /* Every other element of a buffer twice as wide in the last dim (stride 2), so ops meet
     * the same values through their strided paths. 0-d tensors stay contiguous. */
    GOLDEN_STRIDED
} golden_layout;

/* A tensor in the current scope holding spec {"dtype", "shape", "data"}; it requires grad if
 * spec has "requires_grad": true. NULL after printing why to stderr on a malformed spec. */
nb_tensor *golden_tensor(const json_t *spec, golden_layout layout);

/* A JSON number, or one of the strings "inf", "-inf", "nan" (JSON has no infinities).
 * Returns false for anything else. */
bool golden_number(const json_t *v, double *out);

/* The outcome of comparing a result with its golden tensor. */
typedef struct {
    bool ok;
    double max_abs_err;   /* largest |got - expected| over the elements */
    double worst_ratio;   /* largest |got - expected| / tolerance; ok needs <= 1 */
    int64_t worst_index;  /* row-major index of that element, -1 if none */
    double got, expected; /* the values there */
    char message[320];    /* why it failed ("" when ok) */
} golden_cmp;

/* The parity tolerance. An element passes when
 *     |got - expected| <= rtol * |expected| + atol * max(1, max_k |expected_k|)
 * with rtol 1e-5, atol 1e-6 for f32 and rtol 1e-10, atol 1e-12 for f64. The absolute floor
 * is scaled by the tensor's largest magnitude because an element that is a sum of cancelling
 * terms (a matmul entry, a softmax or layer_norm gradient) carries the rounding error of
 * those terms, not of its own small value: at the tensor's scale 1e-6 is about 8 float32
 * ulps (1e-12 about 4500 float64 ulps, still a hundred million times tighter than any real
 * bug). Integer and bool tensors must match exactly. An infinity matches only the same
 * infinity, and NaN matches nothing, not even a NaN in the golden: a test that expects NaN
 * somewhere says so itself. */
golden_cmp golden_compare(const nb_tensor *got, const json_t *expected);
/* The same with explicit tolerances (atol is scaled by max(1, max |expected|) as above). */
golden_cmp golden_compare_tol(const nb_tensor *got, const json_t *expected, double rtol,
                              double atol);

/* Module goldens: a named tensor of a case's "parameters", "inputs", "parameter_grads" or
 * "input_grads" list. */
typedef struct {
    char name[96];
    nb_tensor *tensor; /* in the scope that was current when it was loaded */
} golden_named;

/* The case whose "name" is name in a loaded file, or NULL. Borrowed from root. */
const json_t *golden_find_case(const json_t *root, const char *name);
/* Loads list `key` of a module case (e.g. "parameters": every parameter under its state_dict
 * name, in state_dict order) into out, capacity max. Returns the count, or -1 after printing
 * why. Tensors are contiguous, in the current scope, requiring grad as the file says. */
int golden_named_tensors(const json_t *module_case, const char *key, golden_named *out, int max);
/* The spec named name in list key of a case (to pass to golden_compare), or NULL. Borrowed. */
const json_t *golden_named_spec(const json_t *module_case, const char *key, const char *name);

#endif
