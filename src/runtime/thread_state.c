/* The per-thread state of a device (thread_state.h). */
#include "runtime/thread_state.h"

#include <stdlib.h>

#include "core/status.h"

enum { DEFAULT_SLICE = 1 << 20, ALIGN = 64 };

static void point_slices(qmoe_thread_state *s)
{
    for (int t = 0; t < s->threads; t++) {
        s->ctx[t].scratch = (char *)s->arena + (size_t)t * s->slice_bytes;
        s->ctx[t].scratch_bytes = s->slice_bytes;
    }
}

qmoe_status qmoe_thread_state_reserve(qmoe_thread_state *s, uint64_t bytes, int device_id)
{
    if (bytes <= s->slice_bytes) return QMOE_OK;
    uint64_t slice = (bytes + ALIGN - 1) & ~(uint64_t)(ALIGN - 1), total;
    /* bytes may come from options.scratch_bytes: a round-up that wraps to 0 is refused too */
    if (bytes > UINT64_MAX - (ALIGN - 1) ||
        __builtin_mul_overflow(slice, (uint64_t)s->threads, &total) || total > SIZE_MAX)
        return qmoe_fail(QMOE_ERR_INNER, "device %d: scratchpad of %llu bytes per thread is too large",
                         device_id, (unsigned long long)bytes);
    void *arena = aligned_alloc(ALIGN, (size_t)total);
    if (!arena)
        return qmoe_fail(QMOE_ERR_INNER, "device %d: out of memory for a %llu-byte scratchpad",
                         device_id, (unsigned long long)total);
    free(s->arena);
    s->arena = arena;
    s->slice_bytes = slice;
    point_slices(s);
    return QMOE_OK;
}

uint64_t qmoe_thread_state_scratch_bytes(const qmoe_thread_state *s)
{
    return s->slice_bytes * (uint64_t)s->threads;
}

qmoe_status qmoe_thread_state_init(qmoe_thread_state *s, int threads, uint64_t scratch_bytes,
                                   int device_id)
{
    *s = (qmoe_thread_state){.threads = threads};
    s->ctx = calloc((size_t)threads, sizeof *s->ctx);
    s->copyq = calloc((size_t)threads, sizeof *s->copyq);
    s->stageq = calloc((size_t)threads, sizeof *s->stageq);
    s->trace = calloc((size_t)threads, sizeof *s->trace);
    if (!s->ctx || !s->copyq || !s->stageq || !s->trace) {
        qmoe_thread_state_free(s);
        return qmoe_fail(QMOE_ERR_INNER, "out of memory for a device");
    }
    for (int t = 0; t < threads; t++) {
        s->ctx[t].thread = t;
        s->ctx[t].nthreads = 1;
        s->ctx[t].copyq = &s->copyq[t];
        s->ctx[t].stageq = &s->stageq[t];
    }
    qmoe_status st =
        qmoe_thread_state_reserve(s, scratch_bytes ? scratch_bytes : DEFAULT_SLICE, device_id);
    if (st) qmoe_thread_state_free(s);
    return st;
}

void qmoe_thread_state_free(qmoe_thread_state *s)
{
    if (s->trace)
        for (int t = 0; t < s->threads; t++) qmoe_trace_buf_destroy(s->trace[t]);
    free(s->arena);
    free(s->ctx);
    free(s->copyq);
    free(s->stageq);
    free(s->trace);
    *s = (qmoe_thread_state){0};
}

qmoe_status qmoe_thread_state_trace(qmoe_thread_state *s, int enable, uint32_t events_per_thread,
                                    int device_id)
{
    uint32_t cap = events_per_thread ? events_per_thread : 1u << 16;
    for (int t = 0; t < s->threads; t++) {
        s->ctx[t].trace = NULL;
        qmoe_trace_buf_destroy(s->trace[t]);
        s->trace[t] = NULL;
    }
    if (enable) {
        for (int t = 0; t < s->threads; t++) {
            if (!(s->trace[t] = qmoe_trace_buf_create(cap, device_id, t))) {
                qmoe_thread_state_trace(s, 0, 0, device_id);
                return qmoe_fail(QMOE_ERR_INNER, "out of memory for trace buffers");
            }
            s->ctx[t].trace = s->trace[t];
        }
    }
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_trace_buf *qmoe_thread_state_trace_buf(const qmoe_thread_state *s, int thread)
{
    return thread >= 0 && thread < s->threads ? s->trace[thread] : NULL;
}

/* The checked build also poisons and copies at the pop. Leaves the queue empty either way. */
static qmoe_status check_queue(int device_id, int t, qmoe_copyq *q, const char *which,
                               qmoe_status st)
{
    if (!st && (qmoe_copyq_pending(q) || q->violations))
        st = qmoe_fail(QMOE_ERR_INNER,
                       "device %d thread %d: %s copy queue discipline broken (%u pushes not "
                       "popped, %u out-of-order or empty pops)",
                       device_id, t, which, (unsigned)qmoe_copyq_pending(q), (unsigned)q->violations);
    qmoe_copyq_reset(q);
    return st;
}

qmoe_status qmoe_thread_state_check_queues(qmoe_thread_state *s, int device_id)
{
    qmoe_status st = QMOE_OK;
    for (int t = 0; t < s->threads; t++) {
        st = check_queue(device_id, t, &s->stageq[t], "staging", st);
        st = check_queue(device_id, t, &s->copyq[t], "kernel", st);
    }
    return st;
}
