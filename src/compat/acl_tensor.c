/*
 * aclTensor: a description of device memory (view shape, strides, offset, format, storage shape)
 * and its translation to a native qmoe_tensor when an operator is planned. Tensors are in the
 * handle registry, so destroying one twice, or using a destroyed one, is an error code.
 */
#include <stdlib.h>
#include <string.h>

#include "compat/compat.h"

struct aclTensor {
    aclDataType dtype;
    aclFormat format;
    int nview, nstorage;
    int64_t view[QMOE_MAX_DIMS];
    int64_t stride[QMOE_MAX_DIMS];
    int64_t storage[QMOE_MAX_DIMS];
    int64_t offset;
    void *data;
};

static int check_dims(const char *what, const int64_t *dims, uint64_t n)
{
    if (n > QMOE_MAX_DIMS) {
        compat_fail(ACLNN_ERR_PARAM_INVALID, "aclCreateTensor: %s rank %llu exceeds %d", what,
                    (unsigned long long)n, QMOE_MAX_DIMS);
        return 0;
    }
    if (n && !dims) {
        compat_fail(ACLNN_ERR_PARAM_NULLPTR, "aclCreateTensor: %s dims are NULL for rank %llu", what,
                    (unsigned long long)n);
        return 0;
    }
    for (uint64_t i = 0; i < n; i++)
        if (dims[i] < 0) {
            compat_fail(ACLNN_ERR_PARAM_INVALID, "aclCreateTensor: %s dim %llu is negative (%lld)",
                        what, (unsigned long long)i, (long long)dims[i]);
            return 0;
        }
    return 1;
}

aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t *stride, int64_t offset, aclFormat format,
                           const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData)
{
    if (!check_dims("view", viewDims, viewDimsNum) ||
        !check_dims("storage", storageDims, storageDimsNum))
        return NULL;
    if (offset < 0) {
        compat_fail(ACLNN_ERR_PARAM_INVALID, "aclCreateTensor: offset %lld is negative",
                    (long long)offset);
        return NULL;
    }
    aclTensor *t = calloc(1, sizeof *t);
    if (!t) {
        compat_fail(ACLNN_ERR_INNER, "aclCreateTensor: out of memory");
        return NULL;
    }
    t->dtype = dataType;
    t->format = format;
    t->nview = (int)viewDimsNum;
    t->nstorage = (int)storageDimsNum;
    t->offset = offset;
    t->data = tensorData;
    int64_t contiguous = 1;
    for (int i = t->nview - 1; i >= 0; i--) {
        t->view[i] = viewDims[i];
        /* NULL strides mean row-major. The product stops short of overflowing; a view that big
         * is rejected when used (its element count overflows in qmoe_tensor_create). */
        t->stride[i] = stride ? stride[i] : contiguous;
        if (!stride && viewDims[i] > 0 && contiguous <= INT64_MAX / viewDims[i])
            contiguous *= viewDims[i];
    }
    for (int i = 0; i < t->nstorage; i++) t->storage[i] = storageDims[i];
    compat_lock();
    int ok = compat_registry_add(t, COMPAT_TENSOR, -1, NULL);
    compat_unlock();
    if (!ok) {
        free(t);
        compat_fail(ACLNN_ERR_INNER, "aclCreateTensor: out of memory");
        return NULL;
    }
    return t;
}

aclnnStatus aclDestroyTensor(const aclTensor *tensor)
{
    if (!tensor) return ACLNN_SUCCESS; /* like free(NULL) */
    compat_lock();
    int ok = compat_registry_remove((void *)tensor, COMPAT_TENSOR);
    compat_unlock();
    if (!ok)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "aclDestroyTensor: %p was not created by aclCreateTensor or was "
                           "already destroyed",
                           (const void *)tensor);
    free((void *)tensor);
    return ACLNN_SUCCESS;
}

static int live(const aclTensor *t)
{
    compat_lock();
    int ok = compat_registry_has(t, COMPAT_TENSOR);
    compat_unlock();
    return ok;
}

aclDataType compat_tensor_dtype(const aclTensor *t) { return live(t) ? t->dtype : ACL_DT_UNDEFINED; }
aclFormat compat_tensor_format(const aclTensor *t)
{
    return live(t) ? t->format : ACL_FORMAT_UNDEFINED;
}

