/* tmp_csv — a test fixture: write text to a fresh temporary file under /tmp
 * and return its path. The path lives in a static buffer, overwritten by the
 * next call; the file is the caller's to unlink (tests leave them to /tmp's
 * cleaning, as they are small). Criterion asserts on any failure. */
#ifndef TRAINSIM_TEST_TMP_CSV_H
#define TRAINSIM_TEST_TMP_CSV_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *tmp_csv(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/trainsim_testXXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    return path;
}

#endif
