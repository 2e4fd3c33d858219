/* csvio: reading with libcsv (comments, line numbers, quoting), typed getters
 * and their messages, writing, number formatting (round trip); afile:
 * atomic commit and abort. */
#include <criterion/criterion.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/util/afile.h"
#include "sim/util/csvio.h"

static csvio_table *T;
static ts_err E;

static int rd(const char *text, const char *const *req)
{
    err_clear(&E);
    csvio_free(T);
    T = NULL;
    return csvio_read_mem("t.csv", text, strlen(text), req, 0, &T, &E);
}

static void fini(void)
{
    csvio_free(T);
    T = NULL;
}

TestSuite(csvio, .fini = fini);

Test(csvio, comments_lines_and_quotes)
{
    const char *text = "# source: a \"datasheet\", p. 3\n"
                       "name, bw_gbps ,note\n"
                       "\n"
                       "a,25,\"x, y\"\n"
                       "# another comment\n"
                       "b,50,\"two\nlines\"\n"
                       "c,1e2,\"say \"\"hi\"\"\"";
    cr_assert_eq(rd(text, NULL), TS_OK, "%s", E.msg);
    cr_expect_eq(T->ncols, 3);
    cr_expect_str_eq(T->header[1], "bw_gbps");
    cr_expect_eq(T->header_line, 2);
    cr_assert_eq(T->nrows, 3);
    cr_expect_eq(T->rows[0].line, 4);
    cr_expect_eq(T->rows[1].line, 6);
    cr_expect_eq(T->rows[2].line, 8);
    cr_expect_str_eq(csvio_cell(T, 0, "note"), "x, y");
    cr_expect_str_eq(csvio_cell(T, 1, "note"), "two\nlines");
    cr_expect_str_eq(csvio_cell(T, 2, "note"), "say \"hi\"");
    cr_assert_eq(T->ncomments, 2);
    cr_expect_str_eq(T->comments[0], "source: a \"datasheet\", p. 3");
    double v;
    cr_expect_eq(csvio_get_positive(T, 2, "bw_gbps", &v, &E), TS_OK);
    cr_expect_float_eq(v, 100.0, 1e-12);
}

