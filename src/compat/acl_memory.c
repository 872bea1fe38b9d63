/* Device and host memory: both are host memory here, 64-byte aligned (as the vendor's device
 * memory) and registered, so that frees are checked and aclFinalize releases what is left. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compat/compat.h"

enum { ALIGNMENT = 64 };

static aclError allocate(const char *api, void **ptr, size_t size, compat_kind kind)
{
    if (!compat_initialized())
        return compat_fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (!ptr) return compat_fail(ACL_ERROR_INVALID_PARAM, "%s: the pointer argument is NULL", api);
    if (size == 0) return compat_fail(ACL_ERROR_INVALID_PARAM, "%s: size is 0", api);
    if (size > SIZE_MAX - (ALIGNMENT - 1))
        return compat_fail(ACL_ERROR_BAD_ALLOC, "%s: size %zu is too large", api, size);
    /* aligned_alloc wants a multiple of the alignment. */
    void *p = aligned_alloc(ALIGNMENT, (size + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT);
    if (!p) return compat_fail(ACL_ERROR_BAD_ALLOC, "%s: out of memory for %zu bytes", api, size);
    compat_lock();
    int ok = compat_registry_add(p, kind, compat_current_device(), free);
    compat_unlock();
    if (!ok) {
        free(p);
        return compat_fail(ACL_ERROR_BAD_ALLOC, "%s: out of memory", api);
    }
    *ptr = p;
    return ACL_SUCCESS;
}

static aclError release(const char *api, void *ptr, compat_kind kind)
{
    if (!compat_initialized())
        return compat_fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (!ptr) return compat_fail(ACL_ERROR_INVALID_PARAM, "%s: the pointer is NULL", api);
    compat_lock();
    int ok = compat_registry_remove(ptr, kind);
    compat_unlock();
    if (!ok)
        return compat_fail(ACL_ERROR_INVALID_PARAM,
                           "%s: %p was not allocated by %s or was already freed", api, ptr,
                           kind == COMPAT_DEVICE_MEM ? "aclrtMalloc" : "aclrtMallocHost");
    free(ptr);
    return ACL_SUCCESS;
}

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    (void)policy; /* every policy is ordinary host memory here */
    return allocate("aclrtMalloc", devPtr, size, COMPAT_DEVICE_MEM);
}

aclError aclrtFree(void *devPtr) { return release("aclrtFree", devPtr, COMPAT_DEVICE_MEM); }

aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    return allocate("aclrtMallocHost", hostPtr, size, COMPAT_HOST_MEM);
}

aclError aclrtFreeHost(void *hostPtr) { return release("aclrtFreeHost", hostPtr, COMPAT_HOST_MEM); }

aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)
{
    static const char *api = "aclrtMemcpy";
    if (!compat_initialized())
        return compat_fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    /* Checked as an int so that values outside the enum are caught, whatever its type's width. */
    int k = (int)kind;
    if (k < ACL_MEMCPY_HOST_TO_HOST || k > ACL_MEMCPY_INTER_DEVICE_TO_DEVICE)
        return compat_fail(ACL_ERROR_INVALID_PARAM, "%s: unknown copy kind %d", api, k);
    if (!dst || !src)
        return compat_fail(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", api, !dst ? "dst" : "src");
    if (count > destMax)
        return compat_fail(ACL_ERROR_INVALID_PARAM,
                           "%s: count %zu exceeds destMax %zu (the destination's size)", api, count,
                           destMax);
    memmove(dst, src, count); /* device memory is host memory: every direction is one copy */
    return ACL_SUCCESS;
}

aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    static const char *api = "aclrtMemset";
    if (!compat_initialized())
        return compat_fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (!devPtr) return compat_fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", api);
    if (count > maxCount)
        return compat_fail(ACL_ERROR_INVALID_PARAM, "%s: count %zu exceeds maxCount %zu", api,
                           count, maxCount);
    memset(devPtr, (unsigned char)value, count);
    return ACL_SUCCESS;
}
