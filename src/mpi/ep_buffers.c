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
    free(r->sdispls);
    free(r->rcounts);
    free(r->pcnt);
    free(r->blk_len);
    free(r->blk_chunk);
    free(r->blk_pos);
    free(r->src);
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

int ep_reserve_aligned(void **buf, size_t *cap, size_t a, size_t b)
{
    if (b != 0 && a > SIZE_MAX / b) return 0;
    size_t need = a * b != 0 ? a * b : 1;
    if (*buf && *cap >= need) return 1;
    if (need > SIZE_MAX - 63) return 0;
    void *p = aligned_alloc(64, (need + 63) & ~(size_t)63);
    if (!p) return 0;
    free(*buf);
    *buf = p;
    *cap = need;
    return 1;
}

void ep_without_self(const qmoe_ep *ep, const int *counts, int *out)
{
    for (int r = 0; r < ep->size; r++) out[r] = r == ep->rank ? 0 : counts[r];
}

void ep_compact_displs(const qmoe_ep *ep, const int *counts, int *out)
{
    for (int r = 0, at = 0; r < ep->size; r++) {
        out[r] = at;
        if (r != ep->rank) at += counts[r];
    }
}
