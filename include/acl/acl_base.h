/*
 * qmoe's source-compatible subset of the AscendCL base header: error codes, data types, formats,
 * the stream handle and the error-message query. Written for qmoe from the published API; the
 * names and numbers follow the vendor's documentation:
 *   - aclError return codes:  hicann/runtime docs/api_docs/aclError.md
 *   - aclDataType:            hicann/runtime docs/api_docs/aclDataType.md
 *   - aclFormat:              hicann/runtime docs/api_docs/aclFormat.md
 *   - aclGetRecentErrMsg:     hicann/runtime docs/api_docs/aclGetRecentErrMsg.md
 * Only what qmoe implements is declared here (docs/vendor-api.md).
 */
#ifndef QMOE_ACL_ACL_BASE_H
#define QMOE_ACL_ACL_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* vendor samples call printf after including only the acl headers */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ACL_FUNC_VISIBILITY __attribute__((visibility("default")))
#else
#define ACL_FUNC_VISIBILITY
#endif

typedef int aclError;

/* Return codes (the vendor declares them `static const int`; enum constants have the same type and
 * value and are also usable as case labels in C). */
enum {
    ACL_SUCCESS = 0,
    ACL_ERROR_NONE = 0,
    ACL_ERROR_INVALID_PARAM = 100000,
    ACL_ERROR_UNINITIALIZE = 100001,
    ACL_ERROR_REPEAT_INITIALIZE = 100002,
    ACL_ERROR_INVALID_FILE = 100003,
    ACL_ERROR_REPEAT_FINALIZE = 100037,
    ACL_ERROR_BAD_ALLOC = 200000,
    ACL_ERROR_API_NOT_SUPPORT = 200001,
    ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005,
    ACL_ERROR_INTERNAL_ERROR = 500000,
    ACL_ERROR_FAILURE = 500001,
    ACL_ERROR_RT_FAILURE = 500003,
    /* Runtime codes passed through by AscendCL. */
    ACL_ERROR_RT_PARAM_INVALID = 107000,
    ACL_ERROR_RT_INVALID_DEVICEID = 107001,
    ACL_ERROR_RT_CONTEXT_NULL = 107002,
    ACL_ERROR_RT_INVALID_HANDLE = 107017,
    ACL_ERROR_RT_MEMORY_ALLOCATION = 207001,
};

typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_STRING = 13,
    ACL_COMPLEX64 = 16,
    ACL_COMPLEX128 = 17,
    ACL_BF16 = 27,
    ACL_INT4 = 29,
    ACL_UINT1 = 30,
    ACL_COMPLEX32 = 33,
} aclDataType;

typedef enum {
    ACL_FORMAT_UNDEFINED = -1,
    ACL_FORMAT_NCHW = 0,
    ACL_FORMAT_NHWC = 1,
    ACL_FORMAT_ND = 2,
    ACL_FORMAT_NC1HWC0 = 3,
    ACL_FORMAT_FRACTAL_Z = 4,
    ACL_FORMAT_NC1HWC0_C04 = 12,
    ACL_FORMAT_HWCN = 16,
    ACL_FORMAT_NDHWC = 27,
    ACL_FORMAT_FRACTAL_NZ = 29,
    ACL_FORMAT_NCDHW = 30,
    ACL_FORMAT_NDC1HWC0 = 32,
    ACL_FRACTAL_Z_3D = 33,
    ACL_FORMAT_NC = 35,
    ACL_FORMAT_NCL = 47,
} aclFormat;

/* A stream handle. qmoe streams are objects of its compatibility layer; see acl_rt.h. */
typedef void *aclrtStream;

/* The description of the most recent failure of an acl/aclnn call on this thread, then cleared
 * (as the vendor's "get and clear"). The pointer stays valid until this thread's next call of
 * aclGetRecentErrMsg. qmoe returns "" (never NULL) when no failure is pending. */
ACL_FUNC_VISIBILITY const char *aclGetRecentErrMsg(void);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_ACL_ACL_BASE_H */
