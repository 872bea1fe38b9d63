/* Ranks on one node read each other's expert rows in place: an MPI shared-memory window (one
 * segment per rank, contiguous across ranks) replaces the messages that bring rows home. A row
 * then crosses once, read by the rank that sums it, instead of being copied into a home buffer
 * and read again. */
#include <stdint.h>
#include <stdlib.h>

#include "ep_internal.h"

void ep_shm_init(qmoe_ep *ep, int messages_only)
{
    MPI_Comm node;
    int n = 0, all = 0;
    MPI_Comm_split_type(ep->comm, MPI_COMM_TYPE_SHARED, ep->rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &n);
    MPI_Comm_free(&node);
    ep->win = MPI_WIN_NULL;
    ep->shm_base = calloc((size_t)ep->size, sizeof *ep->shm_base);
    int mine = !messages_only && n == ep->size && ep->shm_base; /* every rank on this node */
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, ep->comm);
    ep->shm = all;
}

static void shm_free(qmoe_ep *ep)
{
    if (ep->win == MPI_WIN_NULL) return;
    MPI_Win_unlock_all(ep->win);
    MPI_Win_free(&ep->win);
    ep->win = MPI_WIN_NULL;
    ep->shm_cap = 0;
}

void ep_shm_destroy(qmoe_ep *ep)
{
    shm_free(ep);
    free(ep->shm_base);
    ep->shm_base = NULL;
}

qmoe_status ep_shm_publish(qmoe_ep *ep, qmoe_status st)
{
    MPI_Win_sync(ep->win);      /* this rank's writes to its segment, visible ...       */
    st = ep_agree(ep->comm, st); /* ... once every rank has written (an all-rank reduce) */
    MPI_Win_sync(ep->win);
    return st;
}

/* Segments of `cap` bytes: 1; 0 when they are not contiguous; -1 when the window could not be
 * made. */
static int shm_alloc(qmoe_ep *ep, size_t cap)
{
    MPI_Info info;
    void *mine = NULL;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "false");
    /* out of memory is an error to return, not the end of the job */
    MPI_Comm_set_errhandler(ep->comm, MPI_ERRORS_RETURN);
    int rc = MPI_Win_allocate_shared((MPI_Aint)cap, 1, info, ep->comm, &mine, &ep->win);
    MPI_Comm_set_errhandler(ep->comm, MPI_ERRORS_ARE_FATAL);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        ep->win = MPI_WIN_NULL;
        return -1;
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, ep->win);
    int ok = 1;
    for (int r = 0; r < ep->size; r++) {
        MPI_Aint sz;
        int du;
        MPI_Win_shared_query(ep->win, r, &sz, &du, &ep->shm_base[r]);
        if ((unsigned char *)ep->shm_base[r] != (unsigned char *)ep->shm_base[0] + (size_t)r * cap)
            ok = 0;
    }
    /* Rows start 64-byte aligned (the kernels stream whole cache lines only to aligned rows; the
     * window's own base need not be): every segment moves by the same pad (cap % 64 == 0), so
     * they stay cap apart, and each keeps cap - 64 bytes. */
    size_t pad = (64 - (uintptr_t)ep->shm_base[0] % 64) % 64;
    for (int r = 0; r < ep->size; r++) ep->shm_base[r] = (unsigned char *)ep->shm_base[r] + pad;
    ep->shm_cap = cap;
    return ok;
}


qmoe_status ep_shm_reserve(qmoe_ep *ep, qmoe_status st, size_t need)
{
    /* one MPI_Allreduce: the largest status and the largest need */
    int64_t v[2] = {(int64_t)st, st == QMOE_OK ? (int64_t)(need > INT64_MAX ? INT64_MAX : need) : 0};
    int64_t m[2];
    MPI_Allreduce(v, m, 2, MPI_INT64_T, MPI_MAX, ep->comm);
    if (m[0] != QMOE_OK)
        return st != QMOE_OK ? st : ep_fail((qmoe_status)m[0], "another rank failed with %lld", (long long)m[0]);
    if (ep->win != MPI_WIN_NULL && (uint64_t)m[1] + 64 <= ep->shm_cap) return QMOE_OK;
    /* a multiple of 64 float32 rows: a row of any dtype starts at a segment's row boundary;
     * 64 bytes more for the alignment of the rows */
    uint64_t unit = (uint64_t)ep->H * 4u * 64u, want = (uint64_t)m[1] + (uint64_t)m[1] / 4 + 64;
    if (want / unit > (uint64_t)INT64_MAX / unit / (uint64_t)ep->size - 1)
        return ep_fail(QMOE_ERR_PARAM_INVALID, "%lld bytes of rows per rank: too many",
                       (long long)m[1]);
    size_t cap = (size_t)((want / unit + 1) * unit);
    shm_free(ep);
    int ok = shm_alloc(ep, cap), all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, ep->comm);
    if (all == 1) return QMOE_OK;
    shm_free(ep);
    if (all < 0) return ep_fail(QMOE_ERR_INNER, "no shared-memory window of %zu bytes per rank", cap);
    ep->shm = 0; /* segments not contiguous: messages from now on, on every rank (agreed) */
    return QMOE_OK;
}
