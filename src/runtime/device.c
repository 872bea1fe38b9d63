/* Devices: worker threads, scratchpad arena, copy queues, trace buffers, and the command thread
 * that runs the operators queued on the device, one at a time, in submission order. */
#define _GNU_SOURCE
#include "runtime/device.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/options.h"
#include "core/status.h"
#include "runtime/job.h"

enum { MAX_THREADS = 4096, DEFAULT_SLICE = 1 << 20, ALIGN = 64 };

static atomic_int next_device_id;

/* A thread's CPU-time clock, published by the thread itself (known is set after id). */
struct qmoe_thread_clock {
    atomic_int known;
    clockid_t id;
};

static void publish_clock(qmoe_device *dev, int t)
{
    struct qmoe_thread_clock *c = &dev->clocks[t];
    if (atomic_load_explicit(&c->known, memory_order_acquire)) return;
    if (!pthread_getcpuclockid(pthread_self(), &c->id))
        atomic_store_explicit(&c->known, 1, memory_order_release);
}

static uint64_t cpu_ns(const struct qmoe_thread_clock *c)
{
    struct timespec ts;
    if (!atomic_load_explicit(&c->known, memory_order_acquire) || clock_gettime(c->id, &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t qmoe_device_progress(const qmoe_device *dev)
{
    uint64_t p = atomic_load_explicit(&dev->progress, memory_order_relaxed);
    for (int t = 0; t < dev->threads; t++) p += cpu_ns(&dev->clocks[t]);
    return p;
}

uint64_t qmoe_device_progress_of(void *devices, int index)
{
    return qmoe_device_progress(((qmoe_device *const *)devices)[index]);
}

typedef struct counted_work {
    qmoe_device *dev;
    qmoe_work_fn f;
    void *data;
} counted_work;

static void counted_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    counted_work *w = data;
    publish_clock(w->dev, ctx->thread);
    w->f(ctx, w->data, part, nparts);
    atomic_fetch_add_explicit(&w->dev->progress, 1, memory_order_relaxed);
}

void qmoe_device_run(qmoe_device *dev, qmoe_work_fn f, void *data, int nparts)
{
    counted_work w = {dev, f, data};
    qmoe_workq_run(dev->wq, counted_part, &w, nparts);
}

int qmoe_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

static void point_slices(qmoe_device *dev)
{
    for (int t = 0; t < dev->threads; t++) {
        dev->ctx[t].scratch = (char *)dev->arena + (size_t)t * dev->slice_bytes;
        dev->ctx[t].scratch_bytes = dev->slice_bytes;
    }
}

/* Grows the per-thread slices to at least `bytes`; only between operators (command thread). */
qmoe_status qmoe_device_reserve(qmoe_device *dev, uint64_t bytes)
{
    if (bytes <= dev->slice_bytes) return QMOE_OK;
    uint64_t slice = (bytes + ALIGN - 1) & ~(uint64_t)(ALIGN - 1), total;
    /* bytes may come from options.scratch_bytes: a round-up that wraps to 0 is refused too */
    if (bytes > UINT64_MAX - (ALIGN - 1) ||
        __builtin_mul_overflow(slice, (uint64_t)dev->threads, &total) || total > SIZE_MAX)
        return qmoe_fail(QMOE_ERR_INNER, "device %d: scratchpad of %llu bytes per thread is too large",
                         dev->id, (unsigned long long)bytes);
    void *arena = aligned_alloc(ALIGN, (size_t)total);
    if (!arena)
        return qmoe_fail(QMOE_ERR_INNER, "device %d: out of memory for a %llu-byte scratchpad",
                         dev->id, (unsigned long long)total);
    free(dev->arena);
    dev->arena = arena;
    dev->slice_bytes = slice;
    point_slices(dev);
    return QMOE_OK;
}

static void *command_main(void *arg)
{
    qmoe_device *dev = arg;
    if (dev->ncpus > 0) qmoe_pin_self(dev->cpus[0]);
    publish_clock(dev, 0); /* the command thread is thread 0 */
    pthread_mutex_lock(&dev->mu);
    for (;;) {
        while (!dev->head && !dev->stop) pthread_cond_wait(&dev->cv, &dev->mu);
        if (!dev->head) break; /* stop, and the queue is drained */
        qmoe_cmd *cmd = dev->head;
        dev->head = cmd->next;
        if (!dev->head) dev->tail = NULL;
        dev->running = 1;
        pthread_mutex_unlock(&dev->mu);
        atomic_fetch_add_explicit(&dev->progress, 1, memory_order_relaxed);
        qmoe_job_run_on_device(cmd, dev);
        atomic_fetch_add_explicit(&dev->progress, 1, memory_order_relaxed);
        pthread_mutex_lock(&dev->mu);
        dev->running = 0;
        pthread_cond_broadcast(&dev->cv);
    }
    pthread_mutex_unlock(&dev->mu);
    return NULL;
}

void qmoe_device_enqueue(qmoe_device *dev, qmoe_cmd *cmd)
{
    cmd->next = NULL;
    pthread_mutex_lock(&dev->mu);
    if (dev->tail) dev->tail->next = cmd;
    else dev->head = cmd;
    dev->tail = cmd;
    pthread_cond_broadcast(&dev->cv);
    pthread_mutex_unlock(&dev->mu);
}

static qmoe_status check_options(const qmoe_device_options *o, int cores)
{
    if (o->threads < 0 || o->threads > MAX_THREADS)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: threads = %d, expected 0..%d",
                         o->threads, MAX_THREADS);
    if (o->ncpus < 0 || (o->ncpus > 0 && !o->cpus))
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: ncpus = %d with cpus %s", o->ncpus,
                         o->cpus ? "set" : "NULL");
    if (o->ncpus > MAX_THREADS)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: ncpus = %d exceeds %d", o->ncpus,
                         MAX_THREADS);
    long conf = sysconf(_SC_NPROCESSORS_CONF);
    int max_cpu = conf > cores ? (int)conf : cores;
    for (int i = 0; i < o->ncpus; i++)
        if (o->cpus[i] < 0 || o->cpus[i] >= max_cpu || o->cpus[i] >= CPU_SETSIZE)
            return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: cpus[%d] = %d is not a CPU of this machine",
                             i, o->cpus[i]);
    return QMOE_OK;
}

