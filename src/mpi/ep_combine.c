/* qmoe_moe_combine: processed rows back to their tokens' ranks, weighted sum over k. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ep_internal.h"

qmoe_status qmoe_moe_combine(qmoe_ep *ep, qmoe_dtype y_dtype, const void *expert_y, int64_t rows,
                             const float *weights, qmoe_dtype out_dtype, void *out)
{
    if (!ep) return ep_fail(QMOE_ERR_PARAM_NULLPTR, "ep is NULL"); /* no communicator to agree on */
    const ep_route *rt = &ep->route;
    const int64_t H = ep->H;
    qmoe_status st = QMOE_OK;
    if (out_dtype != QMOE_DTYPE_FLOAT32 && out_dtype != QMOE_DTYPE_BFLOAT16 &&
        out_dtype != QMOE_DTYPE_FLOAT16)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "out_dtype %d is not FLOAT32, FLOAT16 or BFLOAT16",
                     (int)out_dtype);
    else if (ep->dispatched && rt->tokens > 0 && !out)
        st = ep_fail(QMOE_ERR_PARAM_NULLPTR, "out is NULL with %lld tokens", (long long)rt->tokens);
    size_t parts = (size_t)(ep->threads < EP_SUM_MAX_THREADS ? ep->threads : EP_SUM_MAX_THREADS);
    float *acc = ep_alloc(parts, (size_t)H * sizeof(float)); /* one row per thread */
    if (st == QMOE_OK && !acc) st = ep_fail(QMOE_ERR_INNER, "out of memory");
    ep_sum_args sum = {weights, out_dtype, out, acc};
    st = ep_send_home(ep, st, y_dtype, expert_y, rows, NULL, &sum);
    if (st == QMOE_OK) ep_clear_error();
    free(acc);
    return st;
}

/* The other ranks' rows go back from their grouped places, one message per (chunk of the
 * source's tokens, source, local expert) sub-block, chunk by chunk; whole: one message per
 * (source, local expert) block, tag EP_TAG_HOME (nobody sums as chunks arrive). */
static int post_back(qmoe_ep *ep, const unsigned char *y, size_t row, MPI_Datatype y_row,
                     int whole, MPI_Request *req)
{
    const ep_route *rt = &ep->route;
    const int64_t nl = ep->nlocal;
    int n = 0;
    for (int s = 0; s < ep->size; s++)
        for (int64_t l = 0; l < nl && s != ep->rank; l++) {
            int64_t b = (int64_t)s * nl + l, at = rt->blk_pos[b];
            if (whole) {
                if (rt->blk_len[b])
                    MPI_Isend(y + (size_t)at * row, rt->blk_len[b], y_row, s, EP_TAG_HOME,
                              ep->comm, &req[n++]);
                continue;
            }
            for (int c = 0; c < EP_CHUNKS; c++) {
                int len = rt->blk_chunk[b * EP_CHUNKS + c];
                if (len)
                    MPI_Isend(y + (size_t)at * row, len, y_row, s, EP_TAG_COMBINE + c, ep->comm,
                              &req[n++]);
                at += len;
            }
        }
    return n;
}

/* This rank's remote rows of chunk c (c < 0: all chunks, tag EP_TAG_HOME) come home in the
 * order dispatch sent them (per owner, by expert: the k-th message of a pair and tag matches the
 * k-th receive). at[p]: where expert position p's next rows go. */
static int post_home(qmoe_ep *ep, int c, size_t row, MPI_Datatype y_row, unsigned char *home,
                     int64_t *at, MPI_Request *req)
{
    const ep_route *rt = &ep->route;
    int n = 0;
    for (int d = 0; d < ep->size; d++)
        for (int64_t p = ep->pos_first[d]; p < ep->pos_first[d + 1] && d != ep->rank; p++) {
            int len = 0;
            for (int k = c < 0 ? 0 : c; k < (c < 0 ? EP_CHUNKS : c + 1); k++)
                len += rt->pcnt[p * EP_CHUNKS + k];
            if (len)
                MPI_Irecv(home + (size_t)at[p] * row, len, y_row, d,
                          c < 0 ? EP_TAG_HOME : EP_TAG_COMBINE + c, ep->comm, &req[n++]);
            at[p] += len;
        }
    return n;
}

