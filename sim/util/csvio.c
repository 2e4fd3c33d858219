#include "sim/util/csvio.h"

#include <csv.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/grow.h"

/* ---------------------------------------------------------------- reading */

typedef struct {
    csvio_table *t;
    char **cur; /* cells of the row being parsed */
    size_t ncur, capcur;
    size_t caprows;
    size_t capcomments;
    int row_line; /* line where the current row started (0 = none) */
    int rc;       /* first error, TS_OK if none */
    ts_err *err;
} reader;

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static void free_cells(char **cells, size_t n)
{
    if (!cells)
        return;
    for (size_t i = 0; i < n; i++)
        free(cells[i]);
    free(cells);
}

void csvio_free(csvio_table *t)
{
    if (!t)
        return;
    free(t->path);
    free_cells(t->header, t->ncols);
    for (size_t i = 0; i < t->nrows; i++)
        free_cells(t->rows[i].cells, t->ncols);
    free(t->rows);
    free_cells(t->comments, t->ncomments);
    free(t);
}

static void on_field(void *s, size_t len, void *data)
{
    reader *r = data;
    if (r->rc)
        return;
    if (r->ncur == r->capcur && grow_to((void **)&r->cur, &r->capcur, r->ncur + 1, 16, sizeof *r->cur)) {
        r->rc = err_set(r->err, TS_ENOMEM, "%s: out of memory", r->t->path);
        return;
    }
    char *c = dup_n(s ? s : "", s ? len : 0);
    if (!c) {
        r->rc = err_set(r->err, TS_ENOMEM, "%s: out of memory", r->t->path);
        return;
    }
    r->cur[r->ncur++] = c;
}

static void header_list(const csvio_table *t, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < t->ncols && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? ", " : "", t->header[i]);
}

static void on_row(int term, void *data)
{
    (void)term;
    reader *r = data;
    csvio_table *t = r->t;
    int line = r->row_line;
    r->row_line = 0;
    if (r->rc)
        return;
    if (!t->header) {
        for (size_t i = 0; i < r->ncur; i++) {
            if (!r->cur[i][0]) {
                r->rc = err_set(r->err, TS_EINVAL, "%s:%d: header column %zu has no name", t->path, line, i + 1);
                return;
            }
            for (size_t j = 0; j < i; j++)
                if (!strcmp(r->cur[i], r->cur[j])) {
                    r->rc = err_set(r->err, TS_EINVAL, "%s:%d: column '%s' appears twice in the header", t->path, line,
                                    r->cur[i]);
                    return;
                }
        }
        t->header = r->cur;
        t->ncols = r->ncur;
        t->header_line = line;
    } else {
        if (r->ncur != t->ncols) {
            char cols[600];
            header_list(t, cols, sizeof cols);
            r->rc = err_set(r->err, TS_EINVAL, "%s:%d: row has %zu cells but the header (line %d) has %zu columns: %s",
                            t->path, line, r->ncur, t->header_line, t->ncols, cols);
            return;
        }
        if (t->nrows == r->caprows && grow_to((void **)&t->rows, &r->caprows, t->nrows + 1, 32, sizeof *t->rows)) {
            r->rc = err_set(r->err, TS_ENOMEM, "%s: out of memory", t->path);
            return;
        }
        t->rows[t->nrows].line = line;
        t->rows[t->nrows].cells = r->cur;
        t->nrows++;
    }
    r->cur = NULL;
    r->ncur = r->capcur = 0;
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

static int add_comment(reader *r, const char *s, size_t n)
{
    csvio_table *t = r->t;
    s++, n--; /* the '#' */
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    if (grow_to((void **)&t->comments, &r->capcomments, t->ncomments + 1, 8, sizeof *t->comments))
        return err_set(r->err, TS_ENOMEM, "%s: out of memory", t->path);
    if (!(t->comments[t->ncomments] = dup_n(s, n)))
        return err_set(r->err, TS_ENOMEM, "%s: out of memory", t->path);
    t->ncomments++;
    return TS_OK;
}

static int parse_all(reader *r, const char *data, size_t len)
{
    struct csv_parser p;
    if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI) != 0)
        return err_set(r->err, TS_ENOMEM, "%s: out of memory", r->t->path);
    int line = 0;
    size_t pos = 0;
    if (len >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3))
        pos = 3; /* a UTF-8 byte-order mark, as spreadsheets write */
    while (pos < len && !r->rc) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (data + pos)) + 1 : len - pos;
        const char *s = data + pos;
        line++;
        pos += n;
        if (r->row_line == 0) { /* between rows: comments and blank lines are ours */
            if (s[0] == '#') {
                r->rc = add_comment(r, s, n);
                continue;
            }
            if (blank(s, n))
                continue;
            r->row_line = line;
        }
        if (csv_parse(&p, s, n, on_field, on_row, r) != n && !r->rc)
            r->rc = err_set(r->err, TS_EINVAL,
                            "%s:%d: malformed CSV (%s; quote a cell that holds commas or quotes, "
                            "doubling the quotes inside)",
                            r->t->path, line, csv_strerror(csv_error(&p)));
    }
    if (!r->rc && csv_fini(&p, on_field, on_row, r) != 0 && !r->rc)
        r->rc = err_set(r->err, TS_EINVAL, "%s:%d: malformed CSV at end of file (%s: a quoted cell is not closed)",
                        r->t->path, r->row_line ? r->row_line : line, csv_strerror(csv_error(&p)));
    csv_free(&p);
    return r->rc;
}

