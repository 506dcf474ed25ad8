/* PyTorch-style printing: tensor([[1., 2.],
 *                                  [3., 4.]], shape=[2, 2], dtype=float32)
 * The body follows torch/_tensor_str.py (precision 4, line width 80, 3 edge items, summary
 * above 1000 elements); nabla always appends the shape and dtype. */
#define _POSIX_C_SOURCE 200809L
#include "nbt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EDGE 3          /* items shown at each end of a summarised dim */
#define SUMMARY_AT 1000 /* tensors with more elements are summarised, as in PyTorch */
#define LINE_WIDTH 80
#define INDENT 7 /* strlen("tensor(") */

typedef enum { FMT_INT, FMT_FIXED, FMT_SCI, FMT_PLAIN } number_style;

typedef struct {
    FILE *f;
    const nb_tensor *t;
    number_style style;
    int width; /* every element is right-aligned to this width */
    bool summarize;
    /* the shown nonzero finite float values, which choose the style (PyTorch's _Formatter) */
    bool any, ints;
    double min, max;
} printer;

/* Element at the storage offset off, as double. */
static double value_at(const nb_tensor *t, int64_t off) {
    return nbt_load_double((const char *)t->storage->data + off * (int64_t)nbt_esize(t->dtype),
                           t->dtype);
}

/* Formats one element without padding (Python's str.format rules for the chosen style). */
static void format_value(const printer *p, int64_t off, char *buf, size_t len) {
    const nb_tensor *t = p->t;
    if (t->dtype == NB_I64) {
        const char *q = (const char *)t->storage->data + off * 8;
        snprintf(buf, len, "%lld", (long long)*(const int64_t *)q);
        return;
    }
    double v = value_at(t, off);
    if (t->dtype == NB_BOOL)
        snprintf(buf, len, "%s", v != 0 ? "True" : "False");
    else if (isnan(v))
        snprintf(buf, len, "nan"); /* C would print "-nan" for some NaNs */
    else if (p->style == FMT_SCI)
        snprintf(buf, len, "%.4e", v);
    else if (p->style == FMT_FIXED)
        snprintf(buf, len, "%.4f", v);
    else if (isinf(v))
        snprintf(buf, len, v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, len, "%.0f.", v);
}

/* Visits the storage offset of every element that will be printed (all of them, or the
 * edges of each long dim when summarising), in row-major order. */
typedef void (*visit_fn)(printer *p, int64_t off);
static void visit_shown(printer *p, int dim, int64_t off, visit_fn fn) {
    const nb_tensor *t = p->t;
    if (dim == t->ndim) {
        fn(p, off);
        return;
    }
    int64_t n = t->shape[dim];
    for (int64_t i = 0; i < n; i++) {
        if (p->summarize && n > 2 * EDGE && i == EDGE) i = n - EDGE;
        visit_shown(p, dim + 1, off + i * t->strides[dim], fn);
    }
}

static void gather_stats(printer *p, int64_t off) {
    double v = value_at(p->t, off);
    if (!isfinite(v) || v == 0) return; /* only nonzero finite values choose the format */
    double a = fabs(v);
    if (!p->any || a < p->min) p->min = a;
    if (!p->any || a > p->max) p->max = a;
    if (v != ceil(v)) p->ints = false;
    p->any = true;
}

static void widen(printer *p, int64_t off) {
    const nb_tensor *t = p->t;
    if (nb_is_float(t)) { /* floats: only nonzero finite values set the width */
        double v = value_at(t, off);
        if (!isfinite(v) || v == 0) return;
    }
    char buf[64];
    format_value(p, off, buf, sizeof buf);
    int w = (int)strlen(buf);
    if (w > p->width) p->width = w;
}

static void choose_format(printer *p) {
    p->width = 1;
    p->style = FMT_PLAIN;
    if (nb_is_float(p->t)) {
        p->any = false;
        p->ints = true;
        visit_shown(p, 0, p->t->offset, gather_stats);
        p->style = FMT_INT;
        if (p->any) {
            bool wide = p->max / p->min > 1000.0 || p->max > 1.0e8;
            if (p->ints)
                p->style = wide ? FMT_SCI : FMT_INT;
            else
                p->style = wide || p->min < 1.0e-4 ? FMT_SCI : FMT_FIXED;
        }
    }
    visit_shown(p, 0, p->t->offset, widen);
}

