/* The public two-phase entry points of GroupedMatmulSwigluQuant. */
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/status.h"
#include "host/gmm_plan.h"
#include "kernels/kernel.h"
#include "ops/gmm_list.h"
#include "ops/gmm_run.h"

qmoe_status qmoe_gmm_swiglu_quant_workspace_size(
    const qmoe_tensor *x, const qmoe_tensor *weight, const qmoe_tensor *bias,
    const qmoe_tensor *offset, const qmoe_tensor *weight_scale, const qmoe_tensor *x_scale,
    const qmoe_tensor *group_list, const qmoe_tensor *output, const qmoe_tensor *output_scale,
    const qmoe_tensor *output_offset, const qmoe_op_options *options, uint64_t *workspace_size,
    qmoe_executor **executor)
{
    if (!workspace_size)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "workspaceSize",
                             "workspaceSize is a null pointer");
    if (!executor)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "executor",
                             "executor is a null pointer");
    qmoe_gmm_params plan;
    qmoe_status st = qmoe_gmm_plan(x, weight, bias, offset, weight_scale, x_scale, group_list,
                                   output, output_scale, output_offset, options, &plan);
    if (st) return st;
    qmoe_executor *ex = calloc(1, sizeof *ex);
    if (!ex) return qmoe_fail(QMOE_ERR_INNER, "out of memory for the executor");
    ex->plan = plan;
    *workspace_size = plan.workspace_bytes;
    *executor = ex;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_gmm_swiglu_quant(void *workspace, uint64_t workspace_size,
                                  qmoe_executor *executor, qmoe_stream *stream)
{
    if (!executor)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "executor",
                             "executor is a null pointer");
    const qmoe_gmm_params *p = &executor->plan;
    if (workspace_size < p->workspace_bytes)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspaceSize",
                             "workspaceSize = %llu is less than the %llu bytes phase one asked for",
                             (unsigned long long)workspace_size,
                             (unsigned long long)p->workspace_bytes);
    if (!workspace && p->workspace_bytes)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "workspace",
                             "workspace is a null pointer");
    /* the driver keeps float S rows there: a misaligned float pointer is undefined behaviour */
    if (p->workspace_bytes && (uintptr_t)workspace % alignof(float))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspace",
                             "workspace %p is not aligned for float", workspace);
    /* groupList is read on the device, after the operators queued before this one (gmm_run.c) */
    qmoe_gmm_params run = *p;
    qmoe_gmm_list_bind(&run, workspace); /* weight-list plans: tables into the workspace */
    qmoe_status st = qmoe_gmm_run(&run, workspace, stream);
    if (st == QMOE_OK) qmoe_clear_error();
    return st;
}

void qmoe_executor_destroy(qmoe_executor *executor) { free(executor); }

qmoe_kernel qmoe_executor_kernel(const qmoe_executor *executor)
{
    return executor ? (qmoe_kernel)executor->plan.kernel : QMOE_KERNEL_AUTO;
}
