/*
 * qmoe's source-compatible aclnnDynamicQuant (contract: docs/ops/dynamic-quant.md). Parameter list from the vendor's
 * aclnn page; codes 161001/161002 as there, messages through aclGetRecentErrMsg(). Executors
 * are one-shot; the default stream (NULL) runs synchronously.
 */
#ifndef QMOE_ACLNNOP_DYNAMIC_QUANT_H
#define QMOE_ACLNNOP_DYNAMIC_QUANT_H

#include "aclnnop/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnDynamicQuantGetWorkspaceSize(const aclTensor *x,
                                                                 const aclTensor *smoothScalesOptional,
                                                                 const aclTensor *yOut,
                                                                 const aclTensor *scaleOut,
                                                                 uint64_t *workspaceSize,
                                                                 aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnDynamicQuant(void *workspace, uint64_t workspaceSize,
                                                  aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
