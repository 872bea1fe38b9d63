/* The thread's pending error message: set by every failing call, fetched and cleared by
 * aclGetRecentErrMsg (the vendor's "get and clear"). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "compat/compat.h"

static _Thread_local char pending[1024];
static _Thread_local char fetched[1024];

int compat_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pending, sizeof pending, fmt, ap);
    va_end(ap);
    return code;
}

const char *aclGetRecentErrMsg(void)
{
    /* A second buffer keeps the returned text valid while new failures overwrite `pending`. */
    memcpy(fetched, pending, sizeof fetched);
    pending[0] = '\0';
    return fetched;
}
