#include "sim/config/mscript.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/mscript_exp.h"
#include "sim/config/mscript_lex.h"

/* ---------------------------------------------------------------- parser */

typedef struct {
    const char *file;
    mscript_lex lx;        /* the reading position */
    mscript_scope sc;      /* the variables */
    int depth, block_line; /* inside if/while/until/for: depth and the outer block's first line */
    const char *block_kw;
    mscript_lex_buf block_names; /* the variables the outer block assigns, ", "-separated */
    mscript *m;                  /* the result, for notes */
    /* the launcher chosen so far */
    int best_rank, best_line;
    mscript_vals best_args, best_pre; /* words after and before the program */
    char *best_prog;
    ts_err *err;
} mparser;

static int enomem(mparser *p)
{
    return err_set(p->err, TS_ENOMEM, "%s: out of memory reading the script", p->file);
}

/* ---------------------------------------------------------------- commands */

/* Perform the assignment word w. */
static int assign(mparser *p, const mscript_lex_word *w)
{
    size_t k = mscript_lex_assign_len(w->raw);
    bool append = w->raw[k] == '+';
    mscript_vals v = {0};
    int rc = TS_OK;
    if (w->array) {
        for (size_t j = 0; j < w->nel && !rc; j++)
            rc = mscript_exp_fields(&p->sc, w->el[j].raw, w->el[j].line, &v);
    } else {
        rc = mscript_exp_value(&p->sc, w->raw + k + 1 + append, w->line, &v);
    }
    if (!rc)
        rc = mscript_exp_set(&p->sc, w->raw, k, &v, append);
    mscript_exp_vals_free(&v);
    return rc;
}

/* The rank of a launcher: 2 runs pretrain*.py, 1 runs another *.py with
 * flags, 0 is no launcher. *k is the program's field. */
static int launcher_rank(const mscript_vals *f, size_t *k)
{
    if (!f->n || !strcmp(f->v[0].text, "echo") || !strcmp(f->v[0].text, "printf"))
        return 0;
    for (size_t j = 0; j < f->n; j++) {
        const char *t = f->v[j].text;
        size_t n = strlen(t);
        if (n > 3 && !strcmp(t + n - 3, ".py") && !f->v[j].why) {
            *k = j;
            const char *base = strrchr(t, '/');
            base = base ? base + 1 : t;
            if (!strncmp(base, "pretrain", 8))
                return 2;
            for (size_t a = j + 1; a < f->n; a++)
                if (!strncmp(f->v[a].text, "--", 2))
                    return 1;
            return 0;
        }
    }
    return 0;
}

static int launcher(mparser *p, mscript_vals *f, int line)
{
    size_t k = 0;
    int r = launcher_rank(f, &k);
    if (!r || r < p->best_rank)
        return TS_OK;
    if (r == p->best_rank)
        return err_set(p->err, TS_EINVAL,
                       "%s:%d: a second launcher line (the first is line %d); trainsim reads one command running "
                       "%s: keep one in the script",
                       p->file, line, p->best_line, r == 2 ? "pretrain*.py" : "a *.py program with flags");
    mscript_exp_vals_free(&p->best_args);
    mscript_exp_vals_free(&p->best_pre);
    free(p->best_prog);
    p->best_rank = r;
    p->best_line = line;
    p->best_prog = f->v[k].text;
    f->v[k].text = NULL;
    for (size_t j = 0; j < f->n; j++) {
        if (j == k)
            continue;
        char *t = f->v[j].text, *why = f->v[j].why;
        f->v[j].text = f->v[j].why = NULL;
        if (mscript_exp_push(j < k ? &p->best_pre : &p->best_args, t, why, f->v[j].line))
            return enomem(p);
    }
    return TS_OK;
}

static bool word_is(const mscript_lex_cmd *c, size_t i, const char *kw)
{
    return i < c->n && !c->w[i].array && !strcmp(c->w[i].raw, kw);
}

static int add_note(mscript *m, const char *why);

