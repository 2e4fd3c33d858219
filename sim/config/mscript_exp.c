#include "sim/config/mscript_exp.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config/mscript_lex.h"
#include "sim/util/grow.h"

char *mscript_exp_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void mscript_exp_vals_free(mscript_vals *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].text);
        free(l->v[i].why);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Append a value, taking text and why (freed on failure). */
int mscript_exp_push(mscript_vals *l, char *text, char *why, int line)
{
    if (!text || grow_to((void **)&l->v, &l->cap, l->n + 1, 8, sizeof *l->v)) {
        free(text);
        free(why);
        return TS_ENOMEM;
    }
    l->v[l->n++] = (mscript_val){text, why, line};
    return TS_OK;
}

/* ---------------------------------------------------------------- expansion */

typedef struct {
    mscript_scope *p;
    mscript_vals out;    /* the fields */
    mscript_lex_buf cur; /* the field being built */
    bool have;           /* cur is a field even if empty ("") */
    char *why;           /* the first unresolved reason in cur */
    int fline;           /* line of cur's first piece */
    int line;            /* line of the word being expanded */
    bool assign;         /* an assignment's value: no splitting, breaks join with a space */
} mexp;

mscript_var *mscript_exp_find(const mscript_scope *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->nvars; i++)
        if (strlen(p->vars[i].name) == len && !strncmp(p->vars[i].name, name, len))
            return &p->vars[i];
    return NULL;
}

/* End the current field (force: even an empty one). */
static int exp_break(mexp *e, bool force)
{
    if (!e->have && !force)
        return TS_OK;
    if (e->assign)
        return e->have ? mscript_lex_put(&e->cur, " ", 1) : TS_OK;
    char *why = e->why;
    e->why = NULL;
    e->have = false;
    return mscript_exp_push(&e->out, mscript_lex_take(&e->cur), why, e->fline);
}

/* Append text; split at blanks when split (an unquoted expansion). why:
 * the text is unresolved (kept whole, reason copied). */
static int exp_piece(mexp *e, const char *t, size_t n, bool split, const char *why, int line)
{
    if (!e->cur.n)
        e->fline = line;
    if (why && !e->why && !(e->why = strdup(why)))
        return TS_ENOMEM;
    if (!split || why || e->assign) {
        e->have = true;
        return mscript_lex_put(&e->cur, t, n);
    }
    int rc = TS_OK;
    for (size_t k = 0; k < n && !rc; k++) {
        if (t[k] == ' ' || t[k] == '\t' || t[k] == '\n') {
            rc = exp_break(e, false);
        } else {
            if (!e->have)
                e->fline = line;
            e->have = true;
            rc = mscript_lex_put(&e->cur, t + k, 1);
        }
    }
    return rc;
}

static int exp_word(mexp *e, const char *raw, size_t len, bool quoted);

