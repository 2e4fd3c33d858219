/* Unit tests for afile: the registry of live temporaries (one entry from
 * open to commit or abort), the PID in temporary names, the removal of
 * stale temporaries (dead writer, older than the run; nothing else), and
 * the writability check. Signals are tested in tests/cli/simulate.sh, not
 * inside Criterion's forked tests. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim/util/afile.h"

/* A fresh directory per test; the caller removes it with rm_dir. */
static void make_dir(char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/test_afile.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

/* Removes dir and the plain files in it. */
static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *de;
    /* cppcheck-suppress readdirCalled ; one stream, one thread */
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        cr_assert_eq(unlink(p), 0, "%s", p);
    }
    closedir(d);
    cr_assert_eq(rmdir(dir), 0);
}

/* Entries of dir whose name starts with '.', other than . and .. */
static int hidden_count(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *de;
    /* cppcheck-suppress readdirCalled ; one stream, one thread */
    while ((de = readdir(d)))
        n += de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

/* A PID that is certainly not running: a child that has exited and been
 * reaped. */
static long dead_pid(void)
{
    pid_t c = fork();
    if (c == 0)
        _exit(0);
    cr_assert(c > 0);
    waitpid(c, NULL, 0);
    return (long)c;
}

static void touch_old(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0, "%s", path);
    close(fd);
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    cr_assert_eq(utimensat(AT_FDCWD, path, old, 0), 0);
}

Test(afile, registry_holds_the_temporary_from_open_to_commit)
{
    char dir[64], path[128], want[128];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/out.csv", dir);
    int before = afile_live_count();
    afile a;
    ts_err e;
    cr_assert_eq(afile_open(&a, path, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(afile_live_count(), before + 1);
    snprintf(want, sizeof want, "%s/.out.csv.%ld.", dir, (long)getpid());
    cr_assert(!strncmp(a.tmp, want, strlen(want)), "temporary %s should start with %s", a.tmp, want);
    cr_assert_eq(strlen(a.tmp), strlen(want) + 6);
    fputs("x\n", a.f);
    cr_assert_eq(afile_commit(&a, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(afile_live_count(), before);
    cr_assert_eq(access(path, F_OK), 0);
    cr_assert_eq(hidden_count(dir), 0);
    rm_dir(dir);
}

Test(afile, abort_clears_the_registry_and_the_temporary)
{
    char dir[64], path[128];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/t.json", dir);
    int before = afile_live_count();
    afile a, b;
    ts_err e;
    cr_assert_eq(afile_open(&a, path, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(afile_open(&b, path, &e), TS_OK, "%s", e.msg); /* two at once: distinct names */
    cr_assert_str_neq(a.tmp, b.tmp);
    cr_assert_eq(afile_live_count(), before + 2);
    afile_abort(&a);
    afile_abort(&b);
    cr_assert_eq(afile_live_count(), before);
    cr_assert_eq(hidden_count(dir), 0);
    cr_assert_neq(access(path, F_OK), 0);
    rm_dir(dir);
}

Test(afile, stale_temporaries_of_dead_writers_are_removed_and_nothing_else)
{
    char dir[64], path[128], dead[160], live[160], fresh[160], other[160], oldstyle[160];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/r.csv", dir);
    long d = dead_pid();
    snprintf(dead, sizeof dead, "%s/.r.csv.%ld.abcdef", dir, d);
    snprintf(live, sizeof live, "%s/.r.csv.%ld.abcdef", dir, (long)getppid());
    snprintf(fresh, sizeof fresh, "%s/.r.csv.%ld.ghijkl", dir, d);
    snprintf(other, sizeof other, "%s/.q.csv.%ld.abcdef", dir, d);
    snprintf(oldstyle, sizeof oldstyle, "%s/.r.csv.abcdef", dir);
    touch_old(dead);
    touch_old(live);
    touch_old(other);
    touch_old(oldstyle);
    int fd = open(fresh, O_WRONLY | O_CREAT, 0644); /* written after this run started */
    close(fd);
    cr_assert_eq(afile_clean_stale(path, (long long)time(NULL) - 60), 1);
    cr_assert_neq(access(dead, F_OK), 0, "the dead writer's old temporary is removed");
    cr_assert_eq(access(live, F_OK), 0, "a live writer's temporary is kept");
    cr_assert_eq(access(fresh, F_OK), 0, "a temporary newer than the run is kept");
    cr_assert_eq(access(other, F_OK), 0, "another output's temporary is kept");
    cr_assert_eq(access(oldstyle, F_OK), 0, "a name without a PID is kept");
    rm_dir(dir);
}

Test(afile, check_writable_leaves_nothing_and_names_flag_and_path)
{
    char dir[64], path[128];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/out.csv", dir);
    ts_err e;
    err_clear(&e);
    cr_assert_eq(afile_check_writable(path, "--out", &e), TS_OK, "%s", e.msg);
    cr_assert_eq(hidden_count(dir), 0);
    cr_assert_neq(access(path, F_OK), 0, "the check creates no output");
    cr_assert_eq(afile_check_writable("-", "--csv", &e), TS_OK);

    snprintf(path, sizeof path, "%s/no/such/out.csv", dir);
    cr_assert_eq(afile_check_writable(path, "--out", &e), TS_EIO);
    cr_assert(strstr(e.msg, "--out") && strstr(e.msg, "no/such/out.csv") && strstr(e.msg, "cannot create"), "%s",
              e.msg);
    cr_assert_eq(afile_check_writable(dir, "--trace", &e), TS_EIO);
    cr_assert(strstr(e.msg, "--trace") && strstr(e.msg, "is a directory"), "%s", e.msg);
    rm_dir(dir);
}
