/* libFuzzer harness for checkpoint configurations: every input is written to an in-memory file
 * and read with nb_lm_config_read, the way `char_lm --eval` does before building a model. An
 * oracle that parses the header on its own (jansson, not nabla's reader) checks every
 * configuration nb_lm_config_read accepts:
 *   - numbers: each field in range, and its metadata text exactly the decimal it was read as
 *     (no truncation, no sign, space or trailing text accepted);
 *   - size: the parameters the configuration implies (counted here by formula) fit in the
 *     file, so building the model cannot allocate more than a small multiple of the input;
 *   - agreement: the model built from it (which must succeed) has exactly the header's tensors,
 *     name for name and shape for shape, besides optimizer state.
 * A refused input must leave an error naming the file. Any violation aborts, as does any crash,
 * sanitizer report or leak. scripts/fuzz lm_config runs it; fuzz_replay.c replays the corpus in
 * fuzz/corpus/lm_config in every build. */
#define _GNU_SOURCE
#include <nabla/nabla.h>

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether the last input read as a configuration (fuzz_replay.c checks the seed files do). */
bool nbfuzz_last_read_ok;

static int memory_file = -1;
static char path[64];

#define ORACLE(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "oracle: " __VA_ARGS__);                                               \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The input's header as JSON, or NULL (then nb_lm_config_read must have refused it). */
static json_t *parse_header(const uint8_t *data, size_t size) {
    if (size < 8) return NULL;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | data[i];
    if (len > size - 8) return NULL;
    return json_loadb((const char *)data + 8, (size_t)len, JSON_REJECT_DUPLICATES, NULL);
}

/* The metadata text of key must be v in decimal. */
static void check_number(const json_t *meta, const char *key, long long v) {
    const char *text = json_string_value(json_object_get(meta, key));
    char want[32];
    snprintf(want, sizeof want, "%lld", v);
    ORACLE(text && strcmp(text, want) == 0, "%s read as %lld from '%s'", key, v,
           text ? text : "(none)");
}