/* An unresolved reference: its text as written, the reason. */
static int exp_unresolved(mexp *e, const char *ref, size_t rlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int exp_unresolved(mexp *e, const char *ref, size_t rlen, const char *fmt, ...)
{
    char why[600];
    int off = snprintf(why, sizeof why, "line %d: ", e->line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why + off, sizeof why - (size_t)off, fmt, ap);
    va_end(ap);
    return exp_piece(e, ref, rlen, false, why, e->line);
}

/* The values a reference gives, or NULL when NAME is not assigned. */
typedef enum { SUB_NONE, SUB_AT, SUB_STAR, SUB_INDEX } sub_kind;

static int exp_values(mexp *e, const mscript_var *v, sub_kind sub, long idx, bool quoted, const char *ref, size_t rlen)
{
    const mscript_vals *l = &v->vals;
    size_t from = 0, to = l->n;
    if (sub == SUB_NONE || sub == SUB_INDEX) {
        from = sub == SUB_INDEX ? (size_t)idx : 0;
        to = from < l->n ? from + 1 : from;
    }
    int rc = TS_OK;
    for (size_t k = from; k < to && !rc; k++) {
        const mscript_val *x = &l->v[k];
        if (k > from)
            rc = sub == SUB_STAR && quoted ? exp_piece(e, " ", 1, false, NULL, x->line) : exp_break(e, quoted);
        if (rc)
            break;
        int line = sub == SUB_NONE ? e->line : x->line; /* where the value is written */
        if (!x->why)
            rc = exp_piece(e, x->text, strlen(x->text), !quoted, NULL, line);
        else if (sub == SUB_NONE)
            rc = exp_unresolved(e, ref, rlen, "%.*s, from %s", (int)rlen, ref, x->why);
        else
            rc = exp_piece(e, x->text, strlen(x->text), false, x->why, line);
    }
    return rc;
}

/* ---- $(( )) */

typedef struct {
    mexp *e;
    const char *s;
    size_t n, i;
    char why[400];
    bool bad;
} arith;

static void ar_blank(arith *a)
{
    while (a->i < a->n && isspace((unsigned char)a->s[a->i]))
        a->i++;
}

static long long ar_sum(arith *a);

static long long ar_atom(arith *a)
{
    ar_blank(a);
    if (a->i >= a->n) {
        a->bad = true;
        return 0;
    }
    const char *s = a->s;
    char c = s[a->i];
    if (c == '(') {
        a->i++;
        long long v = ar_sum(a);
        ar_blank(a);
        if (a->i < a->n && s[a->i] == ')')
            a->i++;
        else
            a->bad = true;
        return v;
    }
    if (c == '-' || c == '+') {
        a->i++;
        long long v = ar_atom(a);
        if (c == '-' && v == LLONG_MIN)
            a->bad = true; /* -LLONG_MIN overflows */
        return c == '-' && v != LLONG_MIN ? -v : v;
    }
    if (isdigit((unsigned char)c)) {
        char *end;
        errno = 0;
        long long v = strtoll(s + a->i, &end, 10);
        if (errno)
            a->bad = true;
        a->i = (size_t)(end - s);
        return v;
    }
    bool brace = false;
    if (c == '$') {
        a->i++;
        if (a->i < a->n && s[a->i] == '{') {
            brace = true;
            a->i++;
        }
    }
    size_t k = a->i;
    while (a->i < a->n && mscript_lex_name_char(s[a->i], a->i == k))
        a->i++;
    size_t len = a->i - k;
    if (brace && a->i < a->n && s[a->i] == '}')
        a->i++;
    else if (brace)
        a->bad = true;
    if (!len) {
        a->bad = true;
        return 0;
    }
    const mscript_var *v = mscript_exp_find(a->e->p, s + k, len);
    if (!a->why[0] && (!v || !v->vals.n))
        snprintf(a->why, sizeof a->why, "line %d: %.*s in $(( )) is never assigned", a->e->line, (int)len, s + k);
    else if (!a->why[0] && v->vals.v[0].why)
        snprintf(a->why, sizeof a->why, "line %d: %.*s in $(( )), from %s", a->e->line, (int)len, s + k,
                 v->vals.v[0].why);
    if (!v || !v->vals.n || v->vals.v[0].why)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v->vals.v[0].text, &end, 10);
    if (errno || end == v->vals.v[0].text || *end)
        a->bad = true;
    return x;
}

static long long ar_prod(arith *a)
{
    long long v = ar_atom(a);
    for (;;) {
        ar_blank(a);
        if (a->i >= a->n || !strchr("*/%", a->s[a->i]))
            return v;
        char op = a->s[a->i++];
        long long r = ar_atom(a), out = 0;
        if (op == '*' && __builtin_mul_overflow(v, r, &out))
            a->bad = true;
        else if (op != '*' && (r == 0 || (r == -1 && v == LLONG_MIN)))
            a->bad = !a->why[0] || r != 0; /* division by zero (0 from an unresolved name: its why), overflow */
        else if (op != '*')
            out = op == '/' ? v / r : v % r;
        v = out;
    }
}

