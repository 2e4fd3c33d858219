/* opt — the command-line flag parser every subcommand uses.
 *
 * A subcommand fills an opt_table with flag specs (Megatron-LM style long
 * names such as "--num-layers", an optional short alias such as "-p"), each
 * pointing at the variable it sets, then calls opt_parse(). Values are given
 * as `--flag VALUE` or `--flag=VALUE`; switches (OPT_BOOL) take no value, or
 * `--flag=true|false` to override a preset. Errors are TS_EINVAL with a
 * message naming the flag and what would be valid: unknown flag (with the
 * nearest valid name), missing value, not a number or trailing junk, value
 * out of range (the range is given), bad enum value (valid names listed),
 * flag given twice. opt_was_set() tells which flags the user gave, so callers
 * can let explicit flags override presets whatever their order.
 *
 *   opt_table t;
 *   opt_table_init(&t, "trainsim simulate", "Predict one training iteration.");
 *   opt_add(&t, &(opt_spec){.name = "--num-layers", .type = OPT_INT,
 *           .target = &c.model.num_layers, .min = 1, .max = 100000,
 *           .unit = "layers", .help = "transformer layers"});
 *   int rc = opt_parse(&t, argc, argv, &err);   // argv[0] = the command name
 *   if (t.help_requested) opt_help(&t, stdout);
 *   opt_table_free(&t);
 *
 * Ownership: the table owns copies of the spec array entries (not of the
 * strings they point to, which must outlive the table: string literals in
 * practice). OPT_STRING targets (const char **) are set to point into argv.
 */
#ifndef TRAINSIM_OPT_H
#define TRAINSIM_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/util/err.h"

typedef enum {
    OPT_INT = 0, /* target: int *,      range [min, max] */
    OPT_INT64,   /* target: int64_t *,  range [min, max] (exact up to 2^53) */
    OPT_DOUBLE,  /* target: double *,   range [min, max]; finite */
    OPT_BOOL,    /* target: bool *,     a switch: present = true */
    OPT_STRING,  /* target: const char **, points into argv */
    OPT_ENUM,    /* target: int *,      index into enum_names */
    OPT_SECTION  /* no target: a heading in the help text (name = title) */
} opt_type;

typedef struct {
    const char *name;  /* "--num-layers" (must start with "--") */
    const char *alias; /* "-p", or NULL */
    opt_type type;
    void *target;                  /* what the flag sets (see opt_type) */
    double min, max;               /* inclusive range for numbers; min == max == 0: no range */
    const char *const *enum_names; /* OPT_ENUM: NULL-terminated list of names */
    const char *unit;              /* "sequences", "GB/s", "ms"... shown in help; NULL = none */
    const char *defval;            /* default shown in help; NULL = the target's value at opt_add */
    const char *help;              /* one sentence */
    const char *metavar;           /* value placeholder in help ("FILE"); NULL = from type */
} opt_spec;

#define OPT_DEFVAL_BYTES 48

typedef struct {
    opt_spec spec;
    char defbuf[OPT_DEFVAL_BYTES]; /* the target's value at opt_add, shown when spec.defval is NULL */
    bool set;                      /* given on the command line */
} opt_entry;

typedef struct opt_table {
    const char *prog;    /* "trainsim simulate" (usage line) */
    const char *summary; /* one paragraph printed under the usage line */
    opt_entry *entries;  /* owned */
    size_t n, cap;
    bool help_requested; /* --help or -h was given */
    int max_positional;  /* how many non-flag arguments are accepted (default 0) */
    int n_positional;
    char **positional; /* owned array of pointers into argv */
} opt_table;

/* Start an empty table. prog and summary are borrowed. */
void opt_table_init(opt_table *t, const char *prog, const char *summary);

/* Release what t owns (not the targets). */
void opt_table_free(opt_table *t);

/* Add one flag (the spec is copied). TS_ESTATE for a malformed spec or a
 * name/alias already in the table (a programming error), TS_ENOMEM. */
int opt_add(opt_table *t, const opt_spec *s, ts_err *err);

/* Add a heading for the help text. */
int opt_section(opt_table *t, const char *title, ts_err *err);

/* Parse argv[1 .. argc-1] (argv[0] is the command name). Sets targets, marks
 * flags as set. "--help"/"-h" sets t->help_requested and stops parsing
 * (returns TS_OK). A lone "--" ends the flags; non-flag arguments are
 * positional (at most t->max_positional). TS_EINVAL with a message on bad
 * input; targets already set stay set. */
int opt_parse(opt_table *t, int argc, char **argv, ts_err *err);

/* The flag with this long name ("--num-layers"; not an alias), or NULL if
 * the table has none. Borrowed from t. */
const opt_spec *opt_find(const opt_table *t, const char *name);

/* Whether the flag with this long name was given. false for unknown names. */
bool opt_was_set(const opt_table *t, const char *name);

/* Whether some flag whose target is ptr was given (lets callers ask by field). */
bool opt_target_set(const opt_table *t, const void *ptr);

/* The long name of the nearest flag to name (edit distance), or NULL if the
 * table has no flags. */
const char *opt_nearest(const opt_table *t, const char *name);

/* Write the help text: usage, summary, then every flag with its value kind,
 * unit, default, range (or valid names) and help. */
void opt_help(const opt_table *t, FILE *f);

/* Levenshtein edit distance between a and b (exposed for tests and for other
 * "did you mean" messages, e.g. model and GPU names). */
size_t opt_edit_distance(const char *a, const char *b);

#endif
