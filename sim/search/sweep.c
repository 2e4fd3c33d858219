/* sweep — resumable CSV sweeps (see sweep.h). */
#include "sim/search/sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sim/search/pool.h"
#include "sim/util/csvio.h"

/* ------------------------------------------------------------------ keys */

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

void sweep_row_key(size_t row, size_t ncols, const char *const *header, const char *const *cells, char *buf)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t c = 0; c < ncols; c++) {
        h = fnv1a(h, header[c], strlen(header[c]) + 1); /* the NUL separates fields */
        h = fnv1a(h, cells[c], strlen(cells[c]) + 1);
    }
    snprintf(buf, SWEEP_KEY_BYTES, "%zu-%016" PRIx64, row, h);
}

/* ------------------------------------------------------------------ lock */

/* Lock file "OUT.lock": an fcntl write lock on it is held for the whole
 * sweep (released by the kernel when the process ends, however it ends);
 * its text "PID START\n" names the holder for the refusal message and is
 * left in place only by a process that died. A clean end removes it while
 * still holding the lock; a taker therefore checks, once locked, that the
 * path still names the file it locked, and tries again otherwise. */
static int lock_take(const char *out, char **lock_path, int *fd_out, long *stale_pid, ts_err *err)
{
    *fd_out = -1;
    *stale_pid = 0;
    size_t n = strlen(out) + 6;
    char *lp = malloc(n);
    if (!lp)
        return err_set(err, TS_ENOMEM, "sweep: out of memory");
    snprintf(lp, n, "%s.lock", out);
    int rc = TS_OK;
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(lp, O_RDWR | O_CREAT, 0644);
        if (fd < 0) {
            rc = err_set(err, TS_EIO, "--out %s: cannot create the lock file %s: %s", out, lp, strerror(errno));
            break;
        }
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        if (fcntl(fd, F_SETLK, &fl) != 0) {
            int e = errno;
            char text[64] = "";
            ssize_t got = pread(fd, text, sizeof text - 1, 0);
            text[got > 0 ? got : 0] = '\0';
            char *end;
            long pid = strtol(text, &end, 10);
            long long started = strtoll(end, NULL, 10);
            struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
            if (fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK)
                pid = (long)q.l_pid; /* the kernel's word over the file's */
            close(fd);
            if (e == EACCES || e == EAGAIN)
                rc = err_set(err, TS_EIO,
                             "--out %s: another trainsim sweep (PID %ld, started %lld s after the epoch) is writing "
                             "it (lock %s); wait for it to end, or give another --out",
                             out, pid, started, lp);
            else
                rc = err_set(err, TS_EIO, "--out %s: cannot lock %s: %s", out, lp, strerror(e));
            break;
        }
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(lp, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
            close(fd); /* removed by the holder as it ended: lock the new one */
            continue;
        }
        char text[64] = "";
        ssize_t got = pread(fd, text, sizeof text - 1, 0);
        text[got > 0 ? got : 0] = '\0';
        long pid = strtol(text, NULL, 10);
        if (pid > 0)
            *stale_pid = pid; /* left by a sweep that died: taken over */
        char mine[64];
        int len = snprintf(mine, sizeof mine, "%ld %lld\n", (long)getpid(), (long long)time(NULL));
        if (ftruncate(fd, 0) != 0 || pwrite(fd, mine, (size_t)len, 0) != len) {
            rc = err_set(err, TS_EIO, "--out %s: cannot write the lock file %s: %s", out, lp, strerror(errno));
            close(fd);
            break;
        }
        *fd_out = fd;
        *lock_path = lp;
        return TS_OK;
    }
    if (rc == TS_OK)
        rc = err_set(err, TS_EIO, "--out %s: the lock file %s keeps being replaced; try again", out, lp);
    free(lp);
    return rc;
}

/* Removes the lock file (still locked, so no one else holds it) and
 * releases the lock. */
