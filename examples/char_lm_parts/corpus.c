/* char_lm's texts and vocabulary (corpus.h). */
#define _POSIX_C_SOURCE 200809L
#include "corpus.h"

#include <dirent.h>
#include <nabla/nabla.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Every HOLD_OUT-th block of BLOCK bytes goes to the validation text: spread over the whole
 * corpus (every fortune file contributes), yet each block is long, contiguous text. */
#define BLOCK HOLD_OUT_BLOCK
#define HOLD_OUT HOLD_OUT_EVERY

/* Moves text into c as its train and validation splits (takes ownership of text). */
static bool split(corpus *c, char *text, size_t len) {
    c->train = malloc(len + 1);
    c->val = malloc(len / HOLD_OUT + BLOCK + 1);
    if (!c->train || !c->val) {
        free(text);
        corpus_free(c);
        return fprintf(stderr, "char_lm: out of memory\n"), false;
    }
    c->train_len = c->val_len = 0;
    for (size_t at = 0, block = 0; at < len; at += BLOCK, block++) {
        size_t n = len - at < BLOCK ? len - at : BLOCK;
        bool val = block % HOLD_OUT == HOLD_OUT - 1;
        memcpy(val ? c->val + c->val_len : c->train + c->train_len, text + at, n);
        *(val ? &c->val_len : &c->train_len) += n;
    }
    free(text);
    return true;
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
    size_t len;
    char *text = read_all(path, &len);
    if (!text) return fprintf(stderr, "char_lm: cannot read %s\n", path), false;
    return split(c, text, len);
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
    if (!ok || len < BLOCK * HOLD_OUT) {
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
    free(c->train);
    free(c->val);
    c->train = c->val = NULL;
}

/* ---- vocabulary ---- */
void vocab_build(vocab *v, const char *text, size_t len, const char *more, size_t more_len) {
    bool seen[256] = {false};
    for (size_t i = 0; i < len; i++) seen[(unsigned char)text[i]] = true;
    for (size_t i = 0; more && i < more_len; i++) seen[(unsigned char)more[i]] = true;
    v->size = 0;
    for (int ch = 0; ch < 256; ch++) {
        v->id[ch] = -1;
        if (seen[ch]) {
            v->id[ch] = v->size;
            v->chars[v->size++] = (unsigned char)ch;
        }
    }
}

void vocab_to_hex(const vocab *v, char *out) {
    for (int64_t i = 0; i < v->size; i++) sprintf(out + 2 * i, "%02x", v->chars[i]);
    out[2 * v->size] = '\0';
}

bool vocab_from_hex(vocab *v, const char *hex) {
    size_t n = strlen(hex);
    if (n == 0 || n % 2 || n > 512) return false;
    char text[256];
    for (size_t i = 0; i < n / 2; i++) {
        unsigned byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) return false;
        if (i > 0 && byte <= (unsigned char)text[i - 1]) return false; /* sorted, distinct */
        text[i] = (char)byte;
    }
    vocab_build(v, text, n / 2, NULL, 0);
    return true;
}

void vocab_encode(const vocab *v, const char *text, size_t len, int64_t *ids, size_t *n) {
    *n = 0;
    for (size_t i = 0; i < len; i++)
        if (v->id[(unsigned char)text[i]] >= 0) ids[(*n)++] = v->id[(unsigned char)text[i]];
}

size_t vocab_unknown(const vocab *v, const char *text, size_t len, char *shown, size_t cap) {
    enum { SHOWN = 8 };
    bool seen[256] = {false};
    size_t count = 0, distinct = 0, used = 0;
    if (cap) shown[0] = '\0';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (v->id[ch] >= 0) continue;
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
