#include "golden.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef NBTEST_GOLDEN_DIR
#error "tests/meson.build defines NBTEST_GOLDEN_DIR"
#endif

const char *golden_dir(void) {
    return NBTEST_GOLDEN_DIR;
}

json_t *golden_load(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", golden_dir(), name);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        fprintf(stderr, "golden: %s:%d: %s\n", path, err.line, err.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        fprintf(stderr, "golden: %s: top level is not an object\n", path);
        json_decref(root);
        return NULL;
    }
    return root;
}

bool golden_number(const json_t *v, double *out) {
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return true;
    }
    const char *s = json_string_value(v);
    if (!s) return false;
    if (strcmp(s, "inf") == 0)
        *out = INFINITY;
    else if (strcmp(s, "-inf") == 0)
        *out = -INFINITY;
    else if (strcmp(s, "nan") == 0)
        *out = NAN;
    else
        return false;
    return true;
}

static bool parse_dtype(const char *s, nb_dtype *dt) {
    static const struct {
        const char *name;
        nb_dtype dt;
    } names[] = {{"f32", NB_F32}, {"f64", NB_F64}, {"i64", NB_I64}, {"bool", NB_BOOL}};
    for (size_t k = 0; s && k < sizeof names / sizeof names[0]; k++)
        if (strcmp(s, names[k].name) == 0) return *dt = names[k].dt, true;
    return false;
}

/* Reads spec's dtype and shape; numel is the product of the shape. */
static bool parse_header(const json_t *spec, nb_dtype *dt, int *ndim, int64_t *shape,
                         int64_t *numel) {
    const json_t *jshape = json_object_get(spec, "shape");
    if (!parse_dtype(json_string_value(json_object_get(spec, "dtype")), dt) ||
        !json_is_array(jshape) || json_array_size(jshape) > NB_MAX_DIMS) {
        fprintf(stderr, "golden: tensor spec without a valid dtype and shape\n");
        return false;
    }
    *ndim = (int)json_array_size(jshape);
    *numel = 1;
    for (int d = 0; d < *ndim; d++) {
        const json_t *s = json_array_get(jshape, (size_t)d);
        if (!json_is_integer(s) || json_integer_value(s) < 0) {
            fprintf(stderr, "golden: shape entry %d is not a size\n", d);
            return false;
        }
        shape[d] = json_integer_value(s);
        *numel *= shape[d];
    }
    return true;
}

/* Converts the "data" array into a C array of dt's element type (caller frees). */
static void *parse_data(const json_t *spec, nb_dtype dt, int64_t numel) {
    const json_t *data = json_object_get(spec, "data");
    if (!json_is_array(data) || (int64_t)json_array_size(data) != numel) {
        fprintf(stderr, "golden: data holds %zu values, the shape needs %lld\n",
                json_array_size(data), (long long)numel);
        return NULL;
    }
    void *buf = malloc(nb_dtype_size(dt) * (size_t)(numel ? numel : 1));
    if (!buf) return NULL;
    for (int64_t k = 0; k < numel; k++) {
        const json_t *v = json_array_get(data, (size_t)k);
        double x = 0;
        bool ok = true;
        switch (dt) {
        case NB_F32:
        case NB_F64:
            ok = golden_number(v, &x);
            if (dt == NB_F32)
                ((float *)buf)[k] = (float)x; /* exact: x is a float32 value */
            else
                ((double *)buf)[k] = x;
            break;
        case NB_I64:
            ok = json_is_integer(v);
            ((int64_t *)buf)[k] = json_integer_value(v);
            break;
        case NB_BOOL:
            ok = json_is_boolean(v);
            ((uint8_t *)buf)[k] = json_is_true(v);
            break;
        }
        if (!ok) {
            fprintf(stderr, "golden: data[%lld] is not a %s value\n", (long long)k,
                    nb_dtype_name(dt));
            free(buf);
            return NULL;
        }
    }
    return buf;
}

/* An uninitialised leaf of the given shape whose last dim has stride 2. */
static nb_tensor *strided_leaf(nb_dtype dt, int ndim, const int64_t *shape) {
    int64_t wide[NB_MAX_DIMS + 1];
    memcpy(wide, shape, sizeof(int64_t) * (size_t)ndim);
    wide[ndim] = 2;
    nb_tensor *buffer = nb_zeros(dt, ndim + 1, wide);
    return nb_select(buffer, -1, 1); /* a leaf: buffer does not require grad */
}

nb_tensor *golden_tensor(const json_t *spec, golden_layout layout) {
    nb_dtype dt;
    int ndim;
    int64_t shape[NB_MAX_DIMS], numel;
    if (!json_is_object(spec) || !parse_header(spec, &dt, &ndim, shape, &numel)) return NULL;
    void *buf = parse_data(spec, dt, numel);
    if (!buf) return NULL;
    nb_tensor *t = nb_from_array(dt, ndim, shape, buf);
    free(buf);
    if (t && layout == GOLDEN_STRIDED && ndim > 0) {
        nb_tensor *s = strided_leaf(dt, ndim, shape);
        t = s && nb_copy_(s, t) ? s : NULL;
    }
    if (!t) {
        fprintf(stderr, "golden: cannot build the tensor: %s\n", nb_last_error());
        return NULL;
    }
    if (json_is_true(json_object_get(spec, "requires_grad")) && !nb_requires_grad_(t, true)) {
        fprintf(stderr, "golden: requires_grad: %s\n", nb_last_error());
        return NULL;
    }
    return t;
}

