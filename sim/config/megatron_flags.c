#include "sim/config/megatron_flags.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

const char *const MFLAGS_TREATMENT_NAMES[] = {"modelled", "ignored", "refused", "default-only", NULL};
const char *const MFLAGS_KIND_NAMES[] = {"store_true", "store_false", "value", "list", "boolean_optional", NULL};

static const char *const MFLAGS_COLS[] = {"flag", "treatment", "reason", "kind", "accepted", NULL};

/* The treatments a row may have (modelled is the opt_table's, never a row). */
static const char *const ROW_TREATMENTS[] = {"ignored", "refused", "default-only", NULL};

/* ---------------------------------------------------------------- load */

void mflags_free(mflags_table *t)
{
    if (!t)
        return;
    free(t->entries);
    csvio_free(t->csv);
    free(t);
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const mflags_entry *)a)->flag, ((const mflags_entry *)b)->flag);
}

static bool takes_values(mflags_kind k)
{
    return k == MFLAGS_VALUE || k == MFLAGS_LIST;
}

static int parse_row(const csvio_table *c, size_t r, mflags_entry *e, ts_err *err)
{
    int rc, treatment, kind;
    if ((rc = csvio_get_str(c, r, "flag", &e->flag, err)) ||
        (rc = csvio_get_enum(c, r, "treatment", ROW_TREATMENTS, &treatment, err)) ||
        (rc = csvio_get_str(c, r, "reason", &e->reason, err)) ||
        (rc = csvio_get_enum(c, r, "kind", MFLAGS_KIND_NAMES, &kind, err)))
        return rc;
    e->treatment = (mflags_treatment)(treatment + MFLAGS_IGNORED);
    e->kind = (mflags_kind)kind;
    e->accepted = csvio_cell(c, r, "accepted");
    e->line = c->rows[r].line;
    if (strncmp(e->flag, "--", 2) || !e->flag[2] || strpbrk(e->flag, "= \t"))
        return csvio_errf(c, r, "flag", err, "'%s' is not a flag name (expected --name, no '=' or spaces)", e->flag);
    if (e->treatment == MFLAGS_DEFAULT_ONLY && !takes_values(e->kind))
        return csvio_errf(c, r, "kind", err, "%s: default-only needs a flag that takes values (value or list), not %s",
                          e->flag, MFLAGS_KIND_NAMES[e->kind]);
    if (e->treatment == MFLAGS_DEFAULT_ONLY && !*e->accepted)
        return csvio_errf(c, r, "accepted", err, "%s: default-only needs the accepted values ('|'-separated)", e->flag);
    if (e->treatment != MFLAGS_DEFAULT_ONLY && *e->accepted)
        return csvio_errf(c, r, "accepted", err,
                          "%s: accepted values belong to default-only rows only (this one is %s)", e->flag,
                          MFLAGS_TREATMENT_NAMES[e->treatment]);
    return TS_OK;
}

int mflags_load(const char *path, mflags_table **out, ts_err *err)
{
    char found[CATALOG_PATH_BYTES];
    int rc;
    if (!path) {
        if ((rc = catalog_find(MFLAGS_FILE, found, sizeof found, err)))
            return rc;
        path = found;
    }
    mflags_table *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(err, TS_ENOMEM, "%s: out of memory", path);
    snprintf(t->path, sizeof t->path, "%s", path);
    if ((rc = csvio_read(path, MFLAGS_COLS, 0, &t->csv, err)))
        goto out;
    t->entries = calloc(t->csv->nrows, sizeof *t->entries);
    if (!t->entries) {
        rc = err_set(err, TS_ENOMEM, "%s: out of memory for %zu rows", path, t->csv->nrows);
        goto out;
    }
    for (size_t r = 0; r < t->csv->nrows && !rc; r++)
        rc = parse_row(t->csv, r, &t->entries[r], err);
    if (rc)
        goto out;
    t->n = t->csv->nrows;
    qsort(t->entries, t->n, sizeof *t->entries, entry_cmp);
    for (size_t i = 1; i < t->n; i++) {
        const mflags_entry *a = &t->entries[i - 1], *b = &t->entries[i];
        if (!strcmp(a->flag, b->flag)) {
            rc = err_set(err, TS_EINVAL, "%s:%d: column 'flag': %s listed twice (also line %d; one row per flag)", path,
                         a->line > b->line ? a->line : b->line, a->flag, a->line < b->line ? a->line : b->line);
            goto out;
        }
    }
out:
    if (rc) {
        mflags_free(t);
        return rc;
    }
    *out = t;
    return TS_OK;
}