/* ------------------------------------------------------------------ translation --------------- */

static int native_dtype(aclDataType d, qmoe_dtype *out)
{
    switch (d) {
    case ACL_INT8: *out = QMOE_DTYPE_INT8; return 1;
    case ACL_INT4: *out = QMOE_DTYPE_INT4; return 1;
    case ACL_INT32: *out = QMOE_DTYPE_INT32; return 1;
    case ACL_INT64: *out = QMOE_DTYPE_INT64; return 1;
    case ACL_UINT64: *out = QMOE_DTYPE_UINT64; return 1;
    case ACL_FLOAT: *out = QMOE_DTYPE_FLOAT32; return 1;
    case ACL_FLOAT16: *out = QMOE_DTYPE_FLOAT16; return 1;
    case ACL_BF16: *out = QMOE_DTYPE_BFLOAT16; return 1;
    default: return 0;
    }
}

/* ND and the plain row-major formats (which only name their axes) read as ND; FRACTAL_NZ as NZ. */
static int native_format(aclFormat f, qmoe_format *out)
{
    switch (f) {
    case ACL_FORMAT_ND:
    case ACL_FORMAT_NCHW:
    case ACL_FORMAT_NHWC:
    case ACL_FORMAT_HWCN:
    case ACL_FORMAT_NDHWC:
    case ACL_FORMAT_NCDHW:
    case ACL_FORMAT_NC:
    case ACL_FORMAT_NCL: *out = QMOE_FORMAT_ND; return 1;
    case ACL_FORMAT_FRACTAL_NZ: *out = QMOE_FORMAT_FRACTAL_NZ; return 1;
    default: return 0;
    }
}

static int64_t product(const int64_t *dims, int n, int *overflow)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i] && p > INT64_MAX / dims[i]) *overflow = 1;
        else p *= dims[i];
    }
    return p;
}

/* Elements from the first to one past the last element the view touches, offset included. */
static int view_extent(const aclTensor *t, const int64_t *shape, const int64_t *strides, int n,
                       int64_t *extent)
{
    int64_t last = t->offset;
    for (int i = 0; i < n; i++) {
        if (shape[i] == 0) {
            *extent = 0;
            return 1;
        }
        if (strides[i] < 0) return 1; /* the native tensor reports negative strides */
        if (strides[i] && shape[i] - 1 > (INT64_MAX - last) / strides[i]) return 0;
        last += (shape[i] - 1) * strides[i];
    }
    if (last == INT64_MAX) return 0;
    *extent = last + 1;
    return 1;
}

/* The weight's logical view [E, K, N] ([E, K, N/8] for int32) must agree with its 5-D storage. */
static int nz_view_matches(const aclTensor *t)
{
    const int64_t *s = t->storage;
    int64_t cols = t->dtype == ACL_INT8 ? 32 : t->dtype == ACL_INT32 ? 8 : 64;
    /* Compared by division so that no product can overflow. */
    return t->view[0] == s[0] && t->view[1] % 16 == 0 && t->view[1] / 16 == s[2] &&
           t->view[2] % cols == 0 && t->view[2] / cols == s[1];
}