/* Inside a block (not run): refuse a launcher, note the variables it assigns. */
static int in_block(mparser *p, const mscript_lex_cmd *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const char *t = c->w[i].raw;
        size_t k = mscript_lex_assign_len(t);
        if (strstr(t, ".py"))
            return err_set(p->err, TS_EINVAL,
                           "%s:%d: unsupported construct: a *.py command inside the '%s' block of line %d (trainsim "
                           "runs no conditions or loops); put the launcher line outside the block",
                           p->file, c->line, p->block_kw, p->block_line);
        if (!k)
            continue;
        char name[128];
        if (k > 100) /* a name this long is noted by its first 100 characters */
            k = 100;
        snprintf(name, sizeof name, "%.*s", (int)k, t);
        bool known = false;
        for (const char *q = p->block_names.p; q && (q = strstr(q, name)); q += k)
            known |= (q == p->block_names.p || q[-1] == ' ') && (!q[k] || q[k] == ',');
        if (!known && ((p->block_names.n && mscript_lex_put(&p->block_names, ", ", 2)) ||
                       mscript_lex_put(&p->block_names, name, k)))
            return enomem(p);
    }
    return TS_OK;
}

/* The outer block of lines p->block_line .. end was skipped: note what it
 * would have assigned. */
static int block_closed(mparser *p, int end)
{
    if (!p->block_names.n)
        return TS_OK;
    char *note = mscript_exp_fmt("lines %d-%d: the '%s' block was not run (trainsim runs no conditions or loops); its "
                                 "assignments to %s were not made",
                                 p->block_line, end, p->block_kw, p->block_names.p);
    free(p->block_names.p);
    memset(&p->block_names, 0, sizeof p->block_names);
    int rc = note ? add_note(p->m, note) : TS_ENOMEM;
    free(note);
    return rc ? enomem(p) : TS_OK;
}

static int run_command(mparser *p, mscript_lex_cmd *c)
{
    static const char *const OPEN[] = {"if", "while", "until", "for", NULL};
    static const char *const REFUSE[] = {"case", "select", "function", "{", "source", ".", "eval", NULL};
    size_t i = 0;
    while (word_is(c, i, "then") || word_is(c, i, "do") || word_is(c, i, "else") || word_is(c, i, "elif") ||
           word_is(c, i, "!"))
        i++;
    for (int k = 0; REFUSE[k]; k++)
        if (word_is(c, i, REFUSE[k]))
            return err_set(p->err, TS_EINVAL,
                           "%s:%d: unsupported construct '%s': trainsim reads assignments, arrays and the "
                           "launcher line, and runs nothing (write the values out in the script)",
                           p->file, c->line, REFUSE[k]);
    for (int k = 0; OPEN[k]; k++)
        if (word_is(c, i, OPEN[k])) {
            if (!p->depth++) {
                p->block_line = c->line;
                p->block_kw = OPEN[k];
            }
            i++;
        }
    bool close = word_is(c, i, "fi") || word_is(c, i, "done");
    int rc = p->depth > 0 ? in_block(p, c) : TS_OK;
    if (rc)
        return rc;
    if (close) {
        if (p->depth > 0 && --p->depth == 0)
            return block_closed(p, c->line);
        return TS_OK;
    }
    if (p->depth > 0)
        return TS_OK;
    bool decl = word_is(c, i, "export") || word_is(c, i, "declare") || word_is(c, i, "readonly") ||
                word_is(c, i, "typeset") || word_is(c, i, "local");
    if (decl || word_is(c, i, "unset")) {
        for (size_t j = i + 1; j < c->n; j++) {
            const mscript_lex_word *w = &c->w[j];
            size_t k = mscript_lex_assign_len(w->raw);
            rc = TS_OK;
            if (decl && k)
                rc = assign(p, w);
            else if (!decl && w->raw[0] != '-') {
                mscript_var *v = mscript_exp_find(&p->sc, w->raw, strlen(w->raw));
                if (v)
                    mscript_exp_vals_free(&v->vals);
            }
            if (rc)
                return rc;
        }
        return TS_OK;
    }
    size_t first = i;
    while (first < c->n && (c->w[first].array || mscript_lex_assign_len(c->w[first].raw)))
        first++;
    if (first == c->n) { /* assignments only */
        for (size_t j = i; j < c->n; j++) {
            rc = assign(p, &c->w[j]);
            if (rc)
                return rc;
        }
        return TS_OK;
    }
    /* a command (NAME=v prefixes apply to it alone): expand, look for the launcher */
    mscript_vals f = {0};
    for (size_t j = first; j < c->n && !rc; j++) {
        if (c->w[j].array)
            rc = err_set(p->err, TS_EINVAL, "%s:%d: an array assignment %s( ... ) as an argument", p->file,
                         c->w[j].line, c->w[j].raw);
        else
            rc = mscript_exp_fields(&p->sc, c->w[j].raw, c->w[j].line, &f);
    }
    if (!rc)
        rc = launcher(p, &f, c->line);
    mscript_exp_vals_free(&f);
    return rc;
}

