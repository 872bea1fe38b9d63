/* The MPI side of `qmoe moe run --ep` and `qmoe bench moe --ep` (moe_ep.h), on libqmoe_mpi. */
#include "moe_ep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t moe_ep_checksum(const void *data, size_t n)
{
    /* 8 bytes a step (fast enough to cover a whole input file), then the tail and the length */
    const unsigned char *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001B3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    h ^= (uint64_t)n;
    h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

#ifdef QMOE_CLI_MPI

#include <limits.h>

#include "qmoe/mpi.h"
#include "qmoe/runtime.h"

struct moe_ep {
    int rank, size;
    qmoe_ep *ctx;
};

/* What each process brings to moe_ep_join, OR-ed over all of them. */
enum { J_WRONG_P = 1, J_REFUSED = 2, J_NO_EP = 4, J_EP = 8, J_NO_MEMORY = 16 };

int moe_ep_join(const char *cmd, int asks_ep, int refused, int64_t P, int no_memory)
{
    char err[MOE_EP_ERR_LEN];
    int inited = 0, size = 1;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(NULL, NULL);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mine = (asks_ep ? J_EP : J_NO_EP) | (refused ? J_REFUSED : 0) |
               (no_memory ? J_NO_MEMORY : 0) | (asks_ep && !refused && P != size ? J_WRONG_P : 0);
    int all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
    if (all == J_EP) return 0;
    if (all == J_NO_EP) { /* separate runs that mpirun started: none waits for another */
        MPI_Finalize();
        return 1;
    }
    if (mine & J_REFUSED) snprintf(err, MOE_EP_ERR_LEN, "%s", "");
    else if (mine & J_NO_MEMORY) snprintf(err, MOE_EP_ERR_LEN, "out of memory");
    else if (mine & J_WRONG_P)
        snprintf(err, MOE_EP_ERR_LEN,
                 "--ep %lld, but %d rank(s) are running (start it as mpirun -np %lld qmoe ...)",
                 (long long)P, size, (long long)P);
    else
        snprintf(err, MOE_EP_ERR_LEN, "another rank %s; every rank must be given the same arguments",
                 (all & J_EP) && (all & J_NO_EP) ? (asks_ep ? "was started without --ep" : "was given --ep")
                 : all & J_REFUSED ? "refused its arguments"
                 : all & J_WRONG_P ? "was given another --ep than the ranks running"
                                   : "ran out of memory");
    /* before MPI_Finalize, which waits for every process: once one has exited with an error,
     * mpirun may end the others before they could say why */
    if (err[0]) fprintf(stderr, "qmoe %s: %s\n", cmd, err);
    MPI_Finalize();
    return -1;
}

int moe_ep_launched(void)
{
    /* Open MPI's, and MPICH's (Hydra) */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(vars[i]);
        long n = v ? strtol(v, NULL, 10) : 0;
        if (n > 1) return n > INT_MAX ? INT_MAX : (int)n;
    }
    return 0;
}

int moe_ep_start(const char *cmd, int64_t P, int refused, moe_ep **out)
{
    moe_ep *ep = refused ? NULL : calloc(1, sizeof *ep);
    /* agreed by every process, so none goes on to wait for one that stopped */
    if (moe_ep_join(cmd, 1, refused, P, !refused && !ep)) {
        free(ep);
        return -1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &ep->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ep->size);
    *out = ep;
    return 0;
}

