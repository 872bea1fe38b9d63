/* The device on the caller's threads: no thread of its own. Its commands wait in a queue until a
 * caller drains it (synchronize, destroy), and each operator's parts run through the caller's
 * parallel function (an external work queue). Nothing of qmoe runs or waits while the caller is
 * not in one of those calls, so an engine's thread pool keeps its cores to itself. */
#include <stddef.h>
#include <stdlib.h>

#include "core/options.h"
#include "core/status.h"
#include "runtime/cmdq.h"
#include "runtime/device.h"
#include "runtime/thread_state.h"


typedef struct ext_device {
    qmoe_device base; /* first: a qmoe_device * is an ext_device * */
    qmoe_thread_state ts;
    qmoe_workq *wq; /* external: runs through the caller's parallel function */
    qmoe_cmdq q; /* drained on the caller's thread */
    atomic_ullong progress; /* commands and parts done */
} ext_device;

static ext_device *ext(qmoe_device *dev) { return (ext_device *)dev; }
static const ext_device *cext(const qmoe_device *dev) { return (const ext_device *)dev; }

static void ext_submit(qmoe_device *d, qmoe_cmd *cmd) { qmoe_cmdq_push(&ext(d)->q, cmd); }

/* One thread at a time runs the queue (cmdq.c); a second caller waits for its stream as for any
 * device. */
static void ext_drain(qmoe_device *d) { qmoe_cmdq_drain(&ext(d)->q); }

static qmoe_status ext_fence(qmoe_device *d, qmoe_fence_slot *slots, int self, int count,
                             uint32_t seq, qmoe_status status, const qmoe_fence_watch *watch)
{
    return qmoe_fence_barrier(slots, self, count, seq, status, 0, ext(d)->ts.ctx[0].trace, watch);
}

static qmoe_status ext_reserve(qmoe_device *d, uint64_t bytes)
{
    return qmoe_thread_state_reserve(&ext(d)->ts, bytes, d->id);
}

static uint64_t ext_scratch_bytes(const qmoe_device *d)
{
    return qmoe_thread_state_scratch_bytes(&cext(d)->ts);
}

typedef struct counted_work {
    ext_device *dev;
    qmoe_work_fn f;
    void *data;
} counted_work;

static void counted_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    counted_work *w = data;
    w->f(ctx, w->data, part, nparts);
    atomic_fetch_add_explicit(&w->dev->progress, 1, memory_order_relaxed);
}

static void ext_run_parts(qmoe_device *d, qmoe_work_fn f, void *data, int nparts)
{
    counted_work w = {ext(d), f, data};
    qmoe_workq_run(ext(d)->wq, counted_part, &w, nparts);
}

static int ext_threads(const qmoe_device *d) { return cext(d)->ts.threads; }

static const char *ext_isa(const qmoe_device *d)
{
    (void)d;
    return NULL; /* the host CPU's */
}

static uint64_t ext_progress(const qmoe_device *d)
{
    return atomic_load_explicit(&cext(d)->progress, memory_order_relaxed);
}

static qmoe_status ext_trace(qmoe_device *d, int enable, uint32_t events_per_thread)
{
    return qmoe_thread_state_trace(&ext(d)->ts, enable, events_per_thread, d->id);
}

static qmoe_trace_buf *ext_trace_buf(const qmoe_device *d, int thread)
{
    return qmoe_thread_state_trace_buf(&cext(d)->ts, thread);
}

static qmoe_status ext_check_queues(qmoe_device *d)
{
    return qmoe_thread_state_check_queues(&ext(d)->ts, d->id);
}

static qmoe_status ext_finish(qmoe_device *d, qmoe_status status)
{
    if (!qmoe_workq_take_fault(ext(d)->wq) || status) return status;
    return qmoe_fail(QMOE_ERR_RUNTIME,
                     "device %d: the caller's parallel function did not call the task once for "
                     "every thread index in [0, nthreads)",
                     d->id);
}

static void free_device(ext_device *dev)
{
    qmoe_workq_destroy(dev->wq);
    qmoe_thread_state_free(&dev->ts);
    qmoe_cmdq_destroy(&dev->q);
    free(dev);
}

static void ext_destroy(qmoe_device *d)
{
    ext_drain(d);
    free_device(ext(d));
}

static const qmoe_device_ops ext_ops = {
    .kind = "external",
    .destroy = ext_destroy,
    .submit = ext_submit,
    .fence = ext_fence,
    .reserve = ext_reserve,
    .scratch_bytes = ext_scratch_bytes,
    .run_parts = ext_run_parts,
    .threads = ext_threads,
    .isa = ext_isa,
    .progress = ext_progress,
    .trace = ext_trace,
    .trace_buf = ext_trace_buf,
    .check_queues = ext_check_queues,
    .finish = ext_finish,
    .drain = ext_drain,
};

qmoe_status qmoe_device_create_external(const qmoe_device_options *options,
                                        qmoe_parallel_fn parallel, void *ctx,
                                        qmoe_device **device)
{
    if (!device || !parallel)
        return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "%s is a null pointer", device ? "parallel" : "device");
    qmoe_device_options o;
    qmoe_status st = qmoe_read_options(options, &o, sizeof o,
                                       offsetof(qmoe_device_options, scratch_bytes) +
                                           sizeof o.scratch_bytes,
                                       "options");
    if (st) return st;
    if (o.threads < 0 || o.threads > QMOE_MAX_THREADS)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: threads = %d, expected 0..%d", o.threads,
                         QMOE_MAX_THREADS);
    if (o.cpus || o.ncpus)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                         "device: a device on the caller's threads takes no CPU set (ncpus = %d)",
                         o.ncpus);
    ext_device *dev = calloc(1, sizeof *dev);
    if (!dev) return qmoe_fail(QMOE_ERR_INNER, "out of memory for a device");
    qmoe_device_init(&dev->base, &ext_ops);
    qmoe_cmdq_init(&dev->q, &dev->base, &dev->progress);
    int threads = o.threads ? o.threads : qmoe_device_online_cores();
    if ((st = qmoe_thread_state_init(&dev->ts, threads, o.scratch_bytes, dev->base.id)) ||
        (st = qmoe_workq_create_external(threads, dev->ts.ctx, parallel, ctx, &dev->wq))) {
        free_device(dev);
        return st;
    }
    *device = &dev->base;
    qmoe_clear_error();
    return QMOE_OK;
}
