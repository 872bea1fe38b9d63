/*
 * qmoe's source-compatible subset of the aclnn operator base (the vendor splits it over
 * aclnn/aclnn_base.h and aclnn/acl_meta.h): status codes, tensors and executors. Written for qmoe
 * from the published API; codes from the vendor's "aclnn Return Codes" page
 * (hiascend.com .../API/aolapi/atlasascendc_api_07_1205.html), aclCreateTensor's parameter list
 * from the vendor's operator samples.
 */
#ifndef QMOE_ACLNNOP_ACLNN_BASE_H
#define QMOE_ACLNNOP_ACLNN_BASE_H

#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t aclnnStatus;

enum {
    ACLNN_SUCCESS = 0,
    ACLNN_ERR_PARAM_NULLPTR = 161001,
    ACLNN_ERR_PARAM_INVALID = 161002,
    ACLNN_ERR_RUNTIME_ERROR = 361001,
    ACLNN_ERR_INNER = 561000,
    ACLNN_ERR_INNER_CREATE_EXECUTOR = 561101,
    ACLNN_ERR_INNER_NULLPTR = 561103,
};

typedef struct aclTensor aclTensor;
typedef struct aclOpExecutor aclOpExecutor;

/*
 * A tensor over device memory: `viewDims` (the logical shape), `stride` (elements, NULL for
 * row-major contiguous), `offset` (elements from `tensorData` to the view's first element),
 * `format`, and `storageDims` (the shape of the memory `tensorData` points to, in `format`'s
 * layout). Nothing is copied or owned. Returns NULL with a message for aclGetRecentErrMsg when a
 * rank exceeds 8, a dimension or the offset is negative, or a dims array is NULL.
 */
ACL_FUNC_VISIBILITY aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum,
                                               aclDataType dataType, const int64_t *stride,
                                               int64_t offset, aclFormat format,
                                               const int64_t *storageDims, uint64_t storageDimsNum,
                                               void *tensorData);
/* NULL is a no-op. */
ACL_FUNC_VISIBILITY aclnnStatus aclDestroyTensor(const aclTensor *tensor);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_ACLNNOP_ACLNN_BASE_H */