int csvio_read_mem(const char *name, const char *data, size_t len, const char *const *required, unsigned flags,
                   csvio_table **out, ts_err *err)
{
    *out = NULL;
    csvio_table *t = calloc(1, sizeof *t);
    if (!t || !(t->path = dup_n(name, strlen(name)))) {
        free(t);
        return err_set(err, TS_ENOMEM, "%s: out of memory", name);
    }
    reader r = {.t = t, .err = err};
    int rc = parse_all(&r, data, len);
    free_cells(r.cur, r.ncur);
    if (!rc && !t->header) {
        char exp[600] = "";
        size_t off = 0;
        for (size_t i = 0; required && required[i] && off < sizeof exp; i++)
            off += (size_t)snprintf(exp + off, sizeof exp - off, "%s%s", i ? ", " : "", required[i]);
        rc = err_set(err, TS_EINVAL, "%s: empty: no header row%s%s%s", name, off ? " (expected columns: " : "", exp,
                     off ? ")" : "");
    }
    if (!rc && t->nrows == 0 && !(flags & CSVIO_ALLOW_NO_ROWS))
        rc = err_set(err, TS_EINVAL, "%s:%d: empty: a header but no data rows", name, t->header_line);
    for (size_t i = 0; !rc && required && required[i]; i++)
        rc = csvio_require(t, required[i], err);
    if (rc) {
        csvio_free(t);
        return rc;
    }
    *out = t;
    return TS_OK;
}

