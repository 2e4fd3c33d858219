#include "sim/util/opt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

void opt_table_init(opt_table *t, const char *prog, const char *summary)
{
    memset(t, 0, sizeof *t);
    t->prog = prog;
    t->summary = summary;
}

void opt_table_free(opt_table *t)
{
    if (!t)
        return;
    free(t->entries);
    free(t->positional);
    t->entries = NULL;
    t->positional = NULL;
    t->n = t->cap = 0;
}

static bool has_range(const opt_spec *s)
{
    return !(s->min == 0 && s->max == 0);
}

static opt_entry *find_long(opt_table *t, const char *name, size_t len)
{
    for (size_t i = 0; i < t->n; i++) {
        const char *n = t->entries[i].spec.name;
        if (t->entries[i].spec.type != OPT_SECTION && strlen(n) == len && !strncmp(n, name, len))
            return &t->entries[i];
    }
    return NULL;
}

static opt_entry *find_alias(opt_table *t, const char *name, size_t len)
{
    for (size_t i = 0; i < t->n; i++) {
        const char *a = t->entries[i].spec.alias;
        if (a && strlen(a) == len && !strncmp(a, name, len))
            return &t->entries[i];
    }
    return NULL;
}

/* Format the target's current value as the help default. */
static void format_default(opt_entry *e)
{
    const opt_spec *s = &e->spec;
    char *b = e->defbuf;
    size_t n = sizeof e->defbuf;
    switch (s->type) {
    case OPT_INT:
        snprintf(b, n, "%d", *(int *)s->target);
        break;
    case OPT_INT64:
        snprintf(b, n, "%" PRId64, *(int64_t *)s->target);
        break;
    case OPT_DOUBLE:
        snprintf(b, n, "%g", *(double *)s->target);
        break;
    case OPT_BOOL:
        snprintf(b, n, "%s", *(bool *)s->target ? "on" : "off");
        break;
    case OPT_STRING: {
        const char *v = *(const char **)s->target;
        snprintf(b, n, "%s", v ? v : "none");
        break;
    }
    case OPT_ENUM: {
        int k = *(int *)s->target, cnt = 0;
        while (s->enum_names[cnt])
            cnt++;
        snprintf(b, n, "%s", k >= 0 && k < cnt ? s->enum_names[k] : "none");
        break;
    }
    case OPT_SECTION:
        b[0] = '\0';
        break;
    }
}

static int grow(opt_table *t, ts_err *err)
{
    if (grow_to((void **)&t->entries, &t->cap, t->n + 1, 32, sizeof *t->entries))
        return err_set(err, TS_ENOMEM, "out of memory registering flags");
    return TS_OK;
}

int opt_add(opt_table *t, const opt_spec *s, ts_err *err)
{
    if (!s->name || strncmp(s->name, "--", 2) || strlen(s->name) < 3 || strchr(s->name, '='))
        return err_set(err, TS_ESTATE, "flag spec: name '%s' must look like --word", s->name ? s->name : "(null)");
    if (!s->target)
        return err_set(err, TS_ESTATE, "flag spec %s: no target", s->name);
    if (s->type == OPT_ENUM && (!s->enum_names || !s->enum_names[0]))
        return err_set(err, TS_ESTATE, "flag spec %s: enum without names", s->name);
    if (s->alias && (s->alias[0] != '-' || s->alias[1] == '-' || !s->alias[1]))
        return err_set(err, TS_ESTATE, "flag spec %s: alias '%s' must look like -x", s->name, s->alias);
    if (s->min > s->max)
        return err_set(err, TS_ESTATE, "flag spec %s: min %g > max %g", s->name, s->min, s->max);
    if (find_long(t, s->name, strlen(s->name)))
        return err_set(err, TS_ESTATE, "flag %s registered twice", s->name);
    if (s->alias && find_alias(t, s->alias, strlen(s->alias)))
        return err_set(err, TS_ESTATE, "flag alias %s registered twice", s->alias);
    int rc = grow(t, err);
    if (rc)
        return rc;
    opt_entry *e = &t->entries[t->n++];
    memset(e, 0, sizeof *e);
    e->spec = *s;
    if (!s->defval)
        format_default(e); /* kept in defbuf: entries move when the table grows */
    return TS_OK;
}

int opt_section(opt_table *t, const char *title, ts_err *err)
{
    int rc = grow(t, err);
    if (rc)
        return rc;
    opt_entry *e = &t->entries[t->n++];
    memset(e, 0, sizeof *e);
    e->spec.type = OPT_SECTION;
    e->spec.name = title;
    return TS_OK;
}

size_t opt_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t *row = malloc((lb + 1) * sizeof *row);
    if (!row)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    size_t d = row[lb];
    free(row);
    return d;
}

