/* flags_run — a test fixture: resolve a command line through the shared
 * flag table (sim/config/flags.h) into the file's config C, as trainsim and
 * trainexec do. C, its flag state S, table T and error E are the including
 * file's (one set per test binary; Criterion runs each test in its own
 * process); flags_run_free releases them (a suite's .fini). */
#ifndef TRAINSIM_TEST_FLAGS_RUN_H
#define TRAINSIM_TEST_FLAGS_RUN_H

#include <criterion/criterion.h>
#include <stdarg.h>

#include "sim/config/flags.h"

static config C;
static flags_state S;
static opt_table T;
static ts_err E;

/* Resolve the NULL-terminated flag list (at most 62 flags) into C; the
 * status of parse + finish, E saying why on failure. */
static inline int flags_run(const char *first, ...)
{
    const char *argv[64] = {"test"};
    int argc = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    config_free(&C);
    flags_release(&S);
    opt_table_free(&T);
    err_clear(&E);
    opt_table_init(&T, "test", NULL);
    cr_assert_eq(flags_register(&S, &T, &C, &E), TS_OK, "%s", E.msg);
    int rc = flags_parse(&S, &T, argc, (char **)argv, &E);
    return rc ? rc : flags_finish(&S, &T, &E);
}

static inline void flags_run_free(void)
{
    config_free(&C);
    flags_release(&S);
    opt_table_free(&T);
}

#endif