static void lock_drop(char *lock_path, int fd)
{
    if (fd < 0)
        return;
    unlink(lock_path);
    close(fd);
    free(lock_path);
}

/* ------------------------------------------------------------ file tail */

static int read_all(int fd, const char *path, char **out, size_t *len, ts_err *err)
{
    struct stat st;
    if (fstat(fd, &st))
        return err_set(err, TS_EIO, "%s: cannot stat: %s", path, strerror(errno));
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf)
        return err_set(err, TS_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            return err_set(err, TS_EIO, "%s: read failed: %s", path,
                           r < 0 ? strerror(errno) : "file shrank while reading");
        }
        got += (size_t)r;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return TS_OK;
}

int sweep_repair_tail(const char *path, bool *repaired, ts_err *err)
{
    *repaired = false;
    int fd = open(path, O_RDWR);
    if (fd < 0) {
        if (errno == ENOENT)
            return TS_OK;
        return err_set(err, TS_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    char *buf = NULL;
    size_t n = 0;
    int rc = read_all(fd, path, &buf, &n, err);
    if (rc == TS_OK && n > 0 && buf[n - 1] != '\n') {
        size_t keep = n;
        while (keep > 0 && buf[keep - 1] != '\n')
            keep--;
        if (ftruncate(fd, (off_t)keep) || fsync(fd))
            rc = err_set(err, TS_EIO, "%s: cannot cut the torn last line: %s", path, strerror(errno));
        else
            *repaired = true;
    }
    free(buf);
    close(fd);
    return rc;
}

/* Write all of buf with one write(2) (retried only if the kernel wrote part
 * of it, which regular files do only on a full disk), then fsync. */
static int append_line(int fd, const char *path, const char *buf, size_t n, ts_err *err)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return err_set(err, TS_EIO, "%s: write failed: %s", path, w < 0 ? strerror(errno) : "no progress");
        done += (size_t)w;
    }
    if (fsync(fd))
        return err_set(err, TS_EIO, "%s: fsync failed: %s", path, strerror(errno));
    return TS_OK;
}

/* One CSV line (libcsv quoting) in a malloc'ed buffer. */
static int format_line(size_t n, const char *const *cells, char **out, size_t *len, ts_err *err)
{
    char *buf = NULL;
    size_t sz = 0;
    FILE *f = open_memstream(&buf, &sz);
    if (!f)
        return err_set(err, TS_ENOMEM, "sweep: out of memory formatting a row");
    int rc = csvio_write_row(f, n, cells, err);
    if (fclose(f) && rc == TS_OK)
        rc = err_set(err, TS_ENOMEM, "sweep: out of memory formatting a row");
    if (rc) {
        free(buf);
        return rc;
    }
    /* One physical line per row, so a torn write is always a last line
     * without its newline: newlines inside quoted cells become spaces. */
    for (size_t i = 0; i + 1 < sz; i++)
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';
    *out = buf;
    *len = sz;
    return TS_OK;
}

/* ------------------------------------------------------------- the state */

typedef struct {
    size_t row; /* data row index in the input (0-based) */
    char key[SWEEP_KEY_BYTES];
    bool done;
    int status;   /* TS_OK or the evaluator's error */
    char **cells; /* ev->n result cells (owned) when status == TS_OK */
    char *msg;    /* error message (owned) otherwise */
} slot;

typedef struct {
    const sweep_opts *o;
    const sweep_evaluator *ev;
    const csvio_table *in;
    const char *const *names; /* input column names without "--" */
    slot *slots;
    size_t nslots, next, commit;
    size_t total, skipped;
    int fd;
    int rc; /* first fatal error */
    ts_err err;
    size_t failed;
} sweep_state;

static void slot_clear(slot *s, size_t nres)
{
    if (s->cells)
        for (size_t j = 0; j < nres; j++)
            free(s->cells[j]);
    free(s->cells);
    free(s->msg);
    s->cells = NULL;
    s->msg = NULL;
}