/* ---------------------------------------------------------------- result */

static int add_note(mscript *m, const char *why)
{
    for (size_t i = 0; i < m->n_unresolved; i++)
        if (!strcmp(m->unresolved[i], why))
            return TS_OK;
    char **u = realloc(m->unresolved, (m->n_unresolved + 1) * sizeof *u);
    if (!u)
        return TS_ENOMEM;
    m->unresolved = u;
    if (!(u[m->n_unresolved] = strdup(why)))
        return TS_ENOMEM;
    m->n_unresolved++;
    return TS_OK;
}

/* World size from the launcher's own flags (p->best_pre). */
static int world_size(mparser *p, mscript *m)
{
    static const char *const NPROC[] = {"--nproc_per_node", "--nproc-per-node", "--num_gpus", "--num-gpus", NULL};
    static const char *const NNODES[] = {"--nnodes", "--num_nodes", "--num-nodes", NULL};
    long nproc = 0, nnodes = 1;
    const mscript_vals *f = &p->best_pre;
    for (size_t j = 0; j < f->n; j++) {
        const char *t = f->v[j].text;
        for (int which = 0; which < 2; which++) {
            const char *const *names = which ? NNODES : NPROC;
            for (int k = 0; names[k]; k++) {
                size_t len = strlen(names[k]);
                if (strncmp(t, names[k], len) || (t[len] && t[len] != '='))
                    continue;
                const mscript_val *val = t[len] ? &f->v[j] : j + 1 < f->n ? &f->v[j + 1] : NULL;
                const char *vt = !val ? "" : t[len] ? t + len + 1 : val->text;
                char *end;
                long x = strtol(vt, &end, 10);
                if (val && val->why && !m->world_why)
                    m->world_why = mscript_exp_fmt("the launcher's %s is unresolved: %s", names[k], val->why);
                else if ((!val || *end || end == vt || x < 1 || x > (1L << 24)) && !m->world_why)
                    m->world_why = mscript_exp_fmt("line %d: the launcher's %s '%s' is not a positive integer",
                                                   val ? val->line : p->best_line, names[k], vt);
                else if (which)
                    nnodes = x;
                else
                    nproc = x;
            }
        }
    }
    if (m->world_why)
        return add_note(m, m->world_why);
    m->world_size = nproc > 0 && nproc * nnodes <= 1L << 24 ? (int)(nproc * nnodes) : 0;
    return TS_OK;
}

