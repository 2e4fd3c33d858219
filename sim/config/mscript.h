/* mscript — read a Megatron-LM bash launch script (the kind of
 * examples/gpt3/train_gpt3_175b_distributed.sh) without running it, and
 * return the arguments that would reach pretrain_gpt.py.
 *
 *   mscript *m = NULL;
 *   if (mscript_load("train.sh", &m, &err) == TS_OK) {
 *       for (int i = 0; i < m->argc; i++) ... m->argv[i] ...
 *       mscript_free(m);
 *   }
 *
 * What it reads, in order, line by line:
 *  - assignments NAME=value, NAME+=value, `export`/`declare`/`readonly`/
 *    `typeset` NAME=value, arrays NAME=( ... ) and NAME+=( ... ) over any
 *    number of lines with comments, `unset NAME`;
 *  - words as bash splits them: '...', "...", backslash escapes and line
 *    continuations, comments; expansions $NAME, ${NAME}, ${ARR[@]},
 *    ${ARR[*]}, ${ARR[N]}, ${#NAME}, ${NAME:-word} / ${NAME-word} /
 *    ${NAME:=word} / ${NAME:+word} (the word when the script never assigned
 *    NAME: the environment is not read), $(( )) integer arithmetic
 *    (+ - * / % and parentheses on numbers and variables); an unquoted
 *    expansion is split into words as bash does (no pathname expansion);
 *  - the launcher line: the command that runs a *.py program (torchrun,
 *    python -m torch.distributed.launch/run, python, deepspeed, srun ...).
 *    A program named pretrain*.py wins; otherwise a *.py given flags (--x).
 *    Two such lines of the same kind are an error. The words after the
 *    program are the arguments; the launcher's --nproc_per_node
 *    (--nproc-per-node, --num_gpus) and --nnodes (--num_nodes) give the
 *    world size nproc x nnodes (nnodes 1 when only nproc is given).
 * Other commands (mkdir, echo, cd, set, pipes, redirections ...) are skipped;
 * if/while/until/for blocks are skipped when they hold no assignment and no
 * launcher, and refused otherwise (their outcome needs the script run).
 *
 * Unresolved values: what the script alone cannot give — a variable never
 * assigned ($DATA_PATH), the script's positional arguments ($1, "$@"),
 * command substitution $(...) and `...`, other expansions (${X%.*}) — are
 * not errors here. The argument keeps the text as written ("$DATA_PATH"),
 * arg_why says why it is unresolved, and every unresolved reference reaching
 * the launcher line is listed once in unresolved[] ("line 40: $DATA_PATH
 * is never assigned ..."). A caller decides what is fatal: a value it needs.
 * No value is ever replaced by a default other than the script's own
 * ${NAME:-word} word.
 *
 * Errors (TS_EINVAL with "FILE:LINE: ..."): no launcher line (no command
 * running a *.py program), two launcher lines, an unterminated quote,
 * $(...), ${...} or array, and unsupported constructs, named (case, select,
 * functions, subshells, here-documents, source/., eval, conditional blocks
 * assigning variables). TS_EIO when the file cannot be read; TS_ENOMEM.
 * Library code: it prints nothing (mscript_write_notes writes where told).
 */
#ifndef TRAINSIM_MSCRIPT_H
#define TRAINSIM_MSCRIPT_H

#include <stddef.h>
#include <stdio.h>

#include "sim/util/err.h"

typedef struct {
    char *path;          /* the file as named; owned */
    char *program;       /* the program the launcher runs, as expanded ("pretrain_gpt.py"); owned */
    int launcher_line;   /* line where the launcher command starts (1-based) */
    int argc;            /* arguments after the program */
    char **argv;         /* [argc + 1], NULL-terminated; owned with their strings */
    int *arg_line;       /* [argc] the line each argument is written on */
    char **arg_why;      /* [argc] NULL, or why argv[i] holds unresolved text; owned */
    int world_size;      /* nproc_per_node x nnodes from the launcher; 0 = not given or unresolved */
    char *world_why;     /* NULL, or why the launcher's world size is unknown; owned */
    size_t n_unresolved; /* entries of unresolved */
    char **unresolved;   /* "line N: ..." for every unresolved reference on the launcher line, once each, in
                            order; owned */
} mscript;

/* Read the script at path. On success *out is a new mscript the caller
 * frees with mscript_free; on failure *out is NULL and err says what and
 * where (FILE:LINE). */
int mscript_load(const char *path, mscript **out, ts_err *err);

/* The same on text already in memory (len bytes, need not be
 * NUL-terminated); name is used in messages and copied into path. */
int mscript_parse(const char *name, const char *text, size_t len, mscript **out, ts_err *err);

/* Free m and everything it owns (NULL is fine). */
void mscript_free(mscript *m);

/* Write one line per unresolved entry to f: "PROG: note: --megatron-script
 * PATH: line N: ...". Nothing when there is none. */
void mscript_write_notes(const mscript *m, const char *prog, FILE *f);

#endif