/* Evaluate one row: build argv, call the evaluator. */
static void eval_slot(sweep_state *st, slot *s)
{
    const csvio_table *in = st->in;
    size_t nc = in->ncols;
    char **argv = calloc(nc + 2, sizeof *argv);
    s->cells = calloc(st->ev->n ? st->ev->n : 1, sizeof *s->cells);
    ts_err e;
    err_clear(&e);
    int argc = 0;
    if (!argv || !s->cells) {
        s->status = err_set(&e, TS_ENOMEM, "out of memory");
        goto out;
    }
    argv[argc++] = "sweep";
    for (size_t c = 0; c < nc; c++) {
        const char *v = in->rows[s->row].cells[c];
        if (!v[0])
            continue;
        size_t need = strlen(st->names[c]) + strlen(v) + 4;
        char *a = malloc(need);
        if (!a) {
            s->status = err_set(&e, TS_ENOMEM, "out of memory");
            goto out;
        }
        int nl = snprintf(a, need, "--%s=", st->names[c]);
        for (int k = 2; k < nl - 1; k++) /* a column megatron_script is the flag --megatron-script */
            if (a[k] == '_')
                a[k] = '-';
        snprintf(a + nl, need - (size_t)nl, "%s", v);
        argv[argc++] = a;
    }
    s->status = st->ev->eval(st->ev->user, argc, argv, s->cells, &e);
out:
    if (s->status != TS_OK) {
        slot_clear(s, st->ev->n);
        s->msg = strdup(e.msg[0] ? e.msg : err_code_name(s->status));
    }
    if (argv)
        for (int i = 1; i < argc; i++)
            free(argv[i]);
    free(argv);
}

/* Write slot s as one output line. Called with the lock held. */
static int commit_slot(sweep_state *st, slot *s)
{
    const csvio_table *in = st->in;
    size_t nres = st->ev->n, n = 1 + in->ncols + 1 + nres + 1;
    const char **cells = calloc(n, sizeof *cells);
    if (!cells)
        return err_set(&st->err, TS_ENOMEM, "sweep: out of memory");
    size_t k = 0;
    cells[k++] = s->key;
    for (size_t c = 0; c < in->ncols; c++)
        cells[k++] = in->rows[s->row].cells[c];
    cells[k++] = s->status == TS_OK ? "ok" : "error";
    for (size_t j = 0; j < nres; j++)
        cells[k++] = s->status == TS_OK && s->cells[j] ? s->cells[j] : "";
    cells[k++] = s->status == TS_OK ? "" : (s->msg ? s->msg : "");
    char *line = NULL;
    size_t len = 0;
    int rc = format_line(n, cells, &line, &len, &st->err);
    if (rc == TS_OK)
        rc = append_line(st->fd, st->o->output, line, len, &st->err);
    if (s->status != TS_OK)
        st->failed++;
    free(line);
    free(cells);
    return rc;
}

static int sweep_work(void *ctx, size_t i)
{
    sweep_state *st = ctx;
    eval_slot(st, &st->slots[i]);
    return TS_OK;
}

/* Under the pool's lock: commit every finished slot in input order, so the
 * output file grows row by row whatever order the threads finish in. */
static int sweep_done(void *ctx, size_t i, int status)
{
    (void)status;
    sweep_state *st = ctx;
    st->slots[i].done = true;
    while (st->rc == TS_OK && st->commit < st->nslots && st->slots[st->commit].done) {
        slot *s = &st->slots[st->commit];
        st->rc = commit_slot(st, s);
        slot_clear(s, st->ev->n);
        st->commit++;
        if (st->o->progress)
            st->o->progress(st->o->progress_user, st->skipped + st->commit, st->total, st->skipped);
    }
    return st->rc;
}