static long long ar_sum(arith *a)
{
    long long v = ar_prod(a);
    for (;;) {
        ar_blank(a);
        if (a->i >= a->n || !strchr("+-", a->s[a->i]))
            return v;
        char op = a->s[a->i++];
        long long r = ar_prod(a);
        if (op == '+' ? __builtin_add_overflow(v, r, &v) : __builtin_sub_overflow(v, r, &v))
            a->bad = true;
    }
}

static int exp_arith(mexp *e, const char *ref, size_t rlen, const char *expr, size_t n)
{
    arith a = {.e = e, .s = expr, .n = n};
    long long v = ar_sum(&a);
    ar_blank(&a);
    if (a.i < a.n)
        a.bad = true;
    if (a.why[0])
        return exp_piece(e, ref, rlen, false, a.why, e->line);
    if (a.bad)
        return exp_unresolved(e, ref, rlen,
                              "%.*s is not simple integer arithmetic (trainsim evaluates + - * / %% and parentheses "
                              "on integers and variables)",
                              (int)rlen, ref);
    char num[32];
    snprintf(num, sizeof num, "%lld", v);
    return exp_piece(e, num, strlen(num), true, NULL, e->line);
}

/* ---- ${ ... } */

static int exp_brace(mexp *e, const char *ref, size_t rlen, bool quoted)
{
    const char *in = ref + 2, *end = ref + rlen - 1; /* between ${ and } */
    bool count = *in == '#' && in + 1 < end;
    if (count)
        in++;
    const char *nm = in;
    bool positional = in < end && isdigit((unsigned char)*in);
    if (positional) {
        while (in < end && isdigit((unsigned char)*in))
            in++;
    } else if (in < end && strchr("@*#?$!-", *in)) {
        in++; /* a special parameter */
    } else {
        while (in < end && mscript_lex_name_char(*in, in == nm))
            in++;
    }
    size_t nlen = (size_t)(in - nm);
    sub_kind sub = SUB_NONE;
    long idx = 0;
    if (nlen && in < end && *in == '[') {
        const char *cl = memchr(in, ']', (size_t)(end - in));
        if (cl && cl == in + 2 && (in[1] == '@' || in[1] == '*'))
            sub = in[1] == '@' ? SUB_AT : SUB_STAR;
        else if (cl && cl > in + 1) {
            char *ie;
            idx = strtol(in + 1, &ie, 10);
            if (ie != cl || idx < 0)
                return exp_unresolved(e, ref, rlen, "%.*s: index is not a number", (int)rlen, ref);
            sub = SUB_INDEX;
        }
        if (cl)
            in = cl + 1;
    }
    const char *op = in;
    if (!nlen || (count && op != end) ||
        (op != end && !(strchr("-=+?", op[0]) || (op[0] == ':' && op + 1 < end && strchr("-=+?", op[1])))))
        return exp_unresolved(e, ref, rlen, "%.*s: trainsim does not evaluate this expansion", (int)rlen, ref);
    bool special = positional || !mscript_lex_name_char(*nm, true);
    const mscript_var *v = special ? NULL : mscript_exp_find(e->p, nm, nlen);
    if (op != end) {
        bool colon = *op == ':';
        char kind = op[colon];
        const char *word = op + colon + 1;
        bool set = v && v->vals.n && (!colon || v->vals.v[0].text[0] || v->vals.v[0].why);
        if (v && v->vals.n && v->vals.v[0].why)
            return exp_unresolved(e, ref, rlen, "%.*s, from %s", (int)rlen, ref, v->vals.v[0].why);
        if (kind == '+')
            return set ? exp_word(e, word, (size_t)(end - word), quoted) : TS_OK;
        if (!set && kind == '?')
            return exp_unresolved(e, ref, rlen, "%.*s stops the script when %.*s is unset", (int)rlen, ref, (int)nlen,
                                  nm);
        if (!set && (kind == '-' || kind == '=')) /* the script's own default (= does not assign here) */
            return exp_word(e, word, (size_t)(end - word), quoted);
    }
    if (special)
        return exp_unresolved(e, ref, rlen, "%.*s is %s, known only when the script runs", (int)rlen, ref,
                              positional ? "an argument of the script" : "set by the shell");
    if (!v)
        return exp_unresolved(e, ref, rlen, "$%.*s is never assigned (trainsim does not read the environment)",
                              (int)nlen, nm);
    if (count) {
        char num[32];
        snprintf(num, sizeof num, "%zu",
                 sub == SUB_AT || sub == SUB_STAR ? v->vals.n
                 : v->vals.n                      ? strlen(v->vals.v[0].text)
                                                  : 0);
        return exp_piece(e, num, strlen(num), false, NULL, e->line);
    }
    return exp_values(e, v, sub, idx, quoted, ref, rlen);
}

