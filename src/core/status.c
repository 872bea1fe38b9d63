#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

qmoe_status qmoe_fail(qmoe_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

void qmoe_clear_error(void) { last_error[0] = '\0'; }

const char *qmoe_last_error(void) { return last_error; }

const char *qmoe_status_name(qmoe_status status)
{
    switch (status) {
    case QMOE_OK: return "QMOE_OK";
    case QMOE_ERR_PARAM_NULLPTR: return "QMOE_ERR_PARAM_NULLPTR";
    case QMOE_ERR_PARAM_INVALID: return "QMOE_ERR_PARAM_INVALID";
    case QMOE_ERR_RUNTIME: return "QMOE_ERR_RUNTIME";
    case QMOE_ERR_INNER: return "QMOE_ERR_INNER";
    }
    return "QMOE_ERR_UNKNOWN";
}

const char *qmoe_version(void) { return "0.1.0"; }
