/* qmoe_moe_dispatch: token rows to the ranks that own their experts, grouped by local expert. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ep_internal.h"

static qmoe_status check_args(const qmoe_ep *ep, int64_t tokens, const void *x,
                              const float *x_scale, const int32_t *expert_idx, int64_t capacity,
                              const void *recv_x, const float *recv_scale,
                              const int64_t *group_list, const int64_t *recv_rows)
{
    int q = ep->x_dtype == QMOE_DTYPE_INT8;
    if (tokens < 0 || tokens > INT_MAX / ep->K)
        return ep_fail(QMOE_ERR_PARAM_INVALID, "tokens %lld: not in [0, INT_MAX / top_k]",
                       (long long)tokens);
    if (capacity < 0)
        return ep_fail(QMOE_ERR_PARAM_INVALID, "capacity %lld < 0", (long long)capacity);
    if (tokens > 0 && (!x || !expert_idx || (q && !x_scale)))
        return ep_fail(QMOE_ERR_PARAM_NULLPTR, "%s is NULL with %lld tokens",
                       !x            ? "x"
                       : !expert_idx ? "expert_idx"
                                     : "x_scale",
                       (long long)tokens);
    if (!recv_rows) return ep_fail(QMOE_ERR_PARAM_NULLPTR, "recv_rows is NULL");
    if (ep->nlocal > 0 && !group_list)
        return ep_fail(QMOE_ERR_PARAM_NULLPTR, "group_list is NULL (%lld local experts)",
                       (long long)ep->nlocal);
    if (capacity > 0 && (!recv_x || (q && !recv_scale)))
        return ep_fail(QMOE_ERR_PARAM_NULLPTR, "%s is NULL with capacity %lld",
                       !recv_x ? "recv_x" : "recv_scale", (long long)capacity);
    for (int64_t i = 0; i < tokens * ep->K; i++)
        if (expert_idx[i] < 0 || expert_idx[i] >= ep->E)
            return ep_fail(QMOE_ERR_PARAM_INVALID, "expert_idx[%lld][%lld] = %d not in [0, %lld)",
                           (long long)(i / ep->K), (long long)(i % ep->K), (int)expert_idx[i],
                           (long long)ep->E);
    return QMOE_OK;
}

qmoe_status qmoe_moe_dispatch(qmoe_ep *ep, int64_t tokens, const void *x, const float *x_scale,
                              const int32_t *expert_idx, int64_t capacity, void *recv_x,
                              float *recv_scale, int64_t *group_list, int64_t *recv_rows)
{
    if (!ep) return ep_fail(QMOE_ERR_PARAM_NULLPTR, "ep is NULL"); /* no communicator to agree on */
    qmoe_status st = check_args(ep, tokens, x, x_scale, expert_idx, capacity, recv_x, recv_scale,
                                group_list, recv_rows);
    ep_recv to = {.capacity = capacity, .x = recv_x, .scale = recv_scale};
    return ep_dispatch(ep, st, tokens, x, x_scale, expert_idx, &to, group_list, recv_rows);
}

/* Received rows into the context's own buffers, `extra` more rows reserved after them. */
static qmoe_status reserve_own(qmoe_ep *ep, ep_recv *to, int64_t total, size_t row)
{
    size_t n = (size_t)total + (size_t)to->extra;
    if (!ep_reserve_aligned(&ep->rx, &ep->rx_cap, n, row) ||
        !ep_reserve_aligned(&ep->rxs, &ep->rxs_cap, n, sizeof(float)))
        return ep_fail(QMOE_ERR_INNER, "out of memory for %lld received rows", (long long)n);
    to->x = ep->rx;
    to->scale = ep->rxs;
    return QMOE_OK;
}

/* The rows of source s (not this rank) for each local expert l arrive straight at their grouped
 * place, one message per non-empty block; the rows to rank d leave from the pack buffer, one
 * message per expert of d, in the same (expert) order on both sides, so the k-th message of a
 * pair matches the k-th receive. Returns the requests posted. */
static int post_rows(qmoe_ep *ep, const ep_route *rt, const unsigned char *pack, void *recv_x,
                     MPI_Request *req)
{
    const int64_t nl = ep->nlocal;
    const size_t row = (size_t)ep->H * ep->x_size;
    int n = 0;
    for (int s = 0; s < ep->size; s++)
        for (int64_t l = 0; l < nl && s != ep->rank; l++) {
            int len = rt->blk_len[(int64_t)s * nl + l];
            if (len)
                MPI_Irecv((unsigned char *)recv_x + (size_t)rt->blk_pos[(int64_t)s * nl + l] * row,
                          len, ep->x_row, s, EP_TAG_DISPATCH, ep->comm, &req[n++]);
        }
    int64_t at = 0; /* compact send order */
    for (int d = 0; d < ep->size; d++)
        for (int64_t p = ep->pos_first[d]; p < ep->pos_first[d + 1] && d != ep->rank; p++) {
            int len = 0;
            for (int c = 0; c < EP_CHUNKS; c++) len += rt->pcnt[p * EP_CHUNKS + c];
            if (len)
                MPI_Isend(pack + (size_t)at * row, len, ep->x_row, d, EP_TAG_DISPATCH, ep->comm,
                          &req[n++]);
            at += len;
        }
    return n;
}

