/* char_lm's texts: the fortunes corpus (Debian's `fortunes` package), a file, or sentences from
 * a small grammar; a held-out split; and the byte vocabulary. */
#ifndef NABLA_EXAMPLES_CORPUS_H
#define NABLA_EXAMPLES_CORPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The held-out split: every HOLD_OUT_EVERY-th block of HOLD_OUT_BLOCK bytes. */
#define HOLD_OUT_BLOCK 4096
#define HOLD_OUT_EVERY 20

/* Where the fortunes package puts its English files. */
#define FORTUNES_DIR "/usr/share/games/fortunes"

typedef struct {
    char *train, *val; /* malloc'd, owned by the corpus */
    size_t train_len, val_len;
    char name[256]; /* what it was read from, for messages */
} corpus;

/* The English fortune files of dir (each file with a .dat index beside it, in name order),
 * cleaned to printable ASCII, newlines and spaces (overstrikes and other bytes dropped), with
 * the "%" lines between fortunes made blank lines. False with a message if none are found. */
bool corpus_fortunes(corpus *c, const char *dir);
/* The bytes of path, unchanged. */
bool corpus_file(corpus *c, const char *path);
/* About 200 KB of sentences from a small grammar, drawn with seed. */
bool corpus_grammar(corpus *c, uint64_t seed);
void corpus_free(corpus *c);

/* The vocabulary: distinct bytes, sorted; id -1 for bytes outside it. */
typedef struct {
    int64_t size;
    unsigned char chars[256];
    int64_t id[256];
} vocab;

/* The bytes of text (and of more, which may be NULL). */
void vocab_build(vocab *v, const char *text, size_t len, const char *more, size_t more_len);
/* As lowercase hex, two digits a byte (metadata values must be UTF-8; bytes may not be). out
 * has room for 2 * 256 + 1. */
void vocab_to_hex(const vocab *v, char *out);
/* Parses vocab_to_hex's text; false if it is not that. */
bool vocab_from_hex(vocab *v, const char *hex);
/* Replaces text by its bytes that are in v, mapped to ids (in place into ids, *n of them). */
void vocab_encode(const vocab *v, const char *text, size_t len, int64_t *ids, size_t *n);
/* How many bytes of text are not in v; shown (room for cap bytes) receives the first few
 * distinct ones, printable as themselves and others as \xNN, for a warning. */
size_t vocab_unknown(const vocab *v, const char *text, size_t len, char *shown, size_t cap);

#endif
