/* The built-in modules of nabla/nn.h, one row each: the table the module tests iterate
 * (test_module_parity, test_module_goldens, test_module_errors). A row says how a test builds
 * the module from a config, calls its forward, and where its PyTorch goldens are and what
 * they must cover. Adding a built-in module is adding a row (docs/extending.md, "Adding a
 * built-in module"); module_table_check.sh fails when nn/ makes a module type no row names.
 * Test-only code: it is not part of libnabla. */
#ifndef NABLA_TEST_MODULE_TABLE_H
#define NABLA_TEST_MODULE_TABLE_H

#include "golden.h"

/* A forward's inputs by role, under the names the golden cases give them. */
typedef enum {
    NBTEST_X,
    NBTEST_X_Q,
    NBTEST_X_KV,
    NBTEST_INDICES,
    NBTEST_KEY_PADDING,
    NBTEST_ATTN_MASK,
    NBTEST_HEAD_MASK,
    NBTEST_NINPUTS
} nbtest_input;
extern const char *const nbtest_input_names[NBTEST_NINPUTS];
#define NBTEST_BIT(role) (1u << (role))

/* One forward call: inputs by role (NULL when absent), the causal flag, and where to return
 * attention weights (NULL: not asked for). */
typedef struct {
    nb_tensor *in[NBTEST_NINPUTS];
    bool causal;
    nb_tensor **weights;
} nbtest_call;

/* A parameter the module's golden case must hold, in order: name and shape. */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[2];
} nbtest_param;

/* What the golden cases cover, per dtype; each row requires its own bits in f32 and f64. */
enum {
    NBTEST_F_LINEAR = 1 << 0,
    NBTEST_F_LAYERNORM = 1 << 1,
    NBTEST_F_EMBEDDING = 1 << 2,
    NBTEST_F_MHA_CAUSAL = 1 << 3,
    NBTEST_F_MHA_PADDING = 1 << 4,
    NBTEST_F_MHA_FULLY_PADDED = 1 << 5,
    NBTEST_F_MHA_ATTN_MASK = 1 << 6,
    NBTEST_F_MHA_CROSS = 1 << 7,
    NBTEST_F_MHA_WEIGHTS = 1 << 8,
    NBTEST_F_MHA_BOTH_MASKS = 1 << 9,    /* key padding and attention mask together */
    NBTEST_F_MHA_CROSS_MASKED = 1 << 10, /* cross-attention with a key padding mask */
    NBTEST_F_BLOCK = 1 << 11,
    NBTEST_F_BLOCK_FULLY_PADDED = 1 << 12,
    NBTEST_F_MHA_NO_BIAS = 1 << 13,     /* no projection has a bias (PyTorch's bias=False) */
    NBTEST_F_MHA_FLOAT_MASK = 1 << 14,  /* a float attn_mask with finite non-zero values */
    NBTEST_F_MHA_MASK_B = 1 << 15,      /* attn_mask [B, T_q, T_k] */
    NBTEST_F_MHA_MASK_BH = 1 << 16,     /* attn_mask [B * H, T_q, T_k] */
    NBTEST_F_MHA_MASK_4D = 1 << 17,     /* attn_mask [B, H, T_q, T_k] */
    NBTEST_F_MHA_HEAD_MASK = 1 << 18,   /* head_mask, with its gradient */
    NBTEST_F_MHA_CAUSAL_RECT = 1 << 19, /* causal with T_q != T_k */
};

/* The golden cases of a row: the files holding them (tests/gen_module_goldens.py writes
 * them) and what they must cover. */
typedef struct {
    const char *const *files; /* NULL-terminated; "modules.json" first */
    /* The parameters a case must hold, from its config alone; the count, or -1. */
    int (*params)(const json_t *config, nbtest_param *out, int max);
    /* The module's computation written with nabla's functional ops, over the golden's
     * parameters, for the cases of modules.json (pins the goldens' conventions to the ops). */
    nb_tensor *(*reference)(const json_t *config, const golden_named *params, int nparams,
                            const nbtest_call *call);
    /* The features a case of this module covers, and the ones the cases must cover. */
    unsigned (*features)(const nb_module *m, const nbtest_call *call);
    unsigned required;
} nbtest_golden_spec;

typedef struct {
    const char *type; /* the module's nb_module type, and the golden cases' "module" */
    /* A small config (JSON) for tests that need one module of each type. */
    const char *example;
    /* The constructor for tests: the module under parent, named name, from a config with
     * no keys but config_keys (NULL-terminated). NULL after printing why. */
    const char *const *config_keys;
    nb_module *(*build)(nb_module *parent, const char *name, const json_t *config);
    /* The inputs forward takes, and the sets of main inputs that make one call (0-ended). */
    unsigned inputs;
    unsigned calls[3];
    bool attends;       /* takes the "causal" flag */
    bool gives_weights; /* can return attention weights */
    nb_tensor *(*forward)(nb_module *m, const nbtest_call *call);
    nbtest_golden_spec golden; /* files NULL: no golden, for the reason in no_golden */
    const char *no_golden;
} nbtest_module;

extern const nbtest_module nbtest_modules[];
extern const int nbtest_module_count;

/* The row of type, or NULL. */
const nbtest_module *nbtest_module_find(const char *type);

/* False (printing why) if obj is not an object or has a key outside keys (NULL-terminated):
 * a constructor argument or forward flag added to a generator must be handled, not ignored. */
bool nbtest_only_keys(const json_t *obj, const char *what, const char *const *keys);

/* The named tensor name of list, or NULL. */
nb_tensor *nbtest_named(const golden_named *list, int n, const char *name);

/* A golden case's inputs and forward flags, for row's module: loads "inputs" into list
 * (capacity max; *n gets the count) and call->in by role, sets call->causal, and *want_weights
 * when the case has the extra output "attn_weights". Every input, flag and extra output must
 * be one row's forward takes or gives, and the inputs must make one call. False after
 * printing why. */
bool nbtest_load_call(const json_t *c, const nbtest_module *row, golden_named *list, int max,
                      int *n, nbtest_call *call, bool *want_weights);

/* module_reference.c: each golden module's parameter list and functional reference. */
int nbtest_linear_params(const json_t *config, nbtest_param *out, int max);
int nbtest_layernorm_params(const json_t *config, nbtest_param *out, int max);
int nbtest_embedding_params(const json_t *config, nbtest_param *out, int max);
int nbtest_mha_params(const json_t *config, nbtest_param *out, int max);
int nbtest_block_params(const json_t *config, nbtest_param *out, int max);
nb_tensor *nbtest_linear_reference(const json_t *, const golden_named *, int, const nbtest_call *);
nb_tensor *nbtest_layernorm_reference(const json_t *, const golden_named *, int,
                                      const nbtest_call *);
nb_tensor *nbtest_embedding_reference(const json_t *, const golden_named *, int,
                                      const nbtest_call *);
nb_tensor *nbtest_mha_reference(const json_t *, const golden_named *, int, const nbtest_call *);
nb_tensor *nbtest_block_reference(const json_t *, const golden_named *, int, const nbtest_call *);

#endif
