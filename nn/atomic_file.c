/* Atomic replacement of a file: a temporary of a unique name, created exclusively and locked
 * while it is written, fsynced, renamed over the target, and the directory fsynced. A crash
 * leaves the old file or the new one; two writers leave one whole file; the temporaries of
 * killed writers are removed by the next save of the same path. */
#define _GNU_SOURCE
#include "atomic_file.h"

#include "tensor/nbt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

bool nbn_write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len > ((size_t)1 << 30) ? (size_t)1 << 30 : len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return false;
        }
        p += w;
        len -= (size_t)w;
    }
    return true;
}

/* Makes the rename durable. Some file systems refuse fsync on a directory; the file itself is
 * already complete on disk then, so that is not treated as a failure. */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

/* Random characters for a temporary name; from getrandom, or the clock and a counter if
 * that fails (exclusive creation, not the name, is what makes the temporary safe). */
static void random_suffix(char *out, size_t len) {
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char bytes[16];
    if (len > sizeof bytes) len = sizeof bytes;
    if (getrandom(bytes, len, GRND_NONBLOCK) != (ssize_t)len) {
        static _Atomic unsigned counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 20 ^
                     (uint64_t)counter++ * 0x9e3779b97f4a7c15u;
        for (size_t i = 0; i < len; i++, x = x * 6364136223846793005u + 1442695040888963407u)
            bytes[i] = (unsigned char)(x >> 56);
    }
    for (size_t i = 0; i < len; i++) out[i] = alphabet[bytes[i] % (sizeof alphabet - 1)];
    out[len] = '\0';
}

/* Temporaries are named path + ".tmp-" + SUFFIX characters of [a-z0-9], with path's file name
 * cut short when the whole would be longer than NAME_LIMIT. */
enum { SUFFIX = 10, ADDED = 5 + SUFFIX, NAME_LIMIT = 255 };

/* path's directory part (up to and including the last '/') and how much of its file name its
 * temporaries keep. */
static void temporary_stem(const char *path, size_t *dir_len, size_t *base_len) {
    const char *slash = strrchr(path, '/');
    *dir_len = slash ? (size_t)(slash + 1 - path) : 0;
    *base_len = strlen(path) - *dir_len;
    if (*base_len > NAME_LIMIT - ADDED) *base_len = NAME_LIMIT - ADDED;
}

/* Whether fd is still the file named name (not unlinked or replaced since it was opened). */
static bool still_named(int fd, const char *name) {
    struct stat by_fd, by_name;
    return fstat(fd, &by_fd) == 0 && lstat(name, &by_name) == 0 && by_fd.st_dev == by_name.st_dev &&
           by_fd.st_ino == by_name.st_ino;
}

/* Creates a new temporary file path + ".tmp-XXXXXXXXXX" exclusively (O_EXCL: nothing that
 * already exists there, file or symlink, is opened) and takes an exclusive flock on it, held
 * until the file is renamed: that lock is what tells a cleaner (remove_stale) the save is
 * running. A file name too long for that is cut short first, so any name that can be saved to
 * has a temporary. Returns the fd and the name in *tmp (the caller frees it), or -1 with errno
 * set. */
static int create_temporary(const char *path, char **tmp) {
    size_t dir_len, base_len;
    temporary_stem(path, &dir_len, &base_len);
    *tmp = nbt_malloc(dir_len + base_len + ADDED + 1);
    if (!*tmp) return errno = ENOMEM, -1;
    char *p = *tmp;
    memcpy(p, path, dir_len + base_len);
    memcpy(p + dir_len + base_len, ".tmp-", 5);
    for (int attempt = 0; attempt < 100; attempt++) {
        random_suffix(p + dir_len + base_len + 5, SUFFIX);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) return -1;
        if (fd < 0) continue;
        /* Between creation and the lock, a cleaner may have taken the file for a dead save's:
         * then it is gone or going, and another name is tried. A file system without flock
         * saves unlocked (a cleaner cannot lock the file either, so it never removes it). */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 ? still_named(fd, p) : errno != EWOULDBLOCK)
            return fd;
        close(fd);
    }
    errno = EEXIST;
    return -1;
}

/* Removes the temporaries of path that no running save holds: names of exactly the form
 * create_temporary makes, regular files (symlinks are not followed), that can be locked. The
 * lock is taken on the file opened by name and the name checked to still be that file before
 * it is unlinked, so a save that renamed its temporary in between loses nothing. Returns how
 * many were removed, or -1 with errno set when the directory cannot be read. */
int nbn_remove_stale_temporaries(const char *path) {
    size_t dir_len, base_len;
    temporary_stem(path, &dir_len, &base_len);
    char *name = nbt_malloc(dir_len + NAME_LIMIT + 2);
    char *dir = dir_len ? strndup(path, dir_len) : strdup(".");
    DIR *d = name && dir ? opendir(dir) : NULL;
    if (!d) {
        int saved = name && dir ? errno : ENOMEM;
        nbt_free(name);
        free(dir);
        return errno = saved, -1;
    }
    const char *base = path + dir_len;
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        if (strlen(n) != base_len + ADDED || memcmp(n, base, base_len) != 0 ||
            memcmp(n + base_len, ".tmp-", 5) != 0)
            continue;
        bool form = true;
        for (const char *c = n + base_len + 5; *c; c++)
            form &= (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9');
        if (!form) continue;
        memcpy(name, path, dir_len);
        strcpy(name + dir_len, n);
        int fd = open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            still_named(fd, name) && unlink(name) == 0)
            removed++;
        close(fd);
    }
    closedir(d);
    nbt_free(name);
    free(dir);
    return removed;
}

bool nbn_replace_file(const char *op, const char *path, bool (*write)(int fd, void *ctx),
                      void *ctx) {
    char *tmp = NULL;
    bool ok = false;
    const char *failed = "creation";
    int fd = create_temporary(path, &tmp), lock_fd = -1;
    if (fd >= 0) {
        ok = write(fd, ctx);
        if (!ok)
            failed = "write";
        else if (fsync(fd) != 0)
            ok = false, failed = "fsync";
        /* The lock belongs to the open file, not the descriptor: a duplicate holds it through
         * the rename while close(fd) still reports a failed write-back. */
        if (ok && (lock_fd = dup(fd)) < 0) ok = false, failed = "dup";
        int saved = errno;
        if (close(fd) != 0 && ok)
            ok = false, failed = "close";
        else
            errno = saved;
        if (ok && rename(tmp, path) != 0) ok = false, failed = "rename";
        saved = errno;
        if (!ok) unlink(tmp);
        if (lock_fd >= 0) close(lock_fd);
        errno = saved;
    }
    if (ok) {
        sync_parent_dir(path);
        nbn_remove_stale_temporaries(path); /* what killed saves left; failing here fails nothing */
    } else
        nbt_error(op, "%s: %s of the temporary file %s failed: %s; any previous file is unchanged",
                  path, failed, tmp ? tmp : "(none)", strerror(errno));
    nbt_free(tmp);
    return ok;
}
