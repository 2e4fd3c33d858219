#include "sim/config/mscript.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

/* ---------------------------------------------------------------- strings */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n)
{
    if (grow_to((void **)&b->p, &b->cap, b->n + n + 1, 64, 1))
        return TS_ENOMEM;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return TS_OK;
}

/* The buffer's string (an empty one if nothing was put), which the caller
 * now owns; the buffer is empty again. NULL when out of memory. */
static char *sb_take(sbuf *b)
{
    char *s = b->p ? b->p : strdup("");
    b->p = NULL;
    b->n = b->cap = 0;
    return s;
}

static char *fmt_alloc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_alloc(const char *fmt, ...)
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

/* ---------------------------------------------------------------- values */

/* One value: a scalar, an array element or a word of a command. why is NULL
 * when the text is fully resolved, else the reason (and text is literal). */
typedef struct {
    char *text;
    char *why;
    int line;
} mval;

typedef struct {
    mval *v;
    size_t n, cap;
} mvals;

typedef struct {
    char *name;
    mvals vals; /* a scalar is one value */
} mvar;

static void vals_free(mvals *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].text);
        free(l->v[i].why);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Append a value, taking text and why (freed on failure). */
static int vals_push(mvals *l, char *text, char *why, int line)
{
    if (!text || grow_to((void **)&l->v, &l->cap, l->n + 1, 8, sizeof *l->v)) {
        free(text);
        free(why);
        return TS_ENOMEM;
    }
    l->v[l->n++] = (mval){text, why, line};
    return TS_OK;
}

/* ---------------------------------------------------------------- parser */

/* A word of a command as written (quotes kept); an array assignment
 * NAME=( ... ) is one word "NAME=" with its elements. */
typedef struct rword {
    char *raw;
    int line;
    struct rword *el; /* array elements, or NULL */
    size_t nel, capel;
    bool array;
} rword;

typedef struct {
    rword *w;
    size_t n, cap;
    int line;
} rcmd;

typedef struct {
    const char *file, *s;
    size_t n, i;
    int line;
    mvar *vars;
    size_t nvars, capvars;
    int depth, block_line; /* inside if/while/until/for: depth and the outer block's first line */
    const char *block_kw;
    sbuf block_names; /* the variables the outer block assigns, ", "-separated */
    mscript *m;       /* the result, for notes */
    /* the launcher chosen so far */
    int best_rank, best_line;
    mvals best_args, best_pre; /* words after and before the program */
    char *best_prog;
    ts_err *err;
} mparser;

static void rword_free(rword *w)
{
    for (size_t i = 0; i < w->nel; i++)
        rword_free(&w->el[i]);
    free(w->el);
    free(w->raw);
}

static void rcmd_clear(rcmd *c)
{
    for (size_t i = 0; i < c->n; i++)
        rword_free(&c->w[i]);
    c->n = 0;
}

static int enomem(mparser *p)
{
    return err_set(p->err, TS_ENOMEM, "%s: out of memory reading the script", p->file);
}

static bool is_name_char(char c, bool first)
{
    return c == '_' || isalpha((unsigned char)c) || (!first && isdigit((unsigned char)c));
}

/* Length of the NAME in "NAME=..." or "NAME+=..." (the = at s[len] or
 * s[len + 1]); 0 when s is not an assignment. */
static size_t assign_name_len(const char *s)
{
    size_t k = 0;
    while (is_name_char(s[k], k == 0))
        k++;
    if (k && (s[k] == '=' || (s[k] == '+' && s[k + 1] == '=')))
        return k;
    return 0;
}

/* The end (exclusive) of the group opened at s[i]: '...', "...", `...`,
 * $(...) or ${...}; 0 when it is never closed. */
