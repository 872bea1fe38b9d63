/*
 * qmoe's source-compatible aclnnMoeGatingTopKSoftmax (finishedOptional must be NULL here: see the contract) (contract: docs/ops/moe-gating-top-k-softmax.md). Parameter list from the vendor's
 * aclnn page; codes 161001/161002 as there, messages through aclGetRecentErrMsg(). Executors
 * are one-shot; the default stream (NULL) runs synchronously.
 */
#ifndef QMOE_ACLNNOP_MOE_GATING_TOP_K_SOFTMAX_H
#define QMOE_ACLNNOP_MOE_GATING_TOP_K_SOFTMAX_H

#include "aclnnop/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeGatingTopKSoftmaxGetWorkspaceSize(
    const aclTensor *x, const aclTensor *finishedOptional, int64_t k, const aclTensor *yOut,
    const aclTensor *expertIdxOut, const aclTensor *rowIdxOut, uint64_t *workspaceSize,
    aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeGatingTopKSoftmax(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor,
                                                          aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
