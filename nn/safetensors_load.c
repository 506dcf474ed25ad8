/* Loading safetensors into existing tensors: the file's tensors (renamed by a name map) are
 * matched to the destinations by name (with a prefix removed where that matches them), every
 * missing, unexpected and mismatched tensor is collected, and only a load with nothing refused
 * writes anything: all or nothing. */
#include "safetensors_file.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* True if some dim with more than one element has stride 0: writing it would hit one element
 * several times. */
static bool is_expanded(const nb_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1 && t->strides[d] == 0) return true;
    return false;
}

static bool check_destinations(const char *op, const char *path, int n, const nb_named_tensor *into,
                               json_t *index) {
    if (n < 0) return nbt_error(op, "%s: n is %d, expected >= 0", path, n), false;
    if (n > 0 && !into) return nbt_error(op, "%s: into is NULL for n = %d", path, n), false;
    for (int i = 0; i < n; i++) {
        const char *name = into[i].name;
        if (!name) return nbt_error(op, "%s: entry %d has a NULL name", path, i), false;
        if (!into[i].tensor)
            return nbt_error(op, "%s: tensor '%s': the destination is NULL", path, name), false;
        if (!nbt_check_live(op, into[i].tensor)) return false;
        if (is_expanded(into[i].tensor))
            return nbt_error(op, "%s: tensor '%s': the destination (shape %s) is an expanded view",
                             path, name, nbt_shape(into[i].tensor)),
                   false;
        if (json_object_get(index, name))
            return nbt_error(op, "%s: the name '%s' is listed twice", path, name), false;
        if (json_object_set_new(index, name, json_integer(i)) != 0)
            return nbt_error(op, "%s: cannot index the name of entry %d (is it valid UTF-8?)", path,
                             i),
                   false;
    }
    return true;
}

/* ---- what the matching finds ---- */
typedef struct {
    char **items;
    int n, cap;
} str_list;

typedef struct {
    const char *op, *path;
    int n;
    const nb_named_tensor *into;
    const nbst_source *src;
    int nsrc;
    int *slot; /* into[i]'s source, or -1 */
    char *file_prefix, *model_prefix;
    str_list missing, unexpected, mismatched;
    int converted;
    bool out_of_memory;
} matcher;