/* Bytes qmoe_ep_expert_rows' buffer holds when p is it (SIZE_MAX for any other pointer). */
static size_t expert_rows_room(const qmoe_ep *ep, const void *p)
{
    if (!p) return SIZE_MAX;
    if (ep->shm && ep->win != MPI_WIN_NULL && p == ep->shm_base[ep->rank]) return ep->shm_cap - 64;
    if (p == ep->ybuf) return ep->ybuf_cap;
    return SIZE_MAX;
}

/* Shared memory: each rank puts the other ranks' rows of expert_y in its segment at their
 * grouped places (route.far's numbering), and once all have, sums its tokens reading every
 * remote row in place: a row crosses once. */
static qmoe_status shm_combine(qmoe_ep *ep, qmoe_status st, qmoe_dtype y_dtype,
                               const void *expert_y, size_t row, const ep_sum_args *sum)
{
    const ep_route *rt = &ep->route;
    const size_t need = (size_t)rt->recv_total * row; /* <= INT_MAX rows of <= INT_MAX bytes */
    /* the rows already in the segment (qmoe_ep_expert_rows): no copy (its room was checked, so
     * the reserve does not regrow the window under them) */
    unsigned char *seg = ep->shm_base[ep->rank];
    int in_place = expert_y && (const void *)seg == expert_y;
    if ((st = ep_shm_reserve(ep, st, need)) != QMOE_OK) return st;
    if (!ep->shm) return QMOE_OK; /* the window was not contiguous: messages (the caller) */
    seg = ep->shm_base[ep->rank];
    for (int s = 0; s < ep->size && !in_place; s++)
        for (int64_t l = 0; l < ep->nlocal && s != ep->rank; l++) {
            int64_t b = (int64_t)s * ep->nlocal + l;
            memcpy(seg + (size_t)rt->blk_pos[b] * row,
                   (const unsigned char *)expert_y + (size_t)rt->blk_pos[b] * row,
                   (size_t)rt->blk_len[b] * row);
        }
    st = ep_shm_publish(ep, QMOE_OK);
    if (st == QMOE_OK) ep_weighted_sum(ep, y_dtype, expert_y, NULL, sum, 0, rt->tokens);
    return st;
}