int csvio_read(const char *path, const char *const *required, unsigned flags, csvio_table **out, ts_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, TS_EIO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = TS_OK;
    for (;;) {
        if (len == cap && grow_to((void **)&buf, &cap, len + 1, 8192, 1)) {
            rc = err_set(err, TS_ENOMEM, "%s: out of memory", path);
            break;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                rc = err_set(err, TS_EIO, "%s: read error: %s", path, strerror(errno));
            break;
        }
    }
    (void)fclose(f); /* read only: nothing to lose */
    if (!rc)
        rc = csvio_read_mem(path, buf ? buf : "", len, required, flags, out, err);
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------- getters */

int csvio_col(const csvio_table *t, const char *name)
{
    for (size_t i = 0; i < t->ncols; i++)
        if (!strcmp(t->header[i], name))
            return (int)i;
    return -1;
}

int csvio_require(const csvio_table *t, const char *name, ts_err *err)
{
    if (csvio_col(t, name) >= 0)
        return TS_OK;
    char cols[600];
    header_list(t, cols, sizeof cols);
    return err_set(err, TS_EINVAL, "%s:%d: missing column '%s' (the header has: %s)", t->path, t->header_line, name,
                   cols);
}

const char *csvio_cell(const csvio_table *t, size_t row, const char *name)
{
    int c = csvio_col(t, name);
    if (c < 0 || row >= t->nrows)
        return "";
    return t->rows[row].cells[c];
}

bool csvio_empty(const csvio_table *t, size_t row, const char *name)
{
    return !csvio_cell(t, row, name)[0];
}

int csvio_errf(const csvio_table *t, size_t row, const char *name, ts_err *err, const char *fmt, ...)
{
    char msg[ERR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = row < t->nrows ? t->rows[row].line : t->header_line;
    if (name)
        return err_set(err, TS_EINVAL, "%s:%d: column '%s': %s", t->path, line, name, msg);
    return err_set(err, TS_EINVAL, "%s:%d: %s", t->path, line, msg);
}

/* Cell of a present column, or a missing-column error. */
static int cell_of(const csvio_table *t, size_t row, const char *name, const char *expect, const char **out,
                   ts_err *err)
{
    int rc = csvio_require(t, name, err);
    if (rc)
        return rc;
    *out = t->rows[row].cells[csvio_col(t, name)];
    if (!**out)
        return csvio_errf(t, row, name, err, "empty (expected %s)", expect);
    return TS_OK;
}

int csvio_get_str(const csvio_table *t, size_t row, const char *name, const char **out, ts_err *err)
{
    return cell_of(t, row, name, "a value", out, err);
}

int csvio_get_int64(const csvio_table *t, size_t row, const char *name, int64_t min, int64_t max, int64_t *out,
                    ts_err *err)
{
    char expect[96];
    snprintf(expect, sizeof expect, "an integer in [%lld, %lld]", (long long)min, (long long)max);
    const char *s;
    int rc = cell_of(t, row, name, expect, &s, err);
    if (rc)
        return rc;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE)
        return csvio_errf(t, row, name, err, "'%s' is not an integer (expected %s)", s, expect);
    if (v < min || v > max)
        return csvio_errf(t, row, name, err, "%lld is out of range (expected %s)", v, expect);
    *out = (int64_t)v;
    return TS_OK;
}

int csvio_get_int(const csvio_table *t, size_t row, const char *name, long min, long max, int *out, ts_err *err)
{
    if (min < INT32_MIN)
        min = INT32_MIN;
    if (max > INT32_MAX)
        max = INT32_MAX;
    int64_t v;
    int rc = csvio_get_int64(t, row, name, min, max, &v, err);
    if (!rc) /* NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign): v is set when rc is TS_OK */
        *out = (int)v;
    return rc;
}

static int get_num(const csvio_table *t, size_t row, const char *name, double min, double max, bool positive,
                   double *out, ts_err *err)
{
    char expect[96];
    if (positive && max > 0)
        snprintf(expect, sizeof expect, "a number in (0, %g]", max);
    else if (positive)
        snprintf(expect, sizeof expect, "a number > 0");
    else
        snprintf(expect, sizeof expect, "a number in [%g, %g]", min, max);
    const char *s;
    int rc = cell_of(t, row, name, expect, &s, err);
    if (rc)
        return rc;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v) ||
        s[strspn(s, "0123456789+-.eE")]) /* decimal only: no hex, inf, nan */
        return csvio_errf(t, row, name, err, "'%s' is not a number (expected %s)", s, expect);
    if (positive ? !(v > 0) || (max > 0 && v > max) : (v < min || v > max))
        return csvio_errf(t, row, name, err, "%s is out of range (expected %s)", s, expect);
    *out = v;
    return TS_OK;
}

