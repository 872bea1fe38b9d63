/*
 * qmoe's source-compatible aclnnGroupedMatmulSwigluQuantWeightNZ: the fused MoE step (grouped
 * int8 x int8/int4 matmul per expert, dequantization, SwiGLU, per-token int8 quantization) with
 * the weight in FRACTAL_NZ. Written for qmoe from the vendor's page
 * (shared/seeds/003_3a525e8233a31528.txt); the contract is docs/ops/grouped-matmul-swiglu-quant.md.
 *
 * Phase one validates every argument that needs no tensor data and returns the workspace size and
 * an executor; its codes are ACLNN_ERR_PARAM_NULLPTR (a required tensor is NULL: x, weight,
 * weightScale, xScale, groupList, output, outputScale, and bias for A8W4) and
 * ACLNN_ERR_PARAM_INVALID (rank, shape, dtype, format, limits), with a message for
 * aclGetRecentErrMsg. As the vendor's, this variant ignores weight's declared format and treats it
 * as FRACTAL_NZ: weight's storage shape must be 5-D ([E, N/32, K/16, 16, 32] int8,
 * [E, N/64, K/16, 16, 64] int4, [E, N/64, K/16, 16, 8] int32 holding 8 int4); its view shape is
 * either that same 5-D shape or the logical [E, K, N] ([E, K, N/8] for int32).
 * A8W4 weight scales may be ACL_UINT64/ACL_INT64 whose low 32 bits hold a float32.
 *
 * Phase two checks the groupList values (decreasing, negative or past M: ACLNN_ERR_PARAM_INVALID,
 * outputs untouched) and launches the operator on `stream` (it runs asynchronously until
 * aclrtSynchronizeStream; on the default stream, NULL, the call waits for it). Memory the tensors
 * and the workspace point to must stay valid until then. Executors are ONE-SHOT as in the vendor API: the
 * second-phase call always destroys its executor, also when it fails; passing it again is
 * ACLNN_ERR_PARAM_INVALID. An executor never executed is released by aclFinalize.
 */
#ifndef QMOE_ACLNNOP_GROUPED_MATMUL_SWIGLU_QUANT_WEIGHT_NZ_H
#define QMOE_ACLNNOP_GROUPED_MATMUL_SWIGLU_QUANT_WEIGHT_NZ_H

#include "aclnnop/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnGroupedMatmulSwigluQuantWeightNZGetWorkspaceSize(
    const aclTensor *x, const aclTensor *weight, const aclTensor *bias, const aclTensor *offset,
    const aclTensor *weightScale, const aclTensor *xScale, const aclTensor *groupList,
    aclTensor *output, aclTensor *outputScale, aclTensor *outputOffset, uint64_t *workspaceSize,
    aclOpExecutor **executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnGroupedMatmulSwigluQuantWeightNZ(void *workspace,
                                                                      uint64_t workspaceSize,
                                                                      aclOpExecutor *executor,
                                                                      aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