/* Releases what create made, whether it got all the way or failed part-way (the arrays are
 * calloc'ed, so unset trace buffers are NULL). The command thread must already be stopped. */
static void free_device(qmoe_device *dev)
{
    qmoe_workq_destroy(dev->wq);
    if (dev->trace)
        for (int t = 0; t < dev->threads; t++) qmoe_trace_buf_destroy(dev->trace[t]);
    free(dev->arena);
    free(dev->ctx);
    free(dev->copyq);
    free(dev->stageq);
    free(dev->trace);
    free(dev->cpus);
    free(dev->clocks);
    pthread_mutex_destroy(&dev->mu);
    pthread_cond_destroy(&dev->cv);
    free(dev);
}

qmoe_status qmoe_device_create(const qmoe_device_options *options, qmoe_device **device)
{
    if (!device) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "device is a null pointer");
    /* a grown struct is read up to its struct_size (0: the 0.2 layout, up to scratch_bytes) */
    qmoe_device_options opts;
    qmoe_status st = qmoe_read_options(options, &opts, sizeof opts,
                                       offsetof(qmoe_device_options, scratch_bytes) +
                                           sizeof opts.scratch_bytes,
                                       "options");
    if (st) return st;
    const qmoe_device_options *o = &opts;
    int cores = qmoe_online_cores();
    st = check_options(o, cores);
    if (st) return st;
    qmoe_device *dev = calloc(1, sizeof *dev);
    if (!dev) return qmoe_fail(QMOE_ERR_INNER, "out of memory for a device");
    dev->id = atomic_fetch_add(&next_device_id, 1);
    dev->threads = o->threads ? o->threads : o->ncpus ? o->ncpus : cores;
    dev->ncpus = o->ncpus;
    dev->ctx = calloc((size_t)dev->threads, sizeof *dev->ctx);
    dev->copyq = calloc((size_t)dev->threads, sizeof *dev->copyq);
    dev->stageq = calloc((size_t)dev->threads, sizeof *dev->stageq);
    dev->trace = calloc((size_t)dev->threads, sizeof *dev->trace);
    dev->clocks = calloc((size_t)dev->threads, sizeof *dev->clocks);
    dev->cpus = o->ncpus ? malloc((size_t)o->ncpus * sizeof *dev->cpus) : NULL;
    pthread_mutex_init(&dev->mu, NULL);
    pthread_cond_init(&dev->cv, NULL);
    if (!dev->ctx || !dev->copyq || !dev->stageq || !dev->trace || !dev->clocks ||
        (o->ncpus && !dev->cpus)) {
        st = qmoe_fail(QMOE_ERR_INNER, "out of memory for a device");
        goto fail;
    }
    if (o->ncpus) memcpy(dev->cpus, o->cpus, (size_t)o->ncpus * sizeof *dev->cpus);
    for (int t = 0; t < dev->threads; t++) {
        dev->ctx[t].thread = t;
        dev->ctx[t].nthreads = 1;
        dev->ctx[t].copyq = &dev->copyq[t];
        dev->ctx[t].stageq = &dev->stageq[t];
    }
    if ((st = qmoe_device_reserve(dev, o->scratch_bytes ? o->scratch_bytes : DEFAULT_SLICE)))
        goto fail;
    if ((st = qmoe_workq_create(dev->threads, dev->ctx, dev->cpus, dev->ncpus, &dev->wq)))
        goto fail;
    if (pthread_create(&dev->cmd_thread, NULL, command_main, dev)) {
        st = qmoe_fail(QMOE_ERR_INNER, "cannot start the command thread of a device");
        goto fail;
    }
    *device = dev;
    qmoe_clear_error();
    return QMOE_OK;
