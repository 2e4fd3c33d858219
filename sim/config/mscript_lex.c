#include "sim/config/mscript_lex.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

int mscript_lex_put(mscript_lex_buf *b, const char *s, size_t n)
{
    if (grow_to((void **)&b->p, &b->cap, b->n + n + 1, 64, 1))
        return TS_ENOMEM;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return TS_OK;
}

char *mscript_lex_take(mscript_lex_buf *b)
{
    char *s = b->p ? b->p : strdup("");
    b->p = NULL;
    b->n = b->cap = 0;
    return s;
}

static void word_free(mscript_lex_word *w)
{
    for (size_t i = 0; i < w->nel; i++)
        word_free(&w->el[i]);
    free(w->el);
    free(w->raw);
}

void mscript_lex_cmd_clear(mscript_lex_cmd *c)
{
    for (size_t i = 0; i < c->n; i++)
        word_free(&c->w[i]);
    c->n = 0;
}

static int enomem(mscript_lex *p)
{
    return err_set(p->err, TS_ENOMEM, "%s: out of memory reading the script", p->file);
}

bool mscript_lex_name_char(char c, bool first)
{
    return c == '_' || isalpha((unsigned char)c) || (!first && isdigit((unsigned char)c));
}

/* Length of the NAME in "NAME=..." or "NAME+=..." (the = at s[len] or
 * s[len + 1]); 0 when s is not an assignment. */
size_t mscript_lex_assign_len(const char *s)
{
    size_t k = 0;
    while (mscript_lex_name_char(s[k], k == 0))
        k++;
    if (k && (s[k] == '=' || (s[k] == '+' && s[k + 1] == '=')))
        return k;
    return 0;
}

/* The end (exclusive) of the group opened at s[i]: '...', "...", `...`,
 * $(...) or ${...}; 0 when it is never closed. */
size_t mscript_lex_group_end(const char *s, size_t n, size_t i)
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
                size_t k = mscript_lex_group_end(s, n, j);
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
            size_t k = mscript_lex_group_end(s, n, j);
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

const char *mscript_lex_group_name(const char *s)
{
    if (s[0] == '\'')
        return "single quote '";
    if (s[0] == '"')
        return "double quote \"";
    if (s[0] == '`')
        return "backquote `";
    return s[1] == '(' ? "$( ... )" : "${ ... }";
}

static void count_lines(mscript_lex *p, size_t from, size_t to)
{
    for (size_t k = from; k < to; k++)
        p->line += p->s[k] == '\n';
}

/* Read one word at p->i into *w (raw, quotes kept, continuations removed). */
static int lex_word(mscript_lex *p, mscript_lex_word *w)
{
    mscript_lex_buf b = {0};
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
            rc = mscript_lex_put(&b, s + p->i, k);
            p->i += k;
            continue;
        }
        if (c == '\'' || c == '"' || c == '`' || (c == '$' && p->i + 1 < p->n && strchr("({", s[p->i + 1]))) {
            size_t end = mscript_lex_group_end(s, p->n, p->i);
            if (!end) {
                free(b.p);
                return err_set(p->err, TS_EINVAL, "%s:%d: unterminated %s (opened here, never closed)", p->file,
                               p->line, mscript_lex_group_name(s + p->i));
            }
            rc = mscript_lex_put(&b, s + p->i, end - p->i);
            count_lines(p, p->i, end);
            p->i = end;
            continue;
        }
        rc = mscript_lex_put(&b, &c, 1);
        p->i++;
    }
    w->raw = rc ? NULL : mscript_lex_take(&b);
    free(b.p);
    return rc || !w->raw ? enomem(p) : TS_OK;
}

static void skip_blanks(mscript_lex *p)
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

static void skip_comment(mscript_lex *p)
{
    while (p->i < p->n && p->s[p->i] != '\n')
        p->i++;
}

/* The elements of NAME=( ... ), p->i just past '('. */
static int lex_array(mscript_lex *p, mscript_lex_word *w)
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
            mscript_lex_word *e = &w->el[w->nel];
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
static int lex_redirect(mscript_lex *p)
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
    mscript_lex_word target = {0};
    int rc = lex_word(p, &target);
    free(target.raw);
    return rc;
}

/* Read the next simple command into c (empty at the end of the file). */
int mscript_lex_next(mscript_lex *p, mscript_lex_cmd *c)
{
    mscript_lex_cmd_clear(c);
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
        mscript_lex_word *w = &c->w[c->n];
        memset(w, 0, sizeof *w);
        if (!c->n)
            c->line = p->line;
        int rc = lex_word(p, w);
        c->n++;
        if (rc)
            return rc;
        size_t k = mscript_lex_assign_len(w->raw);
        const char *eq = k ? strchr(w->raw + k, '=') : NULL;
        if (eq && !eq[1] && p->i < p->n && s[p->i] == '(') {
            p->i++;
            if ((rc = lex_array(p, w)))
                return rc;
        } else if (w->raw[strspn(w->raw, "0123456789")] == '\0' && p->i < p->n && strchr("<>", s[p->i])) {
            c->n--; /* "2>&1": the fd number of a redirection */
            word_free(w);
            if ((rc = lex_redirect(p)))
                return rc;
        }
    }
}

void mscript_lex_cmd_free(mscript_lex_cmd *c)
{
    mscript_lex_cmd_clear(c);
    free(c->w);
    c->w = NULL;
    c->cap = 0;
}
