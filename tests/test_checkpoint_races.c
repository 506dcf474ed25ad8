/* Checkpoint saves against other processes and hostile files: two processes saving different
 * states to one path while a third loads (every load must be one whole saved state), symlinks
 * and stray files at temporary names (never followed, never confusing), and the temporaries
 * of killed saves (removed by the next save, unlike those of saves still running). */
#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define tmp_path nbtest_tmp_path

/* State s (1 or 2): a = s * 1e4 + i (F32 [257]), b = -(s * 1e4 + i) (F64 [1031]), c = s (I64
 * [5]). Sizes differ so a torn file shows as mixed values or a failed load. */
enum { NA = 257, NB = 1031, NC = 5 };

static void make_state(int s, nb_named_tensor out[3]) {
    nb_tensor *a = nb_zeros(NB_F32, NB_SHAPE(NA)), *b = nb_zeros(NB_F64, NB_SHAPE(NB));
    for (int i = 0; i < NA; i++) ((float *)nb_data(a))[i] = (float)(s * 10000 + i);
    for (int i = 0; i < NB; i++) ((double *)nb_data(b))[i] = -(double)(s * 10000 + i);
    out[0] = (nb_named_tensor){"a", a};
    out[1] = (nb_named_tensor){"b", b};
    out[2] = (nb_named_tensor){"c", nb_full(NB_I64, NB_SHAPE(NC), s)};
}

/* Which state the loaded tensors hold: 1, 2, or 0 if they mix states (torn). */
static int state_of(const nb_named_tensor t[3]) {
    int s = (int)((const int64_t *)nb_data(t[2].tensor))[0];
    if (s != 1 && s != 2) return 0;
    for (int i = 0; i < NC; i++)
        if (((const int64_t *)nb_data(t[2].tensor))[i] != s) return 0;
    for (int i = 0; i < NA; i++)
        if (((const float *)nb_data(t[0].tensor))[i] != (float)(s * 10000 + i)) return 0;
    for (int i = 0; i < NB; i++)
        if (((const double *)nb_data(t[1].tensor))[i] != -(double)(s * 10000 + i)) return 0;
    return s;
}

/* A child process saving state s to path `rounds` times; exits 0 if every save succeeded. */
static pid_t spawn_saver(const char *path, int s, int rounds) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    nb_named_tensor state[3];
    make_state(s, state);
    int failed = 0;
    for (int r = 0; r < rounds; r++)
        if (!nb_safetensors_save(path, 3, state) && failed++ == 0)
            fprintf(stderr, "\n  saver %d: %s\n", s, nb_last_error());
    _exit(failed ? 1 : 0);
}

static void test_concurrent_saves_never_tear(void) {
    const char *path = tmp_path("shared.safetensors");
    nb_named_tensor first[3];
    make_state(1, first);
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 3, first));
    int entries_before = nbtest_tmp_files("");
    fflush(NULL);
    pid_t savers[2] = {spawn_saver(path, 1, 60), spawn_saver(path, 2, 60)};
    CU_ASSERT_FATAL(savers[0] > 0 && savers[1] > 0);
    nb_named_tensor into[3];
    make_state(0, into);
    int running = 2, loads = 0, torn = 0, failed = 0, seen[3] = {0};
    int status[2] = {-1, -1};
    while (running > 0) {
        for (int k = 0; k < 2; k++)
            if (status[k] == -1 && waitpid(savers[k], &status[k], WNOHANG) == savers[k]) running--;
        nb_clear_error();
        if (!nb_safetensors_load(path, 3, into)) {
            if (failed++ == 0) fprintf(stderr, "\n  load failed: %s\n", nb_last_error());
            continue;
        }
        loads++;
        int s = state_of(into);
        seen[s]++;
        torn += s == 0;
    }
    for (int k = 0; k < 2; k++) CU_ASSERT_TRUE(WIFEXITED(status[k]) && WEXITSTATUS(status[k]) == 0);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT_EQUAL(torn, 0);
    CU_ASSERT_TRUE(loads > 0);
    if (failed || torn)
        fprintf(stderr, "\n  %d loads: %d of state 1, %d of state 2, %d torn, %d failed\n", loads,
                seen[1], seen[2], torn, failed);
    /* No temporary is left behind by 120 saves. */
    CU_ASSERT_EQUAL(nbtest_tmp_files(""), entries_before);
    unlink(path);
}