static size_t group_end(const char *s, size_t n, size_t i)
{
    char c = s[i];
    size_t j = i + 1;
    if (c == '\'') {
        while (j < n && s[j] != '\'')
            j++;
        return j < n ? j + 1 : 0;
    }
    if (c == '"' || c == '`') {
        while (j < n) {
            if (s[j] == '\\') {
                j += 2;
                continue;
            }
            if (s[j] == c)
                return j + 1;
            if (c == '"' && (s[j] == '`' || (s[j] == '$' && j + 1 < n && (s[j + 1] == '(' || s[j + 1] == '{')))) {
                size_t k = group_end(s, n, j);
                if (!k)
                    return 0;
                j = k;
                continue;
            }
            j++;
        }
        return 0;
    }
    /* $( or ${ */
    char open = s[i + 1], close = open == '(' ? ')' : '}';
    int depth = 0;
    for (j = i + 1; j < n;) {
        char ch = s[j];
        if (ch == '\\') {
            j += 2;
            continue;
        }
        if (ch == '\'' || ch == '"' || ch == '`') {
            size_t k = group_end(s, n, j);
            if (!k)
                return 0;
            j = k;
            continue;
        }
        if (ch == open)
            depth++;
        else if (ch == close && --depth == 0)
            return j + 1;
        j++;
    }
    return 0;
}

static const char *group_name(const char *s)
{
    if (s[0] == '\'')
        return "single quote '";
    if (s[0] == '"')
        return "double quote \"";
    if (s[0] == '`')
        return "backquote `";
    return s[1] == '(' ? "$( ... )" : "${ ... }";
}

static void count_lines(mparser *p, size_t from, size_t to)
{
    for (size_t k = from; k < to; k++)
        p->line += p->s[k] == '\n';
}

/* Read one word at p->i into *w (raw, quotes kept, continuations removed). */
static int lex_word(mparser *p, rword *w)
{
    sbuf b = {0};
    w->line = p->line;
    int rc = TS_OK;
    while (p->i < p->n && !rc) {
        const char *s = p->s;
        char c = s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || strchr(";&|<>()", c))
            break;
        if (c == '\\') {
            if (p->i + 1 < p->n && s[p->i + 1] == '\n') { /* line continuation */
                p->i += 2;
                p->line++;
                continue;
            }
            size_t k = p->i + 2 <= p->n ? 2 : 1;
            rc = sb_put(&b, s + p->i, k);
            p->i += k;
            continue;
        }
        if (c == '\'' || c == '"' || c == '`' || (c == '$' && p->i + 1 < p->n && strchr("({", s[p->i + 1]))) {
            size_t end = group_end(s, p->n, p->i);
            if (!end) {
                free(b.p);
                return err_set(p->err, TS_EINVAL, "%s:%d: unterminated %s (opened here, never closed)", p->file,
                               p->line, group_name(s + p->i));
            }
            rc = sb_put(&b, s + p->i, end - p->i);
            count_lines(p, p->i, end);
            p->i = end;
            continue;
        }
        rc = sb_put(&b, &c, 1);
        p->i++;
    }
    w->raw = rc ? NULL : sb_take(&b);
    free(b.p);
    return rc || !w->raw ? enomem(p) : TS_OK;
}

static void skip_blanks(mparser *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r')
            p->i++;
        else if (c == '\\' && p->i + 1 < p->n && p->s[p->i + 1] == '\n') {
            p->i += 2;
            p->line++;
        } else
            break;
    }
}

static void skip_comment(mparser *p)
{
    while (p->i < p->n && p->s[p->i] != '\n')
        p->i++;
}

/* The elements of NAME=( ... ), p->i just past '('. */
static int lex_array(mparser *p, rword *w)
{
    int open_line = p->line;
    w->array = true;
    for (;;) {
        skip_blanks(p);
        if (p->i >= p->n)
            return err_set(p->err, TS_EINVAL, "%s:%d: unterminated array %s( ... ): no ')' before the end of the file",
                           p->file, open_line, w->raw);
        char c = p->s[p->i];
        if (c == '\n') {
            p->i++;
            p->line++;
        } else if (c == '#') {
            skip_comment(p);
        } else if (c == ')') {
            p->i++;
            return TS_OK;
        } else if (strchr(";&|<>(", c)) {
            return err_set(p->err, TS_EINVAL, "%s:%d: unexpected '%c' inside the array %s( ... ) (valid: words)",
                           p->file, p->line, c, w->raw);
        } else {
            if (w->nel == w->capel && grow_to((void **)&w->el, &w->capel, w->nel + 1, 16, sizeof *w->el))
                return enomem(p);
            rword *e = &w->el[w->nel];
            memset(e, 0, sizeof *e);
            int rc = lex_word(p, e);
            if (rc)
                return rc;
            w->nel++;
        }
    }
}

