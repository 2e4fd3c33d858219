/* Unit tests for sim/err: message formatting, prefixing and truncation. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/util/err.h"

Test(err, set_returns_code_and_formats)
{
    ts_err e;
    err_clear(&e);
    cr_assert_eq(err_set(&e, TS_EINVAL, "--num-layers: '%s' is not a number", "x"), TS_EINVAL);
    cr_assert_eq(e.code, TS_EINVAL);
    cr_assert_str_eq(e.msg, "--num-layers: 'x' is not a number");
}

Test(err, prefix_prepends_context)
{
    ts_err e;
    err_set(&e, TS_EIO, "cannot open");
    cr_assert_eq(err_prefix(&e, "%s:%d: ", "topo.csv", 3), TS_EIO);
    cr_assert_str_eq(e.msg, "topo.csv:3: cannot open");
}

Test(err, prefix_truncates_without_overflow)
{
    ts_err e;
    char longmsg[ERR_MSG_BYTES * 2];
    memset(longmsg, 'a', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = '\0';
    err_set(&e, TS_EINVAL, "%s", longmsg);
    cr_assert_eq(strlen(e.msg), ERR_MSG_BYTES - 1);
    err_prefix(&e, "ctx: ");
    cr_assert_eq(strlen(e.msg), ERR_MSG_BYTES - 1);
    cr_assert_eq(strncmp(e.msg, "ctx: aaa", 8), 0);
}

Test(err, null_is_allowed)
{
    cr_assert_eq(err_set(NULL, TS_ENOMEM, "x"), TS_ENOMEM);
    err_clear(NULL);
    cr_assert_str_eq(err_code_name(TS_EIO), "I/O error");
}
