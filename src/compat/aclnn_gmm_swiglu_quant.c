/*
 * aclnnGroupedMatmulSwigluQuant[WeightNZ]: the vendor's two-phase entry points over the native
 * qmoe_gmm_swiglu_quant_* API. Phase one checks what the vendor checks first (its null-pointer and
 * reserved-argument rules), translates the tensors and lets the native planner do the rest; phase
 * two queues the plan on the stream's native stream (and waits, for the default stream) and
 * always destroys the one-shot executor.
 */
#include <stdlib.h>

#include "aclnnop/aclnn_grouped_matmul_swiglu_quant.h"
#include "aclnnop/aclnn_grouped_matmul_swiglu_quant_weight_nz.h"
#include "compat/compat.h"
#include "qmoe/runtime.h"

enum { ARG_X, ARG_WEIGHT, ARG_BIAS, ARG_WSCALE, ARG_XSCALE, ARG_GROUPS, ARG_OUT, ARG_OUTSCALE, NARGS };

static int is_a8w4(const aclTensor *weight)
{
    aclDataType d = compat_tensor_dtype(weight);
    return d == ACL_INT4 || d == ACL_INT32;
}

static aclnnStatus plan(const char *api, int weight_nz, const aclTensor *const in[NARGS],
                        const aclTensor *offset, const aclTensor *output_offset,
                        uint64_t *workspace_size, aclOpExecutor **executor)
{
    static const char *names[NARGS] = {"x",       "weight",    "bias",   "weightScale",
                                       "xScale",  "groupList", "output", "outputScale"};
    if (!compat_initialized())
        return compat_fail(ACLNN_ERR_RUNTIME_ERROR, "%s: aclInit has not been called", api);
    for (int i = 0; i < NARGS; i++)
        if (i != ARG_BIAS && !in[i])
            return compat_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is a null pointer", api, names[i]);
    if (!in[ARG_BIAS] && is_a8w4(in[ARG_WEIGHT]))
        return compat_fail(ACLNN_ERR_PARAM_NULLPTR,
                           "%s: bias (the weight assist matrix) is a null pointer; A8W4 needs it",
                           api);
    if (offset)
        return compat_fail(ACLNN_ERR_PARAM_INVALID, "%s: offset is reserved and must be a null pointer",
                           api);
    if (output_offset)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: outputOffset is reserved and must be a null pointer", api);
    if (!workspace_size)
        return compat_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize is a null pointer", api);
    if (!executor) return compat_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: executor is a null pointer", api);

    /* The WeightNZ variant ignores weight's declared format (as the vendor's); the other reads it. */
    int weight_as_nz = weight_nz || compat_tensor_format(in[ARG_WEIGHT]) == ACL_FORMAT_FRACTAL_NZ;
    qmoe_tensor *t[NARGS] = {0};
    aclnnStatus st = ACLNN_SUCCESS;
    for (int i = 0; i < NARGS && !st; i++)
        if (in[i])
            st = compat_tensor_to_native(api, names[i], in[i],
                                         i == ARG_WEIGHT && weight_as_nz ? COMPAT_AS_NZ_WEIGHT
                                                                         : COMPAT_AS_VIEW,
                                         &t[i]);
    qmoe_grouped_matmul_swiglu_quant_executor *native = NULL;
    uint64_t size = 0;
    if (!st) {
        qmoe_grouped_matmul_swiglu_quant_options options = {.force_weight_nz = weight_as_nz,
                                   .threads = compat_device_threads()};
        qmoe_status ns = qmoe_grouped_matmul_swiglu_quant_workspace_size(
            t[ARG_X], t[ARG_WEIGHT], t[ARG_BIAS], NULL, t[ARG_WSCALE], t[ARG_XSCALE],
            t[ARG_GROUPS], t[ARG_OUT], t[ARG_OUTSCALE], NULL, &options, &size, &native);
        if (ns) st = compat_fail((aclnnStatus)ns, "%s: %s", api, qmoe_last_error());
    }
    for (int i = 0; i < NARGS; i++) qmoe_tensor_destroy(t[i]); /* the plan keeps only the memory */
    if (st) return st;

    aclOpExecutor *ex = malloc(sizeof *ex);
    if (!ex) qmoe_grouped_matmul_swiglu_quant_executor_destroy(native);
    else *ex = (aclOpExecutor){.op = COMPAT_OP_GMM_SWIGLU_QUANT, .native = native};
    return compat_executor_publish(api, ex, size, workspace_size, executor);
}

static aclnnStatus execute(const char *api, void *workspace, uint64_t workspace_size,
                           aclOpExecutor *executor, aclrtStream stream)
{
    qmoe_stream *native;
    aclnnStatus st = compat_executor_claim(api, executor, COMPAT_OP_GMM_SWIGLU_QUANT, stream, &native);
    if (st) return st;
    st = (aclnnStatus)qmoe_grouped_matmul_swiglu_quant(workspace, workspace_size, executor->native, native);
    return compat_executor_finish(api, executor, st, stream, native);
}

#define GMM_ARGS                                                                                   \
    const aclTensor *x, const aclTensor *weight, const aclTensor *bias, const aclTensor *offset,   \
        const aclTensor *weightScale, const aclTensor *xScale, const aclTensor *groupList,         \
        aclTensor *output, aclTensor *outputScale, aclTensor *outputOffset,                        \
        uint64_t *workspaceSize, aclOpExecutor **executor

aclnnStatus aclnnGroupedMatmulSwigluQuantWeightNZGetWorkspaceSize(GMM_ARGS)
{
    const aclTensor *in[NARGS] = {x, weight, bias, weightScale, xScale, groupList, output, outputScale};
    return plan("aclnnGroupedMatmulSwigluQuantWeightNZGetWorkspaceSize", 1, in, offset, outputOffset,
                workspaceSize, executor);
}

aclnnStatus aclnnGroupedMatmulSwigluQuantWeightNZ(void *workspace, uint64_t workspaceSize,
                                                  aclOpExecutor *executor, aclrtStream stream)
{
    return execute("aclnnGroupedMatmulSwigluQuantWeightNZ", workspace, workspaceSize, executor,
                   stream);
}

aclnnStatus aclnnGroupedMatmulSwigluQuantGetWorkspaceSize(GMM_ARGS)
{
    const aclTensor *in[NARGS] = {x, weight, bias, weightScale, xScale, groupList, output, outputScale};
    return plan("aclnnGroupedMatmulSwigluQuantGetWorkspaceSize", 0, in, offset, outputOffset,
                workspaceSize, executor);
}

aclnnStatus aclnnGroupedMatmulSwigluQuant(void *workspace, uint64_t workspaceSize,
                                          aclOpExecutor *executor, aclrtStream stream)
{
    return execute("aclnnGroupedMatmulSwigluQuant", workspace, workspaceSize, executor, stream);
}

/* Phase two for the other GroupedMatmulSwigluQuant entry points (the weight-list variant). */
aclnnStatus compat_gmm_execute(const char *api, void *workspace, uint64_t workspace_size,
                               aclOpExecutor *executor, aclrtStream stream)
{
    return execute(api, workspace, workspace_size, executor, stream);
}
