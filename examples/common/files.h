/* Small filesystem helpers for the examples. */
#ifndef NABLA_EXAMPLES_FILES_H
#define NABLA_EXAMPLES_FILES_H

#include <stdbool.h>

/* Creates path and any missing parents (like mkdir -p). False with errno set on failure. */
bool make_dirs(const char *path);

#endif
