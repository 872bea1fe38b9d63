/* The CPU device: a pool of worker threads with a scratchpad arena, copy queues and trace
 * buffers (a slice of each per thread), and a command thread (thread 0 of the pool) that runs
 * the commands submitted to the device, one at a time, in submission order. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/options.h"
#include "core/status.h"
#include "runtime/cmdq.h"
#include "runtime/device.h"
#include "runtime/thread_state.h"


/* A thread's CPU-time clock, published by the thread itself (known is set after id). */
struct thread_clock {
    atomic_int known;
    clockid_t id;
};

typedef struct cpu_device {
    qmoe_device base; /* first: a qmoe_device * is a cpu_device * */
    int threads;
    int *cpus;
    int ncpus;
    qmoe_thread_state ts; /* per thread: scratch slice, copy queues, trace buffer */
    qmoe_workq *wq;
    /* command queue, run in order by the command thread */
    pthread_t cmd_thread;
    qmoe_cmdq q;
    /* liveness, for peers waiting at a fence: bumped as commands start and finish and as work
     * parts complete; with the CPU time of the device's threads it is the device's progress */
    atomic_ullong progress;
    struct thread_clock *clocks; /* per thread */
} cpu_device;

static cpu_device *cpu(qmoe_device *dev) { return (cpu_device *)dev; }
static const cpu_device *ccpu(const qmoe_device *dev) { return (const cpu_device *)dev; }

static void publish_clock(cpu_device *dev, int t)
{
    struct thread_clock *c = &dev->clocks[t];
    if (atomic_load_explicit(&c->known, memory_order_acquire)) return;
    if (!pthread_getcpuclockid(pthread_self(), &c->id))
        atomic_store_explicit(&c->known, 1, memory_order_release);
}

static uint64_t cpu_ns(const struct thread_clock *c)
{
    struct timespec ts;
    if (!atomic_load_explicit(&c->known, memory_order_acquire) || clock_gettime(c->id, &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_progress(const qmoe_device *d)
{
    const cpu_device *dev = ccpu(d);
    uint64_t p = atomic_load_explicit(&dev->progress, memory_order_relaxed);
    for (int t = 0; t < dev->threads; t++) p += cpu_ns(&dev->clocks[t]);
    return p;
}

typedef struct counted_work {
    cpu_device *dev;
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

static void cpu_run_parts(qmoe_device *d, qmoe_work_fn f, void *data, int nparts)
{
    counted_work w = {cpu(d), f, data};
    qmoe_workq_run(cpu(d)->wq, counted_part, &w, nparts);
}

int qmoe_device_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > QMOE_MAX_THREADS ? QMOE_MAX_THREADS : (int)n;
}

static qmoe_status cpu_reserve(qmoe_device *d, uint64_t bytes)
{
    return qmoe_thread_state_reserve(&cpu(d)->ts, bytes, d->id);
}

static uint64_t cpu_scratch_bytes(const qmoe_device *d)
{
    return qmoe_thread_state_scratch_bytes(&ccpu(d)->ts);
}

static void *command_main(void *arg)
{
    cpu_device *dev = arg;
    if (dev->ncpus > 0) qmoe_pin_self(dev->cpus[0]);
    publish_clock(dev, 0); /* the command thread is thread 0 */
    qmoe_cmdq_serve(&dev->q);
    return NULL;
}

static void cpu_submit(qmoe_device *d, qmoe_cmd *cmd) { qmoe_cmdq_push(&cpu(d)->q, cmd); }

static qmoe_status cpu_fence(qmoe_device *d, qmoe_fence_slot *slots, int self, int count,
                             uint32_t seq, qmoe_status status, const qmoe_fence_watch *watch)
{
    return qmoe_fence_barrier(slots, self, count, seq, status, 0, cpu(d)->ts.ctx[0].trace, watch);
}

static int cpu_threads(const qmoe_device *d) { return ccpu(d)->threads; }

static const char *cpu_isa(const qmoe_device *d)
{
    (void)d;
    return NULL; /* the host CPU's: the kernels layer knows them */
}

static qmoe_status cpu_trace(qmoe_device *d, int enable, uint32_t events_per_thread)
{
    return qmoe_thread_state_trace(&cpu(d)->ts, enable, events_per_thread, d->id);
}

static qmoe_trace_buf *cpu_trace_buf(const qmoe_device *d, int thread)
{
    return qmoe_thread_state_trace_buf(&ccpu(d)->ts, thread);
}

static qmoe_status cpu_check_queues(qmoe_device *d)
{
    return qmoe_thread_state_check_queues(&cpu(d)->ts, d->id);
}

/* Releases what create made, whether it got all the way or failed part-way (the arrays are
 * calloc'ed). The command thread must already be stopped. */
static void free_device(cpu_device *dev)
{
    qmoe_workq_destroy(dev->wq);
    qmoe_thread_state_free(&dev->ts);
    free(dev->cpus);
    free(dev->clocks);
    qmoe_cmdq_destroy(&dev->q);
    free(dev);
}

static void cpu_destroy(qmoe_device *d)
{
    cpu_device *dev = cpu(d);
    qmoe_cmdq_stop(&dev->q);
    pthread_join(dev->cmd_thread, NULL);
    free_device(dev);
}

static const qmoe_device_ops cpu_ops = {
    .kind = "cpu",
    .destroy = cpu_destroy,
    .submit = cpu_submit,
    .fence = cpu_fence,
    .reserve = cpu_reserve,
    .scratch_bytes = cpu_scratch_bytes,
    .run_parts = cpu_run_parts,
    .threads = cpu_threads,
    .isa = cpu_isa,
    .progress = cpu_progress,
    .trace = cpu_trace,
    .trace_buf = cpu_trace_buf,
    .check_queues = cpu_check_queues,
};

static qmoe_status check_options(const qmoe_device_options *o, int cores)
{
    if (o->threads < 0 || o->threads > QMOE_MAX_THREADS)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: threads = %d, expected 0..%d",
                         o->threads, QMOE_MAX_THREADS);
    if (o->ncpus < 0 || (o->ncpus > 0 && !o->cpus))
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: ncpus = %d with cpus %s", o->ncpus,
                         o->cpus ? "set" : "NULL");
    if (o->ncpus > QMOE_MAX_THREADS)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: ncpus = %d exceeds %d", o->ncpus,
                         QMOE_MAX_THREADS);
    long conf = sysconf(_SC_NPROCESSORS_CONF);
    int max_cpu = conf > cores ? (int)conf : cores;
    for (int i = 0; i < o->ncpus; i++)
        if (o->cpus[i] < 0 || o->cpus[i] >= max_cpu || o->cpus[i] >= CPU_SETSIZE)
            return qmoe_fail(QMOE_ERR_PARAM_INVALID, "device: cpus[%d] = %d is not a CPU of this machine",
                             i, o->cpus[i]);
    return QMOE_OK;
}

