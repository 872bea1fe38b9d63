/* The device interface's common part: ids, the dispatch to a device's table, and the public
 * accessors, tracing export and test hooks, which hold for any kind of device. */
#include "runtime/device.h"

#include <stdlib.h>

#include "core/status.h"

static atomic_int next_device_id;

void qmoe_device_init(qmoe_device *dev, const qmoe_device_ops *ops)
{
    dev->ops = ops;
    dev->id = atomic_fetch_add(&next_device_id, 1);
    atomic_init(&dev->ops_run, 0);
    atomic_init(&dev->inject_at, 0);
    atomic_init(&dev->last_status, QMOE_OK);
}

void qmoe_device_submit(qmoe_device *dev, qmoe_cmd *cmd) { dev->ops->submit(dev, cmd); }

qmoe_status qmoe_device_fence(qmoe_device *dev, qmoe_fence_slot *slots, int self, int count,
                              uint32_t seq, qmoe_status status, const qmoe_fence_watch *watch)
{
    return dev->ops->fence(dev, slots, self, count, seq, status, watch);
}

qmoe_status qmoe_device_reserve(qmoe_device *dev, uint64_t bytes)
{
    return dev->ops->reserve(dev, bytes);
}

void qmoe_device_run(qmoe_device *dev, qmoe_work_fn f, void *data, int nparts)
{
    dev->ops->run_parts(dev, f, data, nparts);
}

qmoe_trace_buf *qmoe_device_trace_buf(const qmoe_device *dev, int thread)
{
    return dev->ops->trace_buf(dev, thread);
}

qmoe_status qmoe_device_check_queues(qmoe_device *dev)
{
    return dev->ops->check_queues ? dev->ops->check_queues(dev) : QMOE_OK;
}

qmoe_status qmoe_device_finish(qmoe_device *dev, qmoe_status status)
{
    return dev->ops->finish ? dev->ops->finish(dev, status) : status;
}

void qmoe_device_drain(qmoe_device *dev)
{
    if (dev->ops->drain) dev->ops->drain(dev);
}

int qmoe_device_is_external(const qmoe_device *dev) { return dev->ops->drain != NULL; }

const char *qmoe_device_own_isa(const qmoe_device *dev) { return dev->ops->isa(dev); }

uint64_t qmoe_device_progress(const qmoe_device *dev) { return dev->ops->progress(dev); }

uint64_t qmoe_device_progress_of(void *devices, int index)
{
    return qmoe_device_progress(((qmoe_device *const *)devices)[index]);
}

void qmoe_device_destroy(qmoe_device *dev)
{
    if (dev) dev->ops->destroy(dev);
}

/* Accessors answer -1 / 0 for a NULL device rather than crash, like the tensor accessors. */
int qmoe_device_threads(const qmoe_device *dev) { return dev ? dev->ops->threads(dev) : -1; }

uint64_t qmoe_device_scratch_bytes(const qmoe_device *dev)
{
    return dev ? dev->ops->scratch_bytes(dev) : 0;
}

int qmoe_device_id(const qmoe_device *dev) { return dev ? dev->id : -1; }

qmoe_status qmoe_device_trace(qmoe_device *dev, int enable, uint32_t events_per_thread)
{
    if (!dev) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "device is a null pointer");
    return dev->ops->trace(dev, enable, events_per_thread);
}

qmoe_status qmoe_trace_write(const char *path, qmoe_device *const *devices, int count)
{
    if (!path || (!devices && count)) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "path or devices is NULL");
    if (count < 0) return qmoe_fail(QMOE_ERR_PARAM_INVALID, "count = %d is negative", count);
    int n = 0;
    for (int d = 0; d < count; d++) {
        if (!devices[d]) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "devices[%d] is NULL", d);
        for (int t = 0; t < qmoe_device_threads(devices[d]); t++)
            n += qmoe_device_trace_buf(devices[d], t) != NULL;
    }
    qmoe_trace_buf **bufs = calloc((size_t)n + 1, sizeof *bufs);
    if (!bufs) return qmoe_fail(QMOE_ERR_INNER, "out of memory");
    n = 0;
    for (int d = 0; d < count; d++)
        for (int t = 0; t < qmoe_device_threads(devices[d]); t++) {
            qmoe_trace_buf *b = qmoe_device_trace_buf(devices[d], t);
            if (b) bufs[n++] = b;
        }
    FILE *f = fopen(path, "w");
    if (!f) {
        free(bufs);
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "trace: cannot open '%s' for writing", path);
    }
    int bad = qmoe_trace_write_json(f, bufs, n);
    bad |= fclose(f) != 0;
    free(bufs);
    if (bad) return qmoe_fail(QMOE_ERR_PARAM_INVALID, "trace: cannot write '%s'", path);
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_device_inject_failure(qmoe_device *dev, uint64_t op_count)
{
    if (!dev) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "device is a null pointer");
    atomic_store(&dev->inject_at, op_count ? atomic_load(&dev->ops_run) + op_count : 0);
    qmoe_clear_error();
    return QMOE_OK;
}

/* Like the other accessors, a NULL device gets an error value, not a crash. */
qmoe_status qmoe_device_last_status(const qmoe_device *dev)
{
    if (!dev) return QMOE_ERR_PARAM_NULLPTR;
    return (qmoe_status)atomic_load(&((qmoe_device *)dev)->last_status);
}

uint64_t qmoe_device_ops_run(const qmoe_device *dev)
{
    if (!dev) return UINT64_MAX;
    return atomic_load(&((qmoe_device *)dev)->ops_run);
}
