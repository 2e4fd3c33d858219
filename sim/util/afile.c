#include "sim/util/afile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------ registry of temporaries
 *
 * Fixed-size, statically allocated, so that a signal handler can walk it:
 * a slot's path is written first, then its flag set; the handler reads only
 * slots whose flag is set and calls only unlink(). Claims and releases take
 * a mutex (never touched by the handler), as several threads may write
 * outputs at once. */
#define AFILE_TMP_BYTES 4096

static char live_path[AFILE_MAX_LIVE][AFILE_TMP_BYTES];
static volatile sig_atomic_t live_used[AFILE_MAX_LIVE];
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long name_counter;
static long long process_start; /* seconds since the epoch, first afile call */

static long long start_time(void)
{
    if (!process_start)
        process_start = (long long)time(NULL);
    return process_start;
}

/* Claim a slot, build a fresh temporary name for path in it and create the
 * file (O_EXCL, mode 0666 & ~umask as for any output). Returns the fd and
 * the slot, or -1 with errno set and *slot_out -1 (-2: no free slot). */
static int tmp_create(const char *path, int *slot_out)
{
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    pthread_mutex_lock(&live_mu);
    (void)start_time();
    int slot = -1;
    for (int i = 0; i < AFILE_MAX_LIVE && slot < 0; i++)
        if (!live_used[i])
            slot = i;
    int fd = -1, e = ENOSPC;
    for (int attempt = 0; slot >= 0 && fd < 0 && attempt < 100; attempt++) {
        /* six letters from the PID, a counter and the clock: unique within
         * this process, and O_EXCL settles the rest */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (++name_counter * 0x9E3779B97F4A7C15ull);
        char suf[7];
        for (int k = 0; k < 6; k++, x /= 52)
            suf[k] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[x % 52];
        suf[6] = '\0';
        int n = snprintf(live_path[slot], AFILE_TMP_BYTES, "%.*s.%s.%ld.%s", (int)dirlen, path, path + dirlen,
                         (long)getpid(), suf);
        if (n < 0 || n >= AFILE_TMP_BYTES) {
            e = ENAMETOOLONG;
            break;
        }
        live_used[slot] = 1; /* recorded before the file exists */
        fd = open(live_path[slot], O_WRONLY | O_CREAT | O_EXCL, 0666);
        e = errno;
        if (fd < 0)
            live_used[slot] = 0;
        if (fd < 0 && e != EEXIST)
            break;
    }
    pthread_mutex_unlock(&live_mu);
    *slot_out = fd >= 0 ? slot : slot < 0 ? -2 : -1;
    errno = e;
    return fd;
}

static void tmp_release(int slot)
{
    if (slot < 0)
        return;
    pthread_mutex_lock(&live_mu);
    live_used[slot] = 0;
    pthread_mutex_unlock(&live_mu);
}

int afile_live_count(void)
{
    int n = 0;
    for (int i = 0; i < AFILE_MAX_LIVE; i++)
        n += live_used[i] != 0;
    return n;
}

static void on_signal(int sig)
{
    int saved = errno;
    for (int i = 0; i < AFILE_MAX_LIVE; i++)
        if (live_used[i])
            (void)unlink(live_path[i]);
    /* default action back, then the same signal: the process dies of it */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(sig, &sa, NULL);
    errno = saved;
    (void)raise(sig);
}

int afile_install_signal_handlers(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    (void)start_time();
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        for (size_t j = 0; j < sizeof sigs / sizeof sigs[0]; j++)
            sigaddset(&sa.sa_mask, sigs[j]); /* one handler run at a time */
        sa.sa_flags = SA_NODEFER;            /* so the re-raise takes effect at once */
        struct sigaction was;
        if (sigaction(sigs[i], NULL, &was) != 0)
            return TS_EIO;
        if (was.sa_handler == SIG_IGN)
            continue; /* ignored on entry (nohup, a background job): stays ignored */
        if (sigaction(sigs[i], &sa, NULL) != 0)
            return TS_EIO;
    }
    return TS_OK;
}