Test(csvio, crlf_and_byte_order_mark)
{
    cr_assert_eq(rd("\xEF\xBB\xBFname,v\r\n# c\r\nx,1\r\n\r\ny,2\r\n", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(T->header[0], "name");
    cr_assert_eq(T->nrows, 2);
    cr_expect_str_eq(csvio_cell(T, 1, "v"), "2");
    cr_expect_eq(T->rows[1].line, 5);
    cr_expect_str_eq(T->comments[0], "c");
}

Test(csvio, empty_file_and_header_only)
{
    static const char *const req[] = {"a", "b", NULL};
    cr_expect_eq(rd("", req), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv: empty: no header row (expected columns: a, b)"), "%s", E.msg);
    cr_expect_eq(rd("# only a comment\n\n", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "empty"), "%s", E.msg);
    cr_expect_eq(rd("# c\na,b\n", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:2: empty: a header but no data rows"), "%s", E.msg);
    csvio_table *t = NULL;
    cr_expect_eq(csvio_read_mem("h.csv", "a,b\n", 4, NULL, CSVIO_ALLOW_NO_ROWS, &t, &E), TS_OK);
    cr_expect_eq(t->nrows, 0);
    csvio_free(t);
}

Test(csvio, missing_column)
{
    static const char *const req[] = {"name", "bw_gbps", NULL};
    cr_expect_eq(rd("# c\nname,bandwidth\nx,3\n", req), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:2: missing column 'bw_gbps' (the header has: name, bandwidth)"), "%s", E.msg);
}

Test(csvio, wrong_cell_count_and_malformed)
{
    cr_expect_eq(rd("a,b\n1,2\n1,2,3\n", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:3: row has 3 cells but the header (line 1) has 2 columns"), "%s", E.msg);
    cr_expect_eq(rd("a,b\n1,2\n\"open,3\n", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:3: malformed CSV"), "%s", E.msg);
    cr_expect_eq(rd("a,b\n1,x\"y\n", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:2: malformed CSV"), "%s", E.msg);
    cr_expect_eq(rd("a,a\n1,2\n", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "column 'a' appears twice"), "%s", E.msg);
}

Test(csvio, typed_getters_messages)
{
    cr_assert_eq(rd("n,bw_gbps,flag\n\n# c\nx,abc,maybe\ny,-25,true\nz,,1\nw,7.5,0\n", NULL), TS_OK, "%s", E.msg);
    double d;
    int i;
    bool b;
    const char *s;
    cr_expect_eq(csvio_get_positive(T, 0, "bw_gbps", &d, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:4: column 'bw_gbps': 'abc' is not a number (expected a number > 0)"), "%s", E.msg);
    cr_expect_eq(csvio_get_positive(T, 1, "bw_gbps", &d, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:5: column 'bw_gbps': -25 is out of range (expected a number > 0)"), "%s", E.msg);
    cr_expect_eq(csvio_get_double(T, 2, "bw_gbps", 0, 10, &d, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:6: column 'bw_gbps': empty"), "%s", E.msg);
    cr_expect_eq(csvio_get_int(T, 3, "bw_gbps", 0, 10, &i, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:7: column 'bw_gbps': '7.5' is not an integer (expected an integer in [0, 10])"),
              "%s", E.msg);
    cr_expect_eq(csvio_get_double(T, 3, "bw_gbps", 0, 5, &d, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "7.5 is out of range (expected a number in [0, 5])"), "%s", E.msg);
    csvio_table *h = NULL;
    cr_assert_eq(csvio_read_mem("h.csv", "v\n0x19\n", 7, NULL, 0, &h, &E), TS_OK);
    cr_expect_eq(csvio_get_positive(h, 0, "v", &d, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "h.csv:2: column 'v': '0x19' is not a number"), "%s", E.msg);
    csvio_free(h);
    cr_expect_eq(csvio_get_bool(T, 0, "flag", &b, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:4: column 'flag': 'maybe' is not a boolean"), "%s", E.msg);
    cr_expect_eq(csvio_get_bool(T, 1, "flag", &b, &E), TS_OK);
    cr_expect(b);
    cr_expect_eq(csvio_get_str(T, 0, "nope", &s, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "t.csv:1: missing column 'nope'"), "%s", E.msg);
    cr_expect(csvio_empty(T, 2, "bw_gbps"));
}

Test(csvio, file_errors)
{
    csvio_table *t = NULL;
    cr_expect_eq(csvio_read("/nonexistent/x.csv", NULL, 0, &t, &E), TS_EIO);
    cr_expect(strstr(E.msg, "/nonexistent/x.csv: cannot open"), "%s", E.msg);
    cr_expect_null(t);
}

Test(csvio, write_round_trip_through_atomic_file)
{
    char dir[] = "/tmp/csvioXXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/out.csv", dir);
    afile a;
    cr_assert_eq(afile_open(&a, path, &E), TS_OK, "%s", E.msg);
    const char *hdr[] = {"name", "note"};
    const char *row[] = {"#x", "a, \"b\"\nc"};
    cr_expect_eq(csvio_write_comment(a.f, "written\nby test", &E), TS_OK);
    cr_expect_eq(csvio_write_row(a.f, 2, hdr, &E), TS_OK);
    cr_expect_eq(csvio_write_row(a.f, 2, row, &E), TS_OK);
    cr_expect_neq(access(path, F_OK), 0, "destination must not exist before commit");
    cr_assert_eq(afile_commit(&a, &E), TS_OK, "%s", E.msg);
    csvio_table *t = NULL;
    cr_assert_eq(csvio_read(path, NULL, 0, &t, &E), TS_OK, "%s", E.msg);
    cr_expect_str_eq(t->comments[0], "written by test");
    cr_expect_str_eq(csvio_cell(t, 0, "name"), "#x");
    cr_expect_str_eq(csvio_cell(t, 0, "note"), "a, \"b\"\nc");
    csvio_free(t);
    /* abort leaves the committed file untouched and no temporary behind */
    cr_assert_eq(afile_open(&a, path, &E), TS_OK);
    fputs("garbage", a.f);
    afile_abort(&a);
    cr_assert_eq(csvio_read(path, NULL, 0, &t, &E), TS_OK, "%s", E.msg);
    csvio_free(t);
    unlink(path);
    cr_expect_eq(rmdir(dir), 0, "temporary file left behind");
}

Test(csvio, afile_bad_directory)
{
    afile a;
    cr_expect_eq(afile_open(&a, "/nonexistent-dir/out.csv", &E), TS_EIO);
    cr_expect(strstr(E.msg, "/nonexistent-dir/out.csv: cannot create a file in directory /nonexistent-dir"), "%s",
              E.msg);
    cr_expect_eq(afile_open(&a, "", &E), TS_EINVAL);
}

#define P63 9223372036854775808.0 /* 2^63 */
#define P53 9007199254740992.0    /* 2^53 */

/* The formatted text of v. */
static const char *fmt(double v)
{
    static char buf[CSVIO_NUM_BYTES];
    return csvio_fmt_double(buf, sizeof buf, v);
}

/* v's text reads back as exactly v (the sign of zero included), is an
 * integer (digits only) iff v is integral and fits an int64, else uses the
 * fewest of 15, 16, 17 significant digits that round-trip. */
static void expect_round_trip(double v)
{
    const char *s = fmt(v);
    char *end = NULL;
    double back = strtod(s, &end);
    cr_expect_eq(*end, '\0', "'%s': trailing text", s);
    cr_expect(back == v && signbit(back) == signbit(v), "%.17g -> '%s' -> %.17g", v, s, back);
    bool integral = v == trunc(v) && v >= -P63 && v < P63; /* -0.0 too: "-0" */
    bool digits = strspn(s + (s[0] == '-'), "0123456789") == strlen(s + (s[0] == '-'));
    cr_expect_eq(digits, integral, "%.17g -> '%s'", v, s);
    if (!integral) {
        char shorter[CSVIO_NUM_BYTES];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(shorter, sizeof shorter, "%.*g", prec, v);
            if (strtod(shorter, NULL) == v) {
                cr_expect_str_eq(s, shorter, "%.17g: not the shortest", v);
                break;
            }
        }
    }
}

/* splitmix64: a fixed-seed generator, so the sample is the same every run. */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

Test(csvio, fmt_double_examples)
{
    cr_expect_str_eq(fmt(930431000.0), "930431000");
    cr_expect_str_eq(fmt(0.0), "0");
    cr_expect_str_eq(fmt(-0.0), "-0");
    cr_expect_str_eq(fmt(-42.0), "-42");
    cr_expect_str_eq(fmt(0.1), "0.1");
    cr_expect_str_eq(fmt(0.5), "0.5");
    cr_expect_str_eq(fmt(1.0 / 3.0), "0.3333333333333333");
    cr_expect_str_eq(fmt(0.1 + 0.2), "0.30000000000000004"); /* needs 17 */
    cr_expect_str_eq(fmt(-P63), "-9223372036854775808");
    cr_expect_str_eq(fmt(P63), "9.223372036854776e+18"); /* one past INT64_MAX */
    cr_expect_str_eq(fmt(1e300), "1e+300");
    cr_expect_str_eq(fmt(1e300 * 1.0000000000000002), "1.0000000000000002e+300");
    cr_expect_str_eq(fmt(2.5e-7), "2.5e-07");
    cr_expect_str_eq(fmt(NAN), "nan");
    cr_expect_str_eq(fmt(INFINITY), "inf");
    cr_expect_str_eq(fmt(-INFINITY), "-inf");
    /* a short buffer is cut, never overrun */
    char small[4];
    cr_expect_str_eq(csvio_fmt_double(small, sizeof small, 123456.0), "123");
}

Test(csvio, fmt_double_round_trip)
{
    const double extremes[] = {
        DBL_MAX, -DBL_MAX, DBL_MIN,           -DBL_MIN,   DBL_TRUE_MIN, -DBL_TRUE_MIN, DBL_EPSILON, 1 - DBL_EPSILON / 2,
        P53,     P53 + 2,  -P53 - 2,          P63 - 1024, P63,          -P63,          -P63 - 2048, 0.0,
        -0.0,    1e-320,   123456789012345.6, 0.1 + 0.2};
    for (size_t i = 0; i < sizeof extremes / sizeof extremes[0]; i++)
        expect_round_trip(extremes[i]);
    uint64_t st = 20240601;
    for (int i = 0; i < 200000; i++) {
        /* any bit pattern but NaN and infinity: every exponent and sign */
        uint64_t bits = next_u64(&st);
        double v;
        memcpy(&v, &bits, sizeof v);
        if (isfinite(v))
            expect_round_trip(v);
        /* integers of every size, and values with a few decimals */
        int64_t k = (int64_t)(next_u64(&st) >> (next_u64(&st) % 64));
        expect_round_trip((double)k);
        expect_round_trip(-(double)k);
        expect_round_trip((double)(k % 1000000) / 1000.0);
        expect_round_trip((double)(next_u64(&st) >> 11) / P53 * 1e9);
    }
}
