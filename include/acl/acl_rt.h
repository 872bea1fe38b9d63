/*
 * qmoe's source-compatible subset of the AscendCL runtime API (acl_rt.h): devices, streams and
 * memory. Written for qmoe from the published API; names, parameter lists and enum values follow
 *   - hicann/runtime docs/api_docs/aclrtMemcpyKind.md, aclrtMemMallocPolicy.md, aclrtMalloc.md,
 *     aclrtMemset.md, aclrtGetDevice.md, and the vendor's sample programs.
 *
 * On a CPU, "device" memory is host memory (64-byte aligned), and a device id selects a qmoe device
 * (QMOE_ACL_DEVICES ids, default 1; QMOE_ACL_THREADS threads each, default all online cores).
 * A stream is a qmoe stream: operators launched on it run asynchronously, and
 * aclrtSynchronizeStream waits for them and reports the first failure of an operator launched on
 * it since the previous synchronization. Launches on the default stream (NULL) are synchronous.
 * Every function needs aclInit first (ACL_ERROR_UNINITIALIZE otherwise). Bad arguments return an
 * error code with a message for aclGetRecentErrMsg, never a crash for NULL or unknown handles.
 */
#ifndef QMOE_ACL_ACL_RT_H
#define QMOE_ACL_ACL_RT_H

#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
    ACL_MEMCPY_DEFAULT = 4,
    ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6,
    ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7,
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_MEM_MALLOC_HUGE_ONLY = 1,
    ACL_MEM_MALLOC_NORMAL_ONLY = 2,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
    ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
    ACL_MEM_MALLOC_HUGE1G_ONLY = 6,
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7,
    ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
    ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000,
} aclrtMemMallocPolicy;

/* Devices: SetDevice makes `deviceId` this thread's current device (counted; ResetDevice undoes
 * one SetDevice and, at the last one, destroys the streams still open on that device). */
ACL_FUNC_VISIBILITY aclError aclrtSetDevice(int32_t deviceId);
ACL_FUNC_VISIBILITY aclError aclrtResetDevice(int32_t deviceId);
ACL_FUNC_VISIBILITY aclError aclrtGetDevice(int32_t *deviceId);

/* Streams, on the current device (device 0 when none was set). NULL is the default stream.
 * Destroying a stream waits for the operators launched on it. */
ACL_FUNC_VISIBILITY aclError aclrtCreateStream(aclrtStream *stream);
ACL_FUNC_VISIBILITY aclError aclrtDestroyStream(aclrtStream stream);
ACL_FUNC_VISIBILITY aclError aclrtSynchronizeStream(aclrtStream stream);

/* Memory. size 0 is an error (as the vendor's). Memory still allocated at aclFinalize is freed. */
ACL_FUNC_VISIBILITY aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
ACL_FUNC_VISIBILITY aclError aclrtFree(void *devPtr);
ACL_FUNC_VISIBILITY aclError aclrtMallocHost(void **hostPtr, size_t size);
ACL_FUNC_VISIBILITY aclError aclrtFreeHost(void *hostPtr);

/* Copies `count` bytes; count > destMax, a NULL pointer or an unknown kind is
 * ACL_ERROR_INVALID_PARAM with nothing copied. Every published kind is a plain copy here. */
ACL_FUNC_VISIBILITY aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
                                         aclrtMemcpyKind kind);
/* Sets `count` bytes to (unsigned char)value; count > maxCount is ACL_ERROR_INVALID_PARAM. */
ACL_FUNC_VISIBILITY aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_ACL_ACL_RT_H */
