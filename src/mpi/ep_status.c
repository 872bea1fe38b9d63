/* Error reporting and agreement for libqmoe_mpi. Its messages live here (libqmoe keeps its own
 * last error, which the hidden-visibility library does not let another library set). */
#include <stdarg.h>
#include <stdio.h>

#include "ep_internal.h"

static _Thread_local char ep_message[512];

qmoe_status ep_fail(qmoe_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ep_message, sizeof ep_message, fmt, ap);
    va_end(ap);
    return status;
}

void ep_clear_error(void) { ep_message[0] = '\0'; }

const char *qmoe_mpi_last_error(void) { return ep_message; }

qmoe_status ep_agree(MPI_Comm comm, qmoe_status local)
{
    int mine = (int)local, all = 0;
    /* Errors are fatal on our communicator, so this returns only with a result. */
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, comm);
    if (all != 0 && mine == 0)
        return ep_fail((qmoe_status)all, "another rank failed with %s (its own input is at fault)",
                       qmoe_status_name((qmoe_status)all));
    return (qmoe_status)all;
}
