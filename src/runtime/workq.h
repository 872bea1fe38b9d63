/*
 * Work queue: a fork-join pool. qmoe_workq_run(q, f, data, n) runs parts 0..n-1 of a job; the
 * calling thread (thread 0) runs part 0 and worker t runs part t; with more parts than threads,
 * thread t also runs parts t + T, t + 2T, ... in order. Workers spin briefly after a job, yield
 * their core for QMOE_WORKER_WAIT_US (default 5 ms), then sleep on a condition variable. A job may have sub-phases separated by qmoe_workq_barrier, an
 * atomic countdown barrier over the job's threads (only when n <= threads: each part one thread).
 *
 * An external pool (qmoe_workq_create_external) starts no thread: a job of more than one part
 * runs through the caller's parallel function (qmoe_parallel_fn, include/qmoe/runtime.h), which
 * calls a task for every thread index on threads of its own; the same round-robin of parts and
 * the same barrier apply.
 */
#ifndef QMOE_RUNTIME_WORKQ_H
#define QMOE_RUNTIME_WORKQ_H

#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"
#include "runtime/thread_ctx.h"

typedef void (*qmoe_work_fn)(qmoe_thread_ctx *ctx, void *data, int part, int nparts);

/* A pool of `threads` (>= 1) threads counting the caller: starts threads - 1 workers. Worker t
 * gets ctx[t] (which must outlive the pool) and, when ncpus > 0, runs on cpus[t % ncpus]. */
qmoe_status qmoe_workq_create(int threads, qmoe_thread_ctx *ctx, const int *cpus, int ncpus,
                              qmoe_workq **out);
/* A pool of `threads` (>= 1) threads that are the caller's: jobs run through parallel(pctx, ...). */
qmoe_status qmoe_workq_create_external(int threads, qmoe_thread_ctx *ctx, qmoe_parallel_fn parallel,
                                       void *pctx, qmoe_workq **out);
void qmoe_workq_destroy(qmoe_workq *q);

/* An external pool's parallel function broke its contract (a thread index called twice, out of
 * range or not at all) since the last call: 1, and forgets it; 0 otherwise. */
int qmoe_workq_take_fault(qmoe_workq *q);

void qmoe_workq_run(qmoe_workq *q, qmoe_work_fn f, void *data, int nparts);

/* Waits until every thread of the current job has arrived. */
void qmoe_workq_barrier(qmoe_thread_ctx *ctx);

int qmoe_workq_threads(const qmoe_workq *q);

/* Pins the calling thread to `cpu`; returns 0 or an errno value. */
int qmoe_pin_self(int cpu);

#endif
