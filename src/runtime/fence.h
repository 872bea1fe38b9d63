/*
 * Multi-device fences: one 128-byte slot per device in shared memory, each holding a
 * monotonically increasing sequence number and the status the device brought to that barrier.
 * A device arriving at barrier `seq` publishes its status, then its seq (release); it leaves when
 * every peer's seq has reached `seq` (compared by signed difference, so wrap-around is harmless).
 * The barrier's result is the first error any device brought: a peer's error is adopted and
 * republished in the device's own slot, so it passes on. The wait is bounded by lack of progress,
 * not by time: a late peer that is alive and working (a watch says so: its progress number
 * changes) extends the wait, since several streams may share a device and its queue may hold
 * long work ahead of the barrier; only a whole timeout without any late peer moving returns
 * QMOE_ERR_RUNTIME instead of hanging.
 *
 * A device that leaves barrier s may publish s + 1 before a slower peer has read its status for
 * s, so a slot keeps the statuses of the last two barriers (by seq parity); a peer cannot reach
 * s + 2 before everyone has arrived at s + 1, that is, finished reading s.
 */
#ifndef QMOE_RUNTIME_FENCE_H
#define QMOE_RUNTIME_FENCE_H

#include <stdatomic.h>
#include <stdint.h>

#include "qmoe/qmoe.h"
#include "runtime/trace.h"

enum { QMOE_FENCE_LINE = 128 };

typedef struct qmoe_fence_entry {
    atomic_uint seq;
    atomic_int status; /* qmoe_status the device brought to barrier `seq` */
} qmoe_fence_entry;

typedef struct qmoe_fence_slot {
    _Alignas(QMOE_FENCE_LINE) atomic_uint seq; /* the last barrier the device arrived at */
    qmoe_fence_entry at[2];                    /* by seq parity */
} qmoe_fence_slot;

_Static_assert(sizeof(qmoe_fence_slot) == QMOE_FENCE_LINE, "one 128-byte line per device");

/* `count` zeroed slots, 128-byte aligned; NULL when out of memory. Free with qmoe_fence_free. */
qmoe_fence_slot *qmoe_fence_alloc(int count);
void qmoe_fence_free(qmoe_fence_slot *slots);

void qmoe_fence_write(qmoe_fence_slot *slot, uint32_t seq, qmoe_status status);

/* How a waiter tells a slow peer from a dead one: progress(ctx, j) returns a number that changes
 * while peer j is alive and working (the device's progress operation; on the CPU device, the
 * work completed plus the CPU time used). */
typedef struct qmoe_fence_watch {
    uint64_t (*progress)(void *ctx, int peer);
    void *ctx;
} qmoe_fence_watch;

enum { QMOE_FENCE_MAX_WATCHED = 64 }; /* groups larger than this are not watched */

/* Device `self` of `count` arrives at barrier `seq` with `status`; returns the group's status:
 * `status` if not OK, else the first peer error, else QMOE_ERR_RUNTIME when `timeout_ns` passed
 * without any late peer making progress (`watch` NULL: without any late peer arriving), else OK.
 * `timeout_ns` 0 means the default (QMOE_FENCE_TIMEOUT_MS, 60 s unless set in the environment). */
qmoe_status qmoe_fence_barrier(qmoe_fence_slot *slots, int self, int count, uint32_t seq,
                               qmoe_status status, uint64_t timeout_ns, qmoe_trace_buf *trace,
                               const qmoe_fence_watch *watch);

#endif
