/* qmoe_ep: the communicator, the expert-to-rank map and the shapes, agreed by all ranks. */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ep_internal.h"

/* Local checks of the config; fills owner[] (allocated by the caller, [E]) when they pass. */
/* A field the caller's struct has (callers built against an older, smaller layout do not). */
#define HAS(c, field) ((c)->struct_size >= offsetof(qmoe_ep_config, field) + sizeof((c)->field))

static qmoe_status check_config(const qmoe_ep_config *c, int size, int32_t **owner)
{
    /* the first layout ended before `threads` */
    if (c->struct_size < offsetof(qmoe_ep_config, threads))
        return ep_fail(QMOE_ERR_PARAM_INVALID, "config: struct_size %u < %zu", c->struct_size,
                       offsetof(qmoe_ep_config, threads));
    if (HAS(c, threads) && (c->threads < 0 || c->threads > 4096))
        return ep_fail(QMOE_ERR_PARAM_INVALID, "config: threads %d not in [0, 4096]", c->threads);
    /* E * EP_CHUNKS counts per rank pair travel in one MPI_Alltoall, 2E values in one
     * MPI_Allreduce */
    if (c->num_experts < 1 || c->num_experts > INT_MAX / (2 * EP_CHUNKS))
        return ep_fail(QMOE_ERR_PARAM_INVALID, "config: num_experts %lld not in [1, %d]",
                       (long long)c->num_experts, INT_MAX / (2 * EP_CHUNKS));
    if (c->top_k < 1 || c->top_k > INT_MAX)
        return ep_fail(QMOE_ERR_PARAM_INVALID, "config: top_k %lld not in [1, INT_MAX]",
                       (long long)c->top_k);
    size_t es = ep_dtype_size(c->x_dtype);
    if (!es)
        return ep_fail(QMOE_ERR_PARAM_INVALID,
                       "config: x_dtype %d is not INT8, FLOAT16, BFLOAT16 or FLOAT32",
                       (int)c->x_dtype);
    /* a row travels as one MPI element of H * es bytes, a token as one of its row, its scale
     * and its top_k ids: their sizes are ints */
    if (c->hidden < 1 || c->hidden > INT_MAX / (int64_t)es)
        return ep_fail(QMOE_ERR_PARAM_INVALID, "config: hidden %lld not in [1, %lld]",
                       (long long)c->hidden, (long long)(INT_MAX / (int64_t)es));
    if (c->top_k > (INT_MAX - 4 - c->hidden * (int64_t)es) / 4)
        return ep_fail(QMOE_ERR_PARAM_INVALID,
                       "config: a token of hidden %lld and top_k %lld is over INT_MAX bytes",
                       (long long)c->hidden, (long long)c->top_k);
    int64_t E = c->num_experts;
    int32_t *o = ep_alloc((size_t)E, sizeof *o);
    if (!o) return ep_fail(QMOE_ERR_INNER, "out of memory for the expert map (%lld)", (long long)E);
    for (int64_t e = 0; e < E; e++) {
        int64_t r = c->expert_rank ? c->expert_rank[e] : e * size / E;
        if (r < 0 || r >= size) {
            free(o);
            return ep_fail(QMOE_ERR_PARAM_INVALID,
                           "config: expert_rank[%lld] = %lld not in [0, %d)", (long long)e,
                           (long long)r, size);
        }
        o[e] = (int32_t)r;
    }
    *owner = o;
    return QMOE_OK;
}

/* Every rank's values equal? One MPI_Allreduce of (v, -v) with MPI_MAX gives max and -min. */
int ep_same_values(MPI_Comm comm, const int64_t *v, int64_t n, int64_t *scratch)
{
    for (int64_t i = 0; i < n; i++) {
        scratch[i] = v[i];
        scratch[n + i] = -v[i];
    }
    MPI_Allreduce(MPI_IN_PLACE, scratch, (int)(2 * n), MPI_INT64_T, MPI_MAX, comm);
    for (int64_t i = 0; i < n; i++)
        if (scratch[i] != -scratch[n + i]) return 0;
    return 1;
}

static qmoe_status build_local(qmoe_ep *ep)
{
    int64_t E = ep->E, pos = 0;
    ep->order = ep_alloc((size_t)E, sizeof *ep->order);
    ep->local_ids = ep_alloc((size_t)E, sizeof *ep->local_ids);
    ep->pos_first = ep_alloc((size_t)ep->size + 1, sizeof *ep->pos_first);
    if (!ep->order || !ep->local_ids || !ep->pos_first)
        return ep_fail(QMOE_ERR_INNER, "out of memory for the map");
    /* (owner, id) order: the rows for one rank leave sorted by its local experts */
    ep->pos_first[ep->size] = E;
    for (int r = 0; r < ep->size; r++) {
        ep->pos_first[r] = pos;
        for (int64_t e = 0; e < E; e++)
            if (ep->owner[e] == r) {
                ep->order[e] = pos++;
                if (r == ep->rank) ep->local_ids[ep->nlocal++] = e;
            }
    }
    return QMOE_OK;
}

