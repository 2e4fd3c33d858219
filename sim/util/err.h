/* err — status codes and error messages shared by every library module.
 *
 * Contract: library functions return an int status (TS_OK on success, a
 * negative TS_E* code on failure) and, on failure, fill a caller-provided
 * ts_err with one human-readable message that says what was wrong, where
 * (file:line, column, flag) and what would be valid. Library code never prints
 * and never exits; only main programs do. A NULL ts_err is allowed: the
 * message is then dropped.
 */
#ifndef TRAINSIM_ERR_H
#define TRAINSIM_ERR_H

#include <stddef.h>

enum {
    TS_OK = 0,
    TS_EINVAL = -1, /* bad input: flag, CSV cell, configuration */
    TS_EIO = -2,    /* file could not be opened, read or written */
    TS_ENOMEM = -3, /* allocation failed */
    TS_ESTATE = -4, /* internal invariant broken (a bug, reported not hidden) */
    TS_ENOTSUP = -5 /* valid request this build/machine cannot serve */
};

#define ERR_MSG_BYTES 1024

typedef struct {
    int code;                /* last TS_E* code set, TS_OK if none */
    char msg[ERR_MSG_BYTES]; /* NUL-terminated message, "" if none */
} ts_err;

/* Reset e to "no error". e may be NULL. */
void err_clear(ts_err *e);

/* Set e's message with printf-style formatting and return code, so callers
 * write `return err_set(e, TS_EINVAL, "...", ...);`. e may be NULL. */
int err_set(ts_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __clang_analyzer__
/* For clang-tidy's static analyzer only (make lint; compilers never define
 * __clang_analyzer__): the contract above, err_set returns code, which the
 * analyzer cannot see from another file; it would otherwise assume TS_OK on
 * error paths and report what follows them. err.c #undefs it. */
#define err_set(e, code, ...) ((void)err_set((e), (code), __VA_ARGS__), (code))
#endif

/* Prefix e's existing message with a printf-style context ("file.csv: ...")
 * and return e's code. e may be NULL (returns TS_ESTATE then). */
int err_prefix(ts_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Short name of a status code ("invalid input", "I/O error", ...). */
const char *err_code_name(int code);

#endif
