#include "core/tensor.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/prepack.h"
#include "core/status.h"

int qmoe_dtype_bits(qmoe_dtype dtype)
{
    switch (dtype) {
    case QMOE_DTYPE_INT4: return 4;
    case QMOE_DTYPE_INT8: return 8;
    case QMOE_DTYPE_FLOAT16:
    case QMOE_DTYPE_BFLOAT16: return 16;
    case QMOE_DTYPE_INT32:
    case QMOE_DTYPE_FLOAT32: return 32;
    case QMOE_DTYPE_INT64:
    case QMOE_DTYPE_UINT64: return 64;
    }
    return 0;
}

const char *qmoe_dtype_name(qmoe_dtype dtype)
{
    switch (dtype) {
    case QMOE_DTYPE_INT8: return "int8";
    case QMOE_DTYPE_INT4: return "int4";
    case QMOE_DTYPE_INT32: return "int32";
    case QMOE_DTYPE_INT64: return "int64";
    case QMOE_DTYPE_UINT64: return "uint64";
    case QMOE_DTYPE_FLOAT32: return "float32";
    case QMOE_DTYPE_FLOAT16: return "float16";
    case QMOE_DTYPE_BFLOAT16: return "bfloat16";
    }
    return "unknown";
}

const char *qmoe_format_name(qmoe_format format)
{
    switch (format) {
    case QMOE_FORMAT_ND: return "ND";
    case QMOE_FORMAT_FRACTAL_NZ: return "FRACTAL_NZ";
    }
    return "unknown";
}

/* A view (data required for elements) or a descriptor (desc: no data). */
static qmoe_status tensor_new(const int64_t *shape, int ndim, const int64_t *strides,
                              qmoe_dtype dtype, qmoe_format format, void *data, int desc,
                              qmoe_tensor **out)
{
    if (!out) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "tensor_create: out is NULL");
    if (ndim < 0 || ndim > QMOE_MAX_DIMS)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "tensor_create: rank %d outside [0, %d]", ndim,
                         QMOE_MAX_DIMS);
    if (ndim > 0 && !shape) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "tensor_create: shape is NULL");
    if (qmoe_dtype_bits(dtype) == 0)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "tensor_create: unknown dtype %d", (int)dtype);
    if (format != QMOE_FORMAT_ND && format != QMOE_FORMAT_FRACTAL_NZ)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "tensor_create: unknown format %d", (int)format);

    qmoe_tensor t = {.ndim = ndim, .dtype = dtype, .format = format, .data = data};
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return qmoe_fail(QMOE_ERR_PARAM_INVALID, "tensor_create: shape[%d] = %lld is negative",
                             i, (long long)shape[i]);
        if (!qmoe_mul_i64(numel, shape[i], &numel))
            return qmoe_fail(QMOE_ERR_PARAM_INVALID, "tensor_create: element count overflows");
        t.shape[i] = shape[i];
    }
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.strides[i] = strides ? strides[i] : stride;
        if (t.strides[i] < 0)
            return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                             "tensor_create: stride[%d] = %lld is negative (unsupported)", i,
                             (long long)t.strides[i]);
        if (!strides && !qmoe_mul_i64(stride, shape[i] ? shape[i] : 1, &stride))
            return qmoe_fail(QMOE_ERR_PARAM_INVALID, "tensor_create: stride overflows");
    }
    /* The extent in bits (highest element + 1, times the element width) must be representable
     * with room to spare, so byte_span() below needs no checks of its own. */
    if (numel > 0) {
        int64_t last = 0, term;
        for (int i = 0; i < ndim; i++) {
            if (!qmoe_mul_i64(shape[i] - 1, t.strides[i], &term) || !qmoe_add_i64(last, term, &last))
                return qmoe_fail(QMOE_ERR_PARAM_INVALID, "tensor_create: extent overflows");
        }
        int64_t extent_bits;
        if (!qmoe_add_i64(last, 1, &last) ||
            !qmoe_mul_i64(last, qmoe_dtype_bits(dtype), &extent_bits) || extent_bits > INT64_MAX / 2)
            return qmoe_fail(QMOE_ERR_PARAM_INVALID, "tensor_create: byte extent overflows");
        if (!data && !desc)
            return qmoe_fail(QMOE_ERR_PARAM_NULLPTR,
                             "tensor_create: data is NULL for a tensor of %lld elements",
                             (long long)numel);
    }
    t.numel = numel;

    qmoe_tensor *heap = malloc(sizeof *heap);
    if (!heap) return qmoe_fail(QMOE_ERR_INNER, "tensor_create: out of memory");
    memcpy(heap, &t, sizeof t);
    *out = heap;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_tensor_create(const int64_t *shape, int ndim, const int64_t *strides,
                               qmoe_dtype dtype, qmoe_format format, void *data,
                               qmoe_tensor **out)
{
    return tensor_new(shape, ndim, strides, dtype, format, data, 0, out);
}

qmoe_status qmoe_tensor_desc_create(const int64_t *shape, int ndim, const int64_t *strides,
                                    qmoe_dtype dtype, qmoe_format format, qmoe_tensor **out)
{
    return tensor_new(shape, ndim, strides, dtype, format, NULL, 1, out);
}

void qmoe_tensor_destroy(qmoe_tensor *tensor) { free(tensor); }

/* Accessors answer -1 / NULL for a NULL tensor rather than crash: they are public entry points. */
int qmoe_tensor_ndim(const qmoe_tensor *t) { return t ? t->ndim : -1; }
int64_t qmoe_tensor_dim(const qmoe_tensor *t, int axis)
{
    return t && axis >= 0 && axis < t->ndim ? t->shape[axis] : -1;
}
int64_t qmoe_tensor_stride(const qmoe_tensor *t, int axis)
{
    return t && axis >= 0 && axis < t->ndim ? t->strides[axis] : -1;
}
qmoe_dtype qmoe_tensor_dtype(const qmoe_tensor *t) { return t ? t->dtype : (qmoe_dtype)-1; }
qmoe_format qmoe_tensor_format(const qmoe_tensor *t) { return t ? t->format : (qmoe_format)-1; }
void *qmoe_tensor_data(const qmoe_tensor *t) { return t ? t->data : NULL; }

int qmoe_tensor_is_contiguous(const qmoe_tensor *t)
{
    if (t->numel == 0) return 1; /* no elements: any strides describe the same (empty) memory */
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expect) return 0;
        expect *= t->shape[i];
    }
    return 1;
}

uint64_t qmoe_tensor_span_bytes(const qmoe_tensor *t)
{
    if (t->numel == 0) return 0;
    /* a view of prepacked weights spans the object's weights, not its logical shape's bytes
     * (4-bit codes of int8 values are half of those) */
    if (t->packed) return t->packed->weight_bytes;
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++) last += (t->shape[i] - 1) * t->strides[i];
    return (uint64_t)(((last + 1) * qmoe_dtype_bits(t->dtype) + 7) / 8);
}

static void byte_span(const qmoe_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)qmoe_tensor_span_bytes(t); /* one past the last byte */
}

int qmoe_tensor_overlaps(const qmoe_tensor *a, const qmoe_tensor *b)
{
    /* a descriptor has no memory yet: its run checks the addresses (ops/op.c) */
    if (a->numel == 0 || b->numel == 0 || !a->data || !b->data) return 0;
    uintptr_t alo, ahi, blo, bhi;
    byte_span(a, &alo, &ahi);
    byte_span(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}