/* The public constructor makes a CPU device: it is the only kind so far. */
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
    int cores = qmoe_device_online_cores();
    st = check_options(o, cores);
    if (st) return st;
    cpu_device *dev = calloc(1, sizeof *dev);
    if (!dev) return qmoe_fail(QMOE_ERR_INNER, "out of memory for a device");
    qmoe_device_init(&dev->base, &cpu_ops);
    dev->threads = o->threads ? o->threads : o->ncpus ? o->ncpus : cores;
    dev->ncpus = o->ncpus;
    dev->clocks = calloc((size_t)dev->threads, sizeof *dev->clocks);
    dev->cpus = o->ncpus ? malloc((size_t)o->ncpus * sizeof *dev->cpus) : NULL;
    qmoe_cmdq_init(&dev->q, &dev->base, &dev->progress);
    if (!dev->clocks || (o->ncpus && !dev->cpus)) {
        st = qmoe_fail(QMOE_ERR_INNER, "out of memory for a device");
        goto fail;
    }
    if (o->ncpus) memcpy(dev->cpus, o->cpus, (size_t)o->ncpus * sizeof *dev->cpus);
    if ((st = qmoe_thread_state_init(&dev->ts, dev->threads, o->scratch_bytes, dev->base.id)))
        goto fail;
    if ((st = qmoe_workq_create(dev->threads, dev->ts.ctx, dev->cpus, dev->ncpus, &dev->wq)))
        goto fail;
    if (pthread_create(&dev->cmd_thread, NULL, command_main, dev)) {
        st = qmoe_fail(QMOE_ERR_INNER, "cannot start the command thread of a device");
        goto fail;
    }
    *device = &dev->base;
    qmoe_clear_error();
    return QMOE_OK;
fail:
    free_device(dev);
    return st;
}
