/* Helpers of the element-wise MoE operator tests: buffers in any float dtype, tensors over them,
 * double-precision reads for the oracles, and the "failed call writes nothing" check. */
#ifndef QMOE_TEST_MOE_COMMON_H
#define QMOE_TEST_MOE_COMMON_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/halfconv.h"
#include "qmoe/moe_ops.h"
#include "qmoe/runtime.h"
#include "support/testlib.h"

static const qmoe_dtype mt_float_dtypes[] = {QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT16,
                                            QMOE_DTYPE_BFLOAT16};

static inline size_t mt_item(qmoe_dtype d)
{
    switch (d) {
    case QMOE_DTYPE_INT8: return 1;
    case QMOE_DTYPE_FLOAT16:
    case QMOE_DTYPE_BFLOAT16: return 2;
    case QMOE_DTYPE_INT64: return 8;
    default: return 4;
    }
}

/* bf16 by truncation-free round to nearest even, written independently of the library's */
static inline uint16_t mt_bf16(float f)
{
    uint32_t b = qmoe_f32_to_bits(f);
    uint32_t lsb = (b >> 16) & 1u;
    return (uint16_t)((b + 0x7FFFu + lsb) >> 16);
}

static inline double mt_get(const void *buf, qmoe_dtype d, int64_t i)
{
    switch (d) {
    case QMOE_DTYPE_FLOAT32: return ((const float *)buf)[i];
    case QMOE_DTYPE_FLOAT16: return qmoe_f16_to_f32(((const uint16_t *)buf)[i]);
    case QMOE_DTYPE_BFLOAT16: return qmoe_bf16_to_f32(((const uint16_t *)buf)[i]);
    case QMOE_DTYPE_INT8: return ((const int8_t *)buf)[i];
    case QMOE_DTYPE_INT32: return ((const int32_t *)buf)[i];
    case QMOE_DTYPE_INT64: return (double)((const int64_t *)buf)[i];
    default: return NAN;
    }
}

static inline void mt_set(void *buf, qmoe_dtype d, int64_t i, double v)
{
    switch (d) {
    case QMOE_DTYPE_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case QMOE_DTYPE_FLOAT16: ((uint16_t *)buf)[i] = qmoe_f32_to_f16((float)v); break;
    case QMOE_DTYPE_BFLOAT16: ((uint16_t *)buf)[i] = mt_bf16((float)v); break;
    case QMOE_DTYPE_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case QMOE_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case QMOE_DTYPE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: break;
    }
}

/* The value a float written in dtype d reads back as (what the operator sees). */
static inline double mt_round(qmoe_dtype d, double v)
{
    uint16_t h;
    switch (d) {
    case QMOE_DTYPE_FLOAT16: h = qmoe_f32_to_f16((float)v); return qmoe_f16_to_f32(h);
    case QMOE_DTYPE_BFLOAT16: h = mt_bf16((float)v); return qmoe_bf16_to_f32(h);
    default: return (float)v;
    }
}

/* Relative precision of a dtype's output rounding. */
static inline double mt_eps(qmoe_dtype d)
{
    return d == QMOE_DTYPE_BFLOAT16 ? 1.0 / 128 : d == QMOE_DTYPE_FLOAT16 ? 1.0 / 1024 : 2e-6;
}

static inline void *mt_alloc(int64_t n, qmoe_dtype d)
{
    size_t bytes = (size_t)(n > 0 ? n : 1) * mt_item(d);
    void *p = malloc(bytes);
    memset(p, 0x5A, bytes); /* a recognisable pattern: untouched memory stays so */
    return p;
}

static inline qmoe_tensor *mt_tensor(void *data, qmoe_dtype d, int nd, const int64_t *shape,
                              const int64_t *strides)
{
    qmoe_tensor *t = NULL;
    qmoe_status st = qmoe_tensor_create(shape, nd, strides, d, QMOE_FORMAT_ND, data, &t);
    CHECK_MSG(st == QMOE_OK, "tensor_create: %s", qmoe_last_error());
    return t;
}

static inline void mt_fill(qt_rng *r, void *buf, qmoe_dtype d, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) mt_set(buf, d, i, qt_uniform(r, lo, hi));
}

/* Run the status of a phase-one call that must fail with `want` and a message. */
#define MT_EXPECT_FAIL(call, want)                                                               \
    do {                                                                                         \
        qmoe_status st_ = (call);                                                                \
        CHECK_MSG(st_ == (want), "%s: got %d", #call, (int)st_);                                 \
        CHECK_MSG(strlen(qmoe_last_error()) > 0, "%s: no message", #call);                       \
    } while (0)

#endif
