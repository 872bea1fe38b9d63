/* qmoe on MPI: expert parallelism across processes and machines (libqmoe_mpi).
 *
 * P ranks of a communicator each own some of a layer's E experts and hold their own tokens.
 * qmoe_moe_dispatch moves every token row to the ranks that own its top-k experts (MPI_Alltoall of
 * the counts, then one MPI_Ialltoallv carrying each token once per rank with its scale and expert
 * ids, however many of its experts that rank owns), where they arrive grouped by local expert (the
 * owner copies a row once per choice); qmoe_moe_combine brings the processed rows back (ranks on
 * one machine read them in place from an MPI shared-memory window; otherwise one message per block)
 * and finishes each token's weighted sum over its k choices in the order of a single-process
 * qmoe_moe_finalize_routing, so the outputs are bit-identical for any P. qmoe_ep_layer_forward runs
 * a whole MoE layer (qmoe/moe_layer.h) on them, each rank holding only its experts' weights (a
 * shard).
 *
 * Every function here is collective over the context's communicator: all ranks call it, in the same
 * order. Bad input on any rank makes every rank return the same status (agreed with an
 * MPI_Allreduce before any data moves) with its outputs untouched. Communication failures are fatal
 * (MPI_ERRORS_ARE_FATAL on the context's own communicator): a rank that dies ends the job. Only
 * compiled when the build found MPI (QMOE_WITH_MPI); link qmoe::qmoe_mpi / -lqmoe_mpi. */
#ifndef QMOE_MPI_H
#define QMOE_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "qmoe/export.h"
#include "qmoe/moe_layer.h"
#include "qmoe/qmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An expert-parallel context: the communicator (duplicated), the expert-to-rank map, the shapes,
 * and what the last dispatch left for combine. One per layer shape and communicator; not for use
 * by two threads at once. */
typedef struct qmoe_ep qmoe_ep;

/* Shapes and placement, the same on every rank (checked). `expert_rank` NULL: contiguous blocks,
 * expert e on rank e * P / E (E >= P not required: a rank may own no expert); otherwise [E] ranks
 * in [0, P). A rank's local experts are the ones it owns in ascending id order. */
typedef struct qmoe_ep_config {
    uint32_t struct_size;       /* sizeof(qmoe_ep_config), for later fields */
    int64_t num_experts;        /* E in [1, INT_MAX / 32] */
    int64_t hidden;             /* H >= 1: elements per row */
    int64_t top_k;              /* K >= 1 */
    qmoe_dtype x_dtype;         /* dispatched rows: INT8 (+ a float32 scale per row), FLOAT16,
                                   BFLOAT16 or FLOAT32 */
    const int32_t *expert_rank; /* NULL or [E]; copied */
    int threads;                /* 0..4096: threads of qmoe_moe_combine's weighted sum on this
                                   rank (0 or 1: the calling thread; at most 64 are started);
                                   may differ between ranks. Callers built before this field
                                   (a smaller struct_size): 1 */
    int messages_only;          /* 0 (default): when every rank is on one machine, rows come
                                   home by being read in place from an MPI shared-memory window;
                                   1 on any rank: MPI messages only, as between machines */
} qmoe_ep_config;
#define QMOE_EP_CONFIG_INIT {(uint32_t)sizeof(qmoe_ep_config), 0, 0, 0, QMOE_DTYPE_INT8, NULL, 0, 0}

/* Collective. Checks the config on every rank and that all ranks agree on it (E, H, K, x_dtype
 * and the map); QMOE_ERR_PARAM_NULLPTR / QMOE_ERR_PARAM_INVALID / QMOE_ERR_INNER (out of memory)
 * on every rank otherwise, *out left as it was. A row of H elements, and a token's record (its
 * row, a 4-byte scale for INT8, its K int32 ids), must fit an MPI count in bytes
 * (H * element size + 4 + 4 K <= INT_MAX). */
QMOE_API qmoe_status qmoe_ep_create(MPI_Comm comm, const qmoe_ep_config *config, qmoe_ep **out);
/* Collective once rows have come home through shared memory (frees the window with
 * MPI_Win_free): every rank calls it, before MPI_Finalize. NULL is a no-op. */
QMOE_API void qmoe_ep_destroy(qmoe_ep *ep);

/* This rank's number of local experts, and the global id of local expert i (in [0, count));
 * -1 for a NULL context or i out of range. */
QMOE_API int64_t qmoe_ep_local_experts(const qmoe_ep *ep);
QMOE_API int64_t qmoe_ep_local_expert_id(const qmoe_ep *ep, int64_t i);
/* 1 when rows come home through shared memory (every rank on one machine and none asked for
 * messages_only), 0 when as MPI messages or for a NULL context. The same on every rank. */
QMOE_API int qmoe_ep_shared_memory(const qmoe_ep *ep);

/* Collective. This rank's `tokens` rows x [tokens, H] of x_dtype (x_scale [tokens] float32 for
 * INT8, else ignored) with their experts expert_idx int32 [tokens, K] (ids in [0, E)) go to the
 * ranks that own those experts. Received here: *recv_rows rows into recv_x [capacity, H] (and
 * their scales into recv_scale [capacity] for INT8), grouped by local expert and within an expert
 * ordered by (source rank, token, k); group_list [local experts] gets the row count of each local
 * expert (QMOE_GROUP_LIST_COUNT style). tokens may be 0 (x, x_scale, expert_idx may then be NULL).
 * Errors, the same on every rank, nothing written: NULL pointers; tokens < 0 or tokens * K over
 * INT_MAX; an expert id out of range (QMOE_ERR_PARAM_INVALID); more rows arriving than `capacity`
 * (QMOE_ERR_PARAM_INVALID: recv_rows is not written either; at most P * max_tokens * K arrive);
 * out of memory (QMOE_ERR_INNER). A rank whose own input is fine learns that another rank failed
 * from qmoe_mpi_last_error(). */