/* ------------------------------------------------------------- set-up */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Build the output header: key, inputs, status, results, error. */
static int make_header(const csvio_table *in, const sweep_evaluator *ev, const char ***out, size_t *n, ts_err *err)
{
    size_t k = 0, total = 1 + in->ncols + 1 + ev->n + 1;
    const char **h = calloc(total, sizeof *h);
    if (!h)
        return err_set(err, TS_ENOMEM, "sweep: out of memory");
    h[k++] = "key";
    for (size_t c = 0; c < in->ncols; c++)
        h[k++] = in->header[c];
    h[k++] = "status";
    for (size_t j = 0; j < ev->n; j++)
        h[k++] = ev->names[j];
    h[k++] = "error";
    for (size_t a = 0; a < total; a++)
        for (size_t b = a + 1; b < total; b++)
            if (!strcmp(h[a], h[b])) {
                int rc = err_set(err, TS_EINVAL,
                                 "%s: column '%s' clashes with an output column (key, status, "
                                 "error and the result columns are reserved)",
                                 in->path, h[a]);
                free(h);
                return rc;
            }
    *out = h;
    *n = total;
    return TS_OK;
}

/* Open (or create) the output, repair its tail, check its header, and
 * collect the keys already present (sorted, borrowed from *table). */
static int open_output(const char *path, const char **header, size_t nh, int *fd_out, csvio_table **table,
                       const char ***keys, size_t *nkeys, bool *repaired, ts_err *err)
{
    *fd_out = -1;
    *table = NULL;
    *keys = NULL;
    *nkeys = 0;
    int rc = sweep_repair_tail(path, repaired, err);
    if (rc)
        return rc;
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND, 0644);
    if (fd < 0)
        return err_set(err, TS_EIO, "%s: cannot open for appending: %s", path, strerror(errno));
    char *buf = NULL, *line = NULL;
    size_t len = 0, llen = 0;
    if ((rc = read_all(fd, path, &buf, &len, err)))
        goto fail;
    if (len == 0) { /* new file: the header, as one line */
        if ((rc = format_line(nh, header, &line, &llen, err)) || (rc = append_line(fd, path, line, llen, err)))
            goto fail;
    } else {
        if ((rc = csvio_read_mem(path, buf, len, NULL, CSVIO_ALLOW_NO_ROWS, table, err)))
            goto fail;
        csvio_table *t = *table;
        bool same = t->ncols == nh;
        for (size_t c = 0; same && c < nh; c++)
            same = !strcmp(t->header[c], header[c]);
        if (!same) {
            rc = err_set(err, TS_EINVAL,
                         "%s:%d: header differs from this sweep's (written for another input "
                         "or another trainsim?); use a new --out file",
                         path, t->header_line);
            goto fail;
        }
        *keys = malloc((t->nrows ? t->nrows : 1) * sizeof **keys);
        if (!*keys) {
            rc = err_set(err, TS_ENOMEM, "sweep: out of memory");
            goto fail;
        }
        for (size_t r = 0; r < t->nrows; r++)
            (*keys)[r] = t->rows[r].cells[0];
        *nkeys = t->nrows;
        qsort(*keys, *nkeys, sizeof **keys, cmp_str);
        for (size_t k = 1; k < *nkeys; k++) {
            if (strcmp((*keys)[k - 1], (*keys)[k]))
                continue;
            /* a row written twice (say, by two sweeps at once): name its lines */
            char lines[256] = "";
            size_t used = 0, count = 0;
            for (size_t r = 0; r < t->nrows; r++) {
                if (strcmp(t->rows[r].cells[0], (*keys)[k]))
                    continue;
                if (used < sizeof lines - 16)
                    used +=
                        (size_t)snprintf(lines + used, sizeof lines - used, "%s%d", count ? ", " : "", t->rows[r].line);
                count++;
            }
            rc = err_set(err, TS_EINVAL,
                         "%s: key %s appears %zu times (lines %s): rows written twice; keep one line per key "
                         "(or give a new --out) and resume",
                         path, (*keys)[k], count, lines);
            goto fail;
        }
    }
    free(buf);
    free(line);
    *fd_out = fd;
    return TS_OK;