int moe_ep_agree(int failed, const moe_ep_fact *f, int n, char *err)
{
    int mine = failed != 0, any = 0, rank = 0, size = 1;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); /* = moe_ep_any */
    if (any) return 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int64_t root[MOE_EP_MAX_FACTS];
    if (n > MOE_EP_MAX_FACTS) n = MOE_EP_MAX_FACTS; /* callers pass fixed lists below it */
    for (int i = 0; i < n; i++) root[i] = f[i].value;
    MPI_Bcast(root, n, MPI_INT64_T, 0, MPI_COMM_WORLD);
    int first = n, at = n;
    for (int i = 0; i < n && first == n; i++)
        if (f[i].value != root[i]) first = i;
    MPI_Allreduce(&first, &at, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (at == n) return 0;
    /* the lowest rank that differs there, and its value: the same message on every rank */
    int who = f[at].value != root[at] ? rank : size, lowest = size;
    MPI_Allreduce(&who, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int64_t theirs = f[at].value;
    MPI_Bcast(&theirs, 1, MPI_INT64_T, lowest, MPI_COMM_WORLD);
    char a[32], b[32];
    int64_t v[2] = {root[at], theirs};
    for (int k = 0; k < 2; k++) {
        char *s = k ? b : a;
        if (f[at].kind == MOE_EP_HEX) {
            snprintf(s, sizeof a, "%016llx", (unsigned long long)v[k]);
        } else if (f[at].kind == MOE_EP_REAL) {
            double d;
            memcpy(&d, &v[k], sizeof d);
            snprintf(s, sizeof a, "%.15g", d); /* the shortest that reads back, mostly */
            if (strtod(s, NULL) != d) snprintf(s, sizeof a, "%.17g", d);
        } else {
            snprintf(s, sizeof a, "%lld", (long long)v[k]);
        }
    }
    snprintf(err, MOE_EP_ERR_LEN,
             "the ranks disagree on %s: rank 0 has %s, rank %d has %s (every rank must be given "
             "the same files and options)",
             f[at].what, a, lowest, b);
    return -1;
}

void moe_ep_end(moe_ep *ep)
{
    if (!ep) return;
    qmoe_ep_destroy(ep->ctx);
    free(ep);
    MPI_Finalize();
}

int moe_ep_rank(const moe_ep *ep) { return ep->rank; }
int moe_ep_size(const moe_ep *ep) { return ep->size; }

int moe_ep_any(moe_ep *ep, int failed)
{
    (void)ep; /* the world communicator: what mpirun started */
    int mine = failed != 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

int moe_ep_shard(moe_ep *ep, const qmoe_moe_layer_config *c, const void *const *gate,
                 const void *const *up, const void *const *down, qmoe_dtype dtype,
                 qmoe_moe_layer **layer, char *err)
{
    qmoe_ep_config ec = QMOE_EP_CONFIG_INIT;
    ec.num_experts = c->num_experts, ec.hidden = c->hidden_size, ec.top_k = c->top_k;
    ec.x_dtype = QMOE_DTYPE_INT8;
    if (qmoe_ep_create(MPI_COMM_WORLD, &ec, &ep->ctx)) {
        snprintf(err, MOE_EP_ERR_LEN, "expert parallelism: %s", qmoe_mpi_last_error());
        return -1;
    }
    int64_t n = qmoe_ep_local_experts(ep->ctx);
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    int failed = !ids;
    if (!ids) snprintf(err, MOE_EP_ERR_LEN, "out of memory");
    for (int64_t i = 0; i < n && ids; i++) ids[i] = (int32_t)qmoe_ep_local_expert_id(ep->ctx, i);
    if (ids && qmoe_moe_layer_create_shard_from_float(c, n, ids, gate, up, down, dtype, layer)) {
        snprintf(err, MOE_EP_ERR_LEN, "rank %d's experts: %s", ep->rank, qmoe_last_error());
        failed = 1;
    }
    free(ids);
    if (moe_ep_any(ep, failed)) {
        if (!failed) snprintf(err, MOE_EP_ERR_LEN, "%s", "");
        qmoe_moe_layer_destroy(failed ? NULL : *layer);
        if (!failed) *layer = NULL;
        return -1;
    }
    return 0;
}

int moe_ep_default_threads(moe_ep *ep)
{
    (void)ep;
    MPI_Comm host;
    int here = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
    MPI_Comm_size(host, &here);
    MPI_Comm_free(&host);
    int t = qmoe_device_online_cores() / (here > 0 ? here : 1);
    return t > 0 ? t : 1;
}

void moe_ep_split(const moe_ep *ep, int64_t T, int64_t *first, int64_t *count)
{
    *first = T * ep->rank / ep->size;
    *count = T * (ep->rank + 1) / ep->size - *first;
}

int moe_ep_forward(moe_ep *ep, const qmoe_moe_layer *layer, qmoe_dtype hd, int64_t count,
                   int64_t H, int64_t E, void *hidden, void *logits, void *out, char *err)
{
    int64_t hs[2] = {count, H}, ls[2] = {count, E};
    qmoe_tensor *th = NULL, *tl = NULL, *to = NULL;
    qmoe_status st = qmoe_tensor_create(hs, 2, NULL, hd, QMOE_FORMAT_ND, hidden, &th);
    if (!st) st = qmoe_tensor_create(ls, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, logits, &tl);
    if (!st) st = qmoe_tensor_create(hs, 2, NULL, hd, QMOE_FORMAT_ND, out, &to);
    /* a tensor that could not be made still joins the collective, with its own error */
    qmoe_status fs = qmoe_ep_layer_forward(ep->ctx, layer, st ? NULL : th, tl, to);
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    if (fs) snprintf(err, MOE_EP_ERR_LEN, "%s", st ? qmoe_last_error() : qmoe_mpi_last_error());
    return fs ? -1 : 0;
}

int moe_ep_gather(moe_ep *ep, const void *mine, int64_t count, size_t row, void *all_out)
{
    int *counts = calloc((size_t)ep->size, sizeof *counts), *displs = calloc((size_t)ep->size, sizeof *displs);
    if (moe_ep_any(ep, !counts || !displs)) {
        free(counts), free(displs);
        return -1;
    }
    int c = (int)count; /* the caller keeps T within INT_MAX */
    MPI_Gather(&c, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int r = 1; r < ep->size; r++) displs[r] = displs[r - 1] + counts[r - 1];
    MPI_Datatype rt;
    MPI_Type_contiguous((int)row, MPI_BYTE, &rt);
    MPI_Type_commit(&rt);
    /* rank 0's own rows are already in place */
    MPI_Gatherv(ep->rank == 0 && mine == all_out ? MPI_IN_PLACE : mine, c, rt, all_out, counts, displs, rt, 0,
                MPI_COMM_WORLD);
    MPI_Type_free(&rt);
    free(counts), free(displs);
    return 0;
}

double moe_ep_wtime(void) { return MPI_Wtime(); }
void moe_ep_barrier(moe_ep *ep)
{
    (void)ep;
    MPI_Barrier(MPI_COMM_WORLD);
}

#else /* built without MPI */

int moe_ep_start(const char *cmd, int64_t P, int refused, moe_ep **ep)
{
    (void)P, (void)ep;
    if (refused) return -1; /* it said why */
    fprintf(stderr, "qmoe %s: "
             "--ep needs a qmoe built with MPI, and this one was built without it (install Open MPI: "
             "scripts/require-mpi.sh, or apt-get install libopenmpi-dev openmpi-bin; then configure "
             "again)\n", cmd);
    return -1;
}

int moe_ep_join(const char *cmd, int asks_ep, int refused, int64_t P, int no_memory)
{
    (void)no_memory;
    if (!asks_ep) return 1;
    return moe_ep_start(cmd, P, refused, NULL);
}
int moe_ep_launched(void) { return 0; } /* no MPI: no process waits for another */
void moe_ep_end(moe_ep *ep) { (void)ep; }
int moe_ep_rank(const moe_ep *ep) { return (void)ep, 0; }
int moe_ep_size(const moe_ep *ep) { return (void)ep, 1; }
int moe_ep_any(moe_ep *ep, int failed) { return (void)ep, failed; }
int moe_ep_agree(int failed, const moe_ep_fact *facts, int n, char *err)
{
    (void)facts, (void)n, (void)err;
    return failed ? 1 : 0;
}
int moe_ep_shard(moe_ep *ep, const qmoe_moe_layer_config *c, const void *const *gate,
                 const void *const *up, const void *const *down, qmoe_dtype dtype,
                 qmoe_moe_layer **layer, char *err)
{
    (void)ep, (void)c, (void)gate, (void)up, (void)down, (void)dtype, (void)layer;
    snprintf(err, MOE_EP_ERR_LEN, "built without MPI");
    return -1;
}
int moe_ep_default_threads(moe_ep *ep) { return (void)ep, 0; }
void moe_ep_split(const moe_ep *ep, int64_t T, int64_t *first, int64_t *count)
{
    (void)ep;
    *first = 0, *count = T;
}
int moe_ep_forward(moe_ep *ep, const qmoe_moe_layer *layer, qmoe_dtype hd, int64_t count,
                   int64_t H, int64_t E, void *hidden, void *logits, void *out, char *err)
{
    (void)ep, (void)layer, (void)hd, (void)count, (void)H, (void)E, (void)hidden, (void)logits, (void)out;
    snprintf(err, MOE_EP_ERR_LEN, "built without MPI");
    return -1;
}
int moe_ep_gather(moe_ep *ep, const void *mine, int64_t count, size_t row, void *all_out)
{
    (void)ep, (void)mine, (void)count, (void)row, (void)all_out;
    return -1;
}
double moe_ep_wtime(void) { return 0; }
void moe_ep_barrier(moe_ep *ep) { (void)ep; }

#endif
