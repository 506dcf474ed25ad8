/* Name maps: the built-in ones (PyTorch's attention and encoder layer, Hugging Face's Llama)
 * and how a map turns a file's entries into the tensors a load matches. */
#include "safetensors_file.h"

#include <stdlib.h>
#include <string.h>

#define QKV(from, to)                                                                              \
    { from, {to "W_query.weight", to "W_key.weight", to "W_value.weight"}, 3 }
#define QKV_BIAS(from, to)                                                                         \
    { from, {to "W_query.bias", to "W_key.bias", to "W_value.bias"}, 3 }

static const nb_name_rule pytorch_rules[] = {
    /* nn.TransformerEncoderLayer: self_attn (a MultiheadAttention), linear1, linear2. */
    QKV("*self_attn.in_proj_weight", "*attn."),
    QKV_BIAS("*self_attn.in_proj_bias", "*attn."),
    {"*self_attn.out_proj.weight", {"*attn.out_proj.weight"}, 1},
    {"*self_attn.out_proj.bias", {"*attn.out_proj.bias"}, 1},
    {"*linear1.weight", {"*ff.fc1.weight"}, 1},
    {"*linear1.bias", {"*ff.fc1.bias"}, 1},
    {"*linear2.weight", {"*ff.fc2.weight"}, 1},
    {"*linear2.bias", {"*ff.fc2.bias"}, 1},
    /* A MultiheadAttention on its own. */
    QKV("*in_proj_weight", "*"),
    QKV_BIAS("*in_proj_bias", "*"),
};

