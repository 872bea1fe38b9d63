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

/* A token goes to another rank once, however many of its choices that rank owns: one record of
 * its row, its scale (int8 rows) and its K expert ids (ep->rec_size bytes); the owner copies the
 * row to each of its grouped places. Records to rank d leave in token order, in one message.
 * pack_records: this rank's, rank after rank (not itself); ucount[d]: records to d. */
static void pack_records(qmoe_ep *ep, int64_t tokens, const void *x, const float *x_scale,
                         const int32_t *expert_idx, const int *ucount, unsigned char *pack)
{
    const int64_t K = ep->K;
    const size_t row = (size_t)ep->H * ep->x_size, rec = ep->rec_size;
    const int q = ep->x_dtype == QMOE_DTYPE_INT8;
    for (int64_t d = 0, at = 0; d < ep->size; d++) {
        if (d == ep->rank || !ucount[d]) continue;
        for (int64_t t = 0; t < tokens; t++) {
            int64_t k = 0;
            while (k < K && ep->owner[expert_idx[t * K + k]] != d) k++;
            if (k == K) continue;
            unsigned char *r = pack + (size_t)at++ * rec;
            memcpy(r, (const unsigned char *)x + (size_t)t * row, row);
            if (q) memcpy(r + row, &x_scale[t], sizeof(float));
            memcpy(r + rec - (size_t)K * sizeof(int32_t), expert_idx + t * K,
                   (size_t)K * sizeof(int32_t));
        }
    }
}

/* The records from source s to their grouped places: (local expert, source), then token, then
 * k, as the source's send order. at[l]: the next place of local expert l's rows from s. */
static void unpack_records(const qmoe_ep *ep, const unsigned char *recs, int n, int64_t *at,
                           ep_recv *to)
{
    const int64_t K = ep->K, first = ep->pos_first[ep->rank];
    const size_t row = (size_t)ep->H * ep->x_size, rec = ep->rec_size;
    const int q = ep->x_dtype == QMOE_DTYPE_INT8, me = ep->rank;
    unsigned char *grouped = to->x;
    for (int i = 0; i < n; i++) {
        const unsigned char *r = recs + (size_t)i * rec;
        for (int64_t k = 0; k < K; k++) {
            int32_t e;
            memcpy(&e, r + rec - (size_t)(K - k) * sizeof(int32_t), sizeof e);
            if (ep->owner[e] != me) continue;
            int64_t p = at[ep->order[e] - first]++;
            memcpy(grouped + (size_t)p * row, r, row);
            if (q) memcpy(&to->scale[p], r + row, sizeof(float));
        }
    }
}