qmoe_status ep_send_home(qmoe_ep *ep, qmoe_status st, qmoe_dtype y_dtype, const void *expert_y,
                         int64_t rows, void *home, const ep_sum_args *sum)
{
    const ep_route *rt = &ep->route;
    const int64_t H = ep->H;
    size_t ys = ep_dtype_size(y_dtype), row = (size_t)H * ys;
    if (st != QMOE_OK) {
        /* the caller's own checks failed: agree on that below */
    } else if (!ep->dispatched) {
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "combine before any successful dispatch");
    } else if (!ys || y_dtype == QMOE_DTYPE_INT8 || (int64_t)row > INT_MAX) {
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "y_dtype %d is not FLOAT32, FLOAT16 or BFLOAT16",
                     (int)y_dtype);
    } else if (rows != rt->recv_total) {
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "rows %lld: the dispatch delivered %lld",
                     (long long)rows, (long long)rt->recv_total);
    } else if (rows > 0 && !expert_y) {
        st = ep_fail(QMOE_ERR_PARAM_NULLPTR, "expert_y is NULL with %lld rows", (long long)rows);
    } else if ((size_t)rows * row > expert_rows_room(ep, expert_y)) {
        st = ep_fail(QMOE_ERR_PARAM_INVALID,
                     "expert_y is qmoe_ep_expert_rows' buffer, smaller than %lld rows of y_dtype %d",
                     (long long)rows, (int)y_dtype);
    }
    if (ep->shm && sum) {
        st = shm_combine(ep, st, y_dtype, expert_y, row, sum);
        if (st != QMOE_OK || ep->shm) return st; /* else messages from now on, on every rank */
    }
    /* sends: one per (source, local expert, chunk); receives of one chunk: one per expert */
    MPI_Request *req = ep_alloc((size_t)ep->size * (size_t)ep->nlocal * EP_CHUNKS + (size_t)ep->E,
                                sizeof *req);
    int64_t *at = ep_alloc((size_t)ep->E, sizeof *at);
    if (st == QMOE_OK &&
        (!req || !at || (!home && !ep_reserve(&ep->home, &ep->home_cap, (size_t)rt->nremote, row))))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld rows", (long long)rt->nremote);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) {
        free(req), free(at);
        return st;
    }
    unsigned char *h = home ? home : ep->home;
    MPI_Datatype y_row;
    MPI_Type_contiguous((int)row, MPI_BYTE, &y_row);
    MPI_Type_commit(&y_row);
    for (int64_t p = 0, acc = 0; p < ep->E; p++) { /* compact send order, as in dispatch */
        at[p] = acc;
        if (p < ep->pos_first[ep->rank] || p >= ep->pos_first[ep->rank + 1])
            for (int c = 0; c < EP_CHUNKS; c++) acc += rt->pcnt[p * EP_CHUNKS + c];
    }
    int ns = post_back(ep, expert_y, row, y_row, !sum, req);
    /* Chunk by chunk: its rows come home, then (combine) its tokens are summed while the rows
     * are still in cache. Chunk c's tokens: t * chunks / T == c. Without a sum, all at once. */
    if (!sum) {
        int nr = post_home(ep, -1, row, y_row, h, at, req + ns);
        MPI_Waitall(nr, req + ns, MPI_STATUSES_IGNORE);
    }
    for (int64_t c = 0, T = rt->tokens; c < rt->chunks && sum; c++) {
        int nr = post_home(ep, (int)c, row, y_row, h, at, req + ns);
        MPI_Waitall(nr, req + ns, MPI_STATUSES_IGNORE);
        ep_weighted_sum(ep, y_dtype, expert_y, h, sum, (c * T + rt->chunks - 1) / rt->chunks,
                        ((c + 1) * T + rt->chunks - 1) / rt->chunks);
    }
    MPI_Waitall(ns, req, MPI_STATUSES_IGNORE);
    MPI_Type_free(&y_row);
    free(req), free(at);
    return QMOE_OK;
}

qmoe_status qmoe_ep_expert_rows(qmoe_ep *ep, qmoe_dtype y_dtype, void **buffer)
{
    if (!ep) return ep_fail(QMOE_ERR_PARAM_NULLPTR, "ep is NULL"); /* no communicator to agree on */
    size_t row = (size_t)ep->H * ep_dtype_size(y_dtype), need = 0;
    qmoe_status st = QMOE_OK;
    if (!buffer)
        st = ep_fail(QMOE_ERR_PARAM_NULLPTR, "buffer is NULL");
    else if (!ep->dispatched)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "no dispatch before qmoe_ep_expert_rows");
    else if (!row || y_dtype == QMOE_DTYPE_INT8)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "y_dtype %d is not FLOAT32, FLOAT16 or BFLOAT16",
                     (int)y_dtype);
    else
        need = (size_t)ep->route.recv_total * row;
    if (ep->shm) {
        /* the reserve's agreement is the barrier: every rank is past its last read of the
         * segments before anyone writes its own again */
        if ((st = ep_shm_reserve(ep, st, need)) != QMOE_OK) return st;
        if (ep->shm) {
            *buffer = ep->shm_base[ep->rank];
            ep_clear_error();
            return QMOE_OK;
        }
    }
    if (st == QMOE_OK && !ep_reserve_aligned(&ep->ybuf, &ep->ybuf_cap, need, 1))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld rows", (long long)ep->route.recv_total);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) return st;
    *buffer = ep->ybuf;
    ep_clear_error();
    return QMOE_OK;
}