/* Expand the $ at raw[i]; *next is where scanning goes on. */
static int exp_dollar(mexp *e, const char *raw, size_t len, size_t i, bool quoted, size_t *next)
{
    const char *r = raw + i;
    char nx = i + 1 < len ? raw[i + 1] : '\0';
    if (nx == '(' || nx == '{') {
        size_t end = mscript_lex_group_end(raw, len, i);
        if (!end)
            return err_set(e->p->err, TS_EINVAL, "%s:%d: unterminated %s", e->p->file, e->line,
                           mscript_lex_group_name(r));
        *next = end;
        size_t rlen = end - i;
        if (nx == '{')
            return exp_brace(e, r, rlen, quoted);
        if (i + 2 < len && raw[i + 2] == '(' && rlen >= 6 && r[rlen - 2] == ')')
            return exp_arith(e, r, rlen, r + 3, rlen - 5);
        return exp_unresolved(e, r, rlen, "%.*s runs a command (trainsim runs nothing)", (int)(rlen > 60 ? 60 : rlen),
                              r);
    }
    size_t k = i + 1;
    if (mscript_lex_name_char(nx, true)) {
        while (k < len && mscript_lex_name_char(raw[k], false))
            k++;
        *next = k;
        const mscript_var *v = mscript_exp_find(e->p, raw + i + 1, k - i - 1);
        if (!v)
            return exp_unresolved(e, r, k - i, "%.*s is never assigned (trainsim does not read the environment)",
                                  (int)(k - i), r);
        return exp_values(e, v, SUB_NONE, 0, quoted, r, k - i);
    }
    if (nx && (isdigit((unsigned char)nx) || strchr("@*#?$!-", nx))) {
        *next = i + 2;
        return exp_unresolved(e, r, 2, "%.2s is %s, known only when the script runs", r,
                              isdigit((unsigned char)nx) ? "an argument of the script" : "set by the shell");
    }
    *next = i + 1;
    return exp_piece(e, "$", 1, false, NULL, e->line);
}

