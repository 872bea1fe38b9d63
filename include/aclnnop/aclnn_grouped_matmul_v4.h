/*
 * qmoe's source-compatible aclnnGroupedMatmulV4, the MoE subset (contract:
 * docs/ops/grouped-matmul.md): one x, one stacked weight [E, K, N] (ND or FRACTAL_NZ), one out
 * (splitItem 2 or 3, groupType 0), groupListType 0 (cumsum) or 1 (count), actType 0; int8 x with
 * int8 / int4 / int32-packed int4 weights, scale and perTokenScale (per-token dequant to bf16,
 * fp16 or fp32), int8 without scales (int32 out), or float x and weight. Parameter list from the
 * vendor's aclnn page; the lists hold one tensor each; offset, antiquant and activation arguments
 * must be NULL. Codes 161001/161002 as there, messages through aclGetRecentErrMsg(). Executors
 * are one-shot; the default stream (NULL) runs synchronously.
 */
#ifndef QMOE_ACLNNOP_GROUPED_MATMUL_V4_H
#define QMOE_ACLNNOP_GROUPED_MATMUL_V4_H

#include "aclnnop/aclnn_base.h"
#include "aclnnop/aclnn_grouped_matmul_swiglu_quant_weight_nz_tensor_list.h" /* aclTensorList */

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnGroupedMatmulV4GetWorkspaceSize(
    const aclTensorList *x, const aclTensorList *weight, const aclTensorList *biasOptional,
    const aclTensorList *scaleOptional, const aclTensorList *offsetOptional,
    const aclTensorList *antiquantScaleOptional, const aclTensorList *antiquantOffsetOptional,
    const aclTensorList *perTokenScaleOptional, const aclTensor *groupListOptional,
    const aclTensorList *activationInputOptional, const aclTensorList *activationQuantScaleOptional,
    const aclTensorList *activationQuantOffsetOptional, int64_t splitItem, int64_t groupType,
    int64_t groupListType, int64_t actType, aclTensorList *out,
    aclTensorList *activationFeatureOutOptional, aclTensorList *dynQuantScaleOutOptional,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnGroupedMatmulV4(void *workspace, uint64_t workspaceSize,
                                                     aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
