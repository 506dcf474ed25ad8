#include "param_list.h"

bool nbn_check_param_list(const char *op, nb_tensor *const *params, int n) {
    if (!params) return nbt_error(op, "params is NULL (n = %d)", n), false;
    if (n < 1) return nbt_error(op, "got an empty parameter list (n = %d)", n), false;
    for (int i = 0; i < n; i++) {
        const nb_tensor *p = params[i];
        if (!p) return nbt_error(op, "parameter %d is NULL", i), false;
        if (p->node)
            return nbt_error(op,
                             "parameter %d (shape %s) is not a leaf: it was computed by an op; "
                             "pass the leaves it came from",
                             i, nbt_shape(p)),
                   false;
        if (!nb_is_float(p))
            return nbt_error(op, "parameter %d (shape %s) is %s, expected float32 or float64", i,
                             nbt_shape(p), nb_dtype_name(p->dtype)),
                   false;
        if (!p->requires_grad)
            return nbt_error(op, "parameter %d (shape %s) does not require grad", i, nbt_shape(p)),
                   false;
        if (p->dtype != params[0]->dtype)
            return nbt_error(op,
                             "parameter %d (shape %s) is %s but parameter 0 (shape %s) is %s: "
                             "all parameters must share one dtype",
                             i, nbt_shape(p), nb_dtype_name(p->dtype), nbt_shape(params[0]),
                             nb_dtype_name(params[0]->dtype)),
                   false;
        for (int j = 0; j < i; j++)
            if (params[j] == p)
                return nbt_error(op, "parameter %d is the same tensor as parameter %d", i, j),
                       false;
    }
    return true;
}
