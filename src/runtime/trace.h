/*
 * Tracing: per-thread event buffers of start/stop events with a 16-bit info field, exported as a
 * Chrome trace-event JSON file that ui.perfetto.dev opens. Off (NULL buffer) costs one
 * predictable branch. A buffer is written only by its own thread; it is read (exported) only
 * while its device is idle.
 */
#ifndef QMOE_RUNTIME_TRACE_H
#define QMOE_RUNTIME_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "runtime/thread_ctx.h"

typedef enum qmoe_trace_event {
    QMOE_EV_PLAN = 0,     /* the device's share of the work: partition of rows and blocks */
    QMOE_EV_COPY = 1,     /* copy-queue push/pop (operand staging) */
    QMOE_EV_COMPUTE = 2,  /* matmul + SwiGLU of a block (kernel swiglu_block) */
    QMOE_EV_EPILOGUE = 3, /* per-token amax + int8 quantization (kernel quantize_rows) */
    QMOE_EV_FENCE = 4,    /* waiting for the peer devices at a fence */
    QMOE_EV_COUNT
} qmoe_trace_event;

typedef struct qmoe_trace_rec {
    uint64_t ns;   /* CLOCK_MONOTONIC */
    uint16_t info; /* row block, expert or chunk */
    uint8_t ev;    /* qmoe_trace_event */
    uint8_t start; /* 1: start, 0: stop */
    uint32_t pad;
} qmoe_trace_rec;

struct qmoe_trace_buf {
    qmoe_trace_rec *recs;
    uint32_t cap, count;
    uint64_t dropped; /* events lost because the buffer was full */
    int32_t device, thread;
};

/* A buffer for `cap` events of thread `thread` of device `device`; NULL when out of memory. */
qmoe_trace_buf *qmoe_trace_buf_create(uint32_t cap, int32_t device, int32_t thread);
void qmoe_trace_buf_destroy(qmoe_trace_buf *t);

void qmoe_trace_record(qmoe_trace_buf *t, qmoe_trace_event ev, int start, uint16_t info);

const char *qmoe_trace_event_name(qmoe_trace_event ev);

/* Writes every event of the buffers as one JSON trace (pid = device, tid = thread). Returns 0,
 * or -1 when the stream reports a write error. */
int qmoe_trace_write_json(FILE *f, qmoe_trace_buf *const *bufs, int nbufs);

#define QMOE_TRACE_START(tr, ev, info)                                                           \
    do {                                                                                         \
        if (__builtin_expect((tr) != 0, 0)) qmoe_trace_record((tr), (ev), 1, (uint16_t)(info)); \
    } while (0)
#define QMOE_TRACE_STOP(tr, ev, info)                                                            \
    do {                                                                                         \
        if (__builtin_expect((tr) != 0, 0)) qmoe_trace_record((tr), (ev), 0, (uint16_t)(info)); \
    } while (0)

#endif
