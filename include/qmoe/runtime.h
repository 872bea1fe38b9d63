/*
 * qmoe runtime: devices, streams, multi-device groups and tracing.
 *
 * A device is a group of worker threads (thread 0 is the device's command thread, threads 1..T-1
 * are its fork-join pool; or the caller's threads: qmoe_device_create_external) with one scratchpad arena (a slice per thread) and per-thread trace
 * buffers and copy queues. A stream runs the operators submitted to it, in submission order,
 * asynchronously to the caller, on one device or on a group of devices that split each operator's
 * output rows. Several streams may share a device: a device runs the operators it is given one at a
 * time, in the order they were submitted (across all streams, one global order).
 *
 * Passing stream NULL to qmoe_grouped_matmul_swiglu_quant() runs the operator synchronously on the
 * process-wide default device (all online cores), created on first use and kept until the process
 * exits; a plan made for D > 1 devices runs on a default group of D devices, each with max(1, cores
 * / D) threads. A plan made with options.threads == 0 is planned for that default thread count; on
 * a device with fewer threads the planned parts are shared round-robin by its threads (results are
 * bit-identical for any thread or device count).
 *
 * Asynchronous execution (stream not NULL), as with the vendor's runtime:
 * qmoe_grouped_matmul_swiglu_quant() checks its arguments, queues the operator and returns. The
 * operator reads groupList when it runs, after the operators queued before it (which may write it),
 * so a bad groupList is reported by qmoe_stream_synchronize(), with nothing written. The workspace
 * and every tensor's memory belong to the caller and must stay valid and unchanged until
 * qmoe_stream_synchronize() returns; the executor itself may be destroyed right after the call (the
 * queued operator holds a copy of the plan).
 */
#ifndef QMOE_RUNTIME_H
#define QMOE_RUNTIME_H

#include "qmoe/qmoe.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { QMOE_MAX_DEVICES = 16 };

/* ---------------------------------------------------------------- devices --------------------- */

/* Initialise with QMOE_DEVICE_OPTIONS_INIT (or zero it), then set what you need. struct_size works
 * as in qmoe_grouped_matmul_swiglu_quant_options: 0 means this 0.2 layout; new fields are only ever
 * appended. */
typedef struct qmoe_device_options {
    uint32_t struct_size; /* sizeof(qmoe_device_options) as the caller was compiled; 0: 0.2 layout */
    int threads;          /* 0: one per online core (or per CPU of `cpus`) */
    const int *cpus;      /* optional CPU set: thread t runs on cpus[t % ncpus]; copied */
    int ncpus;            /* entries of cpus; 0: threads are not pinned */
    uint64_t scratch_bytes; /* per-thread scratchpad slice; 0: 1 MiB. Grows (between operators)
                               when a plan needs more. */
} qmoe_device_options;

#define QMOE_DEVICE_OPTIONS_INIT {(uint32_t)sizeof(qmoe_device_options), 0, NULL, 0, 0}

/* QMOE_ERR_PARAM_INVALID for a negative count, more than 4096 threads or a CPU outside the
 * machine; QMOE_ERR_INNER when threads or memory cannot be had. `options` may be NULL. */
QMOE_API qmoe_status qmoe_device_create(const qmoe_device_options *options, qmoe_device **device);

/* Waits for the operators queued on the device, then stops its threads. Destroy the streams that
 * use a device before the device. NULL is a no-op. */
QMOE_API void qmoe_device_destroy(qmoe_device *device);

/* ------------------------------------------------------- devices on the caller's threads ----- */

/* A parallel function runs task(arg, t) once for every t in [0, nthreads), each call on a thread
 * of its own, all of them at the same time (the tasks of one operator may wait for each other at
 * a barrier), and returns when every call has returned: an OpenMP parallel region of nthreads
 * threads, or an engine's thread pool with at least nthreads threads. nthreads is 2..the
 * device's thread count. It is called from the thread that runs the device's operators. */
typedef void (*qmoe_parallel_task)(void *arg, int thread);
typedef void (*qmoe_parallel_fn)(void *ctx, int nthreads, qmoe_parallel_task task, void *arg);

