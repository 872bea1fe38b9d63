/* The tensor view behind the opaque qmoe_tensor. */
#ifndef QMOE_CORE_TENSOR_H
#define QMOE_CORE_TENSOR_H

#include "qmoe/op.h"
#include "qmoe/qmoe.h"

struct qmoe_tensor {
    int ndim;
    qmoe_dtype dtype;
    qmoe_format format;
    int64_t shape[QMOE_MAX_DIMS];
    int64_t strides[QMOE_MAX_DIMS]; /* elements; see qmoe_tensor_create */
    int64_t numel;
    void *data;
    const struct qmoe_weights *packed; /* a view of prepacked weights (qmoe/weights.h), or NULL */
};

/* Bits per element (4 for int4). */
int qmoe_dtype_bits(qmoe_dtype dtype);
const char *qmoe_dtype_name(qmoe_dtype dtype);
const char *qmoe_format_name(qmoe_format format);

/* Bytes from the first to the last byte the view addresses (0 when empty); bounded by
 * qmoe_tensor_create. */
uint64_t qmoe_tensor_span_bytes(const qmoe_tensor *t);

/* Whether the memory spans of two views (first to last byte they can address) intersect; an
 * empty view spans nothing. Extents are bounded by qmoe_tensor_create, so this cannot overflow. */
int qmoe_tensor_overlaps(const qmoe_tensor *a, const qmoe_tensor *b);

/* Whether the view is row-major contiguous. */
int qmoe_tensor_is_contiguous(const qmoe_tensor *t);

#endif
