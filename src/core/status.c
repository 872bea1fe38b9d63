#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>

/* The calling thread's last error: the message and, for argument errors, which argument broke
 * which rule (qmoe_last_error_info). */
static _Thread_local char last_error[1024];
static _Thread_local qmoe_error_info last_info;

static qmoe_status record(qmoe_status status, qmoe_error_rule rule, const char *arg,
                          const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    last_info.status = status;
    last_info.rule = rule;
    last_info.arg = arg ? arg : "";
    return status;
}

qmoe_status qmoe_fail(qmoe_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(status, status == QMOE_ERR_PARAM_NULLPTR ? QMOE_RULE_NULL : QMOE_RULE_NONE, "", fmt,
           ap);
    va_end(ap);
    return status;
}

qmoe_status qmoe_fail_arg(qmoe_status status, qmoe_error_rule rule, const char *arg,
                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(status, rule, arg, fmt, ap);
    va_end(ap);
    return status;
}

void qmoe_clear_error(void)
{
    last_error[0] = '\0';
    last_info.status = QMOE_OK;
    last_info.rule = QMOE_RULE_NONE;
    last_info.arg = "";
}

qmoe_status qmoe_error_set(qmoe_status status, qmoe_error_rule rule, const char *arg,
                           const char *message)
{
    return qmoe_fail_arg(status, rule, arg, "%s", message ? message : "");
}

qmoe_status qmoe_error_pass(qmoe_status status, const char *message)
{
    if (last_info.status == status && status != QMOE_OK)
        return qmoe_fail_arg(status, last_info.rule, last_info.arg, "%s", message ? message : "");
    return qmoe_fail_arg(status, status == QMOE_ERR_PARAM_NULLPTR ? QMOE_RULE_NULL : QMOE_RULE_NONE,
                         "", "%s", message ? message : "");
}

void qmoe_error_clear(void) { qmoe_clear_error(); }

const char *qmoe_last_error(void) { return last_error; }

const qmoe_error_info *qmoe_last_error_info(void)
{
    /* a thread-local address is not a constant initializer: completed on each read */
    if (!last_info.arg) last_info.arg = "";
    last_info.message = last_error;
    return &last_info;
}

const char *qmoe_error_rule_name(qmoe_error_rule rule)
{
    switch (rule) {
    case QMOE_RULE_NONE: return "QMOE_RULE_NONE";
    case QMOE_RULE_NULL: return "QMOE_RULE_NULL";
    case QMOE_RULE_RESERVED: return "QMOE_RULE_RESERVED";
    case QMOE_RULE_DTYPE: return "QMOE_RULE_DTYPE";
    case QMOE_RULE_RANK: return "QMOE_RULE_RANK";
    case QMOE_RULE_FORMAT: return "QMOE_RULE_FORMAT";
    case QMOE_RULE_SHAPE: return "QMOE_RULE_SHAPE";
    case QMOE_RULE_LIMIT: return "QMOE_RULE_LIMIT";
    case QMOE_RULE_OVERLAP: return "QMOE_RULE_OVERLAP";
    case QMOE_RULE_OPTION: return "QMOE_RULE_OPTION";
    case QMOE_RULE_UNSUPPORTED: return "QMOE_RULE_UNSUPPORTED";
    case QMOE_RULE_VALUE: return "QMOE_RULE_VALUE";
    case QMOE_RULE_WORKSPACE: return "QMOE_RULE_WORKSPACE";
    }
    return "QMOE_RULE_UNKNOWN";
}

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

const char *qmoe_version(void) { return QMOE_VERSION_STRING; }
