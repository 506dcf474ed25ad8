/* PyTorch-style printing: tensor([[1., 2.],
 *                                  [3., 4.]], shape=[2, 2], dtype=float32) */
#define _POSIX_C_SOURCE 200809L
#include "nbt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EDGE 3          /* items shown at each end of a summarised dim */
#define SUMMARY_AT 1000 /* tensors with more elements are summarised, as in PyTorch */

typedef struct {
    FILE *f;
    const nb_tensor *t;
    char fmt[16];
    int width;
    bool summarize;
    bool is_float;
} printer;

static void format_value(const printer *p, double v, char *buf, size_t len) {
    if (!p->is_float) {
        if (p->t->dtype == NB_BOOL) snprintf(buf, len, "%s", v != 0 ? "True" : "False");
        else snprintf(buf, len, "%lld", (long long)v);
    } else if (isnan(v)) {
        snprintf(buf, len, "nan");
    } else if (isinf(v)) {
        snprintf(buf, len, v > 0 ? "inf" : "-inf");
    } else if (strcmp(p->fmt, "int") == 0) {
        snprintf(buf, len, "%.0f.", v);
    } else {
        snprintf(buf, len, p->fmt, v);
    }
}

/* Chooses one format for all elements, like PyTorch: integers as "3.", small ranges fixed
 * with 4 decimals, wide ranges in scientific notation. */
static void choose_format(printer *p) {
    const nb_tensor *t = p->t;
    int64_t n = nb_numel(t);
    double maxabs = 0, minabs = INFINITY;
    bool ints = true;
    for (int64_t k = 0; k < n; k++) {
        double v = nbt_get_linear(t, k);
        if (!isfinite(v)) continue;
        double a = fabs(v);
        if (a > maxabs) maxabs = a;
        if (a > 0 && a < minabs) minabs = a;
        if (v != floor(v)) ints = false;
    }
    if (ints && maxabs < 1e8) strcpy(p->fmt, "int");
    else if (maxabs < 1e8 && (minabs >= 1e-4 || minabs == INFINITY) && maxabs / minabs < 1e8)
        strcpy(p->fmt, "%.4f");
    else strcpy(p->fmt, "%.4e");
    char buf[64];
    p->width = 0;
    for (int64_t k = 0; k < n; k++) {
        format_value(p, nbt_get_linear(t, k), buf, sizeof buf);
        int w = (int)strlen(buf);
        if (w > p->width) p->width = w;
    }
}

static void print_dim(const printer *p, int dim, int64_t offset, int indent) {
    const nb_tensor *t = p->t;
    if (t->ndim == 0) {
        char buf[64];
        format_value(p, nbt_get_linear(t, 0), buf, sizeof buf);
        fputs(buf, p->f);
        return;
    }
    fputc('[', p->f);
    int64_t n = t->shape[dim];
    for (int64_t i = 0; i < n; i++) {
        if (p->summarize && n > 2 * EDGE && i == EDGE) {
            fputs(dim == t->ndim - 1 ? "..., " : "...,\n", p->f);
            if (dim != t->ndim - 1)
                for (int s = 0; s < indent + 1; s++) fputc(' ', p->f);
            i = n - EDGE;
        }
        int64_t off = offset + i * t->strides[dim];
        if (dim == t->ndim - 1) {
            char buf[64];
            nb_tensor one = *t;
            one.ndim = 0;
            one.offset = off;
            format_value(p, nbt_get_linear(&one, 0), buf, sizeof buf);
            fprintf(p->f, "%*s", p->width, buf);
        } else {
            print_dim(p, dim + 1, off, indent + 1);
        }
        if (i + 1 < n) {
            if (dim == t->ndim - 1) {
                fputs(", ", p->f);
            } else {
                fputc(',', p->f);
                for (int b = dim; b < t->ndim - 1; b++) fputc('\n', p->f);
                for (int s = 0; s < indent + 1; s++) fputc(' ', p->f);
            }
        }
    }
    fputc(']', p->f);
}

void nb_fprint(FILE *f, const nb_tensor *t) {
    if (!t) {
        fputs("tensor(NULL)\n", f);
        return;
    }
    printer p = {.f = f, .t = t, .is_float = nb_is_float(t)};
    p.summarize = nb_numel(t) > SUMMARY_AT;
    choose_format(&p);
    fputs("tensor(", f);
    if (nb_numel(t) == 0) fputs("[]", f);
    else print_dim(&p, 0, t->offset, 7);
    fprintf(f, ", shape=%s, dtype=%s%s)\n", nbt_shape(t), nb_dtype_name(t->dtype),
            t->requires_grad ? ", requires_grad=True" : "");
}

void nb_print(const nb_tensor *t) { nb_fprint(stdout, t); }

char *nb_to_string(const nb_tensor *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return nbt_error("to_string", "out of memory");
    nb_fprint(f, t);
    fclose(f);
    return buf;
}
