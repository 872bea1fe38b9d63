/*
 * qmoe's source-compatible aclnnGroupedMatmulSwigluQuant: the same operator as
 * aclnn_grouped_matmul_swiglu_quant_weight_nz.h, but weight's declared format is honoured:
 * ACL_FORMAT_FRACTAL_NZ takes the 5-D storage shape described there; ACL_FORMAT_ND takes the
 * row-major [E, K, N] (int8/int4) or [E, K, N/8] (int32 holding 8 int4) view (an extension: any K
 * and even N). Parameter list from the vendor's page (hiascend.com .../aclnnGroupedMatmulSwigluQuant.md).
 * Codes, messages and the one-shot executor are as in the WeightNZ variant.
 */
#ifndef QMOE_ACLNNOP_GROUPED_MATMUL_SWIGLU_QUANT_H
#define QMOE_ACLNNOP_GROUPED_MATMUL_SWIGLU_QUANT_H

#include "aclnnop/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnGroupedMatmulSwigluQuantGetWorkspaceSize(
    const aclTensor *x, const aclTensor *weight, const aclTensor *bias, const aclTensor *offset,
    const aclTensor *weightScale, const aclTensor *xScale, const aclTensor *groupList,
    aclTensor *output, aclTensor *outputScale, aclTensor *outputOffset, uint64_t *workspaceSize,
    aclOpExecutor **executor);

ACL_FUNC_VISIBILITY aclnnStatus aclnnGroupedMatmulSwigluQuant(void *workspace,
                                                              uint64_t workspaceSize,
                                                              aclOpExecutor *executor,
                                                              aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
