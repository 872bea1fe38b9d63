/* Internal error reporting: set the calling thread's last-error message alongside a status. */
#ifndef QMOE_CORE_STATUS_H
#define QMOE_CORE_STATUS_H

#include "qmoe/qmoe.h"

#if defined(__GNUC__)
#define QMOE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define QMOE_PRINTF(a, b)
#endif

/* Records the message for qmoe_last_error() and returns `status`, so callers write
 * `return qmoe_fail(QMOE_ERR_PARAM_INVALID, "x: rank %d, expected 2", nd);` */
qmoe_status qmoe_fail(qmoe_status status, const char *fmt, ...) QMOE_PRINTF(2, 3);

/* Clears the message at the start of a public call that succeeds. */
void qmoe_clear_error(void);

#endif
