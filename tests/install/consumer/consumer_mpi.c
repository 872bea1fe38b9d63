/* Links libqmoe_mpi through the installed package (qmoe::qmoe_mpi) and calls into it without
 * starting MPI: a thread's last error is empty before any call. */
#include <stdio.h>

#include "qmoe/mpi.h"

int main(void)
{
    const char *e = qmoe_mpi_last_error();
    if (!e || e[0] != '\0') {
        fprintf(stderr, "qmoe_mpi_last_error() before any call: \"%s\"\n", e ? e : "(null)");
        return 1;
    }
    printf("libqmoe_mpi linked\n");
    return 0;
}
