/* sched_print: the exact timeline is kept while it fits the width; wider
 * ones are scaled to a round time per column and never exceed the width. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sched/sched.h"
#include "sim/sched/sched_print.h"
#include "tests/unit/sched_fixture.h"

/* s's timeline at width, as a string the caller frees. */
static char *print_str(const sched *s, const sched_op_times *t, int width)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    cr_assert_not_null(f);
    ts_err e;
    int rc = sched_print(s, t, width, f, &e);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(rc, TS_OK, "%s", e.msg);
    return buf;
}

/* The most time columns of any "rank" line: its characters after "| "
 * divided by the cell width w, rounded up (trailing spaces are trimmed). */
static int widest_cols(const char *out, int w)
{
    int most = 0;
    for (const char *l = strstr(out, "rank "); l; l = strstr(l + 1, "\nrank ")) {
        const char *bar = strstr(l, "| "), *end = strchr(bar, '\n');
        int cols = (int)((end - bar - 2 + w - 1) / w);
        if (cols > most)
            most = cols;
    }
    return most;
}

Test(sched_print, exact_kept_while_it_fits)
{
    sched *s = sched_fixture(SCHED_1F1B, 4, 8, 1, true, false);
    /* unit times: (m + p - 1) * 3 = 33 columns */
    char *wide = print_str(s, NULL, SCHED_PRINT_MAX_COLS), *fit = print_str(s, NULL, 33);
    cr_expect_str_eq(fit, wide);
    cr_expect_not_null(strstr(fit, "one column = 1 time unit (T_F = T_B = T_W = 1)\n"));
    char *narrow = print_str(s, NULL, 32);
    cr_expect_not_null(strstr(narrow, "one column = 2 time units (T_F = T_B = T_W = 1), scaled to fit 32 columns\n"));
    free(wide);
    free(fit);
    free(narrow);
    sched_free(s);
}

/* Every kind, odd op times (common divisor 1 ns), widths from 1 to 200: the
 * timeline never exceeds the width, and a width of 120 uses more than 48
 * columns (the round column time is less than 2.5x the smallest that fits). */
Test(sched_print, scaled_fits_the_width)
{
    const sched_kind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_V};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int v = kinds[k] == SCHED_INTERLEAVED || kinds[k] == SCHED_ZB_V ? 2 : 1;
        sched *s = sched_fixture(kinds[k], 4, 8, v, true, false);
        sched_op_times t = {1234567, 2345678, 900001, 17};
        int w = v > 1 ? 5 : 3;
        for (int width = 1; width <= 200; width += 7) {
            char *out = print_str(s, &t, width);
            cr_expect_not_null(strstr(out, "scaled to fit"), "%s width %d", sched_kind_name(kinds[k]), width);
            cr_expect_leq(widest_cols(out, w), width, "%s width %d:\n%s", sched_kind_name(kinds[k]), width, out);
            free(out);
        }
        char *out = print_str(s, &t, 120);
        cr_expect_gt(widest_cols(out, w), 48, "%s:\n%s", sched_kind_name(kinds[k]), out);
        free(out);
        sched_free(s);
    }
}

Test(sched_print, width_out_of_range)
{
    sched *s = sched_fixture(SCHED_1F1B, 2, 2, 1, true, false);
    ts_err e;
    cr_expect_eq(sched_print(s, NULL, 0, stdout, &e), TS_EINVAL);
    cr_expect_not_null(strstr(e.msg, "[1, 100000]"), "%s", e.msg);
    cr_expect_eq(sched_print(s, NULL, SCHED_PRINT_MAX_COLS + 1, stdout, &e), TS_EINVAL);
    sched_free(s);
}
