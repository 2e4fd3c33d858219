/* afile — atomic output files.
 *
 * afile_open() creates a temporary file next to the destination (same
 * directory, so rename() is atomic): "DIR/.NAME.PID.XXXXXX" (PID: the
 * writing process, so that a later run can tell a stale temporary from a
 * live one). The caller
 * writes to a->f; afile_commit() flushes, fsyncs, closes and renames it onto
 * the destination (then fsyncs the directory); afile_abort() closes and
 * removes it. An interrupted run therefore never leaves a half-written
 * destination. The path "-" means standard output: commit flushes it, abort
 * does nothing.
 *
 *   afile a;
 *   if (afile_open(&a, "out.csv", &err)) return ...;
 *   fprintf(a.f, ...);
 *   rc = write_ok ? afile_commit(&a, &err) : (afile_abort(&a), rc);
 *
 * Ownership: the afile owns its FILE and the two path copies until commit or
 * abort, which release them (each may be called once; abort after commit or
 * on a zeroed afile is a no-op).
 */
#ifndef TRAINSIM_AFILE_H
#define TRAINSIM_AFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "sim/util/err.h"

typedef struct {
    FILE *f;    /* write here */
    char *path; /* destination (owned) */
    char *tmp;  /* temporary path (owned); NULL for stdout */
    bool is_stdout;
    int slot; /* registry slot + 1 (afile.c); 0 = none */
} afile;

/* Open a temporary file for path. TS_EIO naming the directory on failure
 * (missing directory, no permission). The temporary is recorded in a
 * registry of live temporaries (before it is created; cleared once renamed
 * or removed) that the handlers of afile_install_signal_handlers() unlink.
 * First removes the stale temporaries of path (afile_clean_stale). At most
 * AFILE_MAX_LIVE files are open at once (TS_EIO beyond). */
#define AFILE_MAX_LIVE 32
int afile_open(afile *a, const char *path, ts_err *err);

/* Flush, fsync, close and rename onto the destination. On failure the
 * temporary file is removed and TS_EIO names the path and the reason. */
int afile_commit(afile *a, ts_err *err);

/* Close and remove the temporary file; the destination is untouched. */
void afile_abort(afile *a);

/* Install, once per process, handlers for SIGINT, SIGTERM and SIGHUP that
 * unlink every live temporary (async-signal-safe calls only) and then
 * re-raise the signal with its default action, so the process still dies
 * of that signal (exit status 128+N in a shell). A signal ignored on entry
 * (nohup; background jobs of a shell without job control) stays ignored.
 * Call it from main before
 * any afile_open. TS_EIO if sigaction fails. */
int afile_install_signal_handlers(void);

/* Remove the stale temporaries of path: entries "DIR/.NAME.PID.XXXXXX"
 * whose PID is not a live process and whose modification time is older
 * than started (seconds since the epoch; 0 = the first afile call of this
 * process). Entries of live processes, other names and unreadable
 * directories are left alone. Returns how many were removed. */
int afile_clean_stale(const char *path, long long started);

/* Check, before any work, that path can be written: tries creating and
 * removing a temporary in its directory ("-" always passes). flag names the
 * option in the message ("--out"); TS_EIO: "FLAG PATH: cannot create a file
 * in directory D: REASON", or TS_EIO when path is a directory. */
int afile_check_writable(const char *path, const char *flag, ts_err *err);

/* The number of live temporaries in the registry (for tests). */
int afile_live_count(void);

#endif
