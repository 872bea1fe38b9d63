/* The expert-parallel context behind qmoe/mpi.h, shared by its source files. */
#ifndef QMOE_MPI_EP_INTERNAL_H
#define QMOE_MPI_EP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "qmoe/mpi.h"
#include "qmoe/op.h"

#if defined(__GNUC__)
#define EP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define EP_PRINTF(a, b)
#endif

/* What one dispatch leaves for its combine, in rows. Send order: by (owner rank, local expert),
 * then token, then k. Remote rows: the send order without the rank's own rows ("compact"), in
 * which they leave in dispatch (the pack buffer) and come home in combine. */
/* Combine brings the rows home in up to EP_CHUNKS chunks of the source's tokens (chunk c: the
 * tokens t with t * chunks / T == c), each summed as soon as it is in, while in cache. Counts
 * per chunk travel in dispatch's count exchange. */
enum { EP_CHUNKS = 16 };

typedef struct ep_route {
    int64_t tokens, recv_total, nremote; /* nremote: this rank's rows that go to other ranks */
    int64_t chunks;         /* this rank's token chunks, 1..EP_CHUNKS */
    int *scounts;           /* [P]: rows this rank sent to each rank, send order */
    int *pcnt;              /* [E * EP_CHUNKS]: rows sent to (expert position order[e], chunk) */
    int *blk_len;           /* [P * nlocal]: rows from source s for local expert l */
    int *blk_chunk;         /* [P * nlocal * EP_CHUNKS]: of which from the source's chunk c */
    int64_t *blk_pos;       /* [P * nlocal]: where they are in the delivered (grouped) rows */
    /* [tokens * K]: where token t's choice k is after the exchange: >= 0 a remote row (compact
     * send order, in the rows that come home); < 0: -1 - its row in this rank's grouped rows */
    int64_t *src;
    /* shared memory only, [tokens * K]: a remote row's place in its owner's grouped rows g and
     * the owner d as g * P + d (own rows: unused) */
    int64_t *far;
} ep_route;

struct qmoe_ep {
    MPI_Comm comm; /* our own duplicate: our messages never match the caller's */
    int rank, size;
    int64_t E, H, K;
    qmoe_dtype x_dtype;
    size_t x_size;      /* bytes per element of x */
    int32_t *owner;     /* [E] rank of each expert */
    int64_t *order;     /* [E] position of expert e when sorted by (owner, id) */
    int64_t *local_ids; /* [nlocal] this rank's experts, ascending */
    int64_t nlocal;
    int64_t *pos_first; /* [P + 1]: rank r's experts are order positions [pos_first[r], [r + 1]) */
    int threads;        /* combine's weighted sum */
    /* dispatch's record of a token: its row (H * x_size bytes), its scale (int8 rows), its K
     * expert ids (int32) */
    size_t rec_size;
    MPI_Datatype x_rec;
    int dispatched;
    ep_route route;
    /* Shared memory (every rank on one node, not refused by the config): rows come home by
     * being read in place from the owner's segment of one MPI shared-memory window; segment r's
     * rows start at shm_base[r] = shm_base[0] + r * shm_cap (64-byte aligned), shm_cap - 64
     * bytes each. */
    int shm;
    MPI_Win win;
    void **shm_base;
    size_t shm_cap;
    /* Kept between calls (no page faults per batch): dispatch's token records leaving and
     * arriving (source-major), the rows coming home in combine. */
    void *pack, *home, *stage, *ybuf; /* ybuf: qmoe_ep_expert_rows without shared memory */
    size_t pack_cap, home_cap, stage_cap, ybuf_cap;
    /* The layer forward's (ep_layer.c), kept too, 64-byte aligned: the rank's quantized tokens
     * and routing, the rows its experts run (received + shared), their outputs, the experts'
     * workspace. */
    void *rx, *rxs, *tq, *tqs, *tids, *tw, *twf, *ty, *tws;
    size_t rx_cap, rxs_cap, tq_cap, tqs_cap, tids_cap, tw_cap, twf_cap, ty_cap, tws_cap;
    /* The tokens' dynamic quant, planned once for the last shape (qmoe/op.h), and its scratch. */
    qmoe_op *quant;
    int64_t quant_key[5]; /* tokens, dtype, strides of hidden, threads */
    void *quant_ws;
    size_t quant_ws_cap;
};

/* Where dispatch puts the rows arriving here: the caller's buffers (capacity >= 0 rows), or the
 * context's own rx / rxs (capacity -1) with `extra` more rows reserved after the received. */