QMOE_API qmoe_status qmoe_moe_dispatch(qmoe_ep *ep, int64_t tokens, const void *x,
                                       const float *x_scale, const int32_t *expert_idx,
                                       int64_t capacity, void *recv_x, float *recv_scale,
                                       int64_t *group_list, int64_t *recv_rows);

/* Collective, after a qmoe_moe_dispatch of this context. expert_y [rows, H] of y_dtype (FLOAT32,
 * FLOAT16 or BFLOAT16) holds the processed rows in the order dispatch delivered them (rows = its
 * *recv_rows); they go back to their source ranks, where
 *   out[t] = sum over j = 0..K-1 of weights[t, j] * y(t, j)
 * is accumulated in float32 from 0 in that order (weights float32 [tokens, K]; NULL: 1) and
 * stored as out_dtype (FLOAT32, FLOAT16 or BFLOAT16, round to nearest even) into out [tokens, H]
 * — the arithmetic of qmoe_moe_finalize_routing, so results do not depend on P. expert_y may be
 * the buffer of qmoe_ep_expert_rows (read in place, no copy). Errors as for dispatch (also: no
 * dispatch before, rows differing from it, expert_y the buffer of qmoe_ep_expert_rows for a
 * smaller y_dtype), the same on every rank, nothing written. */
QMOE_API qmoe_status qmoe_moe_combine(qmoe_ep *ep, qmoe_dtype y_dtype, const void *expert_y,
                                      int64_t rows, const float *weights, qmoe_dtype out_dtype,
                                      void *out);

/* Collective, after a qmoe_moe_dispatch of this context and before the local experts write their
 * outputs: *buffer gets room for expert_y of that dispatch (its *recv_rows rows of H y_dtype
 * elements, 64-byte aligned). With shared memory (qmoe_ep_shared_memory) it lies in this rank's
 * part of the window: experts that write their outputs there, passed as expert_y to
 * qmoe_moe_combine with the same y_dtype, save combine a copy of every row the other ranks read
 * in place. Otherwise a buffer of the context. Valid until the next call of this function,
 * qmoe_ep_layer_forward or qmoe_ep_destroy. Errors, the same on every rank, *buffer untouched:
 * NULL buffer (QMOE_ERR_PARAM_NULLPTR); no dispatch before, y_dtype not FLOAT32, FLOAT16 or
 * BFLOAT16 (QMOE_ERR_PARAM_INVALID); out of memory (QMOE_ERR_INNER). */
QMOE_API qmoe_status qmoe_ep_expert_rows(qmoe_ep *ep, qmoe_dtype y_dtype, void **buffer);

/* Collective. The MoE layer (qmoe/moe_layer.h) with its experts spread over the ranks: each rank
 * passes its own tokens, hidden [T, H] float32/float16/bfloat16 and router_logits [T, E]
 * (float32 or hidden's dtype), and gets out [T, H] (hidden's dtype, contiguous) for them; T may
 * differ between ranks and be 0. Each rank gates and quantizes (int8, a scale per row) its own
 * tokens, qmoe_moe_dispatch sends the rows to the owners of their top-k experts, each owner runs
 * its experts (gate/up + SwiGLU-quant, down projection: the layer's operators), every rank runs
 * the shared expert (if the layer has one) on its own tokens, and qmoe_moe_combine brings the
 * rows back and sums them in token order. The outputs are bit-identical to
 * qmoe_moe_layer_forward of a whole layer on the same tokens, for any P and placement.
 * `layer`: this rank's shard (qmoe_moe_layer_create_shard*, holding at least the experts the
 * context gives this rank: qmoe_ep_local_expert_id) or a whole layer. The context: x_dtype INT8,
 * the layer's E, H and top_k. Buffers are kept in the context between calls (grown as needed).
 * Equal on every rank, checked before any data moves (QMOE_ERR_PARAM_INVALID on every rank
 * otherwise): the context (E, H, top_k, x_dtype, the map: at qmoe_ep_create); the layer's
 * configuration: intermediate size, mode, group size, clip search, gating, renormalize, group
 * count, k_group, routed scaling factor (bit for bit), the correction bias's values, the shared
 * expert's size; hidden's dtype and router_logits' dtype. May differ: T, the threads, a shard or
 * the whole layer. Not checked (the caller's to keep equal): the weights' values, which no
 * rank holds all of (load them from one file on every rank; `qmoe moe run --ep` checks the
 * file's size and header checksum across ranks), the shared expert's among them.
 * Errors, the same on every rank, out untouched: NULL pointers; shapes or dtypes; a layer that
 * does not hold this rank's experts; any of the above differing between ranks
 * (QMOE_ERR_PARAM_INVALID); an expert id out of range; out of memory (QMOE_ERR_INNER). */
QMOE_API qmoe_status qmoe_ep_layer_forward(qmoe_ep *ep, const qmoe_moe_layer *layer,
                                           const qmoe_tensor *hidden,
                                           const qmoe_tensor *router_logits,
                                           const qmoe_tensor *out);

/* The calling thread's last error, in words ("" after success): the functions above record their
 * errors in libqmoe's one error channel, so this is qmoe_last_error() (and qmoe_last_error_info()
 * has the status). Kept for 0.2 programs. Valid until the thread's next call. */
QMOE_API const char *qmoe_mpi_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_MPI_H */