/* A redirection at p->i ('<', '>', "&>", after an optional fd number
 * already read): skip it and its target word. */
static int lex_redirect(mparser *p)
{
    const char *s = p->s;
    if (s[p->i] == '<' && p->i + 1 < p->n && s[p->i + 1] == '<')
        return err_set(p->err, TS_EINVAL,
                       "%s:%d: unsupported construct: here-document (<<); trainsim reads assignments, arrays and "
                       "the launcher line only",
                       p->file, p->line);
    while (p->i < p->n && strchr("<>&|", s[p->i]))
        p->i++;
    if (s[p->i - 1] == '&' && p->i < p->n && (isdigit((unsigned char)s[p->i]) || s[p->i] == '-')) {
        while (p->i < p->n && (isdigit((unsigned char)s[p->i]) || s[p->i] == '-'))
            p->i++;
        return TS_OK;
    }
    skip_blanks(p);
    rword target = {0};
    int rc = lex_word(p, &target);
    free(target.raw);
    return rc;
}

/* Read the next simple command into c (empty at the end of the file). */
static int lex_command(mparser *p, rcmd *c)
{
    rcmd_clear(c);
    for (;;) {
        skip_blanks(p);
        if (p->i >= p->n)
            return TS_OK;
        const char *s = p->s;
        char ch = s[p->i];
        if (ch == '#') {
            skip_comment(p);
            continue;
        }
        if (ch == '\n' || ch == ';' || (ch == '&' && (p->i + 1 >= p->n || s[p->i + 1] != '>')) || ch == '|') {
            if (ch == ';' && p->i + 1 < p->n && s[p->i + 1] == ';')
                return err_set(p->err, TS_EINVAL,
                               "%s:%d: unsupported construct: case ... esac (;;); trainsim reads assignments, "
                               "arrays and the launcher line only",
                               p->file, p->line);
            p->line += ch == '\n';
            p->i += (ch == '&' || ch == '|') && p->i + 1 < p->n && s[p->i + 1] == ch ? 2 : 1;
            if (c->n)
                return TS_OK;
            continue;
        }
        if (ch == '<' || ch == '>' || ch == '&') {
            int rc = lex_redirect(p);
            if (rc)
                return rc;
            continue;
        }
        if (ch == '(' || ch == ')')
            return err_set(p->err, TS_EINVAL,
                           "%s:%d: unsupported construct: %s; trainsim reads assignments, arrays and the launcher "
                           "line only",
                           p->file, p->line,
                           ch == ')'                       ? "')' without its '('"
                           : c->n && !c->w[c->n - 1].array ? "a function definition NAME()"
                                                           : "a subshell ( ... )");
        if (c->n == c->cap && grow_to((void **)&c->w, &c->cap, c->n + 1, 16, sizeof *c->w))
            return enomem(p);
        rword *w = &c->w[c->n];
        memset(w, 0, sizeof *w);
        if (!c->n)
            c->line = p->line;
        int rc = lex_word(p, w);
        c->n++;
        if (rc)
            return rc;
        size_t k = assign_name_len(w->raw);
        const char *eq = k ? strchr(w->raw + k, '=') : NULL;
        if (eq && !eq[1] && p->i < p->n && s[p->i] == '(') {
            p->i++;
            if ((rc = lex_array(p, w)))
                return rc;
        } else if (w->raw[strspn(w->raw, "0123456789")] == '\0' && p->i < p->n && strchr("<>", s[p->i])) {
            c->n--; /* "2>&1": the fd number of a redirection */
            rword_free(w);
            if ((rc = lex_redirect(p)))
                return rc;
        }
    }
}

