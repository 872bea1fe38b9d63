/* Buffers of libqmoe_mpi: sizes, allocation, counts without the rank's own rows. */
#include <stdlib.h>
#include <string.h>

#include "ep_internal.h"

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
    free(r->pcnt);
    free(r->blk_len);
    free(r->blk_chunk);
    free(r->blk_pos);
    free(r->src);
    free(r->far);
    *r = (ep_route){0};
}

void *ep_alloc(size_t a, size_t b)
{
    if (b != 0 && a > SIZE_MAX / b) return NULL;
    return malloc(a * b != 0 ? a * b : 1);
}

/* A buffer that grows takes a quarter more than asked: the next batches' counts vary by a few
 * percent with the routing, and each regrowth faults its pages in again (tens of ms for a
 * layer's rows). */
static size_t with_headroom(size_t need)
{
    return need <= (SIZE_MAX - 63) / 5 * 4 ? need + need / 4 : need;
}

int ep_reserve(void **buf, size_t *cap, size_t a, size_t b)
{
    if (b != 0 && a > SIZE_MAX / b) return 0;
    size_t need = a * b != 0 ? a * b : 1;
    if (*buf && *cap >= need) return 1;
    size_t n = with_headroom(need);
    void *p = malloc(n);
    if (!p) p = malloc(n = need);
    if (!p) return 0;
    free(*buf);
    *buf = p;
    *cap = n;
    return 1;
}

int ep_reserve_aligned(void **buf, size_t *cap, size_t a, size_t b)
{
    if (b != 0 && a > SIZE_MAX / b) return 0;
    size_t need = a * b != 0 ? a * b : 1;
    if (*buf && *cap >= need) return 1;
    if (need > SIZE_MAX - 63) return 0;
    size_t n = with_headroom(need);
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) p = aligned_alloc(64, ((n = need) + 63) & ~(size_t)63);
    if (!p) return 0;
    free(*buf);
    *buf = p;
    *cap = n;
    return 1;
}