/* Appends a formatted string to l (noting a failure in m). */
__attribute__((format(printf, 3, 4))) static void add(matcher *m, str_list *l, const char *fmt,
                                                      ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (s && l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        char **grown = realloc(l->items, sizeof *grown * (size_t)cap);
        if (grown)
            l->items = grown, l->cap = cap;
        else
            free(s), s = NULL;
    }
    if (!s) {
        m->out_of_memory = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    va_end(ap);
    l->items[l->n++] = s;
}

static void free_list(str_list *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    *l = (str_list){0};
}

/* Optimizer state ("optim." names) is saved beside a model's tensors and takes no prefix. */
static bool is_optimizer_state(const char *name) {
    return strncmp(name, "optim.", 6) == 0;
}

/* name without prefix (if it has it and is not optimizer state). */
static const char *strip(const char *name, const char *prefix) {
    size_t n = strlen(prefix);
    return n && !is_optimizer_state(name) && strncmp(name, prefix, n) == 0 ? name + n : name;
}

/* Indexes the destinations' names without model_prefix; NULL when out of memory. */
static json_t *index_destinations(const matcher *m, const char *model_prefix) {
    json_t *index = json_object();
    for (int i = 0; index && i < m->n; i++)
        if (json_object_set_new(index, strip(m->into[i].name, model_prefix), json_integer(i))) {
            json_decref(index);
            return NULL;
        }
    return index;
}

/* How many file tensors find a destination with these prefixes removed (-1: out of memory). */
static int count_matches(const matcher *m, const char *file_prefix, const char *model_prefix) {
    json_t *index = index_destinations(m, model_prefix);
    if (!index) return -1;
    int found = 0;
    for (int k = 0; k < m->nsrc; k++)
        found += json_object_get(index, strip(m->src[k].name, file_prefix)) != NULL;
    json_decref(index);
    return found;
}

/* Does every name (but optimizer state) of the n start with prefix? */
static bool all_start_with(int n, const char *(*name_of)(const matcher *, int), const matcher *m,
                           const char *prefix, size_t len) {
    for (int i = 0; i < n; i++) {
        const char *name = name_of(m, i);
        if (!is_optimizer_state(name) && strncmp(name, prefix, len) != 0) return false;
    }
    return true;
}
static const char *dest_name(const matcher *m, int i) {
    return m->into[i].name;
}
static const char *src_name(const matcher *m, int i) {
    return m->src[i].name;
}

enum { MAX_PREFIX_TRIES = 8 };

/* Looks for a prefix that all of one side's names carry and that, removed, matches more tensors
 * than the names as they are: a name of that side ending in "." + a name of the other side
 * proposes it. side 0 looks at the file's names, side 1 at the destinations'. */
static void try_prefixes(matcher *m, int side, int *best) {
    const int n_long = side ? m->n : m->nsrc, n_short = side ? m->nsrc : m->n;
    const char *(*long_name)(const matcher *, int) = side ? dest_name : src_name;
    const char *(*short_name)(const matcher *, int) = side ? src_name : dest_name;
    char *tried[MAX_PREFIX_TRIES];
    int ntried = 0;
    for (int j = 0; j < n_short && ntried < MAX_PREFIX_TRIES; j++) {
        const char *tail = short_name(m, j);
        size_t tail_len = strlen(tail);
        if (is_optimizer_state(tail)) continue;
        for (int k = 0; k < n_long && ntried < MAX_PREFIX_TRIES; k++) {
            const char *name = long_name(m, k);
            size_t len = strlen(name);
            if (len <= tail_len + 1 || name[len - tail_len - 1] != '.' ||
                strcmp(name + len - tail_len, tail) != 0 || is_optimizer_state(name))
                continue;
            size_t plen = len - tail_len;
            bool seen = false;
            for (int t = 0; t < ntried && !seen; t++)
                seen = strlen(tried[t]) == plen && strncmp(tried[t], name, plen) == 0;
            if (seen) continue;
            char *prefix = strndup(name, plen);
            if (!prefix) {
                m->out_of_memory = true;
                break;
            }
            tried[ntried++] = prefix;
            if (!all_start_with(n_long, long_name, m, prefix, plen)) continue;
            int found = count_matches(m, side ? "" : prefix, side ? prefix : "");
            if (found > *best) {
                *best = found;
                char **slot = side ? &m->model_prefix : &m->file_prefix;
                free(m->file_prefix);
                free(m->model_prefix);
                m->file_prefix = m->model_prefix = NULL;
                *slot = strdup(prefix);
                if (!*slot) m->out_of_memory = true;
            }
        }
    }
    for (int t = 0; t < ntried; t++) free(tried[t]);
}

/* Chooses the prefixes (m->file_prefix, m->model_prefix, NULL = none) that match the most. */
static void choose_prefixes(matcher *m) {
    int best = count_matches(m, "", "");
    if (best < 0) {
        m->out_of_memory = true;
        return;
    }
    if (best == m->n && best == m->nsrc) return;
    try_prefixes(m, 0, &best);
    try_prefixes(m, 1, &best);
}

/* A file tensor's name for messages: as the file has it, and what it became if renamed. */
static void add_unexpected(matcher *m, const nbst_source *s, const char *name) {
    if (strcmp(s->file_name, name) == 0)
        add(m, &m->unexpected, "%s", s->file_name);
    else
        add(m, &m->unexpected, "%s (as '%s')", s->file_name, name);
}

/* " (file tensor 'X')" when the destination's name is not the file's. */
static const char *from_file(const nbst_source *s, const char *name, char *buf, size_t size) {
    if (strcmp(s->file_name, name) == 0) return "";
    snprintf(buf, size, " (file tensor '%.200s')", s->file_name);
    return buf;
}

static bool is_float(nb_dtype dt) {
    return dt == NB_F32 || dt == NB_F64;
}

/* Pairs each file tensor with its destination and collects what does not fit. */
static void match(matcher *m, const nb_load_opts *o) {
    const char *fp = m->file_prefix ? m->file_prefix : "",
               *mp = m->model_prefix ? m->model_prefix : "";
    json_t *index = index_destinations(m, mp);
    if (!index) {
        m->out_of_memory = true;
        return;
    }
    for (int i = 0; i < m->n; i++) m->slot[i] = -1;
    for (int k = 0; k < m->nsrc; k++) {
        const nbst_source *s = &m->src[k];
        const char *name = strip(s->name, fp);
        const json_t *pos = json_object_get(index, name);
        if (!pos) {
            add_unexpected(m, s, name);
            continue;
        }
        const int i = (int)json_integer_value(pos);
        const nb_tensor *t = m->into[i].tensor;
        const char *dest = m->into[i].name;
        char buf[256];
        const char *origin = from_file(s, dest, buf, sizeof buf);
        if (m->slot[i] >= 0)
            add(m, &m->mismatched, "tensor '%s': the file holds it twice, as '%s' and '%s'", dest,
                m->src[m->slot[i]].file_name, s->file_name);
        else if (s->unsplittable)
            add(m, &m->mismatched,
                "tensor '%s': file tensor '%s' of shape %s does not split into %d equal parts "
                "along dim 0",
                dest, s->file_name, nbt_dims(s->ndim, s->shape), s->parts);
        else if (s->dtype != t->dtype &&
                 !(o->convert_dtype && is_float(s->dtype) && is_float(t->dtype)))
            add(m, &m->mismatched, "tensor '%s': dtype %s in the file, expected %s%s%s", dest,
                nbst_dtype_name(s->dtype), nbst_dtype_name(t->dtype), origin,
                is_float(s->dtype) && is_float(t->dtype)
                    ? " (nb_load_opts.convert_dtype converts F32 and F64)"
                    : "");
        else if (s->ndim != t->ndim ||
                 memcmp(s->shape, t->shape, sizeof(int64_t) * (size_t)s->ndim) != 0)
            add(m, &m->mismatched, "tensor '%s': shape %s in the file, expected %s%s", dest,
                nbt_dims(s->ndim, s->shape), nbt_shape(t), origin);
        m->slot[i] = m->slot[i] >= 0 ? m->slot[i] : k;
    }
    for (int i = 0; i < m->n; i++)
        if (m->slot[i] < 0) add(m, &m->missing, "%s", m->into[i].name);
    json_decref(index);
}

/* The error of a refused load: every problem, as many as the message holds. */
static void refuse(const matcher *m, bool partial) {
    const int n_miss = partial ? 0 : m->missing.n, n_extra = partial ? 0 : m->unexpected.n,
              total = n_miss + n_extra + m->mismatched.n;
    char msg[900];
    size_t used = 0;
    if (total > 1)
        used = (size_t)snprintf(msg, sizeof msg,
                                "%d tensors do not fit (%d missing, %d unexpected, %d "
                                "mismatched): ",
                                total, n_miss, n_extra, m->mismatched.n);
    int shown = 0;
    for (int kind = 0; kind < 3; kind++) {
        const str_list *l = kind == 0 ? &m->missing : kind == 1 ? &m->unexpected : &m->mismatched;
        const int count = kind == 0 ? n_miss : kind == 1 ? n_extra : l->n;
        for (int j = 0; j < count; j++) {
            char one[400];
            if (kind == 0)
                snprintf(one, sizeof one, "tensor '%.300s' is missing from the file", l->items[j]);
            else if (kind == 1)
                snprintf(one, sizeof one,
                         "tensor '%.300s' is in the file but not expected (extra tensor)",
                         l->items[j]);
            else
                snprintf(one, sizeof one, "%s", l->items[j]);
            /* Room is kept for the count of those left out. */
            if (used + strlen(one) + 2 + 64 >= sizeof msg) break;
            used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s", shown ? "; " : "", one);
            shown++;
        }
    }
    if (shown < total)
        snprintf(msg + used, sizeof msg - used, "; and %d more (an nb_load_report lists all)",
                 total - shown);
    nbt_error(m->op, "%s: %s", m->path, msg);
}

/* ---- converting and writing ---- */
/* The bytes destination t receives from source s: the file's, or converted between F32 and F64
 * into a new buffer (*owned). NULL with an error. */
static const void *dest_bytes(const matcher *m, const nbst_file *f, const nbst_source *s,
                              const nb_named_tensor *d, void **owned) {
    const unsigned char *bytes = f->data + s->begin;
    *owned = NULL;
    if (s->dtype == d->tensor->dtype) return bytes;
    const int64_t n = nb_numel(d->tensor);
    void *out = nbt_malloc((size_t)(n ? n : 1) * nb_dtype_size(d->tensor->dtype));
    if (!out) return nbt_error(m->op, "%s: out of memory converting '%s'", m->path, d->name);
    for (int64_t k = 0; k < n; k++) {
        if (s->dtype == NB_F32) {
            float v;
            memcpy(&v, bytes + 4 * k, 4);
            ((double *)out)[k] = v;
            continue;
        }
        double v;
        memcpy(&v, bytes + 8 * k, 8);
        float r = (float)v;
        if (isfinite(v) && !isfinite(r)) {
            nbt_free(out);
            return nbt_error(m->op, "%s: tensor '%s': element %lld is %g, beyond float32's range",
                             m->path, d->name, (long long)k, v);
        }
        ((float *)out)[k] = r;
    }
    return *owned = out;
}

/* Converts where needed, runs the check on every destination that receives data, then writes
 * them all; nothing is written unless everything before succeeded. */
static bool write_all(matcher *m, const nbst_file *f, nbst_check_fn check, void *ctx) {
    const void **bytes = nbt_malloc(sizeof *bytes * (size_t)(m->n ? m->n : 1));
    void **owned = nbt_malloc(sizeof *owned * (size_t)(m->n ? m->n : 1));
    bool ok = bytes && owned;
    if (!ok) nbt_error(m->op, "%s: out of memory", m->path);
    int done = 0;
    for (int i = 0; ok && i < m->n; i++, done++) {
        owned[i] = NULL, bytes[i] = NULL;
        if (m->slot[i] < 0) continue;
        bytes[i] = dest_bytes(m, f, &m->src[m->slot[i]], &m->into[i], &owned[i]);
        ok = bytes[i] != NULL;
        m->converted += owned[i] != NULL;
        const char *why = ok && check ? check(m->into[i].tensor, bytes[i], ctx) : NULL;
        if (why) ok = false, nbt_error(m->op, "%s: tensor '%s': %s", m->path, m->into[i].name, why);
    }
    /* Only now, with everything checked and in memory, are destinations written. */
    for (int i = 0; ok && i < m->n; i++)
        if (bytes[i]) nbst_scatter(m->into[i].tensor, bytes[i]);
    for (int i = 0; owned && i < done; i++) nbt_free(owned[i]);
    nbt_free(owned);
    nbt_free(bytes);
    return ok;
}

/* Hands the lists to report (or frees them). */
static void fill_report(matcher *m, nb_load_report *r, bool loaded) {
    if (!r) {
        free_list(&m->missing);
        free_list(&m->unexpected);
        free_list(&m->mismatched);
        free(m->file_prefix);
        free(m->model_prefix);
        return;
    }
    *r = (nb_load_report){0};
    if (loaded) {
        for (int i = 0; i < m->n; i++) r->n_loaded += m->slot[i] >= 0;
        r->n_converted = m->converted;
    }
    r->n_missing = m->missing.n, r->missing = m->missing.items;
    r->n_unexpected = m->unexpected.n, r->unexpected = m->unexpected.items;
    r->n_mismatched = m->mismatched.n, r->mismatched = m->mismatched.items;
    r->file_prefix = m->file_prefix ? m->file_prefix : strdup("");
    r->model_prefix = m->model_prefix ? m->model_prefix : strdup("");
}

bool nbst_load(const char *op, const char *path, int n, const nb_named_tensor *into,
               const nb_load_opts *opts, bool match_prefix, nbst_check_fn check, void *ctx,
               nb_load_report *report) {
    static const nb_load_opts strict = {0};
    const nb_load_opts *o = opts ? opts : &strict;
    if (report) *report = (nb_load_report){0};
    const char *shown = path ? path : "(null)";
    json_t *names = json_object(); /* the destinations' names, for duplicates */
    if (!names) return nbt_error(op, "out of memory"), false;
    bool ok =
        check_destinations(op, shown, n, into, names) && nbst_check_map(op, shown, o->name_map);
    json_decref(names);
    if (!ok) return false;
    nbst_file f;
    if (!nbst_open(&f, op, path)) return false;
    matcher m = {.op = op, .path = shown, .n = n, .into = into};
    nbst_source *src = nbst_map_sources(&f, o->name_map, &m.nsrc);
    m.src = src;
    m.slot = nbt_malloc(sizeof *m.slot * (size_t)(n ? n : 1));
    ok = src && m.slot;
    if (ok && match_prefix) choose_prefixes(&m);
    if (ok) match(&m, o);
    if (ok && m.out_of_memory) ok = false, nbt_error(op, "%s: out of memory", shown);
    if (ok && (m.mismatched.n || (!o->partial && (m.missing.n || m.unexpected.n))))
        ok = false, refuse(&m, o->partial);
    ok = ok && nbst_read_data(&f) && write_all(&m, &f, check, ctx);
    fill_report(&m, report, ok);
    nbst_close(&f);
    nbst_free_sources(src, m.nsrc);
    nbt_free(m.slot);
    return ok;
}

bool nb_safetensors_load_opts(const char *path, int n, const nb_named_tensor *into,
                              const nb_load_opts *opts, nb_load_report *report) {
    return nbst_load("nb_safetensors_load", path, n, into, opts, false, NULL, NULL, report);
}

bool nb_safetensors_load(const char *path, int n, const nb_named_tensor *into) {
    return nb_safetensors_load_opts(path, n, into, NULL, NULL);
}
