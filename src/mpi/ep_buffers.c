/* Buffers of libqmoe_mpi: sizes, allocation, and the regrouping of received rows. */
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

void ep_regroup(const qmoe_ep *ep, const ep_route *rt, size_t row, int to_grouped, const void *from,
                void *to, void *self)
{
    const int64_t nl = ep->nlocal;
    for (int s = 0; s < ep->size; s++) {
        int own = s == ep->rank && self;
        int64_t at = own ? 0 : rt->rdispls[s]; /* source s's rows, local expert by local expert */
        unsigned char *stage = own ? self : to_grouped ? (unsigned char *)(uintptr_t)from : to;
        unsigned char *grouped = to_grouped ? to : (unsigned char *)(uintptr_t)from;
        for (int64_t l = 0; l < nl; l++) {
            size_t len = (size_t)rt->blk_len[(int64_t)s * nl + l] * row;
            size_t g = (size_t)rt->blk_pos[(int64_t)s * nl + l] * row, st = (size_t)at * row;
            if (len) {
                if (to_grouped) memcpy(grouped + g, stage + st, len);
                else memcpy(stage + st, grouped + g, len);
            }
            at += rt->blk_len[(int64_t)s * nl + l];
        }
    }
}

void ep_without_self(const qmoe_ep *ep, const int *counts, int *out)
{
    for (int r = 0; r < ep->size; r++) out[r] = r == ep->rank ? 0 : counts[r];
}
