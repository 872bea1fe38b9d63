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

qmoe_status ep_dispatch(qmoe_ep *ep, qmoe_status st, int64_t tokens, const void *x,
                        const float *x_scale, const int32_t *expert_idx, ep_recv *to,
                        int64_t *group_list, int64_t *recv_rows)
{
    const int P = ep->size, q = ep->x_dtype == QMOE_DTYPE_INT8;
    const int64_t E = ep->E, K = ep->K, nl = ep->nlocal;
    const size_t row = (size_t)ep->H * ep->x_size;
    const int64_t n = st == QMOE_OK ? tokens * K : 0; /* rows this rank sends */
    ep_route rt = {.tokens = tokens};
    int *send_e = ep_alloc((size_t)P, (size_t)E * sizeof(int));
    int *recv_e = ep_alloc((size_t)P, (size_t)E * sizeof(int));
    int64_t *start = ep_alloc((size_t)E, sizeof(int64_t));
    int64_t *groups = ep_alloc((size_t)nl, sizeof(int64_t));
    rt.rcounts = ep_alloc((size_t)P, sizeof(int));
    rt.rdispls = ep_alloc((size_t)P, sizeof(int));
    rt.scounts = ep_alloc((size_t)P, sizeof(int));
    rt.sdispls = ep_alloc((size_t)P, sizeof(int));
    rt.blk_len = ep_alloc((size_t)P, (size_t)nl * sizeof(int));
    rt.blk_pos = ep_alloc((size_t)P, (size_t)nl * sizeof(int64_t));
    rt.slot = ep_alloc((size_t)n, sizeof(int64_t));
    if (st == QMOE_OK &&
        (!send_e || !recv_e || !start || !groups || !rt.rcounts || !rt.rdispls || !rt.scounts ||
         !rt.sdispls || !rt.blk_len || !rt.blk_pos || !rt.slot ||
         !ep_reserve(&ep->pack, &ep->pack_cap, (size_t)n, row) ||
         (q && !ep_reserve(&ep->pack_scale, &ep->pack_scale_cap, (size_t)n, sizeof(float)))))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld rows to send", (long long)n);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) goto done;

    /* Send order: by (owner, local expert) = order[e], then token, then k (a stable counting
     * sort), so each rank receives its rows grouped by its experts from every source. */
    unsigned char *sbuf = ep->pack;
    float *sscale = ep->pack_scale;
    memset(send_e, 0, (size_t)P * (size_t)E * sizeof(int));
    memset(start, 0, (size_t)E * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) start[ep->order[expert_idx[i]]]++;
    for (int64_t e = 0; e < E; e++)
        send_e[(int64_t)ep->owner[e] * E + e] = (int)start[ep->order[e]];
    for (int64_t p = 0, acc = 0; p < E; p++) {
        int64_t c = start[p];
        start[p] = acc;
        acc += c;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t s = start[ep->order[expert_idx[i]]]++;
        rt.slot[i] = s;
        memcpy(sbuf + (size_t)s * row, (const unsigned char *)x + (size_t)(i / K) * row, row);
        if (q) sscale[s] = x_scale[i / K];
    }
    for (int d = 0, acc = 0; d < P; d++) {
        int64_t c = 0;
        for (int64_t e = 0; e < E; e++) c += send_e[(int64_t)d * E + e];
        rt.scounts[d] = (int)c; /* <= n <= INT_MAX */
        rt.sdispls[d] = acc;
        acc += (int)c;
    }
    MPI_Alltoall(send_e, (int)E, MPI_INT, recv_e, (int)E, MPI_INT, ep->comm);

    /* Where source s's rows for local expert l go: expert-major, then source. */
    int64_t total = 0;
    for (int64_t l = 0; l < nl; l++) {
        int64_t e = ep->local_ids[l], c = 0;
        for (int s = 0; s < P; s++) {
            int64_t k = recv_e[(int64_t)s * E + e];
            rt.blk_len[(int64_t)s * nl + l] = (int)k;
            rt.blk_pos[(int64_t)s * nl + l] = total + c;
            c += k;
        }
        groups[l] = c;
        total += c;
    }
    rt.recv_total = total;
    for (int s = 0, at = 0; s < P; s++) {
        int64_t c = 0;
        for (int64_t l = 0; l < nl; l++) c += rt.blk_len[(int64_t)s * nl + l];
        rt.rcounts[s] = (int)(c > INT_MAX ? INT_MAX : c); /* total > INT_MAX fails below */
        rt.rdispls[s] = at;
        at = (int)(at + c > INT_MAX ? INT_MAX : at + c);
    }
    if (to->capacity >= 0 && total > to->capacity)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "%lld rows arrive at rank %d: more than capacity %lld",
                     (long long)total, ep->rank, (long long)to->capacity);
    else if (total > INT_MAX)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "%lld rows arrive at rank %d: over INT_MAX",
                     (long long)total, ep->rank);
    else if (!ep_reserve(&ep->stage, &ep->stage_cap, (size_t)total, row) ||
             (q &&
              !ep_reserve(&ep->stage_scale, &ep->stage_scale_cap, (size_t)total, sizeof(float))))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld received rows", (long long)total);
    else if (to->capacity < 0)
        st = reserve_own(ep, to, total, row);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) goto done;

    /* Contiguous blocks per peer keep MPI on its fast (single-copy) path; the regrouping by
     * local expert is one block copy per (source, expert) here. */
    ep_without_self(ep, rt.scounts, send_e); /* E >= 1 ints per rank: room for P */
    ep_without_self(ep, rt.rcounts, recv_e);
    MPI_Alltoallv(sbuf, send_e, rt.sdispls, ep->x_row, ep->stage, recv_e, rt.rdispls, ep->x_row,
                  ep->comm);
    if (q)
        MPI_Alltoallv(sscale, send_e, rt.sdispls, MPI_FLOAT, ep->stage_scale, recv_e, rt.rdispls,
                      MPI_FLOAT, ep->comm);
    ep_regroup(ep, &rt, row, 1, ep->stage, to->x, sbuf + (size_t)rt.sdispls[ep->rank] * row);
    if (q)
        ep_regroup(ep, &rt, sizeof(float), 1, ep->stage_scale, to->scale,
                   sscale + rt.sdispls[ep->rank]);
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
    return st;
}
