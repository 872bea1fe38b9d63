/*
 * qmoe's source-compatible aclnnMoeGatingTopK (contract: docs/ops/moe-gating-top-k.md). Parameter list from the vendor's
 * aclnn page; codes 161001/161002 as there, messages through aclGetRecentErrMsg(). Executors
 * are one-shot; the default stream (NULL) runs synchronously.
 */
#ifndef QMOE_ACLNNOP_MOE_GATING_TOP_K_H
#define QMOE_ACLNNOP_MOE_GATING_TOP_K_H

#include <stdbool.h>

#include "aclnnop/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeGatingTopKGetWorkspaceSize(
    const aclTensor *x, const aclTensor *biasOptional, int64_t k, int64_t kGroup,
    int64_t groupCount, int64_t groupSelectMode, int64_t renorm, int64_t normType, bool outFlag,
    double routedScalingFactor, double eps, const aclTensor *yOut, const aclTensor *expertIdxOut,
    const aclTensor *outOut, uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeGatingTopK(void *workspace, uint64_t workspaceSize,
                                                   aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
