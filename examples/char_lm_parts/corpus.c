/* char_lm's texts (corpus.h). */
#define _POSIX_C_SOURCE 200809L
#include "corpus.h"

#include <dirent.h>
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Splits text into c (and frees it). */
static bool split(corpus *c, char *text, size_t len) {
    bool ok = nb_corpus_split(&c->text, text, len, HOLD_OUT_BLOCK, HOLD_OUT_EVERY);
    free(text);
    if (!ok) fprintf(stderr, "char_lm: %s\n", nb_last_error());
    return ok;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

bool corpus_file(corpus *c, const char *path) {
    *c = (corpus){0};
    snprintf(c->name, sizeof c->name, "%s", path);
    if (nb_corpus_read(&c->text, 1, &path, HOLD_OUT_BLOCK, HOLD_OUT_EVERY)) return true;
    fprintf(stderr, "char_lm: %s\n", nb_last_error());
    return false;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends a fortune file's text, cleaned, to buf (grown as needed). */
static bool append_fortunes(const char *path, char **buf, size_t *len, size_t *cap) {
    size_t n;
    char *raw = read_all(path, &n);
    if (!raw) return false;
    if (*len + n + 1 > *cap) {
        *cap = 2 * (*len + n + 1);
        char *grown = realloc(*buf, *cap);
        if (!grown) return free(raw), false;
        *buf = grown;
    }
    bool line_start = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)raw[i];
        if (line_start && ch == '%' && (i + 1 == n || raw[i + 1] == '\n')) {
            continue; /* the separator line: its newline stays, leaving a blank line */
        }
        if (ch == '\b' && *len > 0) { /* overstrike: x BACKSPACE y prints y */
            (*len)--;
            continue;
        }
        if (ch == '\t') ch = ' ';
        line_start = ch == '\n';
        if (ch == '\n' || (ch >= 0x20 && ch < 0x7f)) (*buf)[(*len)++] = (char)ch;
    }
    free(raw);
    return true;
}

bool corpus_fortunes(corpus *c, const char *dir) {
    *c = (corpus){0};
    snprintf(c->name, sizeof c->name, "the fortunes in %s", dir);
    DIR *d = opendir(dir);
    if (!d)
        return fprintf(stderr,
                       "char_lm: no fortunes in %s (apt-get install fortunes), or pass "
                       "--text FILE or --grammar\n",
                       dir),
               false;
    char **names = NULL;
    size_t count = 0, cap_names = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[1024], dat[1100];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(dat, sizeof dat, "%s.dat", path);
        if (strchr(e->d_name, '.') || stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
            stat(dat, &st) != 0)
            continue; /* only the text files that fortune indexes */
        if (count == cap_names) {
            cap_names = cap_names ? 2 * cap_names : 64;
            char **grown = realloc(names, sizeof *names * cap_names);
            if (!grown) break;
            names = grown;
        }
        names[count++] = strdup(path);
    }
    closedir(d);
    qsort(names, count, sizeof *names, by_name);
    char *text = NULL;
    size_t len = 0, cap = 0;
    bool ok = count > 0;
    for (size_t i = 0; i < count; i++) {
        ok = ok && append_fortunes(names[i], &text, &len, &cap);
        free(names[i]);
    }
    free(names);
    if (!ok || len < HOLD_OUT_BLOCK * HOLD_OUT_EVERY) {
        free(text);
        return fprintf(stderr,
                       "char_lm: no usable fortune files in %s (apt-get install "
                       "fortunes), or pass --text FILE or --grammar\n",
                       dir),
               false;
    }
    return split(c, text, len);
}

/* ---- sentences from a tiny grammar ---- */
static const char *const subjects[] = {"the cat",     "a dog",   "the small bird", "my friend",
                                       "the old man", "a child", "the teacher",    "our neighbour"};
static const char *const verbs[] = {"sees",    "likes", "follows", "finds",
                                    "watches", "helps", "calls",   "meets"};
static const char *const objects[] = {"the river",  "a red ball",  "the garden", "a quiet house",
                                      "the market", "a tall tree", "the moon",   "a letter"};
static const char *const endings[] = {" today", " at night", " again",
                                      "",       " slowly",   " in the rain"};
#define PICK(rng, arr) arr[nb_rng_next(rng) % (sizeof arr / sizeof arr[0])]

bool corpus_grammar(corpus *c, uint64_t seed) {
    *c = (corpus){0};
    snprintf(c->name, sizeof c->name, "the built-in grammar");
    nb_rng rng;
    nb_rng_seed(&rng, seed);
    size_t cap = 200000, n = 0;
    char *text = malloc(cap);
    if (!text) return fprintf(stderr, "char_lm: out of memory\n"), false;
    while (n + 200 < cap)
        n += (size_t)snprintf(text + n, cap - n, "%s %s %s%s.\n", PICK(&rng, subjects),
                              PICK(&rng, verbs), PICK(&rng, objects), PICK(&rng, endings));
    return split(c, text, n);
}

void corpus_free(corpus *c) {
    nb_corpus_free(&c->text);
}

size_t corpus_unknown(const nb_tokenizer *t, const char *text, size_t len, char *shown,
                      size_t cap) {
    enum { SHOWN = 8 };
    bool seen[256] = {false};
    size_t count = 0, distinct = 0, used = 0;
    if (cap) shown[0] = '\0';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (nb_tokenizer_has_byte(t, ch)) continue;
        count++;
        if (seen[ch]) continue;
        seen[ch] = true;
        if (distinct++ >= SHOWN || used >= cap) continue;
        int w = ch >= 0x21 && ch < 0x7f
                    ? snprintf(shown + used, cap - used, "%s'%c'", used ? " " : "", ch)
                    : snprintf(shown + used, cap - used, "%s\\x%02x", used ? " " : "", ch);
        used += w > 0 ? (size_t)w : 0;
    }
    if (distinct > SHOWN && used < cap) snprintf(shown + used, cap - used, " ...");
    return count;
}
