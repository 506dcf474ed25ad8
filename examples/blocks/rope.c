/* Rotary position embeddings, rotate-half convention (Hugging Face's Llama layout). */
#include "blocks.h"
#include "errors.h"

#include <math.h>
#include <stdlib.h>

/* cos and sin tables [T, 1, ..., 1, hd] (trailing ones so they broadcast over the dims
 * between seq_dim and the last), for positions offset .. offset + T - 1, computed in double
 * and rounded to dt. sin's first half is negated: rotate_half(x) * sin is then
 * swap_halves(x) * signed_sin, one negation fewer per element. */
static bool rope_tables(nb_dtype dt, int64_t T, int64_t hd, int ones, int64_t offset, double base,
                        nb_tensor **cos_out, nb_tensor **sin_out) {
    int64_t half = hd / 2;
    double *c = malloc(sizeof *c * (size_t)(T * hd)), *s = malloc(sizeof *s * (size_t)(T * hd));
    if (!c || !s) {
        free(c);
        free(s);
        nb_error("rope", "out of memory for [%lld, %lld] tables", (long long)T, (long long)hd);
        return false;
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            double angle = (double)(offset + t) * pow(base, -(double)(2 * i) / (double)hd);
            c[t * hd + i] = c[t * hd + half + i] = cos(angle);
            s[t * hd + i] = -sin(angle);
            s[t * hd + half + i] = sin(angle);
        }
    int64_t shape[NB_MAX_DIMS] = {T};
    for (int k = 1; k <= ones; k++) shape[k] = 1;
    shape[ones + 1] = hd;
    nb_tensor *c64 = nb_from_array(NB_F64, ones + 2, shape, c);
    nb_tensor *s64 = nb_from_array(NB_F64, ones + 2, shape, s);
    free(c);
    free(s);
    *cos_out = dt == NB_F64 ? c64 : nb_to_dtype(c64, dt);
    *sin_out = dt == NB_F64 ? s64 : nb_to_dtype(s64, dt);
    return *cos_out && *sin_out;
}

nb_tensor *blk_rope(const nb_tensor *x, int seq_dim, int64_t offset, double base) {
    if (!x) return blk_null_argument("rope");
    int d = seq_dim < 0 ? seq_dim + x->ndim : seq_dim;
    if (!nb_is_float(x) || x->ndim < 2 || d < 0 || d >= x->ndim - 1)
        return nb_error("rope",
                        "expects a float tensor [..., T, ..., hd] with positions along a dim "
                        "before the last, got %s %s and seq_dim %d",
                        nb_dtype_name(x->dtype), nb_shape_text(x), seq_dim);
    int64_t hd = x->shape[x->ndim - 1], T = x->shape[d];
    if (hd % 2 != 0)
        return nb_error("rope", "head dim (last of %s) must be even", nb_shape_text(x));
    if (offset < 0 || !(base > 0))
        return nb_error("rope", "needs offset >= 0 and base > 0, got %lld and %g",
                        (long long)offset, base);
    nb_tensor *cos_t, *sin_t;
    if (!rope_tables(x->dtype, T, hd, x->ndim - 2 - d, offset, base, &cos_t, &sin_t)) return NULL;
    nb_tensor *halves[2] = {nb_narrow(x, -1, hd / 2, hd / 2), nb_narrow(x, -1, 0, hd / 2)};
    nb_tensor *swapped = nb_concat(2, halves, -1); /* [x2, x1]: rotate_half without the sign */
    return nb_add(nb_mul(x, cos_t), nb_mul(swapped, sin_t));
}
