/* Writes the seed corpus of fuzz_lm_config.c into DIR (fuzz/corpus/lm_config): checkpoints of
 * tiny TransformerLMs saved by nabla itself (untied, tied with two layers, nested under a
 * name in f64 with other output sizes, with optimizer state), which must read, and two hostile
 * variants from issue 29 (layers 2^32 + 1; context 1048576 over a tiny model's tensors), which
 * must be refused. Run: build/fuzz/make_lm_corpus fuzz/corpus/lm_config */
#include <nabla/nabla.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;

static const char *in_dir(const char *name) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static bool save(const char *name, nb_dtype dt, const char *module_name, nb_lm_config cfg,
                 bool with_optimizer) {
    nb_module *model = nb_model_new(dt, 1);
    nb_transformer_lm *lm = nb_transformer_lm_new_config(model, module_name, &cfg, 0.0);
    int n = 0;
    nb_tensor **params = lm ? nb_module_param_tensors(model, &n) : NULL;
    nb_optimizer *opt =
        params && with_optimizer ? nb_adamw_new(n, params, nb_adamw_defaults(1e-3)) : NULL;
    bool ok =
        lm && (!with_optimizer || opt) && nb_transformer_lm_save(lm, opt, in_dir(name), 0, NULL);
    nb_optimizer_free(opt);
    free(params);
    nb_module_free(model);
    return ok;
}

/* A copy of src's tensors and metadata as name, with key set to value. */
static bool variant(const char *src, const char *name, const char *key, const char *value) {
    nb_scope_begin();
    int nt, nm;
    nb_named_tensor *t = nb_safetensors_read(in_dir(src), &nt);
    nb_metadata_entry *m = nb_safetensors_read_metadata(in_dir(src), &nm);
    bool ok = t && m;
    for (int i = 0; ok && i < nm; i++)
        if (strcmp(m[i].key, key) == 0) m[i].value = value;
    ok = ok && nb_safetensors_save_with_metadata(in_dir(name), nt, t, nm, m);
    nb_scope_end();
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    const nb_lm_config tiny = {.vocab = 3, .max_len = 2, .dim = 2, .num_heads = 1, .layers = 1};
    const nb_lm_config tied = {
        .vocab = 2, .max_len = 2, .dim = 2, .num_heads = 2, .layers = 2, .tie_weights = true};
    const nb_lm_config nested = {
        .vocab = 2, .max_len = 1, .dim = 2, .num_heads = 1, .layers = 1, .out_features = 3};
    bool ok =
        save("tiny.safetensors", NB_F32, "", tiny, false) &&
        save("tied_two_layers.safetensors", NB_F32, "", tied, false) &&
        save("nested_f64.safetensors", NB_F64, "lm", nested, false) &&
        save("with_optimizer.safetensors", NB_F32, "", tiny, true) &&
        variant("tiny.safetensors", "layers_2pow32_plus1.bin", "nabla.layers", "4294967297") &&
        variant("tiny.safetensors", "context_1048576.bin", "nabla.context", "1048576");
    if (!ok) fprintf(stderr, "make_lm_corpus: %s\n", nb_last_error());
    return ok ? 0 : 1;
}