const mflags_entry *mflags_find(const mflags_table *t, const char *flag)
{
    if (!t || !t->n)
        return NULL;
    mflags_entry key = {.flag = flag};
    return bsearch(&key, t->entries, t->n, sizeof *t->entries, entry_cmp);
}

bool mflags_in_table(const opt_table *t, const char *name, size_t len)
{
    for (size_t i = 0; i < t->n; i++) {
        const opt_spec *s = &t->entries[i].spec;
        if (s->type == OPT_SECTION)
            continue;
        if ((s->name && strlen(s->name) == len && !strncmp(s->name, name, len)) ||
            (s->alias && strlen(s->alias) == len && !strncmp(s->alias, name, len)))
            return true;
    }
    return false;
}

/* ---------------------------------------------------------------- filter */

void mflags_filtered_free(mflags_filtered *f)
{
    if (!f)
        return;
    free(f->argv);
    free(f->ignored);
    memset(f, 0, sizeof *f);
}

/* A "--name" or "--name=value" argument that opt_parse would read as a flag. */
static bool is_long_flag(const char *a)
{
    return a[0] == '-' && a[1] == '-' && a[2];
}

static size_t name_len(const char *a)
{
    const char *eq = strchr(a, '=');
    return eq ? (size_t)(eq - a) : strlen(a);
}

/* Whether argv holds, before "--" and --help, a long flag t does not know. */
static bool has_unknown(const opt_table *t, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--") || !strcmp(a, "--help") || !strcmp(a, "-h"))
            return false;
        if (is_long_flag(a) && !mflags_in_table(t, a, name_len(a)))
            return true;
    }
    return false;
}

/* Whether v equals one of the '|'-separated accepted values: the same
 * string, or two numbers of the same value ("1" and "1.0"). */
static bool value_accepted(const char *accepted, const char *v)
{
    char *vend;
    double vd = strtod(v, &vend);
    bool vnum = *v && !*vend && isfinite(vd);
    const char *p = accepted;
    for (;;) {
        size_t n = strcspn(p, "|");
        char alt[128];
        snprintf(alt, sizeof alt, "%.*s", (int)(n < sizeof alt - 1 ? n : sizeof alt - 1), p);
        if (!strcmp(alt, v))
            return true;
        char *aend;
        double ad = strtod(alt, &aend);
        if (vnum && *alt && !*aend && ad == vd)
            return true;
        if (!p[n])
            return false;
        p += n + 1;
    }
}

/* "unfused|local" as "unfused or local" into buf. */
static void accepted_words(const char *accepted, char *buf, size_t cap)
{
    size_t off = 0;
    for (const char *p = accepted; *p && off + 5 < cap; p++) {
        if (*p == '|')
            off += (size_t)snprintf(buf + off, cap - off, " or ");
        else
            buf[off++] = *p;
    }
    buf[off < cap ? off : cap - 1] = '\0';
}

/* The values that follow the flag at argv[*i] (e the row, eq its "=value"
 * or NULL): sets *first and *nvals (indices into argv; nvals = 0 and first
 * = -1 for "=value", whose value is eq + 1) and advances *i past them. */
static int take_values(const mflags_entry *e, const char *eq, int argc, char **argv, int *i, int *first, int *nvals,
                       ts_err *err)
{
    *first = -1;
    *nvals = 0;
    switch (e->kind) {
    case MFLAGS_STORE_TRUE:
    case MFLAGS_STORE_FALSE:
    case MFLAGS_BOOLEAN_OPTIONAL:
        if (eq)
            return err_set(err, TS_EINVAL, "%s: takes no value (a Megatron-LM switch; give it as %s alone), not '%s'",
                           e->flag, e->flag, eq + 1);
        return TS_OK;
    case MFLAGS_VALUE:
        if (eq)
            return TS_OK;
        if (*i + 1 >= argc || !strncmp(argv[*i + 1], "--", 2))
            return err_set(err, TS_EINVAL, "%s: missing value (a Megatron-LM flag that takes one value: %s VALUE)",
                           e->flag, e->flag);
        *first = ++*i;
        *nvals = 1;
        return TS_OK;
    case MFLAGS_LIST:
        if (eq)
            return TS_OK;
        *first = *i + 1;
        while (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2)) {
            ++*i;
            ++*nvals;
        }
        return TS_OK;
    }
    return err_set(err, TS_ESTATE, "%s: unknown kind %d", e->flag, (int)e->kind);
}