const char *opt_nearest(const opt_table *t, const char *name)
{
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < t->n; i++) {
        const opt_spec *s = &t->entries[i].spec;
        if (s->type == OPT_SECTION)
            continue;
        size_t d = opt_edit_distance(name, s->name);
        if (s->alias) {
            size_t da = opt_edit_distance(name, s->alias);
            if (da < d)
                d = da;
        }
        if (d < bd) {
            bd = d;
            best = s->name;
        }
    }
    return best;
}

const opt_spec *opt_find(const opt_table *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->entries[i].spec.type != OPT_SECTION && !strcmp(t->entries[i].spec.name, name))
            return &t->entries[i].spec;
    return NULL;
}

bool opt_was_set(const opt_table *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->entries[i].spec.type != OPT_SECTION && !strcmp(t->entries[i].spec.name, name))
            return t->entries[i].set;
    return false;
}

bool opt_target_set(const opt_table *t, const void *ptr)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->entries[i].spec.type != OPT_SECTION && t->entries[i].spec.target == ptr && t->entries[i].set)
            return true;
    return false;
}

/* "in [1, 4096] layers" or "" */
static void range_text(const opt_spec *s, char *buf, size_t n)
{
    if (!has_range(s)) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, n, " in [%.17g, %.17g]%s%s", s->min, s->max, s->unit ? " " : "", s->unit ? s->unit : "");
}

static void enum_list(const opt_spec *s, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; s->enum_names[i] && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? "|" : "", s->enum_names[i]);
}

/* Parse one value for e from text (the flag as written is `as` for messages). */
static int set_value(opt_entry *e, const char *as, const char *text, ts_err *err)
{
    const opt_spec *s = &e->spec;
    char rng[160];
    range_text(s, rng, sizeof rng);
    switch (s->type) {
    case OPT_INT:
    case OPT_INT64: {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (end == text || *end || errno == ERANGE || !*text)
            return err_set(err, TS_EINVAL, "flag %s: '%s' is not an integer (expected an integer%s)", as, text, rng);
        if (has_range(s) && ((double)v < s->min || (double)v > s->max))
            return err_set(err, TS_EINVAL, "flag %s: %lld is out of range (valid: %.17g to %.17g%s%s)", as, v, s->min,
                           s->max, s->unit ? " " : "", s->unit ? s->unit : "");
        if (s->type == OPT_INT) {
            if (v < INT32_MIN || v > INT32_MAX)
                return err_set(err, TS_EINVAL, "flag %s: %lld does not fit in a 32-bit integer", as, v);
            *(int *)s->target = (int)v;
        } else {
            *(int64_t *)s->target = (int64_t)v;
        }
        return TS_OK;
    }
    case OPT_DOUBLE: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (end == text || *end || !*text || errno == ERANGE || !isfinite(v) ||
            text[strspn(text, "0123456789+-.eE")]) /* decimal only: no hex, inf, nan */
            return err_set(err, TS_EINVAL, "flag %s: '%s' is not a finite number (expected a number%s)", as, text, rng);
        if (has_range(s) && (v < s->min || v > s->max))
            return err_set(err, TS_EINVAL, "flag %s: %g is out of range (valid: %.17g to %.17g%s%s)", as, v, s->min,
                           s->max, s->unit ? " " : "", s->unit ? s->unit : "");
        *(double *)s->target = v;
        return TS_OK;
    }
    case OPT_BOOL: {
        static const char *const yes[] = {"true", "1", "yes", "on"};
        static const char *const no[] = {"false", "0", "no", "off"};
        for (size_t i = 0; i < 4; i++) {
            if (!strcmp(text, yes[i])) {
                *(bool *)s->target = true;
                return TS_OK;
            }
            if (!strcmp(text, no[i])) {
                *(bool *)s->target = false;
                return TS_OK;
            }
        }
        return err_set(err, TS_EINVAL, "flag %s: '%s' is not a switch value (give %s alone, or %s=true|false)", as,
                       text, s->name, s->name);
    }
    case OPT_STRING:
        if (!*text)
            return err_set(err, TS_EINVAL, "flag %s: empty value (expected %s)", as,
                           s->metavar ? s->metavar : "a string");
        *(const char **)s->target = text;
        return TS_OK;
    case OPT_ENUM: {
        for (int i = 0; s->enum_names[i]; i++)
            if (!strcmp(text, s->enum_names[i])) {
                *(int *)s->target = i;
                return TS_OK;
            }
        char names[400];
        enum_list(s, names, sizeof names);
        return err_set(err, TS_EINVAL, "flag %s: '%s' is not valid (valid: %s)", as, text, names);
    }
    case OPT_SECTION:
        break;
    }
    return err_set(err, TS_ESTATE, "flag %s: bad spec type", as);
}

