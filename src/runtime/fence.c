#define _POSIX_C_SOURCE 200809L
#include "runtime/fence.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/status.h"

enum { SPIN_NS = 200 * 1000, NAP_NS = 20 * 1000 }; /* yield for 200 us, then nap 20 us */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

qmoe_fence_slot *qmoe_fence_alloc(int count)
{
    size_t bytes = (size_t)count * sizeof(qmoe_fence_slot);
    qmoe_fence_slot *s = aligned_alloc(QMOE_FENCE_LINE, bytes);
    if (!s) return NULL;
    for (int i = 0; i < count; i++) {
        atomic_init(&s[i].seq, 0);
        for (int k = 0; k < 2; k++) {
            atomic_init(&s[i].at[k].seq, 0);
            atomic_init(&s[i].at[k].status, QMOE_OK);
        }
    }
    return s;
}

void qmoe_fence_free(qmoe_fence_slot *slots) { free(slots); }

void qmoe_fence_write(qmoe_fence_slot *slot, uint32_t seq, qmoe_status status)
{
    /* status first: a reader that sees the new seq (acquire) sees this status */
    qmoe_fence_entry *e = &slot->at[seq & 1];
    atomic_store_explicit(&e->status, (int)status, memory_order_relaxed);
    atomic_store_explicit(&e->seq, seq, memory_order_relaxed);
    atomic_store_explicit(&slot->seq, seq, memory_order_release);
}

/* 1 when the peer has arrived at `seq`, with its status for that barrier in *status. */
static int peer_arrived(qmoe_fence_slot *slot, uint32_t seq, qmoe_status *status)
{
    uint32_t latest = atomic_load_explicit(&slot->seq, memory_order_acquire);
    if ((int32_t)(latest - seq) < 0) return 0;
    qmoe_fence_entry *e = &slot->at[seq & 1];
    int st = atomic_load_explicit(&e->status, memory_order_relaxed);
    uint32_t at = atomic_load_explicit(&e->seq, memory_order_relaxed);
    /* Two barriers ahead only happens after a timeout broke the lockstep. */
    *status = at == seq ? (qmoe_status)st : QMOE_ERR_RUNTIME;
    return 1;
}

static uint64_t default_timeout_ns(void)
{
    const char *env = getenv("QMOE_FENCE_TIMEOUT_MS");
    long long ms = env ? atoll(env) : 0;
    if (ms <= 0) ms = 60000;
    if (ms > INT64_MAX / 1000000) ms = INT64_MAX / 1000000; /* neither this nor the deadline wraps */
    return (uint64_t)ms * 1000000u;
}

/* Takes each late peer's progress number; returns 1 when one of them moved since the last look. */
static int late_peer_moved(qmoe_fence_slot *slots, int count, uint32_t seq,
                           const qmoe_fence_watch *watch, uint64_t *seen)
{
    int moved = 0;
    if (!watch || count > QMOE_FENCE_MAX_WATCHED) return 0;
    for (int j = 0; j < count; j++) {
        qmoe_status ignored;
        uint64_t now = watch->progress(watch->ctx, j);
        if (!peer_arrived(&slots[j], seq, &ignored) && now != seen[j]) moved = 1;
        seen[j] = now;
    }
    return moved;
}

qmoe_status qmoe_fence_barrier(qmoe_fence_slot *slots, int self, int count, uint32_t seq,
                               qmoe_status status, uint64_t timeout_ns, qmoe_trace_buf *trace,
                               const qmoe_fence_watch *watch)
{
    QMOE_TRACE_START(trace, QMOE_EV_FENCE, seq);
    qmoe_fence_write(&slots[self], seq, status);
    qmoe_status result = status;
    uint64_t start = 0, deadline = 0, timeout = 0;
    uint64_t seen[QMOE_FENCE_MAX_WATCHED] = {0};
    int expired = 0; /* the deadline passed with no late peer moving: one last look, then fail */
    for (uint64_t spin = 0;; spin++) {
        int arrived = 0;
        for (int j = 0; j < count; j++) {
            qmoe_status peer;
            if (!peer_arrived(&slots[j], seq, &peer)) continue;
            arrived++;
            if (peer != QMOE_OK && result == QMOE_OK) result = peer;
        }
        if (arrived == count) break;
        if (expired) {
            if (result == QMOE_OK)
                result = qmoe_fail(QMOE_ERR_RUNTIME,
                                   "fence %u: a peer device made no progress for %llu ms and did "
                                   "not arrive",
                                   (unsigned)seq, (unsigned long long)(timeout / 1000000u));
            break;
        }
        if (spin % 64 == 63) {
            uint64_t t = now_ns();
            if (!deadline) {
                start = t;
                timeout = timeout_ns ? timeout_ns : default_timeout_ns();
                deadline = timeout > UINT64_MAX - t ? UINT64_MAX : t + timeout;
                late_peer_moved(slots, count, seq, watch, seen);
            } else if (t > deadline) {
                /* a late peer that is still working is not lost: wait another period */
                if (late_peer_moved(slots, count, seq, watch, seen))
                    deadline = timeout > UINT64_MAX - t ? UINT64_MAX : t + timeout;
                else
                    expired = 1;
                continue;
            }
            if (t - start < SPIN_NS) {
                sched_yield();
            } else { /* a peer is busy computing: stop taking CPU time from it */
                struct timespec nap = {0, NAP_NS};
                nanosleep(&nap, NULL);
            }
        }
    }
    if (result != status) qmoe_fence_write(&slots[self], seq, result); /* pass the error on */
    QMOE_TRACE_STOP(trace, QMOE_EV_FENCE, seq);
    return result;
}
