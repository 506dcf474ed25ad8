/* The gradcheck catalogue: every differentiable op, checked in float64 by nb_gradcheck on
 * random, broadcast and non-contiguous inputs. Each op family keeps its entries in its own
 * catalogue_<family>.c, exporting an array and a count listed in test_catalogue.c.
 * test_catalogue fails if any op named in autograd/op_list.h is never recorded while the
 * entries run. */
#ifndef NABLA_CATALOGUE_H
#define NABLA_CATALOGUE_H

#include <nabla/nabla.h>

typedef enum {
    NBCAT_CONTIGUOUS = 0,
    NBCAT_TRANSPOSED, /* made as the last two dims swapped, then transposed back: strided */
    NBCAT_SLICED      /* every other element of a twice-as-wide last dim: stride 2 */
} nbcat_layout;

typedef enum {
    NBCAT_NORMAL = 0,   /* randn */
    NBCAT_POSITIVE,     /* uniform in [0.5, 2] (log, sqrt, pow, div denominators) */
    NBCAT_AWAY_FROM_0,  /* randn with |x| >= 0.2 (relu and other kinks at 0) */
    NBCAT_DISTINCT      /* a shuffled ramp with gaps of 0.1 (max: no ties) */
} nbcat_domain;

typedef struct {
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    nbcat_layout layout;
    nbcat_domain domain;
    bool constant; /* an input that does not require grad */
} nbcat_input;

/* Input specs for the tables: IN(2, 3) is a contiguous [2, 3] input; IN_T and IN_S make it
 * transposed or sliced; IN_C is a constant (no grad); IN_D/IN_TD/IN_SD take a value domain
 * first: IN_D(NBCAT_POSITIVE, 4). */
/* clang-format off */
#define NBCAT_DIMS(...) .ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .shape = {__VA_ARGS__}
#define IN(...) {NBCAT_DIMS(__VA_ARGS__)}
#define IN_T(...) {NBCAT_DIMS(__VA_ARGS__), .layout = NBCAT_TRANSPOSED}
#define IN_S(...) {NBCAT_DIMS(__VA_ARGS__), .layout = NBCAT_SLICED}
#define IN_C(...) {NBCAT_DIMS(__VA_ARGS__), .constant = true}
#define IN_D(dom, ...) {NBCAT_DIMS(__VA_ARGS__), .domain = dom}
#define IN_TD(dom, ...) {NBCAT_DIMS(__VA_ARGS__), .layout = NBCAT_TRANSPOSED, .domain = dom}
#define IN_SD(dom, ...) {NBCAT_DIMS(__VA_ARGS__), .layout = NBCAT_SLICED, .domain = dom}
/* clang-format on */

#define NBCAT_MAX_INPUTS 4

typedef struct {
    const char *name; /* "add: broadcast [3,1] + [4]" */
    nb_grad_fn fn;    /* builds the output from the inputs (may create masks, indices...) */
    int ninputs;
    nbcat_input inputs[NBCAT_MAX_INPUTS];
    const void *ctx;
} nbcat_entry;

/* Per-family tables; each catalogue_<family>.c defines one pair. */
#define NBCAT_FAMILY(family)                                                                       \
    extern const nbcat_entry nbcat_##family[];                                                     \
    extern const int nbcat_##family##_count;

#endif