/* ---------------------------------------------------------------- expansion */

typedef struct {
    mparser *p;
    mvals out;   /* the fields */
    sbuf cur;    /* the field being built */
    bool have;   /* cur is a field even if empty ("") */
    char *why;   /* the first unresolved reason in cur */
    int fline;   /* line of cur's first piece */
    int line;    /* line of the word being expanded */
    bool assign; /* an assignment's value: no splitting, breaks join with a space */
} mexp;

static mvar *var_find(mparser *p, const char *name, size_t len)
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
        return e->have ? sb_put(&e->cur, " ", 1) : TS_OK;
    char *why = e->why;
    e->why = NULL;
    e->have = false;
    return vals_push(&e->out, sb_take(&e->cur), why, e->fline);
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
        return sb_put(&e->cur, t, n);
    }
    int rc = TS_OK;
    for (size_t k = 0; k < n && !rc; k++) {
        if (t[k] == ' ' || t[k] == '\t' || t[k] == '\n') {
            rc = exp_break(e, false);
        } else {
            if (!e->have)
                e->fline = line;
            e->have = true;
            rc = sb_put(&e->cur, t + k, 1);
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

static int exp_values(mexp *e, const mvar *v, sub_kind sub, long idx, bool quoted, const char *ref, size_t rlen)
{
    const mvals *l = &v->vals;
    size_t from = 0, to = l->n;
    if (sub == SUB_NONE || sub == SUB_INDEX) {
        from = sub == SUB_INDEX ? (size_t)idx : 0;
        to = from < l->n ? from + 1 : from;
    }
    int rc = TS_OK;
    for (size_t k = from; k < to && !rc; k++) {
        const mval *x = &l->v[k];
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
        return c == '-' ? -v : v;
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
    while (a->i < a->n && is_name_char(s[a->i], a->i == k))
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
    const mvar *v = var_find(a->e->p, s + k, len);
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
        else if (op != '*' && r == 0)
            a->bad = !a->why[0];
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
        while (in < end && is_name_char(*in, in == nm))
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
    bool special = positional || !is_name_char(*nm, true);
    const mvar *v = special ? NULL : var_find(e->p, nm, nlen);
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
        size_t end = group_end(raw, len, i);
        if (!end)
            return err_set(e->p->err, TS_EINVAL, "%s:%d: unterminated %s", e->p->file, e->line, group_name(r));
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
    if (is_name_char(nx, true)) {
        while (k < len && is_name_char(raw[k], false))
            k++;
        *next = k;
        const mvar *v = var_find(e->p, raw + i + 1, k - i - 1);
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
        } else if (!quoted && (c == '\'' || c == '"') && !group_end(raw, len, i)) {
            return err_set(e->p->err, TS_EINVAL, "%s:%d: unterminated %s", e->p->file, e->line, group_name(raw + i));
        } else if (!quoted && c == '\'') {
            size_t end = group_end(raw, len, i);
            rc = exp_piece(e, raw + i + 1, end - i - 2, false, NULL, e->line);
            i = end;
        } else if (!quoted && c == '"') {
            size_t end = group_end(raw, len, i);
            if (!e->cur.n)
                e->fline = e->line;
            e->have = true;
            rc = exp_word(e, raw + i + 1, end - i - 2, true);
            i = end;
        } else if (c == '$') {
            rc = exp_dollar(e, raw, len, i, quoted, &i);
        } else if (c == '`') {
            size_t end = group_end(raw, len, i);
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

/* Expand w into e->out (fields). */
static int exp_rword(mexp *e, const char *raw, int line)
{
    e->line = line;
    int rc = exp_word(e, raw, strlen(raw), false);
    if (!rc)
        rc = exp_break(e, false);
    return rc == TS_ENOMEM ? enomem(e->p) : rc;
}

static void exp_free(mexp *e)
{
    vals_free(&e->out);
    free(e->cur.p);
    free(e->why);
}

/* ---------------------------------------------------------------- commands */

static int var_set(mparser *p, const char *name, size_t len, mvals *vals, bool append)
{
    mvar *v = var_find(p, name, len);
    if (!v) {
        if (grow_to((void **)&p->vars, &p->capvars, p->nvars + 1, 32, sizeof *p->vars))
            return enomem(p);
        v = &p->vars[p->nvars];
        memset(v, 0, sizeof *v);
        if (!(v->name = strndup(name, len)))
            return enomem(p);
        p->nvars++;
    }
    if (!append)
        vals_free(&v->vals);
    for (size_t k = 0; k < vals->n; k++) {
        mval *x = &vals->v[k];
        if (append && !vals->v[k].why && v->vals.n == 1 && vals->n == 1 && !v->vals.v[0].why) {
            char *t = fmt_alloc("%s%s", v->vals.v[0].text, x->text); /* NAME+=text on a scalar */
            if (!t)
                return enomem(p);
            free(v->vals.v[0].text);
            v->vals.v[0].text = t;
            continue;
        }
        char *t = x->text, *why = x->why;
        x->text = x->why = NULL;
        if (vals_push(&v->vals, t, why, x->line))
            return enomem(p);
    }
    return TS_OK;
}

/* Perform the assignment word w. */
static int assign(mparser *p, const rword *w)
{
    size_t k = assign_name_len(w->raw);
    bool append = w->raw[k] == '+';
    mexp e = {.p = p};
    int rc = TS_OK;
    if (w->array) {
        for (size_t j = 0; j < w->nel && !rc; j++)
            rc = exp_rword(&e, w->el[j].raw, w->el[j].line);
    } else {
        e.assign = true;
        e.line = w->line;
        const char *val = w->raw + k + 1 + append;
        e.have = true; /* NAME= is an empty value */
        e.fline = w->line;
        rc = exp_word(&e, val, strlen(val), false);
        if (!rc) {
            e.assign = false;
            rc = exp_break(&e, true);
        }
        if (rc == TS_ENOMEM)
            rc = enomem(p);
    }
    if (!rc)
        rc = var_set(p, w->raw, k, &e.out, append);
    exp_free(&e);
    return rc;
}

/* The rank of a launcher: 2 runs pretrain*.py, 1 runs another *.py with
 * flags, 0 is no launcher. *k is the program's field. */
static int launcher_rank(const mvals *f, size_t *k)
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

static int launcher(mparser *p, mvals *f, int line)
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
    vals_free(&p->best_args);
    vals_free(&p->best_pre);
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
        if (vals_push(j < k ? &p->best_pre : &p->best_args, t, why, f->v[j].line))
            return enomem(p);
    }
    return TS_OK;
}

static bool word_is(const rcmd *c, size_t i, const char *kw)
{
    return i < c->n && !c->w[i].array && !strcmp(c->w[i].raw, kw);
}

static int add_note(mscript *m, const char *why);

/* Inside a block (not run): refuse a launcher, note the variables it assigns. */
static int in_block(mparser *p, const rcmd *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const char *t = c->w[i].raw;
        size_t k = assign_name_len(t);
        if (strstr(t, ".py"))
            return err_set(p->err, TS_EINVAL,
                           "%s:%d: unsupported construct: a *.py command inside the '%s' block of line %d (trainsim "
                           "runs no conditions or loops); put the launcher line outside the block",
                           p->file, c->line, p->block_kw, p->block_line);
        if (!k)
            continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(k < 100 ? k : 100), t);
        bool known = false;
        for (const char *q = p->block_names.p; q && (q = strstr(q, name)); q += k)
            known |= (q == p->block_names.p || q[-1] == ' ') && (!q[k] || q[k] == ',');
        if (!known && ((p->block_names.n && sb_put(&p->block_names, ", ", 2)) || sb_put(&p->block_names, name, k)))
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
    char *note = fmt_alloc("lines %d-%d: the '%s' block was not run (trainsim runs no conditions or loops); its "
                           "assignments to %s were not made",
                           p->block_line, end, p->block_kw, p->block_names.p);
    free(p->block_names.p);
    memset(&p->block_names, 0, sizeof p->block_names);
    int rc = note ? add_note(p->m, note) : TS_ENOMEM;
    free(note);
    return rc ? enomem(p) : TS_OK;
}

static int run_command(mparser *p, rcmd *c)
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
            const rword *w = &c->w[j];
            size_t k = assign_name_len(w->raw);
            rc = TS_OK;
            if (decl && k)
                rc = assign(p, w);
            else if (!decl && w->raw[0] != '-') {
                mvar *v = var_find(p, w->raw, strlen(w->raw));
                if (v)
                    vals_free(&v->vals);
            }
            if (rc)
                return rc;
        }
        return TS_OK;
    }
    size_t first = i;
    while (first < c->n && (c->w[first].array || assign_name_len(c->w[first].raw)))
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
    mexp e = {.p = p};
    for (size_t j = first; j < c->n && !rc; j++) {
        if (c->w[j].array)
            rc = err_set(p->err, TS_EINVAL, "%s:%d: an array assignment %s( ... ) as an argument", p->file,
                         c->w[j].line, c->w[j].raw);
        else
            rc = exp_rword(&e, c->w[j].raw, c->w[j].line);
    }
    if (!rc)
        rc = launcher(p, &e.out, c->line);
    exp_free(&e);
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
    const mvals *f = &p->best_pre;
    for (size_t j = 0; j < f->n; j++) {
        const char *t = f->v[j].text;
        for (int which = 0; which < 2; which++) {
            const char *const *names = which ? NNODES : NPROC;
            for (int k = 0; names[k]; k++) {
                size_t len = strlen(names[k]);
                if (strncmp(t, names[k], len) || (t[len] && t[len] != '='))
                    continue;
                const mval *val = t[len] ? &f->v[j] : j + 1 < f->n ? &f->v[j + 1] : NULL;
                const char *vt = !val ? "" : t[len] ? t + len + 1 : val->text;
                char *end;
                long x = strtol(vt, &end, 10);
                if (val && val->why && !m->world_why)
                    m->world_why = fmt_alloc("the launcher's %s is unresolved: %s", names[k], val->why);
                else if ((!val || *end || end == vt || x < 1 || x > (1L << 24)) && !m->world_why)
                    m->world_why = fmt_alloc("line %d: the launcher's %s '%s' is not a positive integer",
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
        mval *x = &p->best_args.v[j];
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
    mparser p = {.file = name, .s = text, .n = len, .line = 1, .err = err};
    mscript *m = calloc(1, sizeof *m);
    p.m = m;
    rcmd c = {0};
    int rc = m && (m->path = strdup(name)) ? TS_OK : enomem(&p);
    const char *nul = rc ? NULL : memchr(text, '\0', len);
    if (nul) {
        p.i = (size_t)(nul - text);
        count_lines(&p, 0, p.i);
        rc = err_set(err, TS_EINVAL, "%s:%d: a NUL byte: not a bash script (expected text)", name, p.line);
    }
    while (!rc && p.i < p.n) {
        rc = lex_command(&p, &c);
        if (!rc && c.n)
            rc = run_command(&p, &c);
    }
    if (!rc && p.depth > 0)
        rc = err_set(err, TS_EINVAL, "%s:%d: the '%s' block is never closed (no %s)", name, p.block_line, p.block_kw,
                     !strcmp(p.block_kw, "if") ? "fi" : "done");
    if (!rc)
        rc = build_result(&p, m);
    rcmd_clear(&c);
    free(c.w);
    for (size_t i = 0; i < p.nvars; i++) {
        free(p.vars[i].name);
        vals_free(&p.vars[i].vals);
    }
    free(p.vars);
    vals_free(&p.best_args);
    vals_free(&p.best_pre);
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
    sbuf b = {0};
    char chunk[8192];
    size_t got;
    int rc = TS_OK;
    while (!rc && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (sb_put(&b, chunk, got))
            rc = err_set(err, TS_ENOMEM, "%s: out of memory reading the launch script", path);
    if (!rc && ferror(f))
        rc = err_set(err, TS_EIO, "%s: cannot read the launch script: %s", path, strerror(errno));
    fclose(f);
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