static const nb_name_rule hf_llama_rules[] = {
    {"model.embed_tokens.weight", {"tok_embeddings.weight"}, 1},
    {"model.layers.*.self_attn.q_proj.weight", {"layers.*.attention.wq.weight"}, 1},
    {"model.layers.*.self_attn.k_proj.weight", {"layers.*.attention.wk.weight"}, 1},
    {"model.layers.*.self_attn.v_proj.weight", {"layers.*.attention.wv.weight"}, 1},
    {"model.layers.*.self_attn.o_proj.weight", {"layers.*.attention.wo.weight"}, 1},
    {"model.layers.*.self_attn.rotary_emb.inv_freq", {NULL}, 0},
    {"model.layers.*.mlp.gate_proj.weight", {"layers.*.feed_forward.w1.weight"}, 1},
    {"model.layers.*.mlp.up_proj.weight", {"layers.*.feed_forward.w3.weight"}, 1},
    {"model.layers.*.mlp.down_proj.weight", {"layers.*.feed_forward.w2.weight"}, 1},
    {"model.layers.*.input_layernorm.weight", {"layers.*.attention_norm.weight"}, 1},
    {"model.layers.*.post_attention_layernorm.weight", {"layers.*.ffn_norm.weight"}, 1},
    {"model.norm.weight", {"norm.weight"}, 1},
    {"lm_head.weight", {"output.weight"}, 1},
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const nb_name_map *nb_name_map_pytorch(void) {
    static const nb_name_map map = {"pytorch", COUNT(pytorch_rules), pytorch_rules};
    return &map;
}

const nb_name_map *nb_name_map_hf_llama(void) {
    static const nb_name_map map = {"hf_llama", COUNT(hf_llama_rules), hf_llama_rules};
    return &map;
}

/* Does name match pattern (one '*' at most)? Then *star and *star_len are what '*' matched. */
static bool glob(const char *pattern, const char *name, const char **star, size_t *star_len) {
    const char *at = strchr(pattern, '*');
    if (!at) return *star = "", *star_len = 0, strcmp(pattern, name) == 0;
    size_t head = (size_t)(at - pattern), tail = strlen(at + 1), len = strlen(name);
    if (len < head + tail || strncmp(pattern, name, head) != 0 ||
        strcmp(at + 1, name + len - tail) != 0)
        return false;
    *star = name + head;
    *star_len = len - head - tail;
    return true;
}

/* to with its '*' replaced by star (star_len bytes); malloc'd, NULL when out of memory. */
static char *substitute(const char *to, const char *star, size_t star_len) {
    const char *at = strchr(to, '*');
    size_t head = at ? (size_t)(at - to) : strlen(to), tail = at ? strlen(at + 1) : 0;
    char *s = malloc(head + (at ? star_len : 0) + tail + 1);
    if (!s) return NULL;
    memcpy(s, to, head);
    size_t k = head;
    if (at) {
        memcpy(s + k, star, star_len);
        k += star_len;
        memcpy(s + k, at + 1, tail);
        k += tail;
    }
    s[k] = '\0';
    return s;
}

static const nb_name_rule *find_rule(const nb_name_map *map, const char *name, const char **star,
                                     size_t *star_len) {
    for (int r = 0; map && r < map->n_rules; r++)
        if (map->rules[r].from && glob(map->rules[r].from, name, star, star_len))
            return &map->rules[r];
    return NULL;
}

void nbst_free_sources(nbst_source *s, int count) {
    for (int i = 0; s && i < count; i++) free(s[i].name);
    free(s);
}

/* Fills out[0 .. parts) with the slices of e (or e itself when parts is 1). */
static bool add_parts(const nbst_entry *e, const nb_name_rule *rule, const char *star,
                      size_t star_len, nbst_source *out) {
    const int parts = rule ? rule->parts : 1;
    const bool splittable = e->ndim > 0 && e->shape[0] % parts == 0;
    const uint64_t slice = parts > 1 && splittable ? (e->end - e->begin) / (uint64_t)parts : 0;
    for (int p = 0; p < parts; p++) {
        nbst_source *s = &out[p];
        *s = (nbst_source){.file_name = e->name,
                           .dtype = e->dtype,
                           .ndim = e->ndim,
                           .begin = e->begin,
                           .end = e->end,
                           .parts = parts};
        memcpy(s->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim);
        s->name =
            rule ? substitute(rule->to[p] ? rule->to[p] : "", star, star_len) : strdup(e->name);
        if (!s->name) return false;
        if (parts == 1) continue;
        if (!splittable) {
            s->unsplittable = true;
            continue;
        }
        s->shape[0] = e->shape[0] / parts;
        s->begin = e->begin + slice * (uint64_t)p;
        s->end = s->begin + slice;
    }
    return true;
}

nbst_source *nbst_map_sources(const nbst_file *f, const nb_name_map *map, int *count) {
    *count = 0;
    int total = 0;
    const char *star;
    size_t star_len;
    for (int i = 0; i < f->count; i++) {
        const nb_name_rule *rule = find_rule(map, f->entries[i].name, &star, &star_len);
        total += rule ? rule->parts : 1;
    }
    nbst_source *s = calloc((size_t)(total ? total : 1), sizeof *s);
    bool ok = s != NULL;
    int k = 0;
    for (int i = 0; ok && i < f->count; i++) {
        const nb_name_rule *rule = find_rule(map, f->entries[i].name, &star, &star_len);
        if (rule && rule->parts == 0) continue; /* dropped */
        ok = add_parts(&f->entries[i], rule, star, star_len, s + k);
        k += rule ? rule->parts : 1;
    }
    if (!ok) {
        nbst_free_sources(s, total);
        return nbt_error(f->op, "%s: out of memory", f->path);
    }
    *count = total;
    return s;
}

/* At most one '*' in s. */
static bool one_star_at_most(const char *s) {
    const char *at = strchr(s, '*');
    return !at || !strchr(at + 1, '*');
}

bool nbst_check_map(const char *op, const char *path, const nb_name_map *map) {
    if (!map) return true;
    if (map->n_rules < 0 || (map->n_rules > 0 && !map->rules))
        return nbt_error(op, "%s: name map '%s' has %d rules and rules %p", path,
                         map->name ? map->name : "", map->n_rules, (const void *)map->rules),
               false;
    for (int r = 0; r < map->n_rules; r++) {
        const nb_name_rule *rule = &map->rules[r];
        bool ok = rule->from && one_star_at_most(rule->from) && rule->parts >= 0 &&
                  rule->parts <= NB_NAME_RULE_MAX_PARTS;
        for (int p = 0; ok && p < rule->parts; p++)
            ok = rule->to[p] && rule->to[p][0] && one_star_at_most(rule->to[p]);
        if (!ok)
            return nbt_error(op,
                             "%s: name map '%s', rule %d ('%s'): needs a pattern with one '*' at "
                             "most, parts from 0 to %d and as many non-empty names",
                             path, map->name ? map->name : "", r,
                             rule->from ? rule->from : "(null)", NB_NAME_RULE_MAX_PARTS),
                   false;
    }
    return true;
}