/* Expand raw[0 .. len) (quoted: inside "..."). */
static int exp_word(mexp *e, const char *raw, size_t len, bool quoted)
{
    int rc = TS_OK;
    size_t i = 0;
    while (i < len && !rc) {
        char c = raw[i];
        if (c == '\\' && i + 1 < len && (!quoted || strchr("$`\"\\\n", raw[i + 1]))) {
            rc = raw[i + 1] == '\n' ? TS_OK : exp_piece(e, raw + i + 1, 1, false, NULL, e->line);
            i += 2;
        } else if (!quoted && (c == '\'' || c == '"') && !mscript_lex_group_end(raw, len, i)) {
            return err_set(e->p->err, TS_EINVAL, "%s:%d: unterminated %s", e->p->file, e->line,
                           mscript_lex_group_name(raw + i));
        } else if (!quoted && c == '\'') {
            size_t end = mscript_lex_group_end(raw, len, i);
            rc = exp_piece(e, raw + i + 1, end - i - 2, false, NULL, e->line);
            i = end;
        } else if (!quoted && c == '"') {
            size_t end = mscript_lex_group_end(raw, len, i);
            if (!e->cur.n)
                e->fline = e->line;
            e->have = true;
            rc = exp_word(e, raw + i + 1, end - i - 2, true);
            i = end;
        } else if (c == '$') {
            rc = exp_dollar(e, raw, len, i, quoted, &i);
        } else if (c == '`') {
            size_t end = mscript_lex_group_end(raw, len, i);
            if (!end)
                return err_set(e->p->err, TS_EINVAL, "%s:%d: unterminated backquote `", e->p->file, e->line);
            rc = exp_unresolved(e, raw + i, end - i, "%.*s runs a command (trainsim runs nothing)",
                                (int)(end - i > 60 ? 60 : end - i), raw + i);
            i = end;
        } else {
            rc = exp_piece(e, &c, 1, false, NULL, e->line);
            i++;
        }
    }
    return rc;
}

static int enomem(const mscript_scope *sc)
{
    return err_set(sc->err, TS_ENOMEM, "%s: out of memory reading the script", sc->file);
}

/* Expand raw into out: fields, or one value (assign). */
static int expand(mscript_scope *sc, const char *raw, int line, bool assign, mscript_vals *out)
{
    mexp e = {.p = sc, .out = *out, .line = line, .fline = line, .assign = assign, .have = assign};
    int rc = exp_word(&e, raw, strlen(raw), false); /* an assignment NAME= is an empty value */
    e.assign = false;
    if (!rc)
        rc = exp_break(&e, assign);
    *out = e.out;
    free(e.cur.p);
    free(e.why);
    return rc == TS_ENOMEM ? enomem(sc) : rc;
}

int mscript_exp_fields(mscript_scope *sc, const char *raw, int line, mscript_vals *out)
{
    return expand(sc, raw, line, false, out);
}

int mscript_exp_value(mscript_scope *sc, const char *raw, int line, mscript_vals *out)
{
    return expand(sc, raw, line, true, out);
}

int mscript_exp_set(mscript_scope *sc, const char *name, size_t len, mscript_vals *vals, bool append)
{
    mscript_var *v = mscript_exp_find(sc, name, len);
    int rc = TS_OK;
    if (!v) {
        if (grow_to((void **)&sc->vars, &sc->capvars, sc->nvars + 1, 32, sizeof *sc->vars))
            return enomem(sc);
        v = &sc->vars[sc->nvars];
        memset(v, 0, sizeof *v);
        if (!(v->name = strndup(name, len)))
            return enomem(sc);
        sc->nvars++;
    }
    if (!append)
        mscript_exp_vals_free(&v->vals);
    for (size_t k = 0; k < vals->n && !rc; k++) {
        mscript_val *x = &vals->v[k];
        if (append && !x->why && v->vals.n == 1 && vals->n == 1 && !v->vals.v[0].why) {
            char *t = mscript_exp_fmt("%s%s", v->vals.v[0].text, x->text); /* NAME+=text on a scalar */
            if (!t) {
                rc = enomem(sc);
                break;
            }
            free(v->vals.v[0].text);
            v->vals.v[0].text = t;
            continue;
        }
        char *t = x->text, *why = x->why;
        x->text = x->why = NULL;
        if (mscript_exp_push(&v->vals, t, why, x->line))
            rc = enomem(sc);
    }
    mscript_exp_vals_free(vals);
    return rc;
}

void mscript_scope_free(mscript_scope *sc)
{
    for (size_t i = 0; i < sc->nvars; i++) {
        free(sc->vars[i].name);
        mscript_exp_vals_free(&sc->vars[i].vals);
    }
    free(sc->vars);
    sc->vars = NULL;
    sc->nvars = sc->capvars = 0;
}
