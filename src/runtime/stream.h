/* Submission of an operator to a stream: what the operators (src/ops) call. */
#ifndef QMOE_RUNTIME_STREAM_H
#define QMOE_RUNTIME_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/device.h"

/* An operator's work on device `index` of a group of `count`: computes that device's share. */
typedef qmoe_status (*qmoe_op_run_fn)(const void *op, qmoe_device *dev, int index, int count);

/*
 * Queues an operator on the first `ndev` devices of `stream` (NULL: the default group for ndev,
 * synchronously). `ndev` is a plan's device count, already in 1..QMOE_MAX_DEVICES (phase one);
 * more than the stream has is QMOE_ERR_PARAM_INVALID. `op` (op_bytes, copied into the queued
 * job) is what run() receives; `slice_bytes` is the per-thread scratchpad slice it needs.
 * Asynchronous: returns QMOE_OK once queued (errors come at synchronize); synchronous: returns
 * the operator's status. The job blocks are the stream's and are reused: once a stream has had
 * as many operators in flight at once as it holds blocks, of the largest op_bytes it has seen,
 * submitting allocates nothing.
 */
qmoe_status qmoe_stream_submit(qmoe_stream *stream, int ndev, qmoe_op_run_fn run, const void *op,
                               size_t op_bytes, uint64_t slice_bytes);

#endif
