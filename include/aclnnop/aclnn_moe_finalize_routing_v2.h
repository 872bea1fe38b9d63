/*
 * qmoe's source-compatible aclnnMoeFinalizeRoutingV2 (dropless: dropPadMode 0 or 2) (contract: docs/ops/moe-finalize-routing-v2.md). Parameter list from the vendor's
 * aclnn page; codes 161001/161002 as there, messages through aclGetRecentErrMsg(). Executors
 * are one-shot; the default stream (NULL) runs synchronously.
 */
#ifndef QMOE_ACLNNOP_MOE_FINALIZE_ROUTING_V2_H
#define QMOE_ACLNNOP_MOE_FINALIZE_ROUTING_V2_H

#include "aclnnop/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeFinalizeRoutingV2GetWorkspaceSize(
    const aclTensor *expandedX, const aclTensor *expandedRowIdx, const aclTensor *x1Optional,
    const aclTensor *x2Optional, const aclTensor *biasOptional, const aclTensor *scalesOptional,
    const aclTensor *expertIdxOptional, int64_t dropPadMode, const aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMoeFinalizeRoutingV2(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor,
                                                          aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
