/* libFuzzer harness for the checkpoint loader: every input is written to an in-memory file and
 * read, its metadata read, and loaded into fixed destinations. Any crash, sanitizer report or
 * leak is a bug; errors are the expected outcome for almost every input. scripts/fuzz runs it;
 * fuzz_replay.c runs it over the seed corpus in every build. */
#define _GNU_SOURCE
#include <nabla/nabla.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether the last input read as a checkpoint (fuzz_replay.c checks the seed files do). */
bool nbfuzz_last_read_ok;

/* The in-memory file, made once, and its /proc path (the loader takes a path). */
static int memory_file = -1;
static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (memory_file < 0) {
        memory_file = memfd_create("nabla_fuzz", MFD_CLOEXEC);
        if (memory_file < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", memory_file);
    }
    if (ftruncate(memory_file, 0) != 0 || pwrite(memory_file, data, size, 0) != (ssize_t)size)
        abort();
    nb_scope_begin();
    int count = 0;
    nb_named_tensor *all = nb_safetensors_read(path, &count);
    nbfuzz_last_read_ok = all != NULL;
    for (int i = 0; all && i < count; i++) /* touch every element read */
        if (nb_numel(all[i].tensor) > 0 && nb_numel(all[i].tensor) < 4096)
            nb_to_doubles(all[i].tensor, (double[4096]){0});
    nb_safetensors_read_metadata(path, &count);
    /* The destinations the seed files were written for (tests/fuzz: make_corpus.py). */
    nb_named_tensor into[3] = {{"a", nb_zeros(NB_F32, NB_SHAPE(2))},
                               {"b", nb_zeros(NB_I64, NB_SHAPE(1))},
                               {"mask", nb_zeros(NB_BOOL, NB_SHAPE(2, 2))}};
    nb_safetensors_load(path, 3, into);
    nb_safetensors_load(path, 2, into);
    nb_scope_end();
    return 0;
}