/* Checks the accepted configuration cfg against the header. */
static void check_accepted(const nb_lm_config *c, const json_t *header, size_t size) {
    ORACLE(header, "accepted, but the header does not parse");
    const json_t *meta = json_object_get(header, "__metadata__");
    ORACLE(c->vocab >= 1 && c->dim >= 1 && c->num_heads >= 1 && c->dim % c->num_heads == 0 &&
               c->layers >= 1 && c->layers <= 16 && c->max_len >= 1 && c->out_features >= 1 &&
               (!c->tie_weights || c->out_features == c->vocab),
           "out of range: vocab %lld d_model %lld heads %lld layers %d context %lld out %lld",
           (long long)c->vocab, (long long)c->dim, (long long)c->num_heads, c->layers,
           (long long)c->max_len, (long long)c->out_features);
    check_number(meta, "nabla.vocab", c->vocab);
    check_number(meta, "nabla.d_model", c->dim);
    check_number(meta, "nabla.heads", c->num_heads);
    check_number(meta, "nabla.layers", c->layers);
    check_number(meta, "nabla.context", c->max_len);
    check_number(meta, "nabla.out_features", c->out_features);
    check_number(meta, "nabla.tie_weights", c->tie_weights);

    /* tok_emb [vocab, d_model], pos_emb [context, d_model] and the head's bias [out] are in the
     * file, 4 bytes or more an element: each number is below the file's size. */
    ORACLE(c->vocab <= (int64_t)size && c->dim <= (int64_t)size && c->max_len <= (int64_t)size &&
               c->out_features <= (int64_t)size,
           "a number larger than the file (%zu bytes)", size);
    /* Parameters by formula: embeddings; per block two LayerNorms (4d), q, k, v and out_proj
     * (4d^2 + d), the feed-forward (8d^2 + 5d); the final norm (2d); the head. Each is at least
     * 4 bytes in the file; with every number below the file's size, nothing overflows. */
    __int128 d = c->dim, params = (__int128)(c->vocab + c->max_len) * d +
                                  c->layers * (12 * d * d + 10 * d) + 2 * d +
                                  (c->tie_weights ? 0 : (__int128)c->out_features * d) +
                                  c->out_features;
    ORACLE(4 * params <= (__int128)size, "%lld parameters from a file of %zu bytes",
           (long long)params, size);

    /* The model built from it has exactly the header's tensors (besides optimizer state). */
    const char *key;
    const char *prefix = NULL;
    const json_t *desc, *tok_emb = NULL;
    size_t prefix_len = 0, in_file = 0;
    json_object_foreach((json_t *)header, key, desc) {
        size_t n = strlen(key);
        if (strcmp(key, "__metadata__") == 0 || strncmp(key, "optim.", 6) == 0) continue;
        in_file++;
        if (n >= 14 && strcmp(key + n - 14, "tok_emb.weight") == 0 &&
            (n == 14 || key[n - 15] == '.'))
            tok_emb = desc, prefix = key, prefix_len = n - 14;
    }
    ORACLE(tok_emb, "accepted without a tok_emb.weight");
    const char *dtype = json_string_value(json_object_get(tok_emb, "dtype"));
    ORACLE(dtype && (!strcmp(dtype, "F32") || !strcmp(dtype, "F64")), "tok_emb is %s", dtype);
    nb_module *model = nb_model_new(strcmp(dtype, "F32") == 0 ? NB_F32 : NB_F64, 1);
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, "", c, 0.0);
    ORACLE(lm, "the accepted configuration does not build: %s", nb_last_error());
    int np = nb_module_param_count(model);
    nb_param *params_of = malloc(sizeof *params_of * (size_t)np);
    ORACLE(params_of && nb_module_named_params(model, params_of, np) == np, "listing parameters");
    ORACLE((size_t)np == in_file, "the model has %d tensors, the file %zu", np, in_file);
    for (int i = 0; i < np; i++) {
        char *name = malloc(prefix_len + strlen(params_of[i].name) + 1);
        memcpy(name, prefix, prefix_len);
        strcpy(name + prefix_len, params_of[i].name);
        const json_t *e = json_object_get(header, name);
        const json_t *shape = json_object_get(e, "shape");
        const nb_tensor *t = params_of[i].tensor;
        ORACLE(e && json_array_size(shape) == (size_t)t->ndim, "tensor %s missing or of rank %zu",
               name, json_array_size(shape));
        for (int k = 0; k < t->ndim; k++)
            ORACLE(json_integer_value(json_array_get(shape, (size_t)k)) == t->shape[k],
                   "tensor %s: dim %d is %lld in the file, %lld in the model", name, k,
                   (long long)json_integer_value(json_array_get(shape, (size_t)k)),
                   (long long)t->shape[k]);
        ORACLE(strcmp(json_string_value(json_object_get(e, "dtype")), dtype) == 0,
               "tensor %s: another dtype than tok_emb's", name);
        free(name);
    }
    /* Loading may still fail (a changed byte, optimizer state with no optimizer), cleanly. */
    nb_transformer_lm_load(lm, NULL, path);
    free(params_of);
    nb_module_free(model);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (memory_file < 0) {
        memory_file = memfd_create("nabla_fuzz_lm", MFD_CLOEXEC);
        if (memory_file < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", memory_file);
    }
    if (ftruncate(memory_file, 0) != 0 || pwrite(memory_file, data, size, 0) != (ssize_t)size)
        abort();
    nb_clear_error();
    nb_lm_config cfg;
    nbfuzz_last_read_ok = nb_lm_config_read(path, &cfg);
    if (nbfuzz_last_read_ok) {
        json_t *header = parse_header(data, size);
        check_accepted(&cfg, header, size);
        json_decref(header);
    } else {
        ORACLE(strstr(nb_last_error(), path), "refused with an error not naming the file: '%s'",
               nb_last_error());
    }
    nb_clear_error();
    return 0;
}
