/*
 * Internal view of a device and of the operators streams queue on devices. The public API is
 * include/qmoe/runtime.h; operators (src/ops) submit with qmoe_stream_submit and run on a device
 * through its work queue, scratchpad and per-thread contexts.
 */
#ifndef QMOE_RUNTIME_DEVICE_H
#define QMOE_RUNTIME_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "qmoe/runtime.h"
#include "runtime/copyq.h"
#include "runtime/fence.h"
#include "runtime/thread_ctx.h"
#include "runtime/trace.h"
#include "runtime/workq.h"

typedef struct qmoe_cmd qmoe_cmd;

struct qmoe_device {
    int id, threads;
    int *cpus;
    int ncpus;
    qmoe_thread_ctx *ctx; /* per thread: scratch slice, copy queue, trace buffer */
    qmoe_copyq *copyq;  /* per thread: the kernels' queue */
    qmoe_copyq *stageq; /* per thread: the driver's staging queue */
    qmoe_trace_buf **trace; /* per thread; allocated while tracing */
    qmoe_workq *wq;
    void *arena;          /* threads * slice_bytes, 64-byte aligned */
    uint64_t slice_bytes; /* per-thread scratchpad slice */
    /* command queue, run in order by the command thread (thread 0 of the pool) */
    pthread_t cmd_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    qmoe_cmd *head, *tail;
    int stop, running;
    atomic_ullong ops_run;
    /* liveness, for peers waiting at a fence: bumped as commands start and finish and as work
     * parts complete; with the CPU time of the device's threads it is qmoe_device_progress */
    atomic_ullong progress;
    struct qmoe_thread_clock *clocks; /* per thread: its CPU-time clock (device.c) */
    atomic_ullong inject_at; /* fail the op with this ops_run number; 0: none */
    atomic_int last_status;
};

/* An operator's work on device `index` of a group of `count`: computes that device's share. */
typedef qmoe_status (*qmoe_op_run_fn)(const void *op, qmoe_device *dev, int index, int count);

/*
 * Queues an operator on the first `ndev` devices of `stream` (NULL: the default group for ndev,
 * synchronously). `ndev` is a plan's device count, already in 1..QMOE_MAX_DEVICES (phase one);
 * more than the stream has is QMOE_ERR_PARAM_INVALID. `op` (op_bytes, copied into the queued
 * job) is what run() receives; `slice_bytes` is the per-thread scratchpad slice it needs. Asynchronous: returns QMOE_OK once
 * queued (errors come at synchronize); synchronous: returns the operator's status.
 */
qmoe_status qmoe_stream_submit(qmoe_stream *stream, int ndev, qmoe_op_run_fn run, const void *op,
                               size_t op_bytes, uint64_t slice_bytes);

/* Runs work on the device's pool, called from the device's command thread by an operator; each
 * completed part counts as progress. */
void qmoe_device_run(qmoe_device *dev, qmoe_work_fn f, void *data, int nparts);

/* A number that changes while the device is alive and working: commands and work parts done
 * plus the CPU time its threads used. A device blocked or gone leaves it still. */
uint64_t qmoe_device_progress(const qmoe_device *dev);

/* For qmoe_fence_watch over the devices of a job: ctx is a qmoe_device *const * array. */
uint64_t qmoe_device_progress_of(void *devices, int index);

/* Comma-separated instruction sets of this CPU, fastest first (qmoe_cpu_isa_list). */
const char *qmoe_cpu_isa_string(void);

#endif
