#include "param_list.h"

#include <stdio.h>

const char *nbn_param_label(const nb_tensor *t, int index) {
    static _Thread_local char texts[4][320];
    static _Thread_local int next;
    char *out = texts[next++ % 4], name[256];
    if (nbn_param_name(t, name, sizeof name))
        snprintf(out, sizeof texts[0], "'%s' (shape %s)", name, nbt_shape(t));
    else
        snprintf(out, sizeof texts[0], "%d (shape %s)", index, nbt_shape(t));
    return out;
}

bool nbn_check_param_list(const char *op, nb_tensor *const *params, int n, int min_n,
                          bool need_grad, int first_index) {
    if (!params && n > 0) return nbt_error(op, "params is NULL (n = %d)", n), false;
    if (n < min_n) return nbt_error(op, "got an empty parameter list (n = %d)", n), false;
    for (int i = 0; i < n; i++) {
        const nb_tensor *p = params[i];
        const int at = first_index + i;
        if (!p) return nbt_error(op, "parameter %d is NULL", at), false;
        if (p->node)
            return nbt_error(op,
                             "parameter %s is not a leaf: it was computed by an op; pass the "
                             "leaves it came from",
                             nbn_param_label(p, at)),
                   false;
        if (!nb_is_float(p))
            return nbt_error(op, "parameter %s is %s, expected float32 or float64",
                             nbn_param_label(p, at), nb_dtype_name(p->dtype)),
                   false;
        if (need_grad && !p->requires_grad)
            return nbt_error(op, "parameter %s does not require grad", nbn_param_label(p, at)),
                   false;
        if (p->dtype != params[0]->dtype)
            return nbt_error(op,
                             "parameter %s is %s but parameter %s is %s: all parameters must "
                             "share one dtype",
                             nbn_param_label(p, at), nb_dtype_name(p->dtype),
                             nbn_param_label(params[0], first_index),
                             nb_dtype_name(params[0]->dtype)),
                   false;
        for (int j = 0; j < i; j++)
            if (params[j] == p)
                return nbt_error(op, "parameter %s is listed twice, as parameters %d and %d",
                                 nbn_param_label(p, at), first_index + j, at),
                       false;
    }
    return true;
}
