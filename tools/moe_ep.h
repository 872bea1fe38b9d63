/* The MPI side of `qmoe moe run --ep P` and `qmoe bench moe --ep P` (tools/moe_ep.c). In a
 * qmoe built without MPI (QMOE_CLI_MPI unset) moe_ep_start says so and the rest is never called. */
#ifndef QMOE_TOOLS_MOE_EP_H
#define QMOE_TOOLS_MOE_EP_H

#include <stddef.h>
#include <stdint.h>

#include "qmoe/moe_layer.h"

enum { MOE_EP_ERR_LEN = 512 };

typedef struct moe_ep moe_ep;

/* Collective over every process mpirun started (MPI is initialized here): asks_ep says this
 * one was given --ep P. 0 when every process was and P is their count; 1 when none was (and
 * none refused its arguments): separate runs, MPI finalized again; otherwise -1 on every
 * process, each having printed "qmoe CMD: why" (its own reason, or what another process did;
 * nothing where it refused its arguments: it said why) before MPI is finalized. A run without --ep joins only when
 * moe_ep_launched(), so that one started beside --ep ranks (mpirun -np 1 A --ep 2 : -np 1 A)
 * stops them instead of leaving them waiting. */
int moe_ep_join(const char *cmd, int asks_ep, int refused, int64_t P, int no_memory);
/* The processes mpirun (Open MPI or MPICH) started this one among, when more than 1; else 0
 * (and always 0 in a qmoe built without MPI). */
int moe_ep_launched(void);

/* Collective: starts MPI and checks, on every rank together (moe_ep_join), that mpirun started
 * P ranks. refused: this rank's arguments were refused (it printed why; P is not read), so
 * every rank stops. 0, or -1 on every rank, each having said why on stderr, MPI finalized (the
 * caller exits 2). */
int moe_ep_start(const char *cmd, int64_t P, int refused, moe_ep **ep);
/* Destroys the context and finalizes MPI; NULL is a no-op. */
void moe_ep_end(moe_ep *ep);
int moe_ep_rank(const moe_ep *ep);
int moe_ep_size(const moe_ep *ep);
/* Collective: nonzero when `failed` is nonzero on any rank. */
int moe_ep_any(moe_ep *ep, int failed);

/* One value every rank must have the same of (a token count, a file's checksum, an option):
 * `what` names it in the message, `kind` says how its value is shown. */
typedef enum moe_ep_kind { MOE_EP_INT, MOE_EP_HEX, MOE_EP_REAL /* the bits of a double */ } moe_ep_kind;
typedef struct moe_ep_fact {
    const char *what;
    int64_t value;
    moe_ep_kind kind;
} moe_ep_fact;
enum { MOE_EP_MAX_FACTS = 64 };

/* Collective over every rank mpirun started (MPI initialized), before anything moves: first
 * exactly the collective of moe_ep_any(failed) (so a rank that failed earlier joins with
 * moe_ep_any(ep, 1)), then rank 0's n facts against every rank's (n <= MOE_EP_MAX_FACTS, the
 * same n everywhere). 0 when no rank failed and all agree; 1 when a rank failed (err untouched:
 * that rank says why); -1 on every rank, with the same err everywhere (the first fact that
 * differs, rank 0's value and the lowest other rank's), when they disagree. */
int moe_ep_agree(int failed, const moe_ep_fact *facts, int n, char *err);

/* A 64-bit checksum of n bytes (for moe_ep_agree: a file's header, an input's data). */
uint64_t moe_ep_checksum(const void *data, size_t n);
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
 * (in rank order, which is token order); rank 0's `mine` may be all_out itself. 0, or -1 on
 * every rank when one is out of memory. */
int moe_ep_gather(moe_ep *ep, const void *mine, int64_t count, size_t row, void *all_out);
/* The seconds since some fixed point, the same clock on every rank (MPI_Wtime); a barrier. */
double moe_ep_wtime(void);
void moe_ep_barrier(moe_ep *ep);

#endif
