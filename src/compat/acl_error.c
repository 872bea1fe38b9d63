/* The vendor face's errors go to the library's one error channel (qmoe_error_set): status,
 * rule, argument and message; aclGetRecentErrMsg fetches and clears it (the vendor's "get and
 * clear"). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compat/compat.h"

static _Thread_local char fetched[1024];

int compat_fail(int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    qmoe_error_pass((qmoe_status)code, msg); /* a native error passed on keeps rule and argument */
    return code;
}

const char *aclGetRecentErrMsg(void)
{
    /* A second buffer keeps the returned text valid while new failures overwrite the channel. */
    snprintf(fetched, sizeof fetched, "%s", qmoe_last_error());
    qmoe_error_clear();
    return fetched;
}
