/*
 * The vendor's aclOpExecutor, for every operator: published into the handle registry at phase
 * one, claimed (one-shot, also across threads) at phase two, and refused when it belongs to
 * another operator, so no executor is ever read as another operator's.
 */
#include <stdlib.h>

#include "compat/compat.h"
#include "qmoe/runtime.h"

void compat_executor_free(aclOpExecutor *executor)
{
    if (!executor) return;
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(executor->native);
    qmoe_moe_executor_destroy(executor->moe);
    qmoe_grouped_matmul_executor_destroy(executor->gmm);
    free(executor);
}

aclnnStatus compat_executor_publish(const char *api, aclOpExecutor *ex, uint64_t size,
                                    uint64_t *workspace_size, aclOpExecutor **executor)
{
    compat_lock();
    int registered = ex && compat_registry_add(ex, COMPAT_EXECUTOR, compat_current_device(),
                                                  (compat_release_fn)compat_executor_free);
    compat_unlock();
    if (!registered) {
        compat_executor_free(ex);
        return compat_fail(ACLNN_ERR_INNER_CREATE_EXECUTOR, "%s: out of memory for the executor", api);
    }
    *workspace_size = size;
    *executor = ex;
    return ACLNN_SUCCESS;
}

aclnnStatus compat_executor_claim(const char *api, aclOpExecutor *executor, compat_op op,
                                  aclrtStream stream, qmoe_stream **native)
{
    if (!executor) return compat_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: executor is a null pointer", api);
    if (!compat_initialized())
        return compat_fail(ACLNN_ERR_RUNTIME_ERROR, "%s: aclInit has not been called", api);
    compat_lock();
    int live = compat_registry_remove(executor, COMPAT_EXECUTOR);
    aclnnStatus st = ACLNN_SUCCESS;
    *native = live ? compat_native_stream(stream, &st) : NULL;
    compat_unlock();
    if (!live)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: executor %p is not live: executors are one-shot and this one was "
                           "already executed (or released by aclFinalize)",
                           api, (void *)executor);
    if (executor->op != op) {
        compat_executor_free(executor); /* claimed, so freed here */
        return compat_fail(ACLNN_ERR_PARAM_INVALID, "%s: the executor belongs to another operator",
                           api);
    }
    if (!st) return ACLNN_SUCCESS;
    if (st == ACLNN_ERR_PARAM_INVALID)
        compat_fail(st, "%s: stream %p is not a live stream", api, stream);
    else
        compat_fail(st, "%s: the device cannot start: %s", api, qmoe_last_error());
    compat_executor_free(executor);
    compat_record_status(stream, st);
    return st;
}

aclnnStatus compat_executor_finish(const char *api, aclOpExecutor *executor, aclnnStatus st,
                                   aclrtStream stream, qmoe_stream *native)
{
    if (st) compat_fail(st, "%s: %s", api, qmoe_last_error());
    /* The queued operator holds its own bound copy of the plan: the executor can go now. */
    compat_executor_free(executor);
    if (!st && !stream && (st = (aclnnStatus)qmoe_stream_synchronize(native)))
        compat_fail(st, "%s: %s", api, qmoe_last_error()); /* the default stream is synchronous */
    if (st) compat_record_status(stream, st);
    return st;
}
