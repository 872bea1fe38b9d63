/* What every kind of CPU-side device keeps per worker thread: the thread's context (scratchpad
 * slice, copy queues, trace buffer) over one scratchpad arena. The thread-pool device
 * (cpu_device.c) and the device on the caller's threads (external_device.c) share it. */
#ifndef QMOE_RUNTIME_THREAD_STATE_H
#define QMOE_RUNTIME_THREAD_STATE_H

#include <stdint.h>

#include "qmoe/qmoe.h"
#include "runtime/copyq.h"
#include "runtime/thread_ctx.h"
#include "runtime/trace.h"

typedef struct qmoe_thread_state {
    int threads;
    qmoe_thread_ctx *ctx;   /* per thread: scratch slice, copy queues, trace buffer */
    qmoe_copyq *copyq;      /* per thread: the kernels' queue */
    qmoe_copyq *stageq;     /* per thread: the driver's staging queue */
    qmoe_trace_buf **trace; /* per thread; allocated while tracing */
    void *arena;            /* threads * slice_bytes, 64-byte aligned */
    uint64_t slice_bytes;   /* per-thread scratchpad slice */
} qmoe_thread_state;

/* `threads` (>= 1) contexts with slices of `scratch_bytes` (0: 1 MiB); device_id names the device
 * in messages. On failure everything made is freed (qmoe_thread_state_free is safe either way). */
qmoe_status qmoe_thread_state_init(qmoe_thread_state *s, int threads, uint64_t scratch_bytes,
                                   int device_id);
void qmoe_thread_state_free(qmoe_thread_state *s);

/* Grows the slices to at least `bytes` (between operators only). */
qmoe_status qmoe_thread_state_reserve(qmoe_thread_state *s, uint64_t bytes, int device_id);
uint64_t qmoe_thread_state_scratch_bytes(const qmoe_thread_state *s);

qmoe_status qmoe_thread_state_trace(qmoe_thread_state *s, int enable, uint32_t events_per_thread,
                                    int device_id);
qmoe_trace_buf *qmoe_thread_state_trace_buf(const qmoe_thread_state *s, int thread);

/* After an operator: every push popped, in order, on every thread's queues; empties them. */
qmoe_status qmoe_thread_state_check_queues(qmoe_thread_state *s, int device_id);

#endif
