/*
 * The device interface. A device runs commands one at a time, in the order they were submitted,
 * and gives an operator's run function a pool of threads, a per-thread scratchpad and trace
 * buffers. Everything outside src/runtime/ reaches a device only through the functions below
 * (and the public ones of include/qmoe/runtime.h), never through its fields.
 *
 * A kind of device is one table of operations (qmoe_device_ops) and the struct that starts with
 * a qmoe_device. The CPU thread pool (cpu_device.c) is the first; the device on the caller's
 * threads (external_device.c) has no command thread: it runs its queue when drained. How to add
 * a device:
 *   1. src/runtime/<kind>_device.c: a struct whose first member is `qmoe_device base`, a static
 *      const qmoe_device_ops table, and a create function that calls qmoe_device_init and fills
 *      the struct; its command thread (or queue) calls cmd->exec(cmd, dev) for each command in
 *      submission order and bumps progress as commands start and end (runtime/cmdq.h does both).
 *   2. A public create function for it in include/qmoe/runtime.h.
 * Streams, groups, fences, the test hooks and the public accessors are the runtime's and work
 * for any device unchanged.
 */
#ifndef QMOE_RUNTIME_DEVICE_H
#define QMOE_RUNTIME_DEVICE_H

#include <stdatomic.h>
#include <stddef.h>

#include "qmoe/runtime.h"
#include "runtime/fence.h"
#include "runtime/thread_ctx.h"
#include "runtime/trace.h"
#include "runtime/workq.h"

/* A command: one device's share of a queued operator. The device calls exec on its command
 * thread, after the commands submitted before it; exec owns the command from then on. */
typedef struct qmoe_cmd qmoe_cmd;
struct qmoe_cmd {
    qmoe_cmd *next; /* the device's queue link */
    void (*exec)(qmoe_cmd *cmd, qmoe_device *dev);
};

typedef struct qmoe_device_ops {
    const char *kind; /* "cpu" */
    /* Runs the commands already submitted, then frees the device. */
    void (*destroy)(qmoe_device *dev);
    /* submit: queues a command; never fails, never blocks on the commands ahead of it. */
    void (*submit)(qmoe_device *dev, qmoe_cmd *cmd);
    /* fence: device `self` of a group of `count` arrives at barrier `seq` of `slots` with
     * `status` and returns the group's status (runtime/fence.h); called from exec. */
    qmoe_status (*fence)(qmoe_device *dev, qmoe_fence_slot *slots, int self, int count,
                         uint32_t seq, qmoe_status status, const qmoe_fence_watch *watch);
    /* memory: grows the per-thread scratchpad to at least `bytes`; called from exec, between
     * operators. The whole scratchpad in bytes. */
    qmoe_status (*reserve)(qmoe_device *dev, uint64_t bytes);
    uint64_t (*scratch_bytes)(const qmoe_device *dev);
    /* run-parts: runs parts 0..nparts-1 of f on the device's threads and returns when all are
     * done; called from exec. Each completed part counts as progress. */
    void (*run_parts)(qmoe_device *dev, qmoe_work_fn f, void *data, int nparts);
    /* properties */
    int (*threads)(const qmoe_device *dev);
    const char *(*isa)(const qmoe_device *dev); /* NULL: the host CPU's (kernels/device_isa.c) */
    /* liveness: a number that changes while the device is alive and working */
    uint64_t (*progress)(const qmoe_device *dev);
    /* tracing: (re)starts or stops recording; the buffer of a thread (NULL when off) */
    qmoe_status (*trace)(qmoe_device *dev, int enable, uint32_t events_per_thread);
    qmoe_trace_buf *(*trace_buf)(const qmoe_device *dev, int thread);
    /* after an operator: checks and empties the per-thread copy queues (NULL: none to check) */
    qmoe_status (*check_queues)(qmoe_device *dev);
    /* after an operator's run on the device, with its status: the device's own check of the run
     * (NULL: none); returns `status` when that is an error, having forgotten its check */
    qmoe_status (*finish)(qmoe_device *dev, qmoe_status status);
    /* a device without a command thread of its own (NULL: it has one): runs the commands
     * submitted so far on the calling thread, in order, and returns when the queue is empty or
     * another thread is already running it. Such a device is never part of a group. */
    void (*drain)(qmoe_device *dev);
} qmoe_device_ops;

/* What every device holds, whatever its kind; the runtime's, not the implementation's. */
struct qmoe_device {
    const qmoe_device_ops *ops;
    int id;
    atomic_ullong ops_run;   /* operators started (stream.c) */
    atomic_ullong inject_at; /* fail the op with this ops_run number; 0: none (test hook) */
    atomic_int last_status;
};

/* Sets the common part: the table and a process-unique id. */
void qmoe_device_init(qmoe_device *dev, const qmoe_device_ops *ops);

/* The operations, for the runtime and the operators' run functions. */
void qmoe_device_submit(qmoe_device *dev, qmoe_cmd *cmd);
qmoe_status qmoe_device_fence(qmoe_device *dev, qmoe_fence_slot *slots, int self, int count,
                              uint32_t seq, qmoe_status status, const qmoe_fence_watch *watch);
qmoe_status qmoe_device_reserve(qmoe_device *dev, uint64_t bytes);
void qmoe_device_run(qmoe_device *dev, qmoe_work_fn f, void *data, int nparts);
qmoe_trace_buf *qmoe_device_trace_buf(const qmoe_device *dev, int thread);
qmoe_status qmoe_device_check_queues(qmoe_device *dev);
qmoe_status qmoe_device_finish(qmoe_device *dev, qmoe_status status);
/* Runs the queued commands of a device without threads of its own here; a no-op for others. */
void qmoe_device_drain(qmoe_device *dev);
int qmoe_device_is_external(const qmoe_device *dev);

/* The device's own instruction sets; NULL when they are the host CPU's (qmoe_device_isa). */
const char *qmoe_device_own_isa(const qmoe_device *dev);

/* A number that changes while the device is alive and working: commands and work parts done
 * plus the CPU time its threads used. A device blocked or gone leaves it still. */
uint64_t qmoe_device_progress(const qmoe_device *dev);

/* For qmoe_fence_watch over the devices of a job: ctx is a qmoe_device *const * array. */
uint64_t qmoe_device_progress_of(void *devices, int index);

#endif