fail:
    free(buf);
    free(line);
    free(*keys);
    *keys = NULL;
    csvio_free(*table);
    *table = NULL;
    close(fd);
    return rc;
}

int sweep_run(const sweep_opts *o, const sweep_evaluator *ev, sweep_stats *stats, ts_err *err)
{
    memset(stats, 0, sizeof *stats);
    if (o->threads < 1)
        return err_set(err, TS_EINVAL, "sweep: --threads must be >= 1 (got %d)", o->threads);
    csvio_table *in = NULL, *outt = NULL;
    const char **header = NULL, **names = NULL, **keys = NULL;
    size_t nh = 0, nkeys = 0;
    sweep_state st;
    memset(&st, 0, sizeof st);
    st.fd = -1;
    char *lock_path = NULL;
    int lock_fd = -1;
    int rc = csvio_read(o->input, NULL, 0, &in, err);
    if (rc)
        return rc;
    if ((rc = make_header(in, ev, &header, &nh, err)))
        goto done;
    names = calloc(in->ncols, sizeof *names);
    if (!names) {
        rc = err_set(err, TS_ENOMEM, "sweep: out of memory");
        goto done;
    }
    for (size_t c = 0; c < in->ncols; c++) {
        const char *h = in->header[c];
        names[c] = strncmp(h, "--", 2) ? h : h + 2;
        if (!names[c][0]) {
            rc = err_set(err, TS_EINVAL,
                         "%s:%d: column %zu has an empty name (expected a "
                         "trainsim flag such as tensor-model-parallel-size)",
                         in->path, in->header_line, c + 1);
            goto done;
        }
        ts_err ce;
        err_clear(&ce);
        if (ev->check_column && (rc = ev->check_column(ev->user, names[c], &ce)) != TS_OK) {
            rc =
                err_set(err, rc, "%s:%d: column %zu '%s': %s", in->path, in->header_line, c + 1, in->header[c], ce.msg);
            goto done;
        }
    }
    if ((rc = lock_take(o->output, &lock_path, &lock_fd, &stats->stale_lock_pid, err)))
        goto done;
    if ((rc = open_output(o->output, header, nh, &st.fd, &outt, &keys, &nkeys, &stats->repaired, err)))
        goto done;

    st.slots = calloc(in->nrows ? in->nrows : 1, sizeof *st.slots);
    if (!st.slots) {
        rc = err_set(err, TS_ENOMEM, "sweep: out of memory");
        goto done;
    }
    for (size_t r = 0; r < in->nrows; r++) {
        char key[SWEEP_KEY_BYTES];
        sweep_row_key(r + 1, in->ncols, (const char *const *)in->header, (const char *const *)in->rows[r].cells, key);
        const char *kp = key;
        if (nkeys && bsearch(&kp, keys, nkeys, sizeof *keys, cmp_str)) {
            stats->skipped++;
            continue;
        }
        slot *s = &st.slots[st.nslots++];
        s->row = r;
        memcpy(s->key, key, sizeof key);
    }
    stats->rows = in->nrows;
    st.o = o;
    st.ev = ev;
    st.in = in;
    st.names = names;
    st.total = in->nrows;
    st.skipped = stats->skipped;
    err_clear(&st.err);
    if (o->progress)
        o->progress(o->progress_user, st.skipped, st.total, st.skipped);
    pool_run(st.nslots, o->threads, sweep_work, sweep_done, &st);
    stats->ran = st.commit;
    stats->failed = st.failed;
    if (st.rc) {
        rc = st.rc;
        if (err)
            *err = st.err;
    }
done:
    if (st.slots)
        for (size_t i = 0; i < st.nslots; i++)
            slot_clear(&st.slots[i], ev->n);
    free(st.slots);
    if (st.fd >= 0)
        close(st.fd);
    lock_drop(lock_path, lock_fd);
    free(keys);
    csvio_free(outt);
    free(names);
    free(header);
    csvio_free(in);
    return rc;
}