qmoe_status ep_dispatch(qmoe_ep *ep, qmoe_status st, int64_t tokens, const void *x,
                        const float *x_scale, const int32_t *expert_idx, ep_recv *to,
                        int64_t *group_list, int64_t *recv_rows)
{
    const int P = ep->size, q = ep->x_dtype == QMOE_DTYPE_INT8, me = ep->rank;
    const int64_t E = ep->E, K = ep->K, nl = ep->nlocal;
    const size_t row = (size_t)ep->H * ep->x_size, rec = ep->rec_size;
    const int64_t n = st == QMOE_OK ? tokens * K : 0; /* rows this rank sends */
    ep_route rt = {.tokens = tokens};
    /* counts per rank pair: (expert, chunk), then the records (tokens) sent */
    const int64_t EC = E * EP_CHUNKS, EC1 = EC + 1;
    int *send_e = ep_alloc((size_t)P, (size_t)EC1 * sizeof(int));
    int *recv_e = ep_alloc((size_t)P, (size_t)EC1 * sizeof(int));
    /* records to and from each rank, and their displacements (MPI_Ialltoallv) */
    int *ucount = ep_alloc((size_t)P, 4 * sizeof(int)), *urecv = NULL, *udis = NULL, *rdis = NULL;
    int64_t *start = ep_alloc((size_t)E, sizeof(int64_t));
    int64_t *groups = ep_alloc((size_t)nl, sizeof(int64_t));
    int64_t *at = ep_alloc((size_t)nl, sizeof(int64_t));
    rt.scounts = ep_alloc((size_t)P, sizeof(int));
    rt.pcnt = ep_alloc((size_t)EC, sizeof(int));
    rt.blk_len = ep_alloc((size_t)P, (size_t)nl * sizeof(int));
    rt.blk_chunk = ep_alloc((size_t)P * (size_t)nl, EP_CHUNKS * sizeof(int));
    rt.blk_pos = ep_alloc((size_t)P, (size_t)nl * sizeof(int64_t));
    rt.src = ep_alloc((size_t)n, sizeof(int64_t));
    /* shared memory: the owners' block positions ([P][E] each way), where each remote row is */
    int64_t *pos_out = NULL, *pos_in = NULL, *posr = NULL, *cstart = NULL;
    if (ep->shm) {
        pos_out = ep_alloc((size_t)P * 2, (size_t)E * sizeof(int64_t));
        pos_in = pos_out ? pos_out + (size_t)P * (size_t)E : NULL;
        posr = ep_alloc((size_t)E, 2 * sizeof(int64_t));
        cstart = posr ? posr + E : NULL;
        rt.far = ep_alloc((size_t)n, sizeof(int64_t));
        if (st == QMOE_OK && (!pos_out || !posr || !rt.far))
            st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld rows to send", (long long)n);
    }
    if (st == QMOE_OK &&
        (!send_e || !recv_e || !ucount || !start || !groups || !at || !rt.scounts ||
         !rt.pcnt || !rt.blk_len || !rt.blk_chunk || !rt.blk_pos ||
         !rt.src))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld rows to send", (long long)n);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) goto done;
    urecv = ucount + P, udis = ucount + 2 * P, rdis = ucount + 3 * P;

    /* Send order: by (owner, local expert) = order[e], then token, then k (a stable counting
     * sort), so each rank receives its rows grouped by its experts from every source. */
    memset(send_e, 0, (size_t)P * (size_t)EC1 * sizeof(int));
    memset(rt.pcnt, 0, (size_t)EC * sizeof(int));
    memset(start, 0, (size_t)E * sizeof(int64_t));
    memset(ucount, 0, (size_t)P * sizeof(int));
    for (int64_t i = 0; i < n; i++) start[ep->order[expert_idx[i]]]++;
    for (int d = 0; d < P; d++) {
        int64_t c = 0;
        for (int64_t p = ep->pos_first[d]; p < ep->pos_first[d + 1]; p++) c += start[p];
        rt.scounts[d] = (int)c; /* <= n <= INT_MAX */
    }
    rt.nremote = n - rt.scounts[me];
    /* Combine's chunks: >= 16 rows per message on average (a message costs a few microseconds). */
    int64_t far = E - nl > 0 ? E - nl : 1;
    rt.chunks = rt.nremote / (16 * far);
    rt.chunks = rt.chunks < 1 ? 1 : rt.chunks > EP_CHUNKS ? EP_CHUNKS : rt.chunks;
    for (int64_t i = 0; i < n; i++)
        rt.pcnt[ep->order[expert_idx[i]] * EP_CHUNKS + (i / K) * rt.chunks / tokens]++;
    for (int64_t e = 0; e < E; e++)
        memcpy(send_e + (int64_t)ep->owner[e] * EC1 + e * EP_CHUNKS,
               rt.pcnt + ep->order[e] * EP_CHUNKS, EP_CHUNKS * sizeof(int));
    for (int64_t t = 0; t < (n ? tokens : 0); t++) /* records: ranks the token goes to, once */
        for (int64_t k = 0; k < K; k++) {
            int d = ep->owner[expert_idx[t * K + k]], seen = 0;
            for (int64_t j = 0; j < k && !seen; j++) seen = ep->owner[expert_idx[t * K + j]] == d;
            if (!seen && d != me) ucount[d]++;
        }
    for (int d = 0; d < P; d++) send_e[(int64_t)d * EC1 + EC] = ucount[d];
    MPI_Alltoall(send_e, (int)EC1, MPI_INT, recv_e, (int)EC1, MPI_INT, ep->comm);

    /* Where source s's rows for local expert l go: expert-major, then source. */
    int64_t total = 0, urecs = 0, upack = 0;
    for (int64_t l = 0; l < nl; l++) {
        int64_t e = ep->local_ids[l], c = 0;
        for (int s = 0; s < P; s++) {
            int64_t k = 0, b = (int64_t)s * nl + l;
            for (int ch = 0; ch < EP_CHUNKS; ch++) {
                int r = recv_e[(int64_t)s * EC1 + e * EP_CHUNKS + ch];
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
        urecv[s] = recv_e[(int64_t)s * EC1 + EC];
        rdis[s] = (int)(urecs < INT_MAX ? urecs : INT_MAX), udis[s] = (int)(upack < INT_MAX ? upack : INT_MAX);
        urecs += urecv[s];
        upack += ucount[s];
    }
    /* Shared memory: where each of this rank's remote rows will be in its owner's grouped rows
     * (the owner's block of (this rank, expert e) starts at posr[e]). */
    if (ep->shm) {
        memset(pos_out, 0, (size_t)P * (size_t)E * sizeof *pos_out);
        for (int s = 0; s < P; s++)
            for (int64_t l = 0; l < nl; l++)
                pos_out[(int64_t)s * E + ep->local_ids[l]] = rt.blk_pos[(int64_t)s * nl + l];
        MPI_Alltoall(pos_out, (int)E, MPI_INT64_T, pos_in, (int)E, MPI_INT64_T, ep->comm);
        for (int64_t e = 0; e < E; e++) posr[e] = pos_in[(int64_t)ep->owner[e] * E + e];
    }
    if (to->capacity >= 0 && total > to->capacity)
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "%lld rows arrive at rank %d: more than capacity %lld",
                     (long long)total, ep->rank, (long long)to->capacity);
    else if (total > INT_MAX || urecs > INT_MAX || upack > INT_MAX) /* MPI counts are ints */
        st = ep_fail(QMOE_ERR_PARAM_INVALID, "%lld rows arrive at rank %d: over INT_MAX",
                     (long long)total, ep->rank);
    else if (!ep_reserve(&ep->pack, &ep->pack_cap, (size_t)upack, rec) ||
             !ep_reserve(&ep->stage, &ep->stage_cap, (size_t)urecs, rec))
        st = ep_fail(QMOE_ERR_INNER, "out of memory for %lld + %lld rows", (long long)n,
                     (long long)total);
    else if (to->capacity < 0)
        st = reserve_own(ep, to, total, row);
    if ((st = ep_agree(ep->comm, st)) != QMOE_OK) goto done;

    /* The records travel (one non-blocking MPI_Ialltoallv, source-major on arrival) while this
     * rank places its own rows (straight to their grouped places) and notes where every row will
     * be (route.src: compact send order for remote rows, in which combine brings them home).
     * next[p]: the next row of expert position p. */
    unsigned char *pack = ep->pack, *stage = ep->stage, *grouped = to->x;
    pack_records(ep, tokens, x, x_scale, n ? expert_idx : NULL, ucount, pack);
    MPI_Request req;
    MPI_Ialltoallv(pack, ucount, udis, ep->x_rec, stage, urecv, rdis, ep->x_rec, ep->comm, &req);
    int64_t *next = start;
    for (int64_t p = 0, acc = 0; p < E; p++) {
        int own = p >= ep->pos_first[me] && p < ep->pos_first[me + 1];
        int64_t len = start[p];
        next[p] = own ? rt.blk_pos[(int64_t)me * nl + (p - ep->pos_first[me])]
                      : acc - (p >= ep->pos_first[me + 1] ? rt.scounts[me] : 0);
        acc += len;
    }
    if (ep->shm) memcpy(cstart, next, (size_t)E * sizeof *cstart);
    const unsigned char *xb = x;
    for (int64_t i = 0; i < n; i++) {
        int32_t e = expert_idx[i];
        int64_t r = next[ep->order[e]]++;
        if (ep->owner[e] == me) {
            memcpy(grouped + (size_t)r * row, xb + (size_t)(i / K) * row, row);
            if (q) to->scale[r] = x_scale[i / K];
            rt.src[i] = -1 - r;
        } else {
            rt.src[i] = r;
            if (ep->shm) rt.far[i] = (posr[e] + r - cstart[ep->order[e]]) * P + ep->owner[e];
        }
    }

    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (int s = 0; s < P; s++) {
        if (s == me || !urecv[s]) continue;
        for (int64_t l = 0; l < nl; l++) at[l] = rt.blk_pos[(int64_t)s * nl + l];
        unpack_records(ep, stage + (size_t)rdis[s] * rec, urecv[s], at, to);
    }
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
    free(ucount);
    free(start);
    free(groups);
    free(at);
    free(pos_out);
    free(posr);
    return st;
}