qmoe_status qmoe_ep_create(MPI_Comm comm, const qmoe_ep_config *config, qmoe_ep **out)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return ep_fail(QMOE_ERR_PARAM_INVALID, "MPI is not initialized (or already finalized)");
    if (comm == MPI_COMM_NULL) return ep_fail(QMOE_ERR_PARAM_NULLPTR, "comm is MPI_COMM_NULL");
    qmoe_ep *ep = calloc(1, sizeof *ep);
    MPI_Comm dup;
    MPI_Comm_dup(comm, &dup);
    /* A failed collective ends the job rather than leaving the other ranks waiting. */
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_ARE_FATAL);
    int size, rank;
    MPI_Comm_size(dup, &size);
    MPI_Comm_rank(dup, &rank);

    qmoe_status st = QMOE_OK;
    int32_t *owner = NULL;
    if (!ep)
        st = ep_fail(QMOE_ERR_INNER, "out of memory for the context");
    else if (!config || !out)
        st = ep_fail(QMOE_ERR_PARAM_NULLPTR, "%s is NULL", config ? "out" : "config");
    else
        st = check_config(config, size, &owner);
    st = ep_agree(dup, st);
    int64_t shape[4] = {0, 0, 0, 0}, scratch[8];
    if (st == QMOE_OK) {
        shape[0] = config->num_experts;
        shape[1] = config->hidden;
        shape[2] = config->top_k;
        shape[3] = (int64_t)config->x_dtype;
        if (!ep_same_values(dup, shape, 4, scratch))
            st = ep_fail(QMOE_ERR_PARAM_INVALID,
                         "config differs between ranks (num_experts, hidden, top_k or x_dtype)");
    }
    if (st == QMOE_OK) {
        int64_t E = shape[0];
        int64_t *map = ep_alloc((size_t)E, sizeof *map),
                *mscratch = ep_alloc((size_t)E, 2 * sizeof *map);
        qmoe_status mst =
            map && mscratch ? QMOE_OK : ep_fail(QMOE_ERR_INNER, "out of memory for the map");
        st = ep_agree(dup, mst);
        if (st == QMOE_OK) {
            for (int64_t e = 0; e < E; e++) map[e] = owner[e];
            if (!ep_same_values(dup, map, E, mscratch))
                st = ep_fail(QMOE_ERR_PARAM_INVALID, "config: expert_rank differs between ranks");
        }
        free(map);
        free(mscratch);
    }
    if (st == QMOE_OK) {
        ep->comm = dup;
        ep->rank = rank;
        ep->size = size;
        ep->E = config->num_experts;
        ep->H = config->hidden;
        ep->K = config->top_k;
        ep->x_dtype = config->x_dtype;
        ep->x_size = ep_dtype_size(config->x_dtype);
        ep->threads = HAS(config, threads) && config->threads > 1 ? config->threads : 1;
        ep->owner = owner;
        owner = NULL;
        st = ep_agree(dup, build_local(ep));
    }
    if (st != QMOE_OK) {
        free(owner);
        if (ep) {
            free(ep->order);
            free(ep->local_ids);
            free(ep->pos_first);
            free(ep->owner);
            free(ep);
        }
        MPI_Comm_free(&dup);
        return st;
    }
    ep_shm_init(ep, HAS(config, messages_only) && config->messages_only);
    ep->rec_size = (size_t)ep->H * ep->x_size + (ep->x_dtype == QMOE_DTYPE_INT8 ? 4 : 0) +
                   (size_t)ep->K * sizeof(int32_t);
    MPI_Type_contiguous((int)ep->rec_size, MPI_BYTE, &ep->x_rec);
    MPI_Type_commit(&ep->x_rec);
    *out = ep;
    ep_clear_error();
    return QMOE_OK;
}

void qmoe_ep_destroy(qmoe_ep *ep)
{
    if (!ep) return;
    ep_route_free(&ep->route);
    ep_shm_destroy(ep);
    free(ep->pack);
    free(ep->home);
    free(ep->stage);
    free(ep->ybuf);
    qmoe_op_destroy(ep->quant);
    void *own[] = {ep->rx, ep->rxs, ep->tq, ep->tqs, ep->tids, ep->tw, ep->twf, ep->ty, ep->tws,
                   ep->quant_ws};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) free(own[i]);
    MPI_Type_free(&ep->x_rec);
    MPI_Comm_free(&ep->comm);
    free(ep->owner);
    free(ep->order);
    free(ep->local_ids);
    free(ep->pos_first);
    free(ep);
}

int64_t qmoe_ep_local_experts(const qmoe_ep *ep) { return ep ? ep->nlocal : -1; }

int qmoe_ep_shared_memory(const qmoe_ep *ep) { return ep ? ep->shm : 0; }

int64_t qmoe_ep_local_expert_id(const qmoe_ep *ep, int64_t i)
{
    return ep && i >= 0 && i < ep->nlocal ? ep->local_ids[i] : -1;
}
