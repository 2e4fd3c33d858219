/* mscript_lex — the words and commands of a bash launch script, for
 * mscript (mscript.h): what bash would see before any expansion.
 *
 *   mscript_lex lx = {.file = "train.sh", .s = text, .n = len, .line = 1, .err = &err};
 *   mscript_lex_cmd c = {0};
 *   while (lx.i < lx.n && mscript_lex_next(&lx, &c) == TS_OK)
 *       ... c.w[0 .. c.n) ...
 *   mscript_lex_cmd_free(&c);
 *
 * A command is a simple command: its words up to a newline, ';', '&', '&&',
 * '|' or '||' (so the parts of a pipeline or list are separate commands).
 * Words keep their quotes, $(...), ${...} and `...` as written (the
 * expansion is mscript_exp's); comments and backslash-newline continuations
 * are removed; redirections (> f, 2>&1, &> f, < f) are dropped with their
 * targets. NAME=( ... ) and NAME+=( ... ) are one word "NAME=" with the
 * elements as written, over any number of lines with comments.
 * Errors, TS_EINVAL "FILE:LINE: ...": an unterminated quote, $(...), ${...},
 * `...` or array; a subshell ( ... ), a function definition NAME(), a
 * here-document (<<), case's ;; (unsupported). TS_ENOMEM.
 */
#ifndef TRAINSIM_MSCRIPT_LEX_H
#define TRAINSIM_MSCRIPT_LEX_H

#include <stdbool.h>
#include <stddef.h>

#include "sim/util/err.h"

/* A growing NUL-terminated string. */
typedef struct {
    char *p; /* owned; NULL while empty */
    size_t n, cap;
} mscript_lex_buf;

/* Append n bytes of s. TS_OK or TS_ENOMEM (b unchanged). */
int mscript_lex_put(mscript_lex_buf *b, const char *s, size_t n);

/* The string built (an empty one if nothing was put), now the caller's to
 * free; b is empty again. NULL when out of memory. */
char *mscript_lex_take(mscript_lex_buf *b);

/* A word as written; an array assignment is raw "NAME=" (or "NAME+=") with
 * array set and its elements in el. */
typedef struct mscript_lex_word {
    char *raw;                   /* owned */
    int line;                    /* where it starts */
    struct mscript_lex_word *el; /* [nel] elements; owned */
    size_t nel, capel;
    bool array;
} mscript_lex_word;

typedef struct {
    mscript_lex_word *w; /* [n]; owned */
    size_t n, cap;
    int line; /* where the command starts */
} mscript_lex_cmd;

/* The reading position in a script. */
typedef struct {
    const char *file; /* for messages (borrowed) */
    const char *s;    /* the text, n bytes, no NUL byte inside (borrowed) */
    size_t n, i;      /* length; position */
    int line;         /* line at i (1-based) */
    ts_err *err;
} mscript_lex;

/* Read the next command into c (its previous words freed). At the end of
 * the text c->n is 0. */
int mscript_lex_next(mscript_lex *lx, mscript_lex_cmd *c);

/* Free c's words (c stays usable); _free also frees the array. */
void mscript_lex_cmd_clear(mscript_lex_cmd *c);
void mscript_lex_cmd_free(mscript_lex_cmd *c);

/* The end (exclusive) of the group that opens at s[i] ('...', "...",
 * `...`, $(...), ${...}); 0 when it is never closed within n bytes. */
size_t mscript_lex_group_end(const char *s, size_t n, size_t i);

/* A group's name for messages ("double quote \"", "${ ... }"). */
const char *mscript_lex_group_name(const char *s);

/* Whether c may be in a variable name (first: its first character). */
bool mscript_lex_name_char(char c, bool first);

/* Length of NAME when s is "NAME=..." or "NAME+=...", else 0. */
size_t mscript_lex_assign_len(const char *s);

#endif
