/* qmoe_moe_combine: processed rows back to their tokens' ranks, weighted sum over k. */
#include <limits.h>
#include <stdlib.h>

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
    float *acc = ep_alloc((size_t)ep->threads, (size_t)H * sizeof(float)); /* per thread */
    if (st == QMOE_OK && !acc) st = ep_fail(QMOE_ERR_INNER, "out of memory");
    st = ep_send_home(ep, st, y_dtype, expert_y, rows, NULL);
    if (st == QMOE_OK) {
        ep_weighted_sum(ep, y_dtype, expert_y, ep->home, weights, out_dtype, out, acc);
        ep_clear_error();
    }
    free(acc);
    return st;
}

/* The other ranks' rows go back from their grouped places, one message per (source, local
 * expert) block; this rank's remote rows come home one message per (owner, expert) block, in
 * the order dispatch sent them (so the k-th message of a pair matches the k-th receive). */
static int post_home(qmoe_ep *ep, const unsigned char *y, size_t row, MPI_Datatype y_row,
                     unsigned char *home, MPI_Request *req)
{
    const ep_route *rt = &ep->route;
    const int64_t nl = ep->nlocal;
    int n = 0;
    int64_t at = 0; /* compact send order */
    for (int d = 0; d < ep->size; d++)
        for (int64_t p = ep->pos_first[d]; p < ep->pos_first[d + 1] && d != ep->rank; p++) {
            if (rt->pcnt[p])
                MPI_Irecv(home + (size_t)at * row, rt->pcnt[p], y_row, d, EP_TAG_COMBINE, ep->comm,
                          &req[n++]);
            at += rt->pcnt[p];
        }
    for (int s = 0; s < ep->size; s++)
        for (int64_t l = 0; l < nl && s != ep->rank; l++) {
            int len = rt->blk_len[(int64_t)s * nl + l];
            if (len)
                MPI_Isend(y + (size_t)rt->blk_pos[(int64_t)s * nl + l] * row, len, y_row, s,
                          EP_TAG_COMBINE, ep->comm, &req[n++]);
        }
    return n;
}

qmoe_status ep_send_home(qmoe_ep *ep, qmoe_status st, qmoe_dtype y_dtype, const void *expert_y,
                         int64_t rows, void *home)
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
    }
    MPI_Request *req = ep_alloc((size_t)ep->E + (size_t)ep->size * (size_t)ep->nlocal, sizeof *req);
    if (st == QMOE_OK &&
        (!req || (!home && !ep_reserve(&ep->home, &ep->home_cap, (size_t)rt->nremote, row))))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld rows", (long long)rt->nremote);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) {
        free(req);
        return st;
    }
    MPI_Datatype y_row;
    MPI_Type_contiguous((int)row, MPI_BYTE, &y_row);
    MPI_Type_commit(&y_row);
    int n = post_home(ep, expert_y, row, y_row, home ? home : ep->home, req);
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    MPI_Type_free(&y_row);
    free(req);
    return QMOE_OK;
}
