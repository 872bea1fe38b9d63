/*
 * Multi-device fences: one 128-byte slot per device in shared memory, each holding a
 * monotonically increasing sequence number and the status the device brought to that barrier.
 * A device arriving at barrier `seq` publishes its status, then its seq (release); it leaves when
 * every peer's seq has reached `seq` (compared by signed difference, so wrap-around is harmless).
 * The barrier's result is the first error any device brought: a peer's error is adopted and
 * republished in the device's own slot, so it passes on. The wait is bounded: past the timeout
 * the barrier returns QMOE_ERR_RUNTIME instead of hanging.
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

/* Device `self` of `count` arrives at barrier `seq` with `status`; returns the group's status:
 * `status` if not OK, else the first peer error, else QMOE_ERR_RUNTIME on timeout, else OK.
 * `timeout_ns` 0 means the default (QMOE_FENCE_TIMEOUT_MS, 60 s unless set in the environment). */
qmoe_status qmoe_fence_barrier(qmoe_fence_slot *slots, int self, int count, uint32_t seq,
                               qmoe_status status, uint64_t timeout_ns, qmoe_trace_buf *trace);

#endif
