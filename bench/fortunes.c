/* The fortunes corpus as examples/char_lm reads it (fortunes.h). */
#define _POSIX_C_SOURCE 200809L
#include "fortunes.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A growing byte buffer. */
typedef struct {
    char *bytes;
    size_t len, cap;
} text_buf;

static bool reserve(text_buf *t, size_t more) {
    if (t->len + more <= t->cap) return true;
    size_t cap = 2 * (t->len + more);
    char *grown = realloc(t->bytes, cap);
    if (!grown) return false;
    t->bytes = grown;
    t->cap = cap;
    return true;
}

/* Appends the cleaned bytes of one open fortune file to t (rules in fortunes.h). */
static bool append_cleaned(text_buf *t, FILE *f) {
    bool at_line_start = true;
    for (int ch = getc(f); ch != EOF;) {
        const int next = getc(f);
        if (at_line_start && ch == '%' && (next == '\n' || next == EOF)) {
            ch = next; /* the separator's newline stays: an empty line */
            continue;
        }
        if (ch == '\b' && t->len > 0) { /* at the very start it is dropped as other bytes are */
            t->len--;
            ch = next;
            continue;
        }
        if (ch == '\t') ch = ' ';
        at_line_start = ch == '\n';
        if (ch == '\n' || (ch >= 0x20 && ch < 0x7f)) {
            if (!reserve(t, 1)) return false;
            t->bytes[t->len++] = (char)ch;
        }
        ch = next;
    }
    return !ferror(f);
}

static int no_dot(const struct dirent *e) {
    return strchr(e->d_name, '.') == NULL;
}

/* Is dir/name a regular file with an index dir/name.dat beside it? */
static bool indexed_fortune_file(const char *dir, const char *name, char *path, size_t cap) {
    char dat[1100];
    struct stat st;
    snprintf(path, cap, "%s/%s", dir, name);
    snprintf(dat, sizeof dat, "%s.dat", path);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && stat(dat, &st) == 0;
}

bool fortunes_read(nb_corpus *c, const char *dir) {
    *c = (nb_corpus){0};
    struct dirent **names = NULL;
    const int n = scandir(dir, &names, no_dot, alphasort); /* strcmp order in the C locale */
    text_buf t = {0};
    int files = 0;
    bool ok = n >= 0;
    if (!ok) fprintf(stderr, "char_lm_nabla: cannot list %s (apt-get install fortunes)\n", dir);
    for (int i = 0; i < n; i++) {
        char path[1024];
        if (ok && indexed_fortune_file(dir, names[i]->d_name, path, sizeof path)) {
            FILE *f = fopen(path, "rb");
            ok = f && append_cleaned(&t, f);
            if (f) fclose(f);
            if (!ok) fprintf(stderr, "char_lm_nabla: cannot read %s\n", path);
            files++;
        }
        free(names[i]);
    }
    free(names);
    if (ok && (files == 0 || t.len < (size_t)FORTUNES_BLOCK * FORTUNES_EVERY)) {
        fprintf(stderr, "char_lm_nabla: no usable fortune files in %s (apt-get install fortunes)\n",
                dir);
        ok = false;
    }
    if (ok && !nb_corpus_split(c, t.bytes, t.len, FORTUNES_BLOCK, FORTUNES_EVERY)) {
        fprintf(stderr, "char_lm_nabla: %s\n", nb_last_error());
        ok = false;
    }
    free(t.bytes);
    return ok;
}