/* The scales (4 bytes a row) in one exchange, source-major, then to their grouped places. */
static void move_scales(qmoe_ep *ep, const ep_route *rt, const float *pack_scale, float *to,
                        int *counts)
{
    const int P = ep->size;
    const int64_t nl = ep->nlocal;
    int *sc = counts, *sd = counts + P, *rc = counts + 2 * P, *rd = counts + 3 * P;
    ep_without_self(ep, rt->scounts, sc);
    ep_compact_displs(ep, rt->scounts, sd);
    ep_without_self(ep, rt->rcounts, rc);
    ep_compact_displs(ep, rt->rcounts, rd);
    float *stage = ep->stage_scale;
    MPI_Alltoallv(pack_scale, sc, sd, MPI_FLOAT, stage, rc, rd, MPI_FLOAT, ep->comm);
    for (int s = 0; s < P; s++) {
        int64_t at = rd[s];
        for (int64_t l = 0; l < nl && s != ep->rank; l++) {
            int len = rt->blk_len[(int64_t)s * nl + l];
            memcpy(to + rt->blk_pos[(int64_t)s * nl + l], stage + at, (size_t)len * sizeof *to);
            at += len;
        }
    }
}

qmoe_status ep_dispatch(qmoe_ep *ep, qmoe_status st, int64_t tokens, const void *x,
                        const float *x_scale, const int32_t *expert_idx, ep_recv *to,
                        int64_t *group_list, int64_t *recv_rows)
{
    const int P = ep->size, q = ep->x_dtype == QMOE_DTYPE_INT8, me = ep->rank;
    const int64_t E = ep->E, K = ep->K, nl = ep->nlocal;
    const size_t row = (size_t)ep->H * ep->x_size;
    const int64_t n = st == QMOE_OK ? tokens * K : 0; /* rows this rank sends */
    ep_route rt = {.tokens = tokens};
    const int64_t EC = E * EP_CHUNKS; /* counts per rank pair: (expert, chunk) */
    int *send_e = ep_alloc((size_t)P, (size_t)EC * sizeof(int));
    int *recv_e = ep_alloc((size_t)P, (size_t)EC * sizeof(int)); /* >= 4 P ints */
    int64_t *start = ep_alloc((size_t)E, sizeof(int64_t));
    int64_t *groups = ep_alloc((size_t)nl, sizeof(int64_t));
    MPI_Request *req = ep_alloc((size_t)E + (size_t)P * (size_t)nl, sizeof *req);
    rt.rcounts = ep_alloc((size_t)P, sizeof(int));
    rt.scounts = ep_alloc((size_t)P, sizeof(int));
    rt.sdispls = ep_alloc((size_t)P, sizeof(int));
    rt.pcnt = ep_alloc((size_t)EC, sizeof(int));
    rt.blk_len = ep_alloc((size_t)P, (size_t)nl * sizeof(int));
    rt.blk_chunk = ep_alloc((size_t)P * (size_t)nl, EP_CHUNKS * sizeof(int));
    rt.blk_pos = ep_alloc((size_t)P, (size_t)nl * sizeof(int64_t));
    rt.src = ep_alloc((size_t)n, sizeof(int64_t));
    if (st == QMOE_OK &&
        (!send_e || !recv_e || !start || !groups || !req || !rt.rcounts || !rt.scounts ||
         !rt.sdispls || !rt.pcnt || !rt.blk_len || !rt.blk_chunk || !rt.blk_pos || !rt.src))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld rows to send", (long long)n);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) goto done;

    /* Send order: by (owner, local expert) = order[e], then token, then k (a stable counting
     * sort), so each rank receives its rows grouped by its experts from every source. */
    memset(send_e, 0, (size_t)P * (size_t)EC * sizeof(int));
    memset(rt.pcnt, 0, (size_t)EC * sizeof(int));
    memset(start, 0, (size_t)E * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) start[ep->order[expert_idx[i]]]++;
    for (int d = 0, acc = 0; d < P; d++) {
        int64_t c = 0;
        for (int64_t p = ep->pos_first[d]; p < ep->pos_first[d + 1]; p++) c += start[p];
        rt.scounts[d] = (int)c; /* <= n <= INT_MAX */
        rt.sdispls[d] = acc;
        acc += (int)c;
    }
    rt.nremote = n - rt.scounts[me];
    /* Chunks of >= 16 rows per message on average (a message costs a few microseconds). */
    int64_t far = E - nl > 0 ? E - nl : 1;
    rt.chunks = rt.nremote / (16 * far);
    rt.chunks = rt.chunks < 1 ? 1 : rt.chunks > EP_CHUNKS ? EP_CHUNKS : rt.chunks;
    for (int64_t i = 0; i < n; i++)
        rt.pcnt[ep->order[expert_idx[i]] * EP_CHUNKS + (i / K) * rt.chunks / tokens]++;
    for (int64_t e = 0; e < E; e++)
        memcpy(send_e + (int64_t)ep->owner[e] * EC + e * EP_CHUNKS,
               rt.pcnt + ep->order[e] * EP_CHUNKS, EP_CHUNKS * sizeof(int));
    MPI_Alltoall(send_e, (int)EC, MPI_INT, recv_e, (int)EC, MPI_INT, ep->comm);

    /* Where source s's rows for local expert l go: expert-major, then source. */
    int64_t total = 0;
    for (int64_t l = 0; l < nl; l++) {
        int64_t e = ep->local_ids[l], c = 0;
        for (int s = 0; s < P; s++) {
            int64_t k = 0, b = (int64_t)s * nl + l;
            for (int ch = 0; ch < EP_CHUNKS; ch++) {
                int r = recv_e[(int64_t)s * EC + e * EP_CHUNKS + ch];
                rt.blk_chunk[b * EP_CHUNKS + ch] = r;
                k += r; /* <= the source's T * K <= INT_MAX */
            }
            rt.blk_len[(int64_t)s * nl + l] = (int)k;
            rt.blk_pos[(int64_t)s * nl + l] = total + c;
            c += k;
        }
        groups[l] = c;
        total += c;
    }
    rt.recv_total = total;
    for (int s = 0; s < P; s++) {
        int64_t c = 0;
        for (int64_t l = 0; l < nl; l++) c += rt.blk_len[(int64_t)s * nl + l];
        rt.rcounts[s] = (int)(c > INT_MAX ? INT_MAX : c); /* total > INT_MAX fails below */
    }
    if (to->capacity >= 0 && total > to->capacity)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "%lld rows arrive at rank %d: more than capacity %lld",
                     (long long)total, ep->rank, (long long)to->capacity);
    else if (total > INT_MAX)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "%lld rows arrive at rank %d: over INT_MAX",
                     (long long)total, ep->rank);
    else if (!ep_reserve(&ep->pack, &ep->pack_cap, (size_t)rt.nremote, row) ||
             (q && (!ep_reserve(&ep->pack_scale, &ep->pack_scale_cap, (size_t)rt.nremote,
                                sizeof(float)) ||
                    !ep_reserve(&ep->stage_scale, &ep->stage_scale_cap, (size_t)total,
                                sizeof(float)))))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld + %lld rows", (long long)n,
                     (long long)total);
    else if (to->capacity < 0)
        st = reserve_own(ep, to, total, row);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) goto done;

    /* Each row is written once before MPI: the rank's own straight to its grouped place, the
     * others into the pack buffer in compact send order (the send order without the rank's own
     * rows), where they leave from. next[p]: the next such row of expert position p. */
    int64_t *next = start;
    for (int64_t p = 0, acc = 0; p < E; p++) {
        int own = p >= ep->pos_first[me] && p < ep->pos_first[me + 1];
        int64_t len = start[p];
        next[p] = own ? rt.blk_pos[(int64_t)me * nl + (p - ep->pos_first[me])]
                      : acc - (p >= ep->pos_first[me + 1] ? rt.scounts[me] : 0);
        acc += len;
    }
    const unsigned char *xb = x;
    unsigned char *pack = ep->pack, *grouped = to->x;
    float *pscale = ep->pack_scale;
    for (int64_t i = 0; i < n; i++) {
        int32_t e = expert_idx[i];
        int64_t r = next[ep->order[e]]++;
        const unsigned char *xr = xb + (size_t)(i / K) * row;
        if (ep->owner[e] == me) {
            memcpy(grouped + (size_t)r * row, xr, row);
            if (q) to->scale[r] = x_scale[i / K];
            rt.src[i] = -1 - r;
        } else {
            memcpy(pack + (size_t)r * row, xr, row);
            if (q) pscale[r] = x_scale[i / K];
            rt.src[i] = r;
        }
    }
    int nreq = post_rows(ep, &rt, pack, grouped, req);
    if (q) move_scales(ep, &rt, pscale, to->scale, recv_e); /* recv_e: >= 4 P ints (E >= 1) */
    MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    if (nl > 0) memcpy(group_list, groups, (size_t)nl * sizeof *groups);
    *recv_rows = total;
    ep_route_free(&ep->route);
    ep->route = rt;
    rt = (ep_route){0};
    ep->dispatched = 1;
    ep_clear_error();
done:
    ep_route_free(&rt);
    free(send_e);
    free(recv_e);
    free(start);
    free(groups);
    free(req);
    return st;
}