static void put_element(const printer *p, int64_t off) {
    char buf[64];
    format_value(p, off, buf, sizeof buf);
    fprintf(p->f, "%*s", p->width, buf);
}

static void newline_indent(const printer *p, int newlines, int indent) {
    for (int k = 0; k < newlines; k++) fputc('\n', p->f);
    for (int k = 0; k < indent; k++) fputc(' ', p->f);
}

/* One row: elements separated by ", ", wrapped to the line width; " ..." counts as an
 * element where a summarised row skips its middle. */
static void print_row(const printer *p, int64_t offset, int indent) {
    const nb_tensor *t = p->t;
    int64_t n = t->shape[t->ndim - 1], stride = t->strides[t->ndim - 1];
    int64_t per_line = (LINE_WIDTH - indent) / (p->width + 2);
    if (per_line < 1) per_line = 1;
    bool skip = p->summarize && n > 2 * EDGE;
    fputc('[', p->f);
    int64_t item = 0; /* printed items so far, including the " ..." */
    for (int64_t i = 0; i < n; i++, item++) {
        if (item > 0) {
            fputc(',', p->f);
            if (item % per_line == 0)
                newline_indent(p, 1, indent + 1);
            else
                fputc(' ', p->f);
        }
        if (skip && i == EDGE) {
            fputs(" ...", p->f);
            i = n - EDGE - 1;
            continue;
        }
        put_element(p, offset + i * stride);
    }
    fputc(']', p->f);
}

static void print_dim(const printer *p, int dim, int64_t offset, int indent) {
    const nb_tensor *t = p->t;
    if (dim == t->ndim - 1) {
        print_row(p, offset, indent);
        return;
    }
    int64_t n = t->shape[dim];
    int newlines = t->ndim - dim - 1; /* blank lines separate blocks of higher dims */
    fputc('[', p->f);
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) {
            fputc(',', p->f);
            newline_indent(p, newlines, indent + 1);
        }
        if (p->summarize && n > 2 * EDGE && i == EDGE) {
            fputs("...,", p->f);
            newline_indent(p, newlines, indent + 1);
            i = n - EDGE;
        }
        print_dim(p, dim + 1, offset + i * t->strides[dim], indent + 1);
    }
    fputc(']', p->f);
}

/* tensor(values), then the shape / dtype suffix if asked for. */
static void print_tensor(FILE *f, const nb_tensor *t, bool suffix) {
    if (!f) {
        nbt_error(suffix ? "nb_fprint" : "nb_fprint_values", "NULL file");
        return;
    }
    if (!t) {
        fputs("tensor(NULL)\n", f);
        return;
    }
    if (!nbt_check_live("nb_fprint", t)) {
        fputs("tensor(released)\n", f);
        return;
    }
    printer p = {.f = f, .t = t};
    fputs("tensor(", f);
    if (nbt_numel(t) == 0) {
        fputs("[]", f);
    } else {
        p.summarize = nbt_numel(t) > SUMMARY_AT;
        choose_format(&p);
        if (t->ndim == 0) {
            char buf[64];
            format_value(&p, t->offset, buf, sizeof buf);
            fputs(buf, f);
        } else {
            print_dim(&p, 0, t->offset, INDENT);
        }
    }
    if (suffix)
        fprintf(f, ", shape=%s, dtype=%s%s", nbt_shape(t), nb_dtype_name(t->dtype),
                t->requires_grad ? ", requires_grad=True" : "");
    fputs(")\n", f);
}

void nb_fprint(FILE *f, const nb_tensor *t) {
    print_tensor(f, t, true);
}

void nb_fprint_values(FILE *f, const nb_tensor *t) {
    print_tensor(f, t, false);
}

void nb_print_values(const nb_tensor *t) {
    print_tensor(stdout, t, false);
}

void nb_print(const nb_tensor *t) {
    nb_fprint(stdout, t);
}

char *nb_to_string(const nb_tensor *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return nbt_error("to_string", "out of memory");
    nb_fprint(f, t);
    fclose(f);
    return buf;
}