static int build_result(mparser *p, mscript *m)
{
    if (!p->best_rank)
        return err_set(p->err, TS_EINVAL,
                       "%s: no launcher line: no command runs pretrain_gpt.py or another *.py program with flags "
                       "(expected e.g. `torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ...`)",
                       p->file);
    m->program = p->best_prog;
    p->best_prog = NULL;
    m->launcher_line = p->best_line;
    size_t n = p->best_args.n;
    m->argv = calloc(n + 1, sizeof *m->argv);
    m->arg_why = calloc(n ? n : 1, sizeof *m->arg_why);
    m->arg_line = calloc(n ? n : 1, sizeof *m->arg_line);
    if (!m->argv || !m->arg_why || !m->arg_line)
        return enomem(p);
    for (size_t j = 0; j < n; j++) {
        mscript_val *x = &p->best_args.v[j];
        m->argv[j] = x->text;
        m->arg_why[j] = x->why;
        m->arg_line[j] = x->line;
        x->text = x->why = NULL;
        m->argc++;
    }
    for (size_t j = 0; j < p->best_pre.n; j++)
        if (p->best_pre.v[j].why && add_note(m, p->best_pre.v[j].why))
            return enomem(p);
    for (int j = 0; j < m->argc; j++)
        if (m->arg_why[j] && add_note(m, m->arg_why[j]))
            return enomem(p);
    return world_size(p, m) ? enomem(p) : TS_OK;
}

int mscript_parse(const char *name, const char *text, size_t len, mscript **out, ts_err *err)
{
    *out = NULL;
    mparser p = {.file = name,
                 .lx = {.file = name, .s = text, .n = len, .line = 1, .err = err},
                 .sc = {.file = name, .err = err},
                 .err = err};
    mscript *m = calloc(1, sizeof *m);
    p.m = m;
    mscript_lex_cmd c = {0};
    int rc = m && (m->path = strdup(name)) ? TS_OK : enomem(&p);
    const char *nul = rc ? NULL : memchr(text, '\0', len);
    if (nul) {
        int line = 1;
        for (const char *q = text; q < nul; q++)
            line += *q == '\n';
        rc = err_set(err, TS_EINVAL, "%s:%d: a NUL byte: not a bash script (expected text)", name, line);
    }
    while (!rc && p.lx.i < p.lx.n) {
        rc = mscript_lex_next(&p.lx, &c);
        if (!rc && c.n)
            rc = run_command(&p, &c);
    }
    if (!rc && p.depth > 0)
        rc = err_set(err, TS_EINVAL, "%s:%d: the '%s' block is never closed (no %s)", name, p.block_line, p.block_kw,
                     !strcmp(p.block_kw, "if") ? "fi" : "done");
    if (!rc)
        rc = build_result(&p, m);
    mscript_lex_cmd_free(&c);
    mscript_scope_free(&p.sc);
    mscript_exp_vals_free(&p.best_args);
    mscript_exp_vals_free(&p.best_pre);
    free(p.best_prog);
    free(p.block_names.p);
    if (rc)
        mscript_free(m);
    else
        *out = m;
    return rc;
}

int mscript_load(const char *path, mscript **out, ts_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, TS_EIO, "%s: cannot open the launch script: %s", path, strerror(errno));
    mscript_lex_buf b = {0};
    char chunk[8192];
    size_t got;
    int rc = TS_OK;
    while (!rc && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (mscript_lex_put(&b, chunk, got))
            rc = err_set(err, TS_ENOMEM, "%s: out of memory reading the launch script", path);
    if (!rc && ferror(f))
        rc = err_set(err, TS_EIO, "%s: cannot read the launch script: %s", path, strerror(errno));
    (void)fclose(f); /* read only: nothing to lose */
    if (!rc)
        rc = mscript_parse(path, b.p ? b.p : "", b.n, out, err);
    free(b.p);
    return rc;
}

void mscript_free(mscript *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->argc; i++) {
        free(m->argv[i]);
        free(m->arg_why[i]);
    }
    for (size_t i = 0; i < m->n_unresolved; i++)
        free(m->unresolved[i]);
    free(m->argv);
    free(m->arg_why);
    free(m->arg_line);
    free(m->unresolved);
    free(m->world_why);
    free(m->program);
    free(m->path);
    free(m);
}

void mscript_write_notes(const mscript *m, const char *prog, FILE *f)
{
    for (size_t i = 0; m && i < m->n_unresolved; i++)
        fprintf(f, "%s: note: --megatron-script %s: %s\n", prog, m->path, m->unresolved[i]);
}
