/* Numeric CSV files into tensors. libcsv (Debian's libcsv-dev) does the CSV syntax; this file
 * counts lines for the error messages, parses the numbers and picks the columns. */
#define _GNU_SOURCE /* strtod_l and newlocale: numbers in the C locale, whatever the program's */
#include "nabla/data.h"
#include "tensor/nbt.h"

#include <csv.h>
#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP "nb_csv_read"

/* What the parser's callbacks build: every field of every data record as a double. */
typedef struct {
    const char *path;
    locale_t c_locale;
    bool in_header;     /* the next record is the header */
    int64_t line;       /* the line being fed to the parser, from 1 */
    int64_t end_line;   /* where the last record ended */
    int64_t first_line; /* where the first record ended */
    int ncols;          /* fields of the first record; 0 until it ends */
    int field;          /* fields of the current record so far */
    char **names;       /* the header's fields, nnames of them, or NULL */
    int64_t nnames, names_cap;
    double *values; /* row-major, ncols a row */
    int64_t nvalues, values_cap;
    int64_t *row_lines; /* the line where each data row ended */
    int64_t rows, rows_cap;
    bool failed; /* an error was recorded: the rest of the file is ignored */
} csv_reader;

/* "column 3" or `column 3 ("width")`, counting from 1, in buf. */
static const char *column_text(const csv_reader *r, int col, char *buf, size_t len) {
    if (col < r->nnames)
        snprintf(buf, len, "column %d (\"%.40s\")", col + 1, r->names[col]);
    else
        snprintf(buf, len, "column %d", col + 1);
    return buf;
}

/* p (of *cap elements of size elem) grown to hold at least need: p itself, a new block (p is
 * then freed), or NULL when out of memory (p is left as it was). */
static void *grow(void *p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return p;
    int64_t n = *cap ? *cap * 2 : 256;
    while (n < need) n *= 2;
    void *q = realloc(p, (size_t)n * elem);
    if (q) *cap = n;
    return q;
}

static void fail_oom(csv_reader *r) {
    nbt_error(OP, "%s: out of memory at line %lld", r->path, (long long)r->line);
    r->failed = true;
}

/* The number in the field text (NUL-terminated, len bytes), or false with an error. */
static bool parse_number(csv_reader *r, const char *text, size_t len, int col, double *v) {
    char where[80];
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p)
        return nbt_error(OP, "%s:%lld: %s: empty field, expected a number", r->path,
                         (long long)r->line, column_text(r, col, where, sizeof where)),
               false;
    char *end;
    errno = 0;
    *v = strtod_l(p, &end, r->c_locale);
    bool overflow = errno == ERANGE && isinf(*v);
    while (*end == ' ' || *end == '\t' || *end == '\r') end++;
    if (end == p || *end || strlen(text) != len)
        return nbt_error(OP, "%s:%lld: %s: \"%.40s\" is not a number", r->path, (long long)r->line,
                         column_text(r, col, where, sizeof where), text),
               false;
    if (overflow)
        return nbt_error(OP, "%s:%lld: %s: %.40s is beyond float64's range", r->path,
                         (long long)r->line, column_text(r, col, where, sizeof where), text),
               false;
    return true;
}

/* libcsv's field callback: one field of the current record. */
static void on_field(void *text, size_t len, void *data) {
    csv_reader *r = data;
    if (r->failed) return;
    int col = r->field++;
    if (r->in_header) {
        char **names = grow(r->names, &r->names_cap, r->nnames + 1, sizeof *names);
        if (names) r->names = names;
        char *name = names ? strdup(text) : NULL;
        if (!name) {
            fail_oom(r);
            return;
        }
        r->names[r->nnames++] = name;
        return;
    }
    if (r->ncols && col >= r->ncols) return; /* too many: reported at the record's end */
    double v;
    if (!parse_number(r, text, len, col, &v)) {
        r->failed = true;
        return;
    }
    double *values = grow(r->values, &r->values_cap, r->nvalues + 1, sizeof *values);
    if (!values) {
        fail_oom(r);
        return;
    }
    r->values = values;
    r->values[r->nvalues++] = v;
}

