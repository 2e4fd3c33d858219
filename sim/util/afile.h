/* afile — atomic output files.
 *
 * afile_open() creates a temporary file next to the destination (same
 * directory, so rename() is atomic): "DIR/.NAME.XXXXXX". The caller
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
} afile;

/* Open a temporary file for path. TS_EIO naming the directory on failure
 * (missing directory, no permission). */
int afile_open(afile *a, const char *path, ts_err *err);

/* Flush, fsync, close and rename onto the destination. On failure the
 * temporary file is removed and TS_EIO names the path and the reason. */
int afile_commit(afile *a, ts_err *err);

/* Close and remove the temporary file; the destination is untouched. */
void afile_abort(afile *a);

#endif
