/* Internal error reporting: set the calling thread's last-error message (and structured info)
 * alongside a status. */
#ifndef QMOE_CORE_STATUS_H
#define QMOE_CORE_STATUS_H

#include "qmoe/qmoe.h"

#if defined(__GNUC__)
#define QMOE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define QMOE_PRINTF(a, b)
#endif

/* Records the message for qmoe_last_error() and returns `status`, so callers write
 * `return qmoe_fail(QMOE_ERR_INNER, "out of memory for %s", what);`. The structured info names
 * no argument (rule QMOE_RULE_NULL for QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NONE otherwise). */
qmoe_status qmoe_fail(qmoe_status status, const char *fmt, ...) QMOE_PRINTF(2, 3);

/* As qmoe_fail, for an argument error: which argument (a static string, the vendor's name) broke
 * which rule, for qmoe_last_error_info(). One call per validation site:
 * `return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_RANK, "x", "x: rank %d ...", nd);` */
qmoe_status qmoe_fail_arg(qmoe_status status, qmoe_error_rule rule, const char *arg,
                          const char *fmt, ...) QMOE_PRINTF(4, 5);

/* Clears the message and the info at the start of a public call that succeeds. */
void qmoe_clear_error(void);

#endif
