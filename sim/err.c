#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    char old[ERR_MSG_BYTES];
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s%s", head, old);
    return e->code;
}

const char *err_code_name(int code)
{
    switch (code) {
    case TS_OK: return "ok";
    case TS_EINVAL: return "invalid input";
    case TS_EIO: return "I/O error";
    case TS_ENOMEM: return "out of memory";
    case TS_ESTATE: return "internal error";
    case TS_ENOTSUP: return "not supported";
    default: return "unknown error";
    }
}