typedef struct ep_recv {
    int64_t capacity, extra;
    void *x;
    float *scale;
} ep_recv;

/* qmoe_moe_dispatch after its argument checks (`st`: their local result, agreed here first). */
qmoe_status ep_dispatch(qmoe_ep *ep, qmoe_status st, int64_t tokens, const void *x,
                        const float *x_scale, const int32_t *expert_idx, ep_recv *to,
                        int64_t *group_list, int64_t *recv_rows);

/* What combine's weighted sum needs besides the rows (ep_weighted_sum). */
typedef struct ep_sum_args {
    const float *weights;
    qmoe_dtype out_dtype;
    void *out;
    float *acc;
} ep_sum_args;

/* The exchange half of qmoe_moe_combine: checks (with `st`, the caller's local status, all
 * agreed), then the processed rows of other ranks' tokens go back to them and this rank's remote
 * rows come home into `home` (NULL: ep->home, grown here) in compact send order (route.src).
 * The rank's own rows stay where they are in expert_y. `sum` non-NULL: each chunk of tokens is
 * summed into sum->out as soon as its rows are home. */
qmoe_status ep_send_home(qmoe_ep *ep, qmoe_status st, qmoe_dtype y_dtype, const void *expert_y,
                         int64_t rows, void *home, const ep_sum_args *sum);

/* Shared memory (ep_shm.c). Init: collective, at creation. Reserve: collective; agrees on `st`
 * (returned, the same on every rank) and grows every segment to the largest `need` of any rank
 * (may turn ep->shm off, on every rank, if the window is not contiguous). Publish: every rank's
 * writes to its segment are visible to all (and `st` agreed) before any rank goes on. Destroy:
 * collective when a window exists. */
void ep_shm_init(qmoe_ep *ep, int messages_only);
qmoe_status ep_shm_reserve(qmoe_ep *ep, qmoe_status st, size_t need);
qmoe_status ep_shm_publish(qmoe_ep *ep, qmoe_status st);
void ep_shm_destroy(qmoe_ep *ep);
/* Where remote row far (route.far) is, rows of `row` bytes. */
static inline const unsigned char *ep_shm_row(const qmoe_ep *ep, int64_t far, size_t row)
{
    return (const unsigned char *)ep->shm_base[far % ep->size] + (size_t)(far / ep->size) * row;
}

/* Every rank's values equal? (One MPI_Allreduce; scratch holds 2n.) */
int ep_same_values(MPI_Comm comm, const int64_t *v, int64_t n, int64_t *scratch);

/* Records the calling thread's message for qmoe_mpi_last_error() and returns `status`. */
qmoe_status ep_fail(qmoe_status status, const char *fmt, ...) EP_PRINTF(2, 3);
void ep_clear_error(void);

/* Every rank passes its local status; every rank gets the same one back (the largest code). A
 * rank that was fine but gets an error learns from its message that another rank failed. */
qmoe_status ep_agree(MPI_Comm comm, qmoe_status local);

/* Bytes per element of the row types qmoe_mpi moves; 0 for others. */
size_t ep_dtype_size(qmoe_dtype dt);

void ep_route_free(ep_route *r);

/* malloc(a * b), NULL on overflow; never NULL for 0 bytes (MPI gets valid buffers). */
void *ep_alloc(size_t a, size_t b);
/* Grows *buf to a * b bytes (kept when large enough); 0 when out of memory or on overflow, with
 * *buf as it was. */
int ep_reserve(void **buf, size_t *cap, size_t a, size_t b);
/* ep_reserve, 64-byte aligned (buffers the operators read as tensors). */
int ep_reserve_aligned(void **buf, size_t *cap, size_t a, size_t b);


/* Tags of the messages of the rows coming home (messages transport): in whole (peer, expert)
 * blocks (the layer), or in chunks (combine: EP_TAG_COMBINE + chunk). */
enum { EP_TAG_HOME = 2, EP_TAG_COMBINE = 3 };

enum { EP_SUM_MAX_THREADS = 64 }; /* more are not started */

/* out[t] = sum over j of w[t, j] * y(t, j) for this rank's tokens [t0, t1), rows from `home`
 * (remote) or expert_y (own), in float32 from 0 in j order (weights NULL: 1), stored as
 * out_dtype (round to nearest even); up to ep->threads threads (at most EP_SUM_MAX_THREADS)
 * split the tokens, a->acc: [that many, H] floats. */
void ep_weighted_sum(const qmoe_ep *ep, qmoe_dtype y_dtype, const void *expert_y, const void *home,
                     const ep_sum_args *a, int64_t t0, int64_t t1);

#endif
