/* Error reporting and agreement for libqmoe_mpi. Its messages live here (libqmoe keeps its own
 * last error, which the hidden-visibility library does not let another library set). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

size_t ep_dtype_size(qmoe_dtype dt)
{
    switch (dt) {
    case QMOE_DTYPE_INT8: return 1;
    case QMOE_DTYPE_FLOAT16:
    case QMOE_DTYPE_BFLOAT16: return 2;
    case QMOE_DTYPE_FLOAT32: return 4;
    default: return 0;
    }
}

void ep_route_free(ep_route *r)
{
    free(r->scounts);
    free(r->sdispls);
    free(r->rcounts);
    free(r->rdispls);
    free(r->blk_len);
    free(r->blk_pos);
    free(r->slot);
    *r = (ep_route){0};
}

void *ep_alloc(size_t a, size_t b)
{
    if (b != 0 && a > SIZE_MAX / b) return NULL;
    return malloc(a * b != 0 ? a * b : 1);
}

int ep_reserve(void **buf, size_t *cap, size_t a, size_t b)
{
    if (b != 0 && a > SIZE_MAX / b) return 0;
    size_t need = a * b != 0 ? a * b : 1;
    if (*buf && *cap >= need) return 1;
    void *p = malloc(need);
    if (!p) return 0;
    free(*buf);
    *buf = p;
    *cap = need;
    return 1;
}

void ep_regroup(const qmoe_ep *ep, const ep_route *rt, size_t row, int to_grouped,
                const void *from, void *to)
{
    const int64_t nl = ep->nlocal;
    for (int s = 0; s < ep->size; s++) {
        int64_t at = rt->rdispls[s]; /* source s's rows, local expert by local expert */
        for (int64_t l = 0; l < nl; l++) {
            size_t len = (size_t)rt->blk_len[(int64_t)s * nl + l] * row;
            size_t g = (size_t)rt->blk_pos[(int64_t)s * nl + l] * row, st = (size_t)at * row;
            if (len)
                memcpy((unsigned char *)to + (to_grouped ? g : st),
                       (const unsigned char *)from + (to_grouped ? st : g), len);
            at += rt->blk_len[(int64_t)s * nl + l];
        }
    }
}
