/* Error reporting and agreement for libqmoe_mpi. Its errors go to the library's one error
 * channel (qmoe_error_set), where qmoe_last_error() / qmoe_last_error_info() read them. */
#include <stdarg.h>
#include <stdio.h>

#include "ep_internal.h"

qmoe_status ep_fail(qmoe_status status, const char *fmt, ...)
{
    char msg[1024]; /* formatted first: the arguments may be the channel's own message */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qmoe_error_pass(status, msg); /* a library error passed on keeps rule and argument */
}

void ep_clear_error(void) { qmoe_error_clear(); }

const char *qmoe_mpi_last_error(void) { return qmoe_last_error(); }

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
