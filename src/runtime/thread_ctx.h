/* What a worker thread of a device hands to a kernel: its index, its scratchpad slice, its copy
 * queue and its trace buffer. Kernels see only this, never the device. */
#ifndef QMOE_RUNTIME_THREAD_CTX_H
#define QMOE_RUNTIME_THREAD_CTX_H

#include <stdint.h>

typedef struct qmoe_copyq qmoe_copyq;
typedef struct qmoe_trace_buf qmoe_trace_buf;
typedef struct qmoe_workq qmoe_workq;

typedef struct qmoe_thread_ctx {
    int32_t thread;   /* index within the device, 0 = the device's command thread */
    int32_t nthreads; /* threads working on this operator */
    void *scratch;    /* this thread's scratchpad slice, 64-byte aligned */
    uint64_t scratch_bytes;
    qmoe_copyq *copyq;     /* this thread's copy queue, for the kernel */
    qmoe_copyq *stageq;    /* the operator driver's queue (operand staging); a FIFO cannot be
                              shared by two nested pipelines, so the kernel's is separate */
    qmoe_trace_buf *trace; /* NULL when tracing is off */
    qmoe_workq *wq;        /* the pool running the job (qmoe_workq_barrier) */
} qmoe_thread_ctx;

#endif
