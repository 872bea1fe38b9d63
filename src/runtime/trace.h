/*
 * Tracing: per-thread event buffers of start/stop events with a 16-bit info field, exported as a
 * trace file that ui.perfetto.dev opens. Off (NULL buffer) costs one predictable branch.
 */
#ifndef QMOE_RUNTIME_TRACE_H
#define QMOE_RUNTIME_TRACE_H

#include <stdint.h>

#include "runtime/thread_ctx.h"

typedef enum qmoe_trace_event {
    QMOE_EV_PLAN = 0,
    QMOE_EV_COPY = 1,
    QMOE_EV_COMPUTE = 2,
    QMOE_EV_EPILOGUE = 3, /* SwiGLU + quantization */
    QMOE_EV_FENCE = 4,
    QMOE_EV_COUNT
} qmoe_trace_event;

void qmoe_trace_record(qmoe_trace_buf *t, qmoe_trace_event ev, int start, uint16_t info);

#define QMOE_TRACE_START(tr, ev, info)                                                           \
    do {                                                                                         \
        if (__builtin_expect((tr) != 0, 0)) qmoe_trace_record((tr), (ev), 1, (uint16_t)(info)); \
    } while (0)
#define QMOE_TRACE_STOP(tr, ev, info)                                                            \
    do {                                                                                         \
        if (__builtin_expect((tr) != 0, 0)) qmoe_trace_record((tr), (ev), 0, (uint16_t)(info)); \
    } while (0)

#endif