int opt_parse(opt_table *t, int argc, char **argv, ts_err *err)
{
    bool flags_done = false;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (flags_done || a[0] != '-' || !a[1]) {
            if (t->n_positional >= t->max_positional)
                return err_set(err, TS_EINVAL, "unexpected argument '%s' (%s takes %s; flags start with --)", a,
                               t->prog ? t->prog : "this command",
                               t->max_positional ? "fewer positional arguments" : "no positional arguments");
            if (!t->positional) {
                t->positional = calloc((size_t)t->max_positional, sizeof *t->positional);
                if (!t->positional)
                    return err_set(err, TS_ENOMEM, "out of memory parsing arguments");
            }
            t->positional[t->n_positional++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            flags_done = true;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            t->help_requested = true;
            return TS_OK;
        }
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        opt_entry *e = a[1] == '-' ? find_long(t, a, nlen) : find_alias(t, a, nlen);
        if (!e) {
            char shown[128];
            snprintf(shown, sizeof shown, "%.*s", (int)(nlen < 100 ? nlen : 100), a);
            const char *near = opt_nearest(t, shown);
            if (near)
                return err_set(err, TS_EINVAL, "unknown flag '%s'; did you mean %s? (%s --help lists all flags)", shown,
                               near, t->prog ? t->prog : "--help");
            return err_set(err, TS_EINVAL, "unknown flag '%s' (%s takes no flags)", shown,
                           t->prog ? t->prog : "this command");
        }
        const char *as = e->spec.name;
        if (e->set)
            return err_set(err, TS_EINVAL, "flag %s given twice (give each flag once)", as);
        const char *val;
        if (eq) {
            val = eq + 1;
        } else if (e->spec.type == OPT_BOOL) {
            val = "true";
        } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
            val = argv[++i];
        } else {
            char kind[400];
            if (e->spec.type == OPT_ENUM)
                enum_list(&e->spec, kind, sizeof kind);
            else
                snprintf(kind, sizeof kind, "%s",
                         e->spec.metavar              ? e->spec.metavar
                         : e->spec.type == OPT_DOUBLE ? "a number"
                         : e->spec.type == OPT_STRING ? "a string"
                                                      : "an integer");
            return err_set(err, TS_EINVAL, "flag %s: missing value (expected %s%s%s)", as, kind,
                           e->spec.unit ? ", in " : "", e->spec.unit ? e->spec.unit : "");
        }
        int rc = set_value(e, as, val, err);
        if (rc)
            return rc;
        e->set = true;
    }
    return TS_OK;
}

/* Write text word-wrapped to lines of at most width columns, each line
 * starting with indent spaces. */
static void wrap(FILE *f, const char *text, int indent, int width)
{
    int col = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ')
            p++;
        int n = (int)strcspn(p, " ");
        if (!n)
            break;
        if (col > 0 && col + 1 + n > width) {
            fputc('\n', f);
            col = 0;
        }
        if (col == 0)
            col = fprintf(f, "%*s", indent, "");
        else
            col += fprintf(f, " ");
        col += fprintf(f, "%.*s", n, p);
        p += n;
    }
    fputc('\n', f);
}

static const char *metavar(const opt_spec *s)
{
    if (s->metavar)
        return s->metavar;
    switch (s->type) {
    case OPT_INT:
    case OPT_INT64:
        return "INT";
    case OPT_DOUBLE:
        return "NUM";
    case OPT_STRING:
        return "STR";
    case OPT_ENUM:
        return "NAME";
    default:
        return "";
    }
}

void opt_help(const opt_table *t, FILE *f)
{
    fprintf(f, "usage: %s [flags]\n", t->prog ? t->prog : "trainsim");
    if (t->summary)
        fprintf(f, "%s\n", t->summary);
    for (size_t i = 0; i < t->n; i++) {
        const opt_spec *s = &t->entries[i].spec;
        if (s->type == OPT_SECTION) {
            fprintf(f, "\n%s:\n", s->name);
            continue;
        }
        char head[160];
        int off = snprintf(head, sizeof head, "  %s%s%s", s->alias ? s->alias : "", s->alias ? ", " : "", s->name);
        if (s->type != OPT_BOOL && off > 0 && (size_t)off < sizeof head)
            snprintf(head + off, sizeof head - (size_t)off, " %s", metavar(s));
        fprintf(f, "%s\n", head);
        char text[2048];
        off = snprintf(text, sizeof text, "%s", s->help ? s->help : "");
        if (s->type == OPT_ENUM && off >= 0 && (size_t)off < sizeof text) {
            char names[400];
            enum_list(s, names, sizeof names);
            off += snprintf(text + off, sizeof text - (size_t)off, " [%s]", names);
        }
        wrap(f, text, 6, 100);
        fprintf(f, "      unit: %s; default: %s", s->unit ? s->unit : "-",
                s->defval ? s->defval : t->entries[i].defbuf);
        if (has_range(s))
            fprintf(f, "; range: %.17g to %.17g", s->min, s->max);
        fputc('\n', f);
    }
    fprintf(f, "\n  -h, --help\n      print this help and exit\n");
}
