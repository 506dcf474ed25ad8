/* The fortunes corpus as examples/char_lm reads it, for bench/char_lm_nabla: the English files
 * of Debian's `fortunes` package, cleaned the same way, split by the library's corpus. */
#ifndef NABLA_BENCH_FORTUNES_H
#define NABLA_BENCH_FORTUNES_H

#include <nabla/text.h>
#include <stdbool.h>

/* Where the fortunes package puts its English files. */
#define FORTUNES_DIR "/usr/share/games/fortunes"
/* char_lm's held-out split: every 20th block of 4096 bytes (nb_corpus_split). */
#define FORTUNES_BLOCK 4096
#define FORTUNES_EVERY 20

/* Splits into c the text of dir's fortune files: every regular file whose name has no '.' and
 * which has a NAME.dat index beside it, in strcmp order of names, joined end to end, each
 * cleaned: a line holding only "%" (the separator) becomes an empty line, a backspace deletes
 * the byte before it (an overstrike prints the second character), tabs become spaces, and
 * bytes other than newline and printable ASCII are dropped. False with a message on stderr
 * when the directory holds no such files or less text than one held-out period. Free c with
 * nb_corpus_free (also after a failure). */
bool fortunes_read(nb_corpus *c, const char *dir);

#endif
