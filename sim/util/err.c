#include "sim/util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#undef err_set /* err.h's model of err_set for the static analyzer */

void err_clear(ts_err *e)
{
    if (!e)
        return;
    e->code = TS_OK;
    e->msg[0] = '\0';
}

int err_set(ts_err *e, int code, const char *fmt, ...)
{
    if (!e)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return code;
}

int err_prefix(ts_err *e, const char *fmt, ...)
{
    if (!e)
        return TS_ESTATE;
    char head[ERR_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    size_t hl = strlen(head);
    size_t ol = strnlen(e->msg, sizeof e->msg - 1);
    if (hl > sizeof e->msg - 1)
        hl = sizeof e->msg - 1;
    if (hl + ol > sizeof e->msg - 1)
        ol = sizeof e->msg - 1 - hl;
    memmove(e->msg + hl, e->msg, ol);
    memcpy(e->msg, head, hl);
    e->msg[hl + ol] = '\0';
    return e->code;
}

const char *err_code_name(int code)
{
    switch (code) {
    case TS_OK:
        return "ok";
    case TS_EINVAL:
        return "invalid input";
    case TS_EIO:
        return "I/O error";
    case TS_ENOMEM:
        return "out of memory";
    case TS_ESTATE:
        return "internal error";
    case TS_ENOTSUP:
        return "not supported";
    default:
        return "unknown error";
    }
}