/* A symlink planted at the old fixed temporary name (path.tmp), pointing at a file or at
 * nothing, is neither followed nor replaced. */
static void test_symlink_at_temporary_name_untouched(void) {
    const char *path = tmp_path("victim_ckpt.safetensors");
    char tmp[300], victim[300], absent[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(victim, sizeof victim, "%s", tmp_path("precious.txt"));
    snprintf(absent, sizeof absent, "%s", tmp_path("created_through_link"));
    FILE *f = fopen(victim, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("keep me", f);
    fclose(f);
    nb_named_tensor state[3];
    make_state(2, state);
    for (int round = 0; round < 2; round++) {
        const char *target = round == 0 ? victim : absent;
        CU_ASSERT_EQUAL_FATAL(symlink(target, tmp), 0);
        CU_ASSERT_TRUE(nb_safetensors_save(path, 3, state));
        struct stat st;
        CU_ASSERT_TRUE(lstat(tmp, &st) == 0 && S_ISLNK(st.st_mode));
        char buf[32] = {0};
        f = fopen(victim, "r");
        CU_ASSERT_TRUE(f && fread(buf, 1, sizeof buf - 1, f) == 7 && strcmp(buf, "keep me") == 0);
        if (f) fclose(f);
        CU_ASSERT_EQUAL(access(absent, F_OK), -1);
        unlink(tmp);
    }
    nb_named_tensor into[3];
    make_state(0, into);
    CU_ASSERT_TRUE(nb_safetensors_load(path, 3, into));
    CU_ASSERT_EQUAL(state_of(into), 2);
    unlink(path);
    unlink(victim);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

static bool holds_text(const char *path, const char *text) {
    char buf[64] = {0};
    FILE *f = fopen(path, "r");
    bool same = f && fread(buf, 1, sizeof buf - 1, f) == strlen(text) && strcmp(buf, text) == 0;
    if (f) fclose(f);
    return same;
}

/* Issue 29, item 13: temporaries of killed saves are removed by the next save of the path, and
 * only those: a temporary some process holds locked (a save still running) stays whole, as do
 * names not of the exact form, other paths' temporaries, symlinks (not followed),
 * directories and FIFOs (not waited on). Saves and loads go on as if none were there. */
static void test_stale_temporaries_removed(void) {
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("stray.safetensors"));
    static const char *const kept[] = {
        "stray.safetensors.tmp",             /* the old fixed name */
        "stray.safetensors.tmp-ABCDEFGHIJ",  /* not [a-z0-9] */
        "stray.safetensors.tmp-abcdefghijk", /* 11 characters */
        "stray.safetensors.tmp-abcdefghi",   /* 9 */
        "stray.safetensors.tmp-abcdefghij.x",
        "other.safetensors.tmp-abcdefghij", /* another path's */
    };
    enum { NKEPT = sizeof kept / sizeof kept[0] };
    for (int k = 0; k < NKEPT; k++) write_text(tmp_path(kept[k]), "half a checkpoint");
    /* tmp_path's buffers are reused: copies */
    char stale[512], running[512], link[512], folder[512], victim[512];
    snprintf(stale, sizeof stale, "%s", tmp_path("stray.safetensors.tmp-abcdefghij"));
    snprintf(running, sizeof running, "%s", tmp_path("stray.safetensors.tmp-0123456789"));
    snprintf(link, sizeof link, "%s", tmp_path("stray.safetensors.tmp-link000000"));
    snprintf(folder, sizeof folder, "%s", tmp_path("stray.safetensors.tmp-folder0000"));
    snprintf(victim, sizeof victim, "%s", tmp_path("stray_victim.txt"));
    char fifo[512]; /* opening it for reading must not block the cleaner */
    snprintf(fifo, sizeof fifo, "%s", tmp_path("stray.safetensors.tmp-fifo000000"));
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    write_text(stale, "half a checkpoint");
    write_text(running, "being written");
    write_text(victim, "keep me");
    CU_ASSERT_EQUAL_FATAL(symlink(victim, link), 0);
    CU_ASSERT_EQUAL_FATAL(mkdir(folder, 0700), 0);
    /* A save still running holds its temporary locked (another open file: flock locks
     * conflict between open files even in one process). */
    int held = open(running, O_RDWR);
    CU_ASSERT_FATAL(held >= 0 && flock(held, LOCK_EX | LOCK_NB) == 0);

    for (int s = 1; s <= 2; s++) {
        nb_named_tensor state[3], into[3];
        make_state(s, state);
        make_state(0, into);
        CU_ASSERT_TRUE(nb_safetensors_save(path, 3, state));
        CU_ASSERT_TRUE(nb_safetensors_load(path, 3, into));
        CU_ASSERT_EQUAL(state_of(into), s);
        CU_ASSERT_EQUAL(access(stale, F_OK), -1); /* removed by the first save */
    }
    CU_ASSERT_TRUE(holds_text(running, "being written"));
    for (int k = 0; k < NKEPT; k++)
        CU_ASSERT_TRUE(holds_text(tmp_path(kept[k]), "half a checkpoint"));
    struct stat st;
    CU_ASSERT_TRUE(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    CU_ASSERT_TRUE(holds_text(victim, "keep me"));
    CU_ASSERT_TRUE(stat(folder, &st) == 0 && S_ISDIR(st.st_mode));
    CU_ASSERT_TRUE(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));

    /* The running save ends without renaming (it was killed): now it is stale. */
    CU_ASSERT_EQUAL(nb_safetensors_remove_stale_temporaries(path), 0);
    close(held);
    CU_ASSERT_EQUAL(nb_safetensors_remove_stale_temporaries(path), 1);
    CU_ASSERT_EQUAL(access(running, F_OK), -1);
    CU_ASSERT_EQUAL(nb_safetensors_remove_stale_temporaries(path), 0);
    nb_clear_error();
    CU_ASSERT_EQUAL(nb_safetensors_remove_stale_temporaries(NULL), -1);
    NBT_ASSERT_ERROR("nb_safetensors_remove_stale_temporaries: path is NULL");
    CU_ASSERT_EQUAL(nb_safetensors_remove_stale_temporaries(tmp_path("no_dir/x.safetensors")), -1);
    NBT_ASSERT_ERROR("cannot read its directory");

    for (int k = 0; k < NKEPT; k++) unlink(tmp_path(kept[k]));
    unlink(link);
    unlink(victim);
    rmdir(folder);
    unlink(fifo);
    unlink(path);
}

/* A save really killed midway (SIGXFSZ at a file size limit kills the child inside write())
 * leaves its temporary; the next save of the path removes it, and the old file is intact. */
static void test_killed_save_cleaned_up(void) {
    const char *path = tmp_path("killed.safetensors");
    nb_named_tensor one[3], into[3];
    make_state(1, one);
    CU_ASSERT_TRUE_FATAL(nb_safetensors_save(path, 3, one));
    int before = nbtest_tmp_files("killed.safetensors");
    CU_ASSERT_EQUAL(before, 1);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit small = {3000, 3000}; /* state 2 needs about 9.3 KB */
        setrlimit(RLIMIT_FSIZE, &small);
        signal(SIGXFSZ, SIG_DFL);
        nb_named_tensor two[3];
        make_state(2, two);
        nb_safetensors_save(path, 3, two);
        _exit(0); /* not reached: the write past the limit kills the process */
    }
    int status;
    CU_ASSERT_EQUAL_FATAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ);
    CU_ASSERT_EQUAL(nbtest_tmp_files("killed.safetensors.tmp-"), 1); /* the dead save's */
    make_state(0, into);
    CU_ASSERT_TRUE(nb_safetensors_load(path, 3, into));
    CU_ASSERT_EQUAL(state_of(into), 1);
    CU_ASSERT_TRUE(nb_safetensors_save(path, 3, one));
    CU_ASSERT_EQUAL(nbtest_tmp_files("killed.safetensors.tmp-"), 0);
    CU_ASSERT_EQUAL(nbtest_tmp_files("killed.safetensors"), 1);
    unlink(path);
}

int main(void) {
    const nbtest_case cases[] = {
        {"concurrent saves never tear", test_concurrent_saves_never_tear},
        {"symlink at a temporary name untouched", test_symlink_at_temporary_name_untouched},
        {"stale temporaries removed, running saves' kept", test_stale_temporaries_removed},
        {"a killed save's temporary is cleaned up", test_killed_save_cleaned_up},
    };
    return nbtest_run("checkpoint races", cases, sizeof cases / sizeof cases[0]);
}