/* libcsv's record callback: the current record ended. */
static void on_record(int terminator, void *data) {
    (void)terminator;
    csv_reader *r = data;
    int fields = r->field;
    r->field = 0;
    if (r->failed) return;
    if (!r->ncols) {
        r->ncols = fields;
        r->first_line = r->line;
    } else if (fields != r->ncols) {
        nbt_error(OP, "%s:%lld: %d field%s, but the first record (line %lld) has %d", r->path,
                  (long long)r->line, fields, fields == 1 ? "" : "s", (long long)r->first_line,
                  r->ncols);
        r->failed = true;
        return;
    }
    r->end_line = r->line;
    if (r->in_header) {
        r->in_header = false;
        return;
    }
    int64_t *lines = grow(r->row_lines, &r->rows_cap, r->rows + 1, sizeof *lines);
    if (!lines) {
        fail_oom(r);
        return;
    }
    r->row_lines = lines;
    r->row_lines[r->rows++] = r->line;
}

/* Feeds the file to libcsv line by line, so that the callbacks know the line. */
static bool parse_file(csv_reader *r, FILE *f, char delimiter) {
    struct csv_parser p;
    if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0)
        return nbt_error(OP, "%s: out of memory", r->path), false;
    csv_set_delim(&p, (unsigned char)delimiter);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while (!r->failed && (len = getline(&line, &cap, f)) >= 0) {
        const char *s = line;
        if (++r->line == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3, len -= 3;
        if (csv_parse(&p, s, (size_t)len, on_field, on_record, r) != (size_t)len && !r->failed) {
            nbt_error(OP, "%s:%lld: malformed quotes (libcsv: %s)", r->path, (long long)r->line,
                      csv_strerror(csv_error(&p)));
            r->failed = true;
        }
    }
    free(line);
    if (!r->failed && ferror(f)) {
        nbt_error(OP, "%s: read error after line %lld: %s", r->path, (long long)r->line,
                  strerror(errno));
        r->failed = true;
    }
    if (!r->failed && csv_fini(&p, on_field, on_record, r) != 0 && !r->failed) {
        nbt_error(OP, "%s: the file ends inside a quoted field that starts after line %lld",
                  r->path, (long long)r->end_line);
        r->failed = true;
    }
    csv_free(&p);
    return !r->failed;
}

/* cols resolved into [0, ncols) in out, or false with an error naming role. */
static bool resolve_columns(const csv_reader *r, const char *role, const int *cols, int n,
                            int *out) {
    for (int k = 0; k < n; k++) {
        int c = cols[k] < 0 ? cols[k] + r->ncols : cols[k];
        if (c < 0 || c >= r->ncols)
            return nbt_error(OP, "%s: %s column %d is out of range: the file has %d columns",
                             r->path, role, cols[k], r->ncols),
                   false;
        out[k] = c;
    }
    return true;
}

/* The values of columns cols (n of them) as dt [rows, n], or [rows] when flat; NULL with an
 * error naming the line and column of a value dt cannot hold. */
static nb_tensor *columns_tensor(const csv_reader *r, const int *cols, int n, nb_dtype dt,
                                 bool flat) {
    nb_tensor *t = nb_empty(dt, flat ? 1 : 2, (const int64_t[]){r->rows, n});
    if (!t) return NULL;
    char *out = nbt_ptr(t), where[80];
    for (int64_t row = 0; row < r->rows; row++)
        for (int k = 0; k < n; k++, out += nbt_esize(dt)) {
            double v = r->values[row * r->ncols + cols[k]];
            const char *bad = NULL;
            if (dt == NB_F32 && isfinite(v) && fabs(v) > FLT_MAX)
                bad = "is beyond float32's range";
            else if (dt == NB_I64 && !(v == trunc(v) && fabs(v) <= 0x1p53))
                bad = "is not a whole number up to 2^53 in size (the targets are int64)";
            if (bad)
                return nbt_error(OP, "%s:%lld: %s: %g %s", r->path, (long long)r->row_lines[row],
                                 column_text(r, cols[k], where, sizeof where), v, bad);
            nbt_store_double(out, dt, v);
        }
    return t;
}

