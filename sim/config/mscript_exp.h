/* mscript_exp — the variables of a bash launch script and the expansion of
 * its words, for mscript (mscript.h). Nothing is run and the environment
 * is not read.
 *
 *   mscript_scope sc = {.file = "train.sh", .err = &err};
 *   mscript_vals v = {0};
 *   mscript_exp_value(&sc, "8", 3, &v);            // GPUS=8 on line 3
 *   mscript_exp_set(&sc, "GPUS", 4, &v, false);    // takes v's values
 *   mscript_exp_fields(&sc, "$GPUS", 9, &out);     // out += "8"
 *   mscript_exp_vals_free(&out); mscript_scope_free(&sc);
 *
 * A value is resolved text, or unresolved: its text is then what the script
 * wrote ("$DATA_PATH") and why says why, with the line ("line 40:
 * $DATA_PATH is never assigned ..."). Expansions: $NAME, ${NAME},
 * ${ARR[@]}, ${ARR[*]}, ${ARR[N]}, ${#NAME}, ${#ARR[@]}; ${NAME:-w},
 * ${NAME-w}, ${NAME:=w}, ${NAME=w} give w when NAME is not assigned (w is
 * the script's own default; := does not assign), ${NAME:+w}; $(( )) on
 * integers (+ - * / % and parentheses, names with or without $).
 * Unresolved: a name never assigned, the script's arguments ($1, "$@"),
 * the shell's ($$, $?), $(...) and `...`, other ${...} forms, arithmetic
 * that is not that. Unquoted expansions are split at blanks (no pathname
 * expansion), "${ARR[@]}" gives one field per element.
 */
#ifndef TRAINSIM_MSCRIPT_EXP_H
#define TRAINSIM_MSCRIPT_EXP_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/util/err.h"

/* A value: a scalar, an array element, a field of a command. */
typedef struct {
    char *text; /* owned */
    char *why;  /* owned; NULL when the text is resolved */
    int line;   /* where it is written */
} mscript_val;

typedef struct {
    mscript_val *v; /* [n]; owned */
    size_t n, cap;
} mscript_vals;

typedef struct {
    char *name;        /* owned */
    mscript_vals vals; /* a scalar has one value */
} mscript_var;

/* The variables assigned so far. */
typedef struct {
    const char *file;  /* for messages (borrowed) */
    mscript_var *vars; /* [nvars]; owned */
    size_t nvars, capvars;
    ts_err *err;
} mscript_scope;

/* Append a value, taking text and why (both freed on failure; text NULL is
 * a failure). TS_OK or TS_ENOMEM. */
int mscript_exp_push(mscript_vals *l, char *text, char *why, int line);

/* Free l's values (l is empty again). */
void mscript_exp_vals_free(mscript_vals *l);

/* The variable name[0 .. len), or NULL when never assigned (or unset). */
mscript_var *mscript_exp_find(const mscript_scope *sc, const char *name, size_t len);

/* Assign (append: +=) vals to the variable name[0 .. len), taking the
 * values out of vals (vals is left empty). A scalar += appends text. */
int mscript_exp_set(mscript_scope *sc, const char *name, size_t len, mscript_vals *vals, bool append);

/* Free every variable. */
void mscript_scope_free(mscript_scope *sc);

/* Expand the word raw (as written, on line) into fields appended to out. */
int mscript_exp_fields(mscript_scope *sc, const char *raw, int line, mscript_vals *out);

/* Expand raw as an assignment's value: one value, never split, appended to
 * out. */
int mscript_exp_value(mscript_scope *sc, const char *raw, int line, mscript_vals *out);

/* printf into a new string the caller frees; NULL when out of memory. */
char *mscript_exp_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
