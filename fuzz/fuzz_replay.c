/* Runs a fuzz harness over every regular file of a directory (its corpus) and over each file's
 * prefixes, without libFuzzer: built and run by every build, so the harness keeps compiling and
 * the corpus keeps loading cleanly under valgrind and the sanitizers. Hand-made seeds, named
 * *.safetensors, must read; inputs libFuzzer kept (named by hash) and seeds named otherwise
 * are there to be refused, and need not. */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern bool nbfuzz_last_read_ok;

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    for (size_t got = 1; got > 0;) {
        if (*len == cap) {
            unsigned char *grown = realloc(buf, cap = cap ? 2 * cap : 4096);
            if (!grown) break;
            buf = grown;
        }
        got = fread(buf + *len, 1, cap - *len, f);
        *len += got;
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    int files = 0, unreadable = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* another corpus's folder */
        size_t name_len = strlen(e->d_name), ext_len = strlen(".safetensors");
        bool must_read =
            name_len > ext_len && strcmp(e->d_name + name_len - ext_len, ".safetensors") == 0;
        size_t len;
        unsigned char *bytes = read_file(path, &len);
        if (!bytes) continue;
        for (size_t cut = 0; cut < len; cut += 1 + cut / 8) LLVMFuzzerTestOneInput(bytes, cut);
        LLVMFuzzerTestOneInput(bytes, len);
        if (must_read && !nbfuzz_last_read_ok) {
            fprintf(stderr, "%s: a seed file does not read as a checkpoint\n", path);
            unreadable++;
        }
        free(bytes);
        files++;
    }
    closedir(d);
    printf("replayed %d files and their prefixes\n", files);
    return files > 0 && unreadable == 0 ? 0 : 1;
}
