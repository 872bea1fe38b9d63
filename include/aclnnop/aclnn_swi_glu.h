/*
 * qmoe's source-compatible aclnnSwiGlu (contract: docs/ops/swiglu.md). Parameter list from the vendor's
 * aclnn page; codes 161001/161002 as there, messages through aclGetRecentErrMsg(). Executors
 * are one-shot; the default stream (NULL) runs synchronously.
 */
#ifndef QMOE_ACLNNOP_SWI_GLU_H
#define QMOE_ACLNNOP_SWI_GLU_H

#include "aclnnop/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim,
                                                           const aclTensor *out,
                                                           uint64_t *workspaceSize,
                                                           aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnSwiGlu(void *workspace, uint64_t workspaceSize,
                                            aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
