/* The optimizer's state as named tensors for checkpoints: listing it, checking values loaded
 * into it, and giving state to the parameters a checkpoint holds it for. */
#include "optim_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nb_optimizer_state(nb_optimizer *o, const char *prefix, const nb_named_tensor **out) {
    if (!o || !out)
        return nbt_error("nb_optimizer_state", "%s is NULL", o ? "out" : "optimizer"), -1;
    if (!prefix) prefix = "";
    int count = 0;
    for (int i = 0; i < o->n; i++) count += o->has_state[i] ? o->nstate : 0;
    /* Longest name: prefix, the kind, '.', up to 11 digits and the terminator. */
    size_t longest = 0;
    for (int k = 0; k < o->nstate; k++)
        if (strlen(o->kinds[k].name) > longest) longest = strlen(o->kinds[k].name);
    size_t name_cap = strlen(prefix) + longest + 13;
    nb_named_tensor *named =
        nbt_malloc(sizeof *named * (size_t)(count + 1) + name_cap * (size_t)count);
    if (!named) return nbt_error("nb_optimizer_state", "out of memory"), -1;
    char *names = (char *)(named + count + 1);
    int at = 0;
    for (int i = 0; i < o->n; i++)
        for (int k = 0; o->has_state[i] && k < o->nstate; k++, at++) {
            char *name = names + name_cap * (size_t)at;
            snprintf(name, name_cap, "%s%s.%d", prefix, o->kinds[k].name, i);
            named[at] = (nb_named_tensor){name, nbo_state(o, i, k)};
        }
    nbt_free(o->named);
    o->named = named;
    *out = named;
    return count;
}

/* ---- values loaded from a checkpoint ---- */
static const char *check_floats(const nb_tensor *dest, const void *bytes, bool nonneg) {
    static _Thread_local char why[160];
    int64_t n = nbt_numel(dest);
    for (int64_t k = 0; k < n; k++) {
        double v = dest->dtype == NB_F32 ? ((const float *)bytes)[k] : ((const double *)bytes)[k];
        if (isfinite(v) && (!nonneg || v >= 0)) continue;
        snprintf(why, sizeof why, "element %lld is %g, expected a finite value%s", (long long)k, v,
                 nonneg ? " >= 0" : "");
        return why;
    }
    return NULL;
}

const char *nbo_check_loaded_state(const nb_tensor *dest, const void *bytes, void *ctx) {
    const nb_optimizer *o = ctx;
    for (int i = 0; i < o->n; i++)
        for (int k = 0; o->has_state[i] && k < o->nstate; k++) {
            if (nbo_state(o, i, k) != dest) continue;
            if (!o->kinds[k].is_step)
                return check_floats(dest, bytes, strcmp(o->kinds[k].name, "exp_avg_sq") == 0);
            int64_t step = *(const int64_t *)bytes;
            if (step >= 0 && step < NBO_MAX_STEP) return NULL;
            static _Thread_local char why[96];
            snprintf(why, sizeof why, "step count %lld is out of range [0, 2^53)", (long long)step);
            return why;
        }
    return NULL;
}

/* ---- loading: the parameters with state become those the file has state for ---- */

/* The parameter whose state name is "<prefix><kind>.<i>" for one of o's kinds, or -1. */
static int state_owner(const nb_optimizer *o, const char *prefix, const char *name) {
    size_t plen = strlen(prefix);
    if (strncmp(name, prefix, plen) != 0) return -1;
    name += plen;
    for (int k = 0; k < o->nstate; k++) {
        size_t klen = strlen(o->kinds[k].name);
        if (strncmp(name, o->kinds[k].name, klen) != 0 || name[klen] != '.') continue;
        const char *digits = name + klen + 1;
        char *end;
        if (*digits < '0' || *digits > '9' || (digits[0] == '0' && digits[1])) return -1;
        long i = strtol(digits, &end, 10);
        return *end == '\0' && i < o->n ? (int)i : -1;
    }
    return -1;
}

bool nbo_load_begin(nb_optimizer *o, const char *prefix, int n, const char *const *names) {
    bool *in_file = nbt_malloc(sizeof *in_file * (size_t)(o->n ? o->n : 1));
    if (!in_file) return nbt_error("nb_module_load_with", "out of memory"), false;
    memset(in_file, 0, sizeof *in_file * (size_t)o->n);
    for (int j = 0; j < n; j++) {
        int i = state_owner(o, prefix, names[j]);
        if (i >= 0) in_file[i] = true;
    }
    memcpy(o->had_state, o->has_state, sizeof *o->has_state * (size_t)o->n);
    bool ok = true;
    for (int i = 0; ok && i < o->n; i++) {
        /* Kept state is overwritten only by a load that succeeds. */
        if (in_file[i] && !o->has_state[i]) ok = nbo_make_state(o, "nb_module_load_with", i);
        if (!in_file[i]) o->has_state[i] = false;
    }
    if (!ok) nbo_load_end(o, false);
    nbt_free(in_file);
    return ok;
}

void nbo_load_end(nb_optimizer *o, bool loaded) {
    if (!loaded) memcpy(o->has_state, o->had_state, sizeof *o->has_state * (size_t)o->n);
}