int afile_clean_stale(const char *path, long long started)
{
    if (!path || !*path || !strcmp(path, "-"))
        return 0;
    if (!started)
        started = start_time();
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char dir[AFILE_TMP_BYTES], prefix[AFILE_TMP_BYTES];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
    int np = snprintf(prefix, sizeof prefix, ".%s.", base);
    if (np < 0 || (size_t)np >= sizeof prefix)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *de;
    /* cppcheck-suppress readdirCalled ; d is this call's own stream (readdir_r is deprecated) */
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (strncmp(nm, prefix, (size_t)np))
            continue;
        /* the rest must be PID "." six letters */
        const char *p = nm + np;
        char *end;
        errno = 0;
        long pid = strtol(p, &end, 10);
        if (end == p || errno || pid <= 0 || *end != '.' || strlen(end + 1) != 6)
            continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* ours, alive, or not ours to judge (EPERM: alive) */
        char full[2 * AFILE_TMP_BYTES];
        snprintf(full, sizeof full, "%s/%s", dir, nm);
        struct stat st;
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode) || (long long)st.st_mtime >= started)
            continue;
        if (unlink(full) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

static int dir_error(const char *flag, const char *path, int e, ts_err *err)
{
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    return err_set(err, TS_EIO, "%s%s%s: cannot create a file in %s%.*s: %s", flag ? flag : "", flag ? " " : "", path,
                   dirlen ? "directory " : "the current directory", (int)(dirlen ? dirlen - 1 : 0), path, strerror(e));
}

int afile_check_writable(const char *path, const char *flag, ts_err *err)
{
    if (!path || !*path)
        return err_set(err, TS_EINVAL, "%s: output path is empty (give a file name, or - for standard output)",
                       flag ? flag : "output");
    if (!strcmp(path, "-"))
        return TS_OK;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return err_set(err, TS_EIO, "%s %s: is a directory (give a file name)", flag ? flag : "output", path);
    int slot;
    int fd = tmp_create(path, &slot);
    if (fd < 0)
        return dir_error(flag, path, errno, err);
    close(fd);
    unlink(live_path[slot]);
    tmp_release(slot);
    return TS_OK;
}

static void tmp_release(int slot);

/* Frees the paths and gives the registry slot back (the temporary is gone
 * or renamed by now). */
static void release(afile *a)
{
    if (a->slot > 0)
        tmp_release(a->slot - 1);
    a->slot = 0;
    free(a->path);
    free(a->tmp);
    a->path = a->tmp = NULL;
    a->f = NULL;
    a->is_stdout = false;
}

int afile_open(afile *a, const char *path, ts_err *err)
{
    memset(a, 0, sizeof *a);
    if (!path || !*path)
        return err_set(err, TS_EINVAL, "output path is empty (give a file name, or - for standard output)");
    if (!strcmp(path, "-")) {
        a->f = stdout;
        a->is_stdout = true;
        return TS_OK;
    }
    a->path = strdup(path);
    if (!a->path) {
        release(a);
        return err_set(err, TS_ENOMEM, "%s: out of memory", path);
    }
    (void)afile_clean_stale(path, 0);
    int slot;
    int fd = tmp_create(path, &slot);
    if (fd < 0) {
        int e = errno;
        release(a);
        if (slot == -2)
            return err_set(err, TS_EIO, "%s: more than %d outputs open at once", path, AFILE_MAX_LIVE);
        return dir_error(NULL, path, e, err);
    }
    a->slot = slot + 1;
    a->tmp = strdup(live_path[slot]);
    a->f = a->tmp ? fdopen(fd, "w") : NULL;
    if (!a->f) {
        int e = a->tmp ? errno : ENOMEM;
        close(fd);
        unlink(live_path[slot]);
        release(a);
        return err_set(err, TS_EIO, "%s: cannot open: %s", path, strerror(e));
    }
    return TS_OK;
}

static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse fsync on directories */
        close(fd);
    }
}

int afile_commit(afile *a, ts_err *err)
{
    if (!a->f)
        return err_set(err, TS_ESTATE, "afile_commit on a file that is not open");
    if (a->is_stdout) {
        int bad = fflush(stdout) != 0 || ferror(stdout);
        release(a);
        return bad ? err_set(err, TS_EIO, "standard output: write failed: %s", strerror(errno)) : TS_OK;
    }
    int e = 0;
    if (fflush(a->f) != 0 || ferror(a->f))
        e = errno ? errno : EIO;
    if (!e && fsync(fileno(a->f)) != 0 && errno != EINVAL)
        e = errno;
    if (fclose(a->f) != 0 && !e)
        e = errno;
    a->f = NULL;
    if (!e && rename(a->tmp, a->path) != 0)
        e = errno;
    if (e) {
        unlink(a->tmp);
        int rc = err_set(err, TS_EIO, "%s: write failed: %s (nothing written)", a->path, strerror(e));
        release(a);
        return rc;
    }
    sync_dir(a->path);
    release(a);
    return TS_OK;
}

void afile_abort(afile *a)
{
    if (!a->f) {
        release(a);
        return;
    }
    if (a->is_stdout) {
        (void)fflush(stdout); /* abandoning the output: errors no longer matter */
    } else {
        (void)fclose(a->f);
        unlink(a->tmp);
    }
    release(a);
}