fail:
    free_device(dev);
    return st;
}

void qmoe_device_destroy(qmoe_device *dev)
{
    if (!dev) return;
    pthread_mutex_lock(&dev->mu);
    dev->stop = 1;
    pthread_cond_broadcast(&dev->cv);
    pthread_mutex_unlock(&dev->mu);
    pthread_join(dev->cmd_thread, NULL);
    free_device(dev);
}

/* Accessors answer -1 / 0 for a NULL device rather than crash, like the tensor accessors. */
int qmoe_device_threads(const qmoe_device *dev) { return dev ? dev->threads : -1; }

uint64_t qmoe_device_scratch_bytes(const qmoe_device *dev)
{
    return dev ? dev->slice_bytes * (uint64_t)dev->threads : 0;
}

int qmoe_device_id(const qmoe_device *dev) { return dev ? dev->id : -1; }

const char *qmoe_device_isa(const qmoe_device *dev)
{
    (void)dev;
    return qmoe_cpu_isa_string();
}

qmoe_status qmoe_device_trace(qmoe_device *dev, int enable, uint32_t events_per_thread)
{
    if (!dev) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "device is a null pointer");
    uint32_t cap = events_per_thread ? events_per_thread : 1u << 16;
    for (int t = 0; t < dev->threads; t++) {
        dev->ctx[t].trace = NULL;
        qmoe_trace_buf_destroy(dev->trace[t]);
        dev->trace[t] = NULL;
    }
    if (enable) {
        for (int t = 0; t < dev->threads; t++) {
            if (!(dev->trace[t] = qmoe_trace_buf_create(cap, dev->id, t))) {
                qmoe_device_trace(dev, 0, 0);
                return qmoe_fail(QMOE_ERR_INNER, "out of memory for trace buffers");
            }
            dev->ctx[t].trace = dev->trace[t];
        }
    }
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_trace_write(const char *path, qmoe_device *const *devices, int count)
{
    if (!path || (!devices && count)) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "path or devices is NULL");
    if (count < 0) return qmoe_fail(QMOE_ERR_PARAM_INVALID, "count = %d is negative", count);
    int n = 0;
    for (int d = 0; d < count; d++) {
        if (!devices[d]) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "devices[%d] is NULL", d);
        for (int t = 0; t < devices[d]->threads; t++) n += devices[d]->trace[t] != NULL;
    }
    qmoe_trace_buf **bufs = calloc((size_t)n + 1, sizeof *bufs);
    if (!bufs) return qmoe_fail(QMOE_ERR_INNER, "out of memory");
    n = 0;
    for (int d = 0; d < count; d++)
        for (int t = 0; t < devices[d]->threads; t++)
            if (devices[d]->trace[t]) bufs[n++] = devices[d]->trace[t];
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