aclnnStatus compat_tensor_to_native(const char *api, const char *name, const aclTensor *t,
                                    compat_tensor_role role, qmoe_tensor **out)
{
    qmoe_dtype dtype;
    qmoe_format format;
    if (!live(t))
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: %s: %p is not a live tensor (destroyed, or not from "
                           "aclCreateTensor)",
                           api, name, (const void *)t);
    if (!native_dtype(t->dtype, &dtype))
        return compat_fail(ACLNN_ERR_PARAM_INVALID, "%s: %s: data type %d is not supported here",
                           api, name, (int)t->dtype);
    if (role == COMPAT_AS_NZ_WEIGHT) {
        format = QMOE_FORMAT_FRACTAL_NZ;
    } else if (!native_format(t->format, &format)) {
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: %s: format %d is not supported (ND or FRACTAL_NZ)", api, name,
                           (int)t->format);
    }

    const int64_t *shape = t->view, *strides = t->stride;
    int ndim = t->nview;
    int64_t nz_strides[5];
    int overflow = 0;
    int64_t storage_elems = product(t->storage, t->nstorage, &overflow), extent = 0;
    if (overflow)
        return compat_fail(ACLNN_ERR_PARAM_INVALID, "%s: %s: the storage size overflows", api, name);
    if (role == COMPAT_AS_NZ_WEIGHT) {
        if (t->nstorage != 5)
            return compat_fail(ACLNN_ERR_PARAM_INVALID,
                               "%s: %s: a FRACTAL_NZ weight needs a 5-D storage shape "
                               "[E, N/%d, K/16, 16, %d], got rank %d",
                               api, name, t->dtype == ACL_INT8 ? 32 : 64,
                               t->dtype == ACL_INT8 ? 32 : t->dtype == ACL_INT32 ? 8 : 64,
                               t->nstorage);
        if (t->nview == 3) {
            /* Logical view over NZ memory: the storage shape is the layout, read contiguously.
             * The storage's element count fits, so these products do too. */
            if (!nz_view_matches(t))
                return compat_fail(ACLNN_ERR_PARAM_INVALID,
                                   "%s: %s: view [%lld, %lld, %lld] does not match the 5-D storage "
                                   "[%lld, %lld, %lld, %lld, %lld]",
                                   api, name, (long long)t->view[0], (long long)t->view[1],
                                   (long long)t->view[2], (long long)t->storage[0],
                                   (long long)t->storage[1], (long long)t->storage[2],
                                   (long long)t->storage[3], (long long)t->storage[4]);
            int64_t s = 1;
            for (int i = 4; i >= 0; i--) {
                nz_strides[i] = s;
                if (t->storage[i]) s *= t->storage[i];
            }
            shape = t->storage;
            strides = nz_strides;
            ndim = 5;
        } else if (t->nview != 5) {
            return compat_fail(ACLNN_ERR_PARAM_INVALID,
                               "%s: %s: a FRACTAL_NZ weight's view must be 5-D (as its storage) or "
                               "the logical 3-D [E, K, N], got rank %d",
                               api, name, t->nview);
        }
    }

    /* The view must lie inside the storage the caller described. */
    if (!view_extent(t, shape, strides, ndim, &extent))
        return compat_fail(ACLNN_ERR_PARAM_INVALID, "%s: %s: the view's extent overflows", api, name);
    if (extent > storage_elems)
        return compat_fail(ACLNN_ERR_PARAM_INVALID,
                           "%s: %s: the view reaches element %lld (offset %lld included) but the "
                           "storage holds %lld",
                           api, name, (long long)extent, (long long)t->offset,
                           (long long)storage_elems);

    /* The offset moves the data pointer; int4 offsets must land on a byte. */
    int64_t byte_offset;
    if (dtype == QMOE_DTYPE_INT4) {
        if (t->offset % 2)
            return compat_fail(ACLNN_ERR_PARAM_INVALID,
                               "%s: %s: an int4 offset must be even (got %lld)", api, name,
                               (long long)t->offset);
        byte_offset = t->offset / 2;
    } else {
        int bytes = dtype == QMOE_DTYPE_INT8 ? 1
                    : dtype == QMOE_DTYPE_FLOAT16 || dtype == QMOE_DTYPE_BFLOAT16 ? 2
                    : dtype == QMOE_DTYPE_INT32 || dtype == QMOE_DTYPE_FLOAT32    ? 4
                                                                                   : 8;
        if (t->offset > INT64_MAX / bytes)
            return compat_fail(ACLNN_ERR_PARAM_INVALID, "%s: %s: the offset overflows", api, name);
        byte_offset = t->offset * bytes;
    }
    if (!t->data && t->offset)
        return compat_fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s: data is NULL", api, name);
    void *data = t->data ? (char *)t->data + byte_offset : NULL;

    qmoe_status st = qmoe_tensor_create(shape, ndim, strides, dtype, format, data, out);
    if (st) return compat_fail((aclnnStatus)st, "%s: %s: %s", api, name, qmoe_last_error());
    return ACLNN_SUCCESS;
}