int csvio_get_double(const csvio_table *t, size_t row, const char *name, double min, double max, double *out,
                     ts_err *err)
{
    return get_num(t, row, name, min, max, false, out, err);
}

int csvio_get_positive(const csvio_table *t, size_t row, const char *name, double *out, ts_err *err)
{
    return get_num(t, row, name, 0, 0, true, out, err);
}

int csvio_get_positive_max(const csvio_table *t, size_t row, const char *name, double max, double *out, ts_err *err)
{
    return get_num(t, row, name, 0, max, true, out, err);
}

int csvio_get_bool(const csvio_table *t, size_t row, const char *name, bool *out, ts_err *err)
{
    const char *s;
    int rc = cell_of(t, row, name, "true or false", &s, err);
    if (rc)
        return rc;
    if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "1")) {
        *out = true;
        return TS_OK;
    }
    if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "0")) {
        *out = false;
        return TS_OK;
    }
    return csvio_errf(t, row, name, err, "'%s' is not a boolean (expected true or false)", s);
}

int csvio_get_enum(const csvio_table *t, size_t row, const char *name, const char *const *names, int *out, ts_err *err)
{
    const char *s;
    int rc = csvio_get_str(t, row, name, &s, err);
    if (rc)
        return rc;
    char list[400] = "";
    size_t off = 0;
    for (int i = 0; names[i]; i++) {
        if (!strcmp(s, names[i])) {
            *out = i;
            return TS_OK;
        }
        if (off < sizeof list)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", names[i]);
    }
    return csvio_errf(t, row, name, err, "'%s' is not valid (valid: %s)", s, list);
}

/* ---------------------------------------------------------------- writing */

static bool needs_quotes(const char *s, bool first)
{
    size_t n = strlen(s);
    if (n && (s[0] == ' ' || s[0] == '\t' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        return true;
    if (first && s[0] == '#')
        return true;
    return strpbrk(s, ",\"\r\n") != NULL;
}

int csvio_write_row(FILE *f, size_t n, const char *const *cells, ts_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const char *s = cells[i] ? cells[i] : "";
        if (i && fputc(',', f) == EOF)
            goto fail;
        if (needs_quotes(s, i == 0)) {
            if (csv_fwrite(f, s, strlen(s)) != 0)
                goto fail;
        } else if (fputs(s, f) == EOF) {
            goto fail;
        }
    }
    if (fputc('\n', f) == EOF)
        goto fail;
    return TS_OK;
fail:
    return err_set(err, TS_EIO, "CSV write failed: %s", strerror(errno));
}

int csvio_write_comment(FILE *f, const char *text, ts_err *err)
{
    if (fputs("# ", f) == EOF)
        goto fail;
    for (const char *p = text; *p; p++)
        if (fputc(*p == '\n' || *p == '\r' ? ' ' : *p, f) == EOF)
            goto fail;
    if (fputc('\n', f) == EOF)
        goto fail;
    return TS_OK;
fail:
    return err_set(err, TS_EIO, "CSV write failed: %s", strerror(errno));
}

/* 2^63: integral doubles in [-2^63, 2^63) are exactly int64 values. */
#define CSVIO_TWO_POW_63 9223372036854775808.0

char *csvio_fmt_double(char *buf, size_t n, double v)
{
    if (n == 0)
        return buf;
    if (isnan(v)) {
        snprintf(buf, n, "nan");
    } else if (isinf(v)) {
        snprintf(buf, n, "%s", v > 0 ? "inf" : "-inf");
    } else if (v == trunc(v) && v >= -CSVIO_TWO_POW_63 && v < CSVIO_TWO_POW_63 && !(v == 0 && signbit(v))) {
        snprintf(buf, n, "%" PRId64, (int64_t)v);
    } else {
        /* 17 significant digits always round-trip an IEEE double; fewer
         * often do and read better (0.1, not 0.10000000000000001) */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, n, "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
    return buf;
}
