#include "sim/util/afile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void release(afile *a)
{
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
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t n = strlen(path);
    a->path = strdup(path);
    a->tmp = malloc(n + 16);
    if (!a->path || !a->tmp) {
        release(a);
        return err_set(err, TS_ENOMEM, "%s: out of memory", path);
    }
    snprintf(a->tmp, n + 16, "%.*s.%s.XXXXXX", (int)dirlen, path, path + dirlen);
    int fd = mkstemp(a->tmp);
    if (fd < 0) {
        int e = errno;
        release(a);
        return err_set(err, TS_EIO, "%s: cannot create a file in %s%.*s: %s", path,
                       dirlen ? "directory " : "the current directory", (int)(dirlen ? dirlen - 1 : 0), path,
                       strerror(e));
    }
    /* mkstemp makes 0600; outputs are ordinary files (0666 & ~umask). */
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um);
    a->f = fdopen(fd, "w");
    if (!a->f) {
        int e = errno;
        close(fd);
        unlink(a->tmp);
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