/* TS_EINVAL for a refused flag, or a default-only one whose values are not
 * all accepted; TS_OK for a default-only one that is. */
static int check_refused(const mflags_entry *e, const char *eq, int first, int nvals, char **argv, ts_err *err)
{
    if (e->treatment == MFLAGS_DEFAULT_ONLY) {
        bool ok = eq ? value_accepted(e->accepted, eq + 1) : nvals > 0;
        for (int k = 0; !eq && k < nvals && ok; k++)
            ok = value_accepted(e->accepted, argv[first + k]);
        if (ok)
            return TS_OK;
        char given[256] = "", words[256];
        size_t off = 0;
        if (eq)
            snprintf(given, sizeof given, "=%s", eq + 1);
        for (int k = 0; !eq && k < nvals && off < sizeof given; k++)
            off += (size_t)snprintf(given + off, sizeof given - off, " %s", argv[first + k]);
        accepted_words(e->accepted, words, sizeof words);
        return err_set(
            err, TS_EINVAL,
            "%s%s: not modelled: %s (Megatron-LM flag; trainsim accepts only %s %s; remove it or see " MFLAGS_DOC ")",
            e->flag, given, e->reason, e->flag, words);
    }
    return err_set(err, TS_EINVAL, "%s: not modelled: %s (Megatron-LM flag; remove it or see " MFLAGS_DOC ")", e->flag,
                   e->reason);
}

/* Add row k of mt to the ignored rows seen so far (*seen, *nseen of
 * *seen_cap) unless it is there already: a flag given twice is named once. */
static int note_ignored(size_t k, size_t **seen, size_t *nseen, size_t *seen_cap)
{
    for (size_t i = 0; i < *nseen; i++)
        if ((*seen)[i] == k)
            return TS_OK;
    if (*nseen == *seen_cap && grow_to((void **)seen, seen_cap, *nseen + 1, 16, sizeof **seen))
        return TS_ENOMEM;
    (*seen)[(*nseen)++] = k;
    return TS_OK;
}

/* The flags of rows seen[0 .. n-1] of mt, ", "-separated; NULL if out of
 * memory. The caller frees it. */
static char *join_names(const mflags_table *mt, const size_t *seen, size_t n)
{
    size_t bytes = 1;
    for (size_t k = 0; k < n; k++)
        bytes += strlen(mt->entries[seen[k]].flag) + 2;
    char *s = malloc(bytes);
    if (!s)
        return NULL;
    size_t off = 0;
    for (size_t k = 0; k < n; k++)
        off += (size_t)snprintf(s + off, bytes - off, "%s%s", k ? ", " : "", mt->entries[seen[k]].flag);
    s[off] = '\0';
    return s;
}

