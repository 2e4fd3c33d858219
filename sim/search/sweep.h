/* sweep — run many configurations listed in a CSV, resumably.
 *
 * Input: a CSV (csvio.h) whose header names trainsim flags, with or without
 * the leading "--" ("tensor-model-parallel-size", "--gpus", "model"), an
 * underscore standing for a dash ("megatron_script" is --megatron-script); each
 * data row is one configuration: every non-empty cell becomes "--NAME=VALUE"
 * (switches take true/false), empty cells keep the default.
 *
 * Output (--out): a CSV with the columns
 *   key, <the input columns>, status, <the evaluator's result columns>, error
 * where key = "<data row number>-<16 hex digits of FNV-1a 64 of the header
 * and the row's cells>" (a row edited between runs gets a new key and is run
 * again), status is "ok" or "error" (error holds the message then). Rows are
 * appended in input order, each with one write(2) of the whole line followed
 * by fsync(2), so a kill at any moment leaves every line complete except at
 * most the last.
 *
 * Resuming: when the output exists, a last line without its newline (a torn
 * write) is cut off, the header must equal this sweep's, and rows whose key
 * is present are skipped. Killed at any moment and restarted, the sweep
 * neither loses nor duplicates a row, and the finished file is byte for byte
 * the one an uninterrupted run writes (tests/cli/sweep.sh).
 *
 * Locking: the sweep holds an exclusive lock (fcntl) on "OUT.lock" from
 * before it reads the output until it ends, the file holding "PID START".
 * A second sweep on the same --out refuses at once (TS_EIO naming the
 * holder's PID); a lock file left by a sweep that died is taken over
 * (stats->stale_lock_pid). A resume whose output holds a key twice (rows
 * written twice) stops with TS_EINVAL naming the key and its lines.
 *
 * Rows are evaluated by worker threads and committed in input order, so the
 * output does not depend on the thread count.
 *
 * Ownership: everything sweep_run allocates is freed before it returns.
 */
#ifndef TRAINSIM_SWEEP_H
#define TRAINSIM_SWEEP_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/util/err.h"

/* Evaluates one configuration given as an argument vector (argv[0] is
 * "sweep", then "--NAME=VALUE" ...). On success fills cells[0..n-1] with
 * strings the sweep frees (malloc'ed); on failure returns a TS_E* status and
 * a message (recorded in the row's error column, not fatal). Called from
 * several threads at once: must not share mutable state. */
typedef struct {
    size_t n;                 /* result columns */
    const char *const *names; /* their names (borrowed) */
    int (*eval)(void *user, int argc, char **argv, char **cells, ts_err *err);
    void *user;
    /* Checks an input column's name (without "--") once, before any row
     * runs, so that a misspelt column stops the sweep at once instead of
     * failing every row. TS_EINVAL with a message saying what would be
     * valid (sweep_run adds FILE:LINE and the column). NULL accepts every
     * name. Called from sweep_run's thread only, with user. */
    int (*check_column)(void *user, const char *name, ts_err *err);
} sweep_evaluator;

/* Progress: rows done (skipped ones included) of total, rows skipped as
 * already present. Called with a lock held, one call at a time. */
typedef void (*sweep_progress_fn)(void *user, size_t done, size_t total, size_t skipped);

typedef struct {
    const char *input;          /* input CSV path */
    const char *output;         /* output CSV path (appended; created if missing) */
    int threads;                /* >= 1 */
    sweep_progress_fn progress; /* may be NULL */
    void *progress_user;
} sweep_opts;

typedef struct {
    size_t rows;         /* data rows in the input */
    size_t skipped;      /* already in the output */
    size_t ran;          /* evaluated now */
    size_t failed;       /* of those, with status "error" */
    bool repaired;       /* a torn last line was cut off */
    long stale_lock_pid; /* a lock left by a dead sweep of this PID was taken over; 0 if none */
} sweep_stats;

/* Run the sweep. TS_EINVAL for a bad input (message with FILE:LINE; an
 * input column ev->check_column refuses is one, reported before any row
 * runs or the output is touched) or an output whose header differs; TS_EIO
 * for read/write failures. */
int sweep_run(const sweep_opts *o, const sweep_evaluator *ev, sweep_stats *stats, ts_err *err);

/* The key of data row `row` (1-based) with ncols cells under header (buf of
 * at least SWEEP_KEY_BYTES). */
#define SWEEP_KEY_BYTES 40
void sweep_row_key(size_t row, size_t ncols, const char *const *header, const char *const *cells, char *buf);

/* Repair a torn tail: if the file at path is non-empty and does not end with
 * a newline, truncate it after its last newline (or to empty) and fsync.
 * *repaired tells whether it did. TS_EIO on failure. A missing file is fine. */
int sweep_repair_tail(const char *path, bool *repaired, ts_err *err);

#endif
