/* csvio — reading and writing CSV through libcsv.
 *
 * Reading: the whole file is parsed by libcsv (strict mode) into a table.
 * Lines whose first character is '#' (outside a quoted field) are comment
 * rows: kept in t->comments, never parsed. The first other row is the header
 * (cells trimmed of spaces); every data row must have as many cells as the
 * header. Each row keeps the file line number where it starts, so every
 * message reads "FILE:LINE: column 'NAME': ...".
 *
 * Getters look a column up by name and parse the cell: numbers must be whole
 * (no trailing junk), finite, and inside the given range, else TS_EINVAL:
 *   "topo.csv:7: column 'nic_gbps': 'abc' is not a number (expected a number > 0)"
 *
 * Writing: csvio_write_row() writes one row; a cell that needs quoting
 * (comma, quote, newline, leading/trailing space, leading '#') goes through
 * libcsv's csv_fwrite, others are written as they are. Numbers go through
 * csvio_fmt_double(): integers as integers, others with the digits that
 * round-trip.
 *
 * Ownership: csvio_read*() return a table owned by the caller, freed with
 * csvio_free(); every string in it belongs to it.
 */
#ifndef TRAINSIM_CSVIO_H
#define TRAINSIM_CSVIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/util/err.h"

typedef struct {
    int line;     /* 1-based line number in the file where the row starts */
    char **cells; /* ncols cells, NUL-terminated, trimmed */
} csvio_row;

typedef struct {
    char *path; /* name used in messages (file path or the given name) */
    size_t ncols;
    char **header; /* ncols column names */
    int header_line;
    size_t nrows;
    csvio_row *rows; /* data rows, file order */
    size_t ncomments;
    char **comments; /* comment rows without the leading '#' and spaces */
} csvio_table;

/* Flags for csvio_read. */
enum { CSVIO_ALLOW_NO_ROWS = 1 }; /* a header with no data rows is not an error */

/* Read and parse path. required: NULL-terminated list of column names that
 * must be in the header (or NULL). Errors (TS_EINVAL): empty file / no header
 * ("FILE: empty: no header row (expected columns: ...)"), no data rows,
 * malformed CSV ("FILE:LINE: ..."), duplicate column, row with a wrong cell
 * count, missing required column ("FILE:LINE: missing column 'x' (the header
 * has: ...)"). TS_EIO if the file cannot be read. */
int csvio_read(const char *path, const char *const *required, unsigned flags, csvio_table **out, ts_err *err);

/* Same from a memory buffer; name is used in messages in place of a path. */
int csvio_read_mem(const char *name, const char *data, size_t len, const char *const *required, unsigned flags,
                   csvio_table **out, ts_err *err);

void csvio_free(csvio_table *t);

/* Index of column name, or -1 if absent. */
int csvio_col(const csvio_table *t, const char *name);

/* TS_EINVAL "FILE:LINE: missing column 'name' (the header has: ...)" if absent. */
int csvio_require(const csvio_table *t, const char *name, ts_err *err);

/* The cell of row at column name; "" if the column is absent. Borrowed. */
const char *csvio_cell(const csvio_table *t, size_t row, const char *name);

/* Whether the cell is empty (or the column absent). */
bool csvio_empty(const csvio_table *t, size_t row, const char *name);

/* Non-empty string cell; *out is borrowed from t. */
int csvio_get_str(const csvio_table *t, size_t row, const char *name, const char **out, ts_err *err);

/* Integer cell in [min, max]. */
int csvio_get_int(const csvio_table *t, size_t row, const char *name, long min, long max, int *out, ts_err *err);
int csvio_get_int64(const csvio_table *t, size_t row, const char *name, int64_t min, int64_t max, int64_t *out,
                    ts_err *err);

/* Finite number in [min, max]. */
int csvio_get_double(const csvio_table *t, size_t row, const char *name, double min, double max, double *out,
                     ts_err *err);

/* Finite number > 0 (bandwidths, rates). */
int csvio_get_positive(const csvio_table *t, size_t row, const char *name, double *out, ts_err *err);

/* Finite number in (0, max] (max > 0): physical quantities with a bound that keeps
 * every derived time and size inside int64 ns / bytes. */
int csvio_get_positive_max(const csvio_table *t, size_t row, const char *name, double max, double *out, ts_err *err);

/* true|false|yes|no|1|0 (case-sensitive, lower case). */
int csvio_get_bool(const csvio_table *t, size_t row, const char *name, bool *out, ts_err *err);

/* One of names (NULL-terminated list): *out is its index. TS_EINVAL
 * "FILE:LINE: column 'c': 'x' is not valid (valid: a, b, c)" otherwise. */
int csvio_get_enum(const csvio_table *t, size_t row, const char *name, const char *const *names, int *out, ts_err *err);

/* Error with the row's location: "FILE:LINE: column 'name': <formatted>". */
int csvio_errf(const csvio_table *t, size_t row, const char *name, ts_err *err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Write n cells and a newline. TS_EIO on a write error. */
int csvio_write_row(FILE *f, size_t n, const char *const *cells, ts_err *err);

/* Write a comment row "# text" (newlines in text become spaces). */
int csvio_write_comment(FILE *f, const char *text, ts_err *err);

/* Bytes csvio_fmt_double may write, NUL included ("-2.2250738585072014e-308"
 * is 25). */
#define CSVIO_NUM_BYTES 32

/* v as a CSV cell in buf (n >= CSVIO_NUM_BYTES), so that every writer
 * carries numbers the same way and a reader gets back exactly v:
 *   - integral values that an int64 holds exactly, as an integer
 *     ("930431000", "-9223372036854775808"; -0.0 is "-0");
 *   - other finite values in the shortest of "%.15g", "%.16g", "%.17g" that
 *     strtod reads back as v ("0.1", "1.2345678901234567e-300");
 *   - "nan", "inf", "-inf".
 * Uses the C locale's '.'. Returns buf. */
char *csvio_fmt_double(char *buf, size_t n, double v);

#endif