int mflags_filter(const mflags_table *mt, const opt_table *t, int argc, char **argv, mflags_filtered *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    if (argc < 1)
        return err_set(err, TS_EINVAL, "no command name in the argument vector");
    int rc = TS_OK;
    mflags_table *loaded = NULL;
    size_t *seen = NULL; /* rows of mt ignored so far, in the order given */
    size_t nseen = 0, seen_cap = 0;
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av)
        return err_set(err, TS_ENOMEM, "out of memory copying %d arguments", argc);
    int n = 0;
    av[n++] = argv[0];
    if (!mt && has_unknown(t, argc, argv)) {
        if ((rc = mflags_load(NULL, &loaded, err))) {
            err_prefix(err, "reading the Megatron-LM flag list for a flag trainsim does not know: ");
            goto out;
        }
        mt = loaded;
    }
    bool pass_rest = false;
    int refused = 0;      /* refused flags met: the first's message, then the others named */
    char more[1024] = ""; /* "; also not modelled: --x (reason), ..." */
    size_t more_len = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (pass_rest || !is_long_flag(a)) {
            pass_rest = pass_rest || !strcmp(a, "--") || !strcmp(a, "-h");
            av[n++] = a;
            continue;
        }
        size_t len = name_len(a);
        const char *eq = a[len] == '=' ? a + len : NULL;
        if (!strcmp(a, "--help") || mflags_in_table(t, a, len)) {
            pass_rest = !strcmp(a, "--help");
            av[n++] = a;
            continue;
        }
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name - 1 ? len : sizeof name - 1), a);
        const mflags_entry *e = mflags_find(mt, name);
        if (!e) {
            av[n++] = a; /* opt_parse: unknown flag, with the nearest name */
            continue;
        }
        int first, nvals;
        if ((rc = take_values(e, eq, argc, argv, &i, &first, &nvals, err)))
            goto out;
        if (e->treatment == MFLAGS_IGNORED) {
            if ((rc = note_ignored((size_t)(e - mt->entries), &seen, &nseen, &seen_cap))) {
                rc = err_set(err, TS_ENOMEM, "out of memory listing ignored flags");
                goto out;
            }
        } else if (refused == 0) {
            refused += check_refused(e, eq, first, nvals, argv, err) != TS_OK;
        } else {
            ts_err other;
            err_clear(&other);
            if (check_refused(e, eq, first, nvals, argv, &other) != TS_OK && more_len < sizeof more) {
                more_len += (size_t)snprintf(more + more_len, sizeof more - more_len, "%s%s (%s)",
                                             refused == 1 ? "; also not modelled: " : ", ", e->flag, e->reason);
                refused++;
            }
        }
    }
    if (refused) { /* every refusal at once, so a launch script is fixed in one pass */
        char first_msg[ERR_MSG_BYTES];
        snprintf(first_msg, sizeof first_msg, "%s", err ? err->msg : "");
        rc = err_set(err, TS_EINVAL, "%s%s", first_msg, more);
        goto out;
    }
    av[n] = NULL;
    if (nseen && !(out->ignored = join_names(mt, seen, nseen))) {
        rc = err_set(err, TS_ENOMEM, "out of memory listing ignored flags");
        goto out;
    }
    out->argc = n;
    out->argv = av;
    out->n_ignored = nseen;
    av = NULL;
out:
    free(av);
    free(seen);
    mflags_free(loaded);
    return rc;
}

/* ---------------------------------------------------------------- print */

typedef struct {
    const char *flag, *reason, *accepted;
    mflags_treatment treatment;
} print_row;

static int print_row_cmp(const void *a, const void *b)
{
    return strcmp(((const print_row *)a)->flag, ((const print_row *)b)->flag);
}

int mflags_print(const mflags_table *mt, const opt_table *t, FILE *f, ts_err *err)
{
    size_t cap = t->n + (mt ? mt->n : 0), n = 0;
    print_row *rows = calloc(cap ? cap : 1, sizeof *rows);
    if (!rows)
        return err_set(err, TS_ENOMEM, "out of memory for %zu flags", cap);
    size_t count[MFLAGS_N_TREATMENTS] = {0};
    for (size_t i = 0; i < t->n; i++) {
        const opt_spec *s = &t->entries[i].spec;
        if (s->type == OPT_SECTION)
            continue;
        rows[n++] = (print_row){s->name, "see trainsim config --help", "", MFLAGS_MODELLED};
    }
    for (size_t i = 0; mt && i < mt->n; i++) {
        const mflags_entry *e = &mt->entries[i];
        if (!mflags_in_table(t, e->flag, strlen(e->flag)))
            rows[n++] = (print_row){e->flag, e->reason, e->accepted, e->treatment};
    }
    qsort(rows, n, sizeof *rows, print_row_cmp);
    for (size_t i = 0; i < n; i++) {
        const print_row *r = &rows[i];
        count[r->treatment]++;
        fprintf(f, "%-52s %-13s %s", r->flag, MFLAGS_TREATMENT_NAMES[r->treatment], r->reason);
        if (r->treatment == MFLAGS_DEFAULT_ONLY) {
            char words[256];
            accepted_words(r->accepted, words, sizeof words);
            fprintf(f, " (accepted: %s)", words);
        }
        fputc('\n', f);
    }
    fprintf(f, "%zu modelled, %zu refused, %zu ignored, %zu default-only\n", count[MFLAGS_MODELLED],
            count[MFLAGS_REFUSED], count[MFLAGS_IGNORED], count[MFLAGS_DEFAULT_ONLY]);
    free(rows);
    if (ferror(f))
        return err_set(err, TS_EIO, "writing the Megatron-LM flag table failed");
    return TS_OK;
}