golden_cmp golden_compare(const nb_tensor *got, const json_t *expected) {
    bool f32 = got && got->dtype == NB_F32;
    return golden_compare_tol(got, expected, f32 ? 1e-5 : 1e-10, f32 ? 1e-6 : 1e-12);
}


golden_cmp golden_compare_tol(const nb_tensor *got, const json_t *expected, double rtol,
                              double atol) {
    golden_cmp r = {.ok = false, .worst_index = -1};
    nb_dtype dt;
    int ndim;
    int64_t shape[NB_MAX_DIMS], numel;
    if (!got) {
        snprintf(r.message, sizeof r.message, "no result: %s", nb_last_error());
        return r;
    }
    if (!parse_header(expected, &dt, &ndim, shape, &numel)) {
        snprintf(r.message, sizeof r.message, "malformed golden tensor");
        return r;
    }
    char got_shape[64];
    nb_shape_str(got, got_shape, sizeof got_shape);
    if (got->dtype != dt || got->ndim != ndim ||
        (ndim > 0 && memcmp(got->shape, shape, sizeof(int64_t) * (size_t)ndim) != 0)) {
        snprintf(r.message, sizeof r.message, "got %s %s, expected %s with %lld elements",
                 nb_dtype_name(got->dtype), got_shape, nb_dtype_name(dt), (long long)numel);
        return r;
    }
    /* Read the expected values as doubles whatever their dtype. */
    nb_scope_begin();
    nb_tensor *want = golden_tensor(expected, GOLDEN_CONTIGUOUS);
    double *x = malloc(sizeof(double) * (size_t)(numel ? numel : 1));
    double *y = malloc(sizeof(double) * (size_t)(numel ? numel : 1));
    bool read = want && x && y && nb_to_doubles(got, x) && nb_to_doubles(want, y);
    nb_scope_end();
    if (!read) {
        snprintf(r.message, sizeof r.message, "cannot read the values");
        free(x), free(y);
        return r;
    }
    bool exact = dt == NB_I64 || dt == NB_BOOL;
    double scale = 1;
    for (int64_t k = 0; k < numel; k++)
        if (isfinite(y[k]) && fabs(y[k]) > scale) scale = fabs(y[k]);
    r.ok = true;
    for (int64_t k = 0; k < numel; k++) {
        double err, tol = exact ? 0 : rtol * fabs(y[k]) + atol * scale;
        if (!isfinite(y[k]) || !isfinite(x[k]) || exact)
            err = x[k] == y[k] ? 0 : INFINITY; /* NaN equals nothing, NaN included */
        else
            err = fabs(x[k] - y[k]);
        double ratio = err == 0 ? 0 : tol > 0 ? err / tol : INFINITY;
        if (isfinite(err) && err > r.max_abs_err) r.max_abs_err = err;
        if (r.worst_index < 0 || ratio > r.worst_ratio)
            r.worst_ratio = ratio, r.worst_index = k, r.got = x[k], r.expected = y[k];
        if (!(err <= tol)) r.ok = false;
    }
    if (!r.ok)
        snprintf(r.message, sizeof r.message,
                 "element %lld of %s: got %.17g, expected %.17g (error %.3g, %.3g x tolerance)",
                 (long long)r.worst_index, got_shape, r.got, r.expected, fabs(r.got - r.expected),
                 r.worst_ratio);
    free(x), free(y);
    return r;
}

const json_t *golden_find_case(const json_t *root, const char *name) {
    const json_t *cases = json_object_get(root, "cases");
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *c = json_array_get(cases, k);
        const char *n = json_string_value(json_object_get(c, "name"));
        if (n && strcmp(n, name) == 0) return c;
    }
    return NULL;
}

int golden_named_tensors(const json_t *module_case, const char *key, golden_named *out, int max) {
    const json_t *list = json_object_get(module_case, key);
    if (!json_is_array(list)) {
        fprintf(stderr, "golden: the case has no list \"%s\"\n", key);
        return -1;
    }
    if ((int)json_array_size(list) > max) {
        fprintf(stderr, "golden: \"%s\" holds %zu tensors, room for %d\n", key,
                json_array_size(list), max);
        return -1;
    }
    for (size_t k = 0; k < json_array_size(list); k++) {
        const json_t *spec = json_array_get(list, k);
        const char *name = json_string_value(json_object_get(spec, "name"));
        if (!name || strlen(name) >= sizeof out[k].name) {
            fprintf(stderr, "golden: \"%s\"[%zu] has no usable name\n", key, k);
            return -1;
        }
        strcpy(out[k].name, name);
        out[k].tensor = golden_tensor(spec, GOLDEN_CONTIGUOUS);
        if (!out[k].tensor) return -1;
    }
    return (int)json_array_size(list);
}

const json_t *golden_named_spec(const json_t *module_case, const char *key, const char *name) {
    const json_t *list = json_object_get(module_case, key);
    for (size_t k = 0; k < json_array_size(list); k++) {
        const json_t *spec = json_array_get(list, k);
        const char *n = json_string_value(json_object_get(spec, "name"));
        if (n && strcmp(n, name) == 0) return spec;
    }
    return NULL;
}
