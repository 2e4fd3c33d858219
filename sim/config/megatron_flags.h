/* megatron_flags — what trainsim does with each Megatron-LM flag it does not
 * model, so that a launch script's flags paste in whole.
 *
 * Every argument of Megatron-LM's pretrain_gpt.py gets one treatment:
 *  - modelled: the flag is in the command's opt_table (the shared flags of
 *    flags.h and the command's own); it is never listed in the file;
 *  - ignored: it cannot change performance (learning rate, data paths,
 *    logging, checkpoints, ...); it is dropped with its values and named;
 *  - refused: it changes compute, memory, communication or the schedule and
 *    is not modelled; it is an error naming what it changes;
 *  - default-only: refused unless every value given is one of the row's
 *    accepted values (Megatron's default, or for --attention-backend the
 *    kernels trainsim models); then dropped silently.
 *
 * The rows live in topologies/megatron_flags.csv (found by catalog_find),
 * one per flag name, aliases as rows of their own. Columns:
 *   flag       "--lr" (starts with --)
 *   treatment  ignored | refused | default-only
 *   reason     a short category (ignored) or what it changes (refused)
 *   kind       how many values follow it, as Megatron-LM's argparse reads it:
 *              store_true, store_false, boolean_optional: none; value: one
 *              (the next argument, or --flag=value); list: every following
 *              argument up to the next one starting with "--" (so negative
 *              numbers are values), or the one of --flag=value
 *   accepted   default-only: the accepted values, '|'-separated (numbers
 *              compare by value: 1 = 1.0); empty otherwise
 *
 *   mflags_filtered f;
 *   rc = mflags_filter(NULL, &t, argc, argv, &f, &err); // NULL: the shipped file, loaded if needed
 *   rc = opt_parse(&t, f.argc, f.argv, &err);
 *   if (f.ignored) fprintf(stderr, "ignored (cannot change performance): %s\n", f.ignored);
 *   mflags_filtered_free(&f);
 *
 * Ownership: mflags_load returns a table owned by the caller (mflags_free);
 * entries and their strings belong to it. mflags_filter's result owns its
 * pointer array and its ignored list, not the argument strings, which stay
 * the caller's (mflags_filtered_free).
 */
#ifndef TRAINSIM_MEGATRON_FLAGS_H
#define TRAINSIM_MEGATRON_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "sim/config/catalog.h"
#include "sim/util/csvio.h"
#include "sim/util/err.h"
#include "sim/util/opt.h"

#define MFLAGS_FILE "megatron_flags.csv"
#define MFLAGS_DOC  "docs/inputs.md#megatron-flags"

typedef enum {
    MFLAGS_MODELLED = 0, /* in the opt_table; never a row of the file */
    MFLAGS_IGNORED,
    MFLAGS_REFUSED,
    MFLAGS_DEFAULT_ONLY,
    MFLAGS_N_TREATMENTS
} mflags_treatment;

typedef enum {
    MFLAGS_STORE_TRUE = 0,  /* no value */
    MFLAGS_STORE_FALSE,     /* no value */
    MFLAGS_VALUE,           /* one value */
    MFLAGS_LIST,            /* the following arguments up to the next "--..." */
    MFLAGS_BOOLEAN_OPTIONAL /* no value (--x / --no-x) */
} mflags_kind;

/* NULL-terminated names, indexed by the enums above ("modelled", "ignored",
 * "refused", "default-only"; "store_true", ..., "boolean_optional"). */
extern const char *const MFLAGS_TREATMENT_NAMES[];
extern const char *const MFLAGS_KIND_NAMES[];

typedef struct {
    const char *flag;     /* "--num-experts" */
    const char *reason;   /* short category or what it changes */
    const char *accepted; /* default-only: '|'-separated values; "" otherwise */
    mflags_treatment treatment;
    mflags_kind kind;
    int line; /* line in the file */
} mflags_entry;

typedef struct {
    size_t n;
    mflags_entry *entries; /* n entries sorted by flag (strcmp) */
    csvio_table *csv;      /* the parsed file; holds the strings */
    char path[CATALOG_PATH_BYTES];
} mflags_table;

/* Load a flag file; path NULL = the shipped megatron_flags.csv. TS_EINVAL
 * "FILE:LINE: column 'NAME': ..." for a flag not starting with "--", an
 * unknown treatment or kind, an empty reason, a default-only row without
 * accepted values or whose kind takes no value, accepted values on another
 * row, a flag listed twice; TS_EIO if unreadable or not found. The caller
 * owns *out (mflags_free). */
int mflags_load(const char *path, mflags_table **out, ts_err *err);
void mflags_free(mflags_table *t);

/* The row for flag (exact name, without "=value"), or NULL. Borrowed from t. */
const mflags_entry *mflags_find(const mflags_table *t, const char *flag);

/* Whether the opt_table has a flag of this long name or alias (sections
 * excluded); name need not be NUL-terminated at len. */
bool mflags_in_table(const opt_table *t, const char *name, size_t len);

typedef struct {
    int argc;      /* argv[0] and what opt_parse should see */
    char **argv;   /* argc + 1 pointers, NULL-terminated; the array is owned, the strings are the input's */
    char *ignored; /* the ignored flags in the order given, each once, ", "-separated ("--lr, --data-path");
                      NULL if none; owned */
    size_t n_ignored;
} mflags_filtered;

/* Filter argv[1 .. argc-1] for opt_parse. Arguments not starting with "--",
 * the "--" separator and all after it, --help and all after it, and flags t
 * knows pass through unchanged, as do flags in neither t nor the file
 * (opt_parse then reports them with the nearest name). Ignored flags are
 * dropped with their values (see kind) and collected in out->ignored;
 * default-only flags given an accepted value are dropped silently.
 * mt NULL: the shipped file, read only when some "--" flag is unknown to t.
 * TS_EINVAL: a refused flag ("--num-experts: not modelled: mixture of
 * experts (Megatron-LM flag; remove it or see docs/inputs.md#megatron-flags)"),
 * a default-only flag with another value (the accepted values named), a
 * switch given "=value", a value flag without its value. TS_ENOMEM; TS_EIO
 * / TS_EINVAL from loading the file. On failure *out holds nothing. */
int mflags_filter(const mflags_table *mt, const opt_table *t, int argc, char **argv, mflags_filtered *out, ts_err *err);

/* Free what mflags_filter allocated in f (safe on a zeroed struct). */
void mflags_filtered_free(mflags_filtered *f);

/* Write the whole treatment table, one flag a line sorted by name: first
 * column the flag, second the treatment, then the reason (accepted values
 * for default-only rows); the modelled flags are every flag of t (reason
 * "see trainsim config --help"); rows of mt whose flag t has are
 * skipped (t wins, as in mflags_filter). Last line: "N modelled, N refused,
 * N ignored, N default-only". TS_ENOMEM; TS_EIO on a write error. */
int mflags_print(const mflags_table *mt, const opt_table *t, FILE *f, ts_err *err);

#endif
