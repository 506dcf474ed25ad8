/* char_lm's texts: the fortunes corpus (Debian's `fortunes` package), a file, or sentences from
 * a small grammar, each split by the library's corpus (nabla/text.h) into training and
 * validation text; and the warning about bytes a characters tokenizer has no token for. */
#ifndef NABLA_EXAMPLES_CORPUS_H
#define NABLA_EXAMPLES_CORPUS_H

#include <nabla/nabla.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The held-out split: every HOLD_OUT_EVERY-th block of HOLD_OUT_BLOCK bytes. */
#define HOLD_OUT_BLOCK 4096
#define HOLD_OUT_EVERY 20

/* Where the fortunes package puts its English files. */
#define FORTUNES_DIR "/usr/share/games/fortunes"

typedef struct {
    nb_corpus text; /* the split text; encoded later */
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

/* How many bytes of text t has no token for; shown (room for cap bytes) receives the first
 * few distinct ones, printable as themselves and others as \xNN, for a warning. */
size_t corpus_unknown(const nb_tokenizer *t, const char *text, size_t len, char *shown,
                      size_t cap);

#endif
