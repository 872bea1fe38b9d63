/* What a worker thread of a device hands to a kernel: its index, its scratchpad slice, its copy
 * queue and its trace buffer. Kernels see only this, never the device. */
#ifndef QMOE_RUNTIME_THREAD_CTX_H
#define QMOE_RUNTIME_THREAD_CTX_H

#include <stdint.h>

typedef struct qmoe_copyq qmoe_copyq;
typedef struct qmoe_trace_buf qmoe_trace_buf;

typedef struct qmoe_thread_ctx {
    int32_t thread;   /* index within the device, 0 = the calling thread */
    int32_t nthreads; /* threads working on this operator */
    void *scratch;    /* this thread's scratchpad slice, 64-byte aligned */
    uint64_t scratch_bytes;
    qmoe_copyq *copyq;     /* this thread's copy queue */
    qmoe_trace_buf *trace; /* NULL when tracing is off */
} qmoe_thread_ctx;

#endif