/*
 * A device whose worker threads are the caller's (since 0.3): qmoe starts no thread for it and
 * none of its threads waits or spins while the caller's are idle, so qmoe shares the cores of an
 * engine that owns its own thread pool (ggml's, an OpenMP runtime's) instead of oversubscribing
 * them. The operators submitted to a stream on it are queued as on any device and run, in
 * submission order, on the thread that calls qmoe_stream_synchronize() (or qmoe_stream_destroy()
 * / qmoe_device_destroy(), which run what is still queued); each operator's parts run through
 * parallel(ctx, n, task, arg), n <= options.threads, and an operator of one part runs on that
 * thread alone. Results are bit-identical to a qmoe_device_create() device for any thread count;
 * errors are reported the same way (a failed operator stops the later ones of its stream). A
 * parallel function that calls a thread index twice, one out of range or misses one makes the
 * operator fail with QMOE_ERR_RUNTIME (one that never returns, or runs the tasks one after
 * another while they wait for each other, hangs: that is the contract above).
 *
 * options: threads (0: one per online core) is the most tasks qmoe asks for at once;
 * scratch_bytes as for qmoe_device_create(); cpus must be NULL and ncpus 0 (the caller places its
 * threads). The device may be used by any number of streams of one device each; a group
 * (qmoe_stream_create_group with count > 1) that holds it is QMOE_ERR_PARAM_INVALID.
 * QMOE_ERR_PARAM_NULLPTR for a NULL parallel or device, QMOE_ERR_PARAM_INVALID for bad options,
 * QMOE_ERR_INNER when memory cannot be had. Destroy with qmoe_device_destroy().
 */
QMOE_API qmoe_status qmoe_device_create_external(const qmoe_device_options *options,
                                                 qmoe_parallel_fn parallel, void *ctx,
                                                 qmoe_device **device);

/* Accessors; for a NULL device they return -1 (scratch bytes: 0). */
QMOE_API int qmoe_device_threads(const qmoe_device *device);
QMOE_API uint64_t qmoe_device_scratch_bytes(const qmoe_device *device); /* whole arena, all threads */
QMOE_API int qmoe_device_id(const qmoe_device *device); /* process-unique; the trace's process id */

/* The instruction sets this CPU offers to qmoe's kernels, fastest first, comma-separated, e.g.
 * "avx512_vnni,avx_vnni,avx2,portable". */
QMOE_API const char *qmoe_device_isa(const qmoe_device *device);

/* Online CPU cores of the machine (>= 1). */
QMOE_API int qmoe_device_online_cores(void);

/* ---------------------------------------------------------------- streams --------------------- */

/* A stream on one device. */
QMOE_API qmoe_status qmoe_stream_create(qmoe_device *device, qmoe_stream **stream);

/* A stream on a group of `count` (1..QMOE_MAX_DEVICES, distinct) devices: an operator planned for
 * D devices (options.devices) runs on the first D of them, split by output rows in chunks of
 * whole 128-byte lines (docs/runtime.md, "Multi-device runs"); the devices meet at
 * fences before and after each operator. Executing a plan for more devices than the stream has
 * is QMOE_ERR_PARAM_INVALID. */
QMOE_API qmoe_status qmoe_stream_create_group(qmoe_device *const *devices, int count,
                                     qmoe_stream **stream);

/* Waits for every operator submitted so far; returns the first error among the operators that
 * finished since the previous synchronize (then forgets it), QMOE_OK otherwise. On error,
 * qmoe_last_error() says which operator failed and why. Once an operator fails, the operators
 * queued after it on the same stream are not run (their outputs are left untouched: a chain such
 * as the MoE layer's stops at the failing operator) until this call reports the error. */
QMOE_API qmoe_status qmoe_stream_synchronize(qmoe_stream *stream);

/* Waits for the work in flight, then frees the stream. NULL is a no-op. */
QMOE_API void qmoe_stream_destroy(qmoe_stream *stream);

/* ---------------------------------------------------------------- tracing --------------------- */

/* Starts recording (enable != 0; events_per_thread per thread, 0 means 1<<16; events past that
 * are dropped) or stops it (enable == 0). Either way the events recorded so far are discarded,
 * so call qmoe_trace_write() before stopping. Call while no operator is in flight on the device. */
QMOE_API qmoe_status qmoe_device_trace(qmoe_device *device, int enable, uint32_t events_per_thread);

/* Writes the recorded events of the devices as a Chrome trace-event JSON file that
 * ui.perfetto.dev (or chrome://tracing) opens: one process per device, one track per thread,
 * slices named plan, copy, compute, epilogue, fence with the 16-bit info in args. Call after
 * synchronizing the streams that use them. QMOE_ERR_PARAM_INVALID when the file cannot be
 * written. */
QMOE_API qmoe_status qmoe_trace_write(const char *path, qmoe_device *const *devices, int count);

/* The default device (stream NULL), created on first use; NULL when it cannot be created. The
 * library owns it: streams may be created on it, but it must not be destroyed. */
QMOE_API qmoe_device *qmoe_device_default(void);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_RUNTIME_H */
