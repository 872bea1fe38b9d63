/* The MPI side of `qmoe moe run --ep P` and `qmoe bench moe --ep P` (tools/moe_ep.c). In a
 * qmoe built without MPI (QMOE_CLI_MPI unset) moe_ep_start says so and the rest is never called. */
#ifndef QMOE_TOOLS_MOE_EP_H
#define QMOE_TOOLS_MOE_EP_H

#include <stddef.h>
#include <stdint.h>

#include "qmoe/moe_layer.h"

enum { MOE_EP_ERR_LEN = 512 };

typedef struct moe_ep moe_ep;

/* Starts MPI and checks that mpirun started P ranks. 0, or -1 with err (the caller exits 2). */
int moe_ep_start(int64_t P, moe_ep **ep, char *err);
/* Destroys the context and finalizes MPI; NULL is a no-op. */
void moe_ep_end(moe_ep *ep);
int moe_ep_rank(const moe_ep *ep);
int moe_ep_size(const moe_ep *ep);
/* Collective: nonzero when `failed` is nonzero on any rank. */
int moe_ep_any(moe_ep *ep, int failed);
/* Collective: the expert-parallel context for the layer's shapes and this rank's shard of the
 * layer (float weights indexed by expert id; only this rank's are read). 0 on every rank, or -1
 * on every rank (err: this rank's reason, or that another rank failed). */
int moe_ep_shard(moe_ep *ep, const qmoe_moe_layer_config *c, const void *const *gate,
                 const void *const *up, const void *const *down, qmoe_dtype dtype,
                 qmoe_moe_layer **layer, char *err);
/* Threads per rank when the user gave none: the online cores over the ranks on this host. */
int moe_ep_default_threads(moe_ep *ep);
/* Rank r's tokens of T: [first, first + count), an even split. */
void moe_ep_split(const moe_ep *ep, int64_t T, int64_t *first, int64_t *count);
/* Collective: the sharded forward of this rank's tokens (hidden, logits: its [count] rows, out:
 * its [count, H] output). 0, or -1 on every rank with err. */
int moe_ep_forward(moe_ep *ep, const qmoe_moe_layer *layer, qmoe_dtype hd, int64_t count,
                   int64_t H, int64_t E, void *hidden, void *logits, void *out, char *err);
/* Collective: every rank's output rows (`count` rows of `row` bytes each) into all_out on rank 0
 * (in rank order, which is token order); rank 0's `mine` may be all_out itself. */
void moe_ep_gather(moe_ep *ep, const void *mine, int64_t count, size_t row, void *all_out);
/* The seconds since some fixed point, the same clock on every rank (MPI_Wtime); a barrier. */
double moe_ep_wtime(void);
void moe_ep_barrier(moe_ep *ep);

#endif