/* Checks opts; false with an error. */
static bool check_opts(const char *path, const nb_csv_opts *o, nb_tensor **inputs,
                       nb_tensor **targets) {
    if (!path || !inputs) return nbt_error(OP, "NULL %s", path ? "inputs" : "path"), false;
    if (o->n_target_cols < 0 || o->n_input_cols < 0 || (o->n_target_cols && !o->target_cols) ||
        (o->input_cols && o->n_input_cols < 1))
        return nbt_error(OP,
                         "%s: bad column lists: %d target columns at %p, %d input columns "
                         "at %p",
                         path, o->n_target_cols, (const void *)o->target_cols, o->n_input_cols,
                         (const void *)o->input_cols),
               false;
    if (o->n_target_cols && !targets)
        return nbt_error(OP, "%s: NULL targets with %d target columns", path, o->n_target_cols),
               false;
    if (o->input_dtype != NB_F32 && o->input_dtype != NB_F64)
        return nbt_error(OP, "%s: inputs must be float32 or float64, got %s", path,
                         nb_dtype_name(o->input_dtype)),
               false;
    if (o->target_dtype != NB_F32 && o->target_dtype != NB_F64 && o->target_dtype != NB_I64)
        return nbt_error(OP, "%s: targets must be float32, float64 or int64, got %s", path,
                         nb_dtype_name(o->target_dtype)),
               false;
    if (o->delimiter == '"' || o->delimiter == '\n' || o->delimiter == '\r')
        return nbt_error(OP, "%s: the delimiter cannot be a quote or a line end", path), false;
    return true;
}

/* The tensors of a parsed file, kept in the caller's scope; false with an error. */
static bool build_tensors(const csv_reader *r, const nb_csv_opts *o, nb_tensor **inputs,
                          nb_tensor **targets) {
    if (!r->rows) return nbt_error(OP, "%s: no data rows", r->path), false;
    int *tcols = malloc(sizeof(int) * (size_t)(o->n_target_cols + 1));
    int *icols =
        malloc(sizeof(int) * (size_t)(r->ncols > o->n_input_cols ? r->ncols : o->n_input_cols));
    bool ok =
        tcols && icols && resolve_columns(r, "target", o->target_cols, o->n_target_cols, tcols);
    int nin = o->n_input_cols;
    if (ok && o->input_cols) {
        ok = resolve_columns(r, "input", o->input_cols, nin, icols);
    } else if (ok) { /* every column that is not a target */
        nin = 0;
        for (int c = 0; c < r->ncols; c++) {
            bool target = false;
            for (int k = 0; k < o->n_target_cols; k++) target |= tcols[k] == c;
            if (!target) icols[nin++] = c;
        }
        if (!nin) ok = nbt_error(OP, "%s: every column is a target: no inputs left", r->path);
    }
    if (!tcols || !icols) nbt_error(OP, "%s: out of memory", r->path);
    nb_scope_begin();
    nb_tensor *in = ok ? columns_tensor(r, icols, nin, o->input_dtype, false) : NULL;
    nb_tensor *tg = in && o->n_target_cols ? columns_tensor(r, tcols, o->n_target_cols,
                                                            o->target_dtype, o->n_target_cols == 1)
                                           : NULL;
    ok = in && (tg || !o->n_target_cols);
    if (ok) {
        *inputs = nb_keep(in);
        if (tg) *targets = nb_keep(tg);
    }
    nb_scope_end();
    free(tcols);
    free(icols);
    return ok;
}

bool nb_csv_read(const char *path, const nb_csv_opts *opts, nb_tensor **inputs,
                 nb_tensor **targets) {
    const nb_csv_opts o = opts ? *opts : (nb_csv_opts){0};
    if (inputs) *inputs = NULL;
    if (targets) *targets = NULL;
    if (!check_opts(path, &o, inputs, targets)) return false;
    FILE *f = fopen(path, "r");
    if (!f) return nbt_error(OP, "%s: cannot open: %s", path, strerror(errno)), false;
    csv_reader r = {.path = path, .in_header = o.header};
    r.c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    bool ok = r.c_locale ? parse_file(&r, f, o.delimiter ? o.delimiter : ',')
                         : (nbt_error(OP, "%s: no C locale: %s", path, strerror(errno)), false);
    fclose(f);
    ok = ok && build_tensors(&r, &o, inputs, targets);
    if (r.c_locale) freelocale(r.c_locale);
    for (int64_t k = 0; k < r.nnames; k++) free(r.names[k]);
    free(r.names);
    free(r.values);
    free(r.row_lines);
    return ok;
}

nb_dataset *nb_dataset_from_csv(const char *path, const nb_csv_opts *opts) {
    nb_scope_begin();
    nb_tensor *inputs, *targets;
    nb_dataset *ds =
        nb_csv_read(path, opts, &inputs, &targets) ? nb_dataset_new(inputs, targets) : NULL;
    nb_scope_end();
    return ds;
}
